// Every container alias, and every standard container with mtpool::pool_allocator: insert,
// erase, copy, move, swap, clear, growth and destruction, with contents checked against a
// std::allocator reference and memory checked to come from (and go back to) the right pool.
// Written in C++11 so that the same file runs in every language mode the suite is built in.
#include <mtpool/containers.hpp>

#include "cxx_test_util.hpp"

#include <algorithm>
#include <deque>
#include <forward_list>
#include <iterator>
#include <list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

using mtpool_test::blocks_in_use;
using mtpool_test::pool_containing;
using mtpool_test::make_alloc;
using mtpool_test::pool_of_alloc;

namespace {

template <class T>
using PA = mtpool::pool_allocator<T>;

// Values of each element type from an int, distinct for distinct ints.
template <class V>
struct value_of;
template <>
struct value_of<int> {
  static int make(int i) { return i; }
};
template <class C, class Tr, class A>
struct value_of<std::basic_string<C, Tr, A>> {
  // Long enough to live outside the small-string buffer, so every value allocates.
  static std::basic_string<C, Tr, A> make(int i) {
    std::basic_string<C, Tr, A> s(40, static_cast<C>('a' + i % 26));
    s += static_cast<C>('0' + i % 10);
    s += static_cast<C>('A' + (i / 10) % 26);
    s += static_cast<C>('A' + (i / 260) % 26);
    return s;
  }
};

// Fixture: a fresh pool per test, and the default-pool leak check around it.
class ContainerTest : public mtpool_test::DefaultPoolLeakCheck {
 protected:
  mtpool::pool pool_{"cxx-containers"};
  // After a test's containers are gone, the pool must hold no block either.
  void TearDown() override {
    EXPECT_EQ(blocks_in_use(pool_.get()), 0u);
    DefaultPoolLeakCheck::TearDown();
  }
};

// ---- sequences: vector, deque, list ----------------------------------------------------------

template <class C>
class SequenceTest : public ContainerTest {};

typedef ::testing::Types<mtpool::vector<int>, mtpool::deque<int>, mtpool::list<int>,
                         mtpool::vector<mtpool::string>, mtpool::list<mtpool::string>,
                         mtpool::deque<std::string>, std::vector<int, PA<int>>,
                         std::deque<int, PA<int>>, std::list<int, PA<int>>,
                         std::vector<mtpool::string, PA<mtpool::string>>,
                         std::list<std::string, PA<std::string>>>
    SequenceTypes;
TYPED_TEST_SUITE(SequenceTest, SequenceTypes);

template <class C, class R>
void expect_same_contents(const C &c, const R &r) {
  ASSERT_EQ(static_cast<std::size_t>(std::distance(c.begin(), c.end())), r.size());
  EXPECT_TRUE(std::equal(r.begin(), r.end(), c.begin()));
}

TYPED_TEST(SequenceTest, InsertEraseCopyMoveSwapClear) {
  typedef TypeParam C;
  typedef typename C::value_type V;
  typedef typename C::allocator_type A;
  A alloc = make_alloc<A>::make(this->pool_);
  std::size_t pool_base = blocks_in_use(pool_of_alloc(alloc));
  {
    std::vector<V> ref;  // (its strings may come from the default pool too)
    C c(alloc);
    // Growth: many push_backs reallocate / add nodes or chunks.
    for (int i = 0; i < 1000; ++i) {
      c.push_back(value_of<V>::make(i));
      ref.push_back(value_of<V>::make(i));
    }
    expect_same_contents(c, ref);
    EXPECT_GT(blocks_in_use(pool_of_alloc(alloc)), pool_base);
    // Insert at the front and in the middle; erase a range and single elements.
    c.insert(c.begin(), value_of<V>::make(-1));
    ref.insert(ref.begin(), value_of<V>::make(-1));
    typename C::iterator mid = c.begin();
    std::advance(mid, 500);
    c.insert(mid, 3, value_of<V>::make(-2));
    ref.insert(ref.begin() + 500, 3, value_of<V>::make(-2));
    typename C::iterator first = c.begin(), last = c.begin();
    std::advance(first, 10);
    std::advance(last, 110);
    c.erase(first, last);
    ref.erase(ref.begin() + 10, ref.begin() + 110);
    c.erase(c.begin());
    ref.erase(ref.begin());
    c.pop_back();
    ref.pop_back();
    expect_same_contents(c, ref);

    // Copy construction keeps the allocator (and so the pool).
    C copy(c);
    expect_same_contents(copy, ref);
    EXPECT_TRUE(copy.get_allocator() == c.get_allocator());

    // Copy assignment over existing contents.
    C other(alloc);
    other.push_back(value_of<V>::make(7));
    other = c;
    expect_same_contents(other, ref);

    // Move construction and move assignment leave the source valid.
    C moved(std::move(copy));
    expect_same_contents(moved, ref);
    copy.clear();
    copy.push_back(value_of<V>::make(1));
    EXPECT_EQ(copy.size(), 1u);
    other = std::move(moved);
    expect_same_contents(other, ref);

    // Swap.
    C small(alloc);
    small.push_back(value_of<V>::make(42));
    using std::swap;
    swap(small, other);
    expect_same_contents(small, ref);
    ASSERT_EQ(other.size(), 1u);
    EXPECT_TRUE(*other.begin() == value_of<V>::make(42));

    // Memory comes from the allocator's pool.
    EXPECT_EQ(pool_containing(&*small.begin()), pool_of_alloc(alloc));

    // Clear and reuse.
    small.clear();
    EXPECT_TRUE(small.empty());
    small.push_back(value_of<V>::make(3));
    EXPECT_EQ(small.size(), 1u);

    // Resize grows and shrinks.
    small.resize(300);
    EXPECT_EQ(small.size(), 300u);
    small.resize(5);
    EXPECT_EQ(small.size(), 5u);
    EXPECT_TRUE(*small.begin() == value_of<V>::make(3));
  }
  // Destruction returned every block.
  EXPECT_EQ(blocks_in_use(pool_of_alloc(alloc)), pool_base);
}

// ---- forward_list ----------------------------------------------------------------------------

template <class C>
class ForwardListTest : public ContainerTest {};
typedef ::testing::Types<mtpool::forward_list<int>, mtpool::forward_list<mtpool::string>,
                         std::forward_list<int, PA<int>>,
                         std::forward_list<std::string, PA<std::string>>>
    ForwardListTypes;
TYPED_TEST_SUITE(ForwardListTest, ForwardListTypes);

TYPED_TEST(ForwardListTest, InsertEraseCopyMoveSwapClear) {
  typedef TypeParam C;
  typedef typename C::value_type V;
  typedef typename C::allocator_type A;
  A alloc = make_alloc<A>::make(this->pool_);
  std::size_t pool_base = blocks_in_use(pool_of_alloc(alloc));
  {
    C c(alloc);
    std::vector<V> ref;
    for (int i = 0; i < 1000; ++i) c.push_front(value_of<V>::make(i));
    for (int i = 999; i >= 0; --i) ref.push_back(value_of<V>::make(i));
    expect_same_contents(c, ref);
    c.insert_after(c.before_begin(), value_of<V>::make(-1));
    ref.insert(ref.begin(), value_of<V>::make(-1));
    typename C::iterator it = c.begin();
    std::advance(it, 10);
    c.erase_after(it);
    ref.erase(ref.begin() + 11);
    c.pop_front();
    ref.erase(ref.begin());
    c.remove(value_of<V>::make(500));
    ref.erase(std::find(ref.begin(), ref.end(), value_of<V>::make(500)));
    expect_same_contents(c, ref);

    C copy(c);
    expect_same_contents(copy, ref);
    C other(alloc);
    other = copy;
    expect_same_contents(other, ref);
    C moved(std::move(copy));
    expect_same_contents(moved, ref);
    C small(alloc);
    small.push_front(value_of<V>::make(1));
    using std::swap;
    swap(small, moved);
    expect_same_contents(small, ref);
    EXPECT_EQ(std::distance(moved.begin(), moved.end()), 1);
    EXPECT_EQ(pool_containing(&*small.begin()), pool_of_alloc(alloc));
    small.clear();
    EXPECT_TRUE(small.empty());
  }
  EXPECT_EQ(blocks_in_use(pool_of_alloc(alloc)), pool_base);
}

// ---- strings ---------------------------------------------------------------------------------

template <class S>
class StringTest : public ContainerTest {};
typedef ::testing::Types<mtpool::string, mtpool::wstring, mtpool::u16string, mtpool::u32string,
                         mtpool::basic_string<char>,
                         std::basic_string<char, std::char_traits<char>, PA<char>>,
                         std::basic_string<char32_t, std::char_traits<char32_t>, PA<char32_t>>>
    StringTypes;
TYPED_TEST_SUITE(StringTest, StringTypes);

TYPED_TEST(StringTest, AppendInsertEraseCopyMoveSwap) {
  typedef TypeParam S;
  typedef typename S::value_type Ch;
  typedef typename S::allocator_type A;
  typedef std::basic_string<Ch> Ref;
  A alloc = make_alloc<A>::make(this->pool_);
  std::size_t pool_base = blocks_in_use(pool_of_alloc(alloc));
  {
    S s(alloc);
    Ref ref;
    // Growth from the small buffer to large heap buffers.
    for (int i = 0; i < 2000; ++i) {
      Ch c = static_cast<Ch>('a' + i % 26);
      s.push_back(c);
      ref.push_back(c);
    }
    ASSERT_EQ(s.size(), ref.size());
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), s.begin()));
    EXPECT_EQ(mtp_pool_of(s.data()), pool_of_alloc(alloc));

    s.insert(s.begin() + 5, 10, static_cast<Ch>('Z'));
    ref.insert(ref.begin() + 5, 10, static_cast<Ch>('Z'));
    s.erase(100, 300);
    ref.erase(100, 300);
    s.append(s.substr(0, 50));
    ref.append(ref.substr(0, 50));
    ASSERT_EQ(s.size(), ref.size());
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), s.begin()));

    S copy(s);
    EXPECT_TRUE(copy == s);
    S other(alloc);
    other.assign(3, static_cast<Ch>('q'));
    other = s;
    EXPECT_TRUE(other == s);
    S moved(std::move(copy));
    EXPECT_TRUE(moved == s);
    S small(3, static_cast<Ch>('x'), alloc);
    small.swap(moved);
    EXPECT_TRUE(small == s);
    EXPECT_EQ(moved.size(), 3u);
    S cat = small + moved;
    EXPECT_EQ(cat.size(), s.size() + 3);
    EXPECT_TRUE(s < cat);
    EXPECT_EQ(s.find(static_cast<Ch>('Z')), 5u);
    small.clear();
    EXPECT_TRUE(small.empty());
    small.shrink_to_fit();
    small.resize(5000, static_cast<Ch>('r'));
    EXPECT_EQ(small.size(), 5000u);
  }
  EXPECT_EQ(blocks_in_use(pool_of_alloc(alloc)), pool_base);
}

