// Containers crossing threads: built in one thread and destroyed in another (every node freed
// remotely), handed back and forth, and many threads sharing one pool. Run under TSan in CI.
#include <mtpool/containers.hpp>

#include "cxx_test_util.hpp"

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using mtpool_test::blocks_in_use;

namespace {

template <class T>
using PA = mtpool::pool_allocator<T>;

TEST(ThreadsTest, BuiltInOneThreadDestroyedInAnother) {
  std::size_t before = blocks_in_use();
  mtpool::map<int, mtpool::string> *m = nullptr;
  std::thread builder([&m] {
    m = new mtpool::map<int, mtpool::string>();
    for (int i = 0; i < 5000; ++i) (*m)[i] = mtpool::string(40, static_cast<char>('a' + i % 26));
  });
  builder.join();
  std::thread destroyer([m] {
    EXPECT_EQ(m->size(), 5000u);
    EXPECT_EQ((*m)[27], mtpool::string(40, 'b'));
    delete m;  // every node and string freed by a thread that did not allocate it
  });
  destroyer.join();
  EXPECT_EQ(blocks_in_use(), before);
}

TEST(ThreadsTest, PoolContainersMovedBetweenThreads) {
  mtpool::pool p("cxx-threads-move");
  typedef std::list<std::string, PA<std::string>> L;
  L from_a{PA<std::string>(p)};
  std::thread a([&from_a] {
    for (int i = 0; i < 10000; ++i) from_a.push_back(std::string(30, 'q'));
  });
  a.join();
  std::thread b([&from_a, &p] {
    L mine(std::move(from_a));  // the nodes change hands, not threads' pools
    EXPECT_EQ(mine.size(), 10000u);
    for (int i = 0; i < 5000; ++i) mine.pop_front();  // remote frees
    L more{PA<std::string>(p)};
    more.push_back("local");
    mine.splice(mine.end(), more);
    EXPECT_EQ(mine.back(), "local");
  });
  b.join();
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
}

TEST(ThreadsTest, ManyThreadsShareOnePoolAndTheDefaultPool) {
  mtpool::pool p("cxx-threads-shared");
  const int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<std::vector<int, PA<int>>> results(kThreads, std::vector<int, PA<int>>(PA<int>(p)));
  std::atomic<int> failures(0);
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(std::thread([t, &p, &results, &failures] {
      std::map<int, int, std::less<int>, PA<std::pair<const int, int>>> m{
          PA<std::pair<const int, int>>(p)};
      mtpool::unordered_map<int, mtpool::string> u;
      for (int i = 0; i < 3000; ++i) {
        m[i] = i * t;
        u[i] = mtpool::string(20 + i % 50, 'u');
        results[static_cast<std::size_t>(t)].push_back(i);
      }
      for (int i = 0; i < 3000; i += 2) {
        m.erase(i);
        u.erase(i);
      }
      if (m.size() != 1500u || u.size() != 1500u || m[1] != t) ++failures;
    }));
  }
  for (std::size_t t = 0; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(failures.load(), 0);
  // The vectors filled by the workers are freed here, by the main thread.
  for (std::size_t t = 0; t < results.size(); ++t) EXPECT_EQ(results[t].size(), 3000u);
  results.clear();
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
}

TEST(ThreadsTest, ProducerConsumerHandsNodesOver) {
  // A producer allocates shared_ptrs, a consumer drops them: the classic remote-free pattern.
  std::size_t before = blocks_in_use();
  const int kItems = 20000;
  std::vector<std::shared_ptr<mtpool::string>> box;
  box.reserve(static_cast<std::size_t>(kItems));
  std::thread producer([&box] {
    for (int i = 0; i < kItems; ++i) {
      box.push_back(std::allocate_shared<mtpool::string>(mtpool::allocator<mtpool::string>(), 33,
                                                         'p'));
    }
  });
  producer.join();
  std::thread consumer([&box] {
    for (std::size_t i = 0; i < box.size(); ++i) {
      EXPECT_EQ(box[i]->size(), 33u);
      box[i].reset();
    }
  });
  consumer.join();
  box.clear();
  box.shrink_to_fit();
  EXPECT_EQ(blocks_in_use(), before);
}

}  // namespace
