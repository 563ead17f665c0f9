// mtpool C++ adapter: standard containers whose memory comes from the default pool.
//
// Each alias is the standard container with mtpool::allocator; everything else (complexity,
// exception guarantees, iterator validity, thread safety) is the standard container's own.
//
//   mtpool::vector<int> v;                      // std::vector<int, mtpool::allocator<int>>
//   mtpool::map<int, mtpool::string> m;
//   mtpool::unordered_map<mtpool::string, int> u;  // std::hash is provided for mtpool strings
//
// For containers on an independent pool, use mtpool::pool_allocator with the std template:
//   mtpool::pool p;
//   std::list<int, mtpool::pool_allocator<int>> l{mtpool::pool_allocator<int>(p)};
#ifndef MTPOOL_CONTAINERS_HPP
#define MTPOOL_CONTAINERS_HPP

#include <mtpool/allocator.hpp>

#include <cstddef>
#include <deque>
#include <forward_list>
#include <functional>
#include <list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#if __cplusplus >= 201703L
#include <string_view>
#endif

namespace mtpool {

template <class CharT, class Traits = std::char_traits<CharT>>
using basic_string = std::basic_string<CharT, Traits, allocator<CharT>>;
using string = basic_string<char>;
using wstring = basic_string<wchar_t>;
using u16string = basic_string<char16_t>;
using u32string = basic_string<char32_t>;
#if defined(__cpp_char8_t)
using u8string = basic_string<char8_t>;
#endif

template <class T>
using vector = std::vector<T, allocator<T>>;
template <class T>
using deque = std::deque<T, allocator<T>>;
template <class T>
using list = std::list<T, allocator<T>>;
template <class T>
using forward_list = std::forward_list<T, allocator<T>>;

template <class Key, class T, class Compare = std::less<Key>>
using map = std::map<Key, T, Compare, allocator<std::pair<const Key, T>>>;
template <class Key, class T, class Compare = std::less<Key>>
using multimap = std::multimap<Key, T, Compare, allocator<std::pair<const Key, T>>>;
template <class Key, class Compare = std::less<Key>>
using set = std::set<Key, Compare, allocator<Key>>;
template <class Key, class Compare = std::less<Key>>
using multiset = std::multiset<Key, Compare, allocator<Key>>;

template <class Key, class T, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
using unordered_map =
    std::unordered_map<Key, T, Hash, KeyEqual, allocator<std::pair<const Key, T>>>;
template <class Key, class T, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
using unordered_multimap =
    std::unordered_multimap<Key, T, Hash, KeyEqual, allocator<std::pair<const Key, T>>>;
template <class Key, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
using unordered_set = std::unordered_set<Key, Hash, KeyEqual, allocator<Key>>;
template <class Key, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
using unordered_multiset = std::unordered_multiset<Key, Hash, KeyEqual, allocator<Key>>;

namespace detail {

// Hash of a character sequence, equal to std::hash of the std::basic_string with the same
// characters where the library allows (C++17 string_view, or libstdc++'s or libc++'s own hash).
template <class CharT>
inline std::size_t hash_chars(const CharT *s, std::size_t n) noexcept {
#if __cplusplus >= 201703L
  return std::hash<std::basic_string_view<CharT>>()(std::basic_string_view<CharT>(s, n));
#elif defined(__GLIBCXX__)
  return std::_Hash_impl::hash(s, n * sizeof(CharT));
#elif defined(_LIBCPP_VERSION)
  return std::__do_string_hash(s, s + n);  // what libc++'s hash<basic_string> calls
#else
  // FNV-1a over the bytes.
  const unsigned char *b = reinterpret_cast<const unsigned char *>(s);
  std::size_t h = static_cast<std::size_t>(14695981039346656037ull);
  for (std::size_t i = 0; i < n * sizeof(CharT); ++i) {
    h = (h ^ b[i]) * static_cast<std::size_t>(1099511628211ull);
  }
  return h;
#endif
}

template <class CharT>
struct string_hash {
  std::size_t operator()(const mtpool::basic_string<CharT> &s) const noexcept {
    return hash_chars(s.data(), s.size());
  }
};

}  // namespace detail
}  // namespace mtpool

// The standard library hashes only std::allocator strings (before C++ library versions that
// cover every allocator), so mtpool strings get their own std::hash, equal to std::string's.
namespace std {
template <>
struct hash<mtpool::string> : mtpool::detail::string_hash<char> {};
template <>
struct hash<mtpool::wstring> : mtpool::detail::string_hash<wchar_t> {};
template <>
struct hash<mtpool::u16string> : mtpool::detail::string_hash<char16_t> {};
template <>
struct hash<mtpool::u32string> : mtpool::detail::string_hash<char32_t> {};
#if defined(__cpp_char8_t)
template <>
struct hash<mtpool::u8string> : mtpool::detail::string_hash<char8_t> {};
#endif
}  // namespace std

#endif  // MTPOOL_CONTAINERS_HPP