TEST_F(ContainerTest, StringHashMatchesStdString) {
  mtpool::string s(100, 'h');
  std::string r(100, 'h');
  EXPECT_EQ(std::hash<mtpool::string>()(s), std::hash<std::string>()(r));
  mtpool::unordered_set<mtpool::string> u;
  u.insert(s);
  u.insert(mtpool::string("short"));
  EXPECT_EQ(u.count(mtpool::string(100, 'h')), 1u);
  EXPECT_EQ(u.count(mtpool::string("short")), 1u);
  EXPECT_EQ(u.count(mtpool::string("other")), 0u);
  std::unordered_set<mtpool::wstring> w;
  w.insert(mtpool::wstring(L"wide"));
  EXPECT_EQ(w.count(mtpool::wstring(L"wide")), 1u);
}

// ---- maps ------------------------------------------------------------------------------------

template <class M>
class MapTest : public ContainerTest {};
typedef ::testing::Types<
    mtpool::map<int, int>, mtpool::multimap<int, int>, mtpool::unordered_map<int, int>,
    mtpool::unordered_multimap<int, int>, mtpool::map<int, mtpool::string>,
    mtpool::unordered_map<mtpool::string, int>, mtpool::map<mtpool::string, mtpool::string>,
    std::map<int, int, std::less<int>, PA<std::pair<const int, int>>>,
    std::multimap<int, std::string, std::less<int>, PA<std::pair<const int, std::string>>>,
    std::unordered_map<int, int, std::hash<int>, std::equal_to<int>,
                       PA<std::pair<const int, int>>>>
    MapTypes;
TYPED_TEST_SUITE(MapTest, MapTypes);

template <class M>
std::multimap<typename M::key_type, typename M::mapped_type> sorted(const M &m) {
  return std::multimap<typename M::key_type, typename M::mapped_type>(m.begin(), m.end());
}

TYPED_TEST(MapTest, InsertEraseFindCopyMoveSwapClear) {
  typedef TypeParam M;
  typedef typename M::key_type K;
  typedef typename M::mapped_type V;
  typedef typename M::allocator_type A;
  typedef std::multimap<K, V> Ref;
  A alloc = make_alloc<A>::make(this->pool_);
  std::size_t pool_base = blocks_in_use(pool_of_alloc(alloc));
  {
    M m(alloc);
    Ref ref;
    for (int i = 0; i < 1000; ++i) {
      K k = value_of<K>::make(i);
      V v = value_of<V>::make(i * 3);
      m.insert(typename M::value_type(k, v));
      ref.insert(typename Ref::value_type(k, v));
    }
    EXPECT_EQ(m.size(), 1000u);
    EXPECT_TRUE(sorted(m) == ref);
    ASSERT_TRUE(m.find(value_of<K>::make(77)) != m.end());
    EXPECT_TRUE(m.find(value_of<K>::make(77))->second == value_of<V>::make(231));
    EXPECT_TRUE(m.find(value_of<K>::make(5000)) == m.end());
    for (int i = 0; i < 1000; i += 3) {
      EXPECT_EQ(m.erase(value_of<K>::make(i)), 1u);
      ref.erase(value_of<K>::make(i));
    }
    // Erase by iterator (keys are distinct, so the reference erases the same element).
    K first_key = m.begin()->first;
    m.erase(m.begin());
    ref.erase(ref.find(first_key));
    EXPECT_TRUE(sorted(m) == ref);

    M copy(m);
    EXPECT_TRUE(sorted(copy) == ref);
    EXPECT_TRUE(copy.get_allocator() == m.get_allocator());
    M other(alloc);
    other.insert(typename M::value_type(value_of<K>::make(-5), value_of<V>::make(-5)));
    other = m;
    EXPECT_TRUE(sorted(other) == ref);
    M moved(std::move(copy));
    EXPECT_TRUE(sorted(moved) == ref);
    M small(alloc);
    small.insert(typename M::value_type(value_of<K>::make(-1), value_of<V>::make(-1)));
    using std::swap;
    swap(small, moved);
    EXPECT_TRUE(sorted(small) == ref);
    EXPECT_EQ(moved.size(), 1u);
    other = std::move(small);
    EXPECT_TRUE(sorted(other) == ref);
    EXPECT_EQ(pool_containing(&*other.begin()), pool_of_alloc(alloc));
    other.clear();
    EXPECT_TRUE(other.empty());
    other.insert(typename M::value_type(value_of<K>::make(9), value_of<V>::make(9)));
    EXPECT_EQ(other.count(value_of<K>::make(9)), 1u);
  }
  EXPECT_EQ(blocks_in_use(pool_of_alloc(alloc)), pool_base);
}

// ---- sets ------------------------------------------------------------------------------------

template <class S>
class SetTest : public ContainerTest {};
typedef ::testing::Types<mtpool::set<int>, mtpool::multiset<int>, mtpool::unordered_set<int>,
                         mtpool::unordered_multiset<int>, mtpool::set<mtpool::string>,
                         mtpool::unordered_set<mtpool::string>,
                         std::set<int, std::less<int>, PA<int>>,
                         std::multiset<std::string, std::less<std::string>, PA<std::string>>,
                         std::unordered_set<int, std::hash<int>, std::equal_to<int>, PA<int>>>
    SetTypes;
TYPED_TEST_SUITE(SetTest, SetTypes);

template <class S>
std::multiset<typename S::key_type> sorted_set(const S &s) {
  return std::multiset<typename S::key_type>(s.begin(), s.end());
}

TYPED_TEST(SetTest, InsertEraseFindCopyMoveSwapClear) {
  typedef TypeParam S;
  typedef typename S::key_type K;
  typedef typename S::allocator_type A;
  typedef std::multiset<K> Ref;
  A alloc = make_alloc<A>::make(this->pool_);
  std::size_t pool_base = blocks_in_use(pool_of_alloc(alloc));
  {
    S s(alloc);
    Ref ref;
    for (int i = 0; i < 1000; ++i) {
      s.insert(value_of<K>::make(i));
      ref.insert(value_of<K>::make(i));
    }
    EXPECT_TRUE(sorted_set(s) == ref);
    for (int i = 0; i < 1000; i += 4) {
      EXPECT_EQ(s.erase(value_of<K>::make(i)), 1u);
      ref.erase(value_of<K>::make(i));
    }
    EXPECT_TRUE(s.find(value_of<K>::make(1)) != s.end());
    EXPECT_TRUE(s.find(value_of<K>::make(4)) == s.end());
    EXPECT_TRUE(sorted_set(s) == ref);
    S copy(s);
    S other(alloc);
    other.insert(value_of<K>::make(-3));
    other = copy;
    EXPECT_TRUE(sorted_set(other) == ref);
    S moved(std::move(copy));
    S small(alloc);
    small.insert(value_of<K>::make(-1));
    using std::swap;
    swap(small, moved);
    EXPECT_TRUE(sorted_set(small) == ref);
    EXPECT_EQ(moved.size(), 1u);
    EXPECT_EQ(pool_containing(&*small.begin()), pool_of_alloc(alloc));
    small.clear();
    EXPECT_TRUE(small.empty());
  }
  EXPECT_EQ(blocks_in_use(pool_of_alloc(alloc)), pool_base);
}

// Containers nested in containers, all on mtpool::allocator.
TEST_F(ContainerTest, NestedContainers) {
  mtpool::map<mtpool::string, mtpool::vector<mtpool::list<int>>> m;
  for (int i = 0; i < 50; ++i) {
    mtpool::vector<mtpool::list<int>> &v = m[value_of<mtpool::string>::make(i)];
    v.resize(static_cast<std::size_t>(i % 7 + 1));
    for (std::size_t j = 0; j < v.size(); ++j) v[j].assign(j + 1, i);
  }
  mtpool::map<mtpool::string, mtpool::vector<mtpool::list<int>>> copy = m;
  EXPECT_TRUE(copy == m);
  m.clear();
  EXPECT_EQ(copy.size(), 50u);
  EXPECT_EQ(copy[value_of<mtpool::string>::make(13)].size(), 7u);
}

}  // namespace
