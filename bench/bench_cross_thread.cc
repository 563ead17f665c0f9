// Workloads 3 and 4: memory freed by another thread than the one that allocated it.
//
// prodcons/<family>/<P>to<C>: P producer threads build lists of 64-byte nodes and hand them over
//   bounded queues to C consumer threads, which destroy them. Per iteration each producer builds
//   one list for every consumer and each consumer destroys one list from every producer, so all
//   threads run the same number of iterations. Items are nodes freed (counted by consumers).
// churn/<family>: the server pattern of the Larson benchmark. Each thread keeps a working set of
//   objects of random size (16 B to 1 KiB, 64 object types in 16-byte steps), replaces a random one
//   per iteration, and hands one victim in 8 to the next thread, which frees it. Items are
//   replacements.
#include <array>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "bench_gbench.h"

namespace mtpool_bench {
namespace {

// ---------------------------------------------------------------------------------------------
// Producer-consumer
// ---------------------------------------------------------------------------------------------

struct payload {
  unsigned char bytes[48];  // with the two list links: a 64-byte node
};

template <class F>
struct handoff {
  using L = std::list<payload, typename F::template alloc<payload>>;
  static constexpr std::size_t capacity = 8;

  struct queue {
    std::mutex m;
    std::condition_variable not_empty, not_full;
    std::array<std::optional<L>, capacity> ring;
    std::size_t head = 0, size = 0;

    void push(L &&l) {
      std::unique_lock<std::mutex> lk(m);
      not_full.wait(lk, [&] { return size < capacity; });
      ring[(head + size) % capacity].emplace(std::move(l));
      ++size;
      not_empty.notify_one();
    }
    L pop() {
      std::unique_lock<std::mutex> lk(m);
      not_empty.wait(lk, [&] { return size > 0; });
      L l(std::move(*ring[head]));
      ring[head].reset();
      head = (head + 1) % capacity;
      --size;
      not_full.notify_one();
      return l;
    }
  };

  std::vector<std::unique_ptr<queue>> queues;  // one per consumer
};

template <class F>
void register_prodcons(const config &cfg, int producers, int consumers) {
  const long batch = cfg.smoke ? 16 : 256;
  auto shared = std::make_shared<std::unique_ptr<handoff<F>>>();
  std::string extra = std::to_string(producers) + "to" + std::to_string(consumers);
  auto probe = std::make_shared<mem_probe>();
  benchmark::RegisterBenchmark(
      bench_name("prodcons", F::key, extra).c_str(),
      [=](benchmark::State &st) {
        using H = handoff<F>;
        using L = typename H::L;
        if (st.thread_index() == 0) {
          *shared = std::make_unique<H>();
          for (int c = 0; c < consumers; ++c) (*shared)->queues.emplace_back(new typename H::queue);
        }
        probe->start(st);
        const int me = st.thread_index();
        const bool producer = me < producers;
        long freed = 0;
        unsigned rounds = 0;
        for (auto _ : st) {
          H &h = **shared;
          if (producer) {
            for (int c = 0; c < consumers; ++c) {
              L l(F::template make<payload>());
              for (long i = 0; i < batch; ++i) l.emplace_back().bytes[0] = static_cast<unsigned char>(i);
              h.queues[static_cast<std::size_t>(c)]->push(std::move(l));
            }
          } else {
            auto &q = *h.queues[static_cast<std::size_t>(me - producers)];
            for (int p = 0; p < producers; ++p) {
              L l = q.pop();
              benchmark::DoNotOptimize(l.front().bytes[0]);
              freed += static_cast<long>(l.size());
              l.clear();
            }
            // Reading /proc costs microseconds: sample rarely, or the probe is what gets measured.
            if ((++rounds & 1023) == 0) probe->sample_peak();
          }
        }
        st.SetItemsProcessed(freed);
        probe->finish(st, 0);
        if (st.thread_index() == 0) shared->reset();
      })
      ->Threads(producers + consumers)
      ->UseRealTime();
}

// ---------------------------------------------------------------------------------------------
// Churn
// ---------------------------------------------------------------------------------------------

constexpr std::size_t churn_classes = 64;  // object sizes 16, 32, ..., 1024

// Allocate / free an object of type blk<16*(c+1)> through the family's allocator, by class c.
template <class F>
struct typed_ops {
  using alloc_fn = void *(*)();
  using free_fn = void (*)(void *);
  template <std::size_t C>
  static void *alloc_one() {
    using B = blk<16 * (C + 1)>;
    auto a = F::template make<B>();
    B *p = std::allocator_traits<decltype(a)>::allocate(a, 1);
    p->bytes[0] = 1;
    return p;
  }
  template <std::size_t C>
  static void free_one(void *p) {
    using B = blk<16 * (C + 1)>;
    auto a = F::template make<B>();
    std::allocator_traits<decltype(a)>::deallocate(a, static_cast<B *>(p), 1);
  }
  template <std::size_t... C>
  static std::array<alloc_fn, churn_classes> alloc_table(std::index_sequence<C...>) {
    return {&alloc_one<C>...};
  }
  template <std::size_t... C>
  static std::array<free_fn, churn_classes> free_table(std::index_sequence<C...>) {
    return {&free_one<C>...};
  }
  static const std::array<alloc_fn, churn_classes> &allocs() {
    static const auto t = alloc_table(std::make_index_sequence<churn_classes>());
    return t;
  }
  static const std::array<free_fn, churn_classes> &frees() {
    static const auto t = free_table(std::make_index_sequence<churn_classes>());
    return t;
  }
};

struct churn_obj {
  void *p;
  std::uint32_t cls;
};

// A thread's inbox of objects other threads want it to free.
struct inbox {
  std::mutex m;
  std::vector<churn_obj> items;
};

template <class F>
void register_churn(const config &cfg) {
  const std::size_t working_set = cfg.smoke ? 64 : 4096;
  auto boxes = std::make_shared<std::array<inbox, 4>>();
  auto probe = std::make_shared<mem_probe>();
  benchmark::RegisterBenchmark(
      bench_name("churn", F::key).c_str(),
      [=](benchmark::State &st) {
        const auto &alloc = typed_ops<F>::allocs();
        const auto &dealloc = typed_ops<F>::frees();
        const auto me = static_cast<std::size_t>(st.thread_index());
        const auto threads = static_cast<std::size_t>(st.threads());
        inbox &mine = (*boxes)[me];
        inbox &next = (*boxes)[(me + 1) % threads];
        rng r(1234 + me);
        std::vector<churn_obj> set(working_set), outgoing, incoming;
        outgoing.reserve(1024);
        incoming.reserve(1 << 16);
        for (auto &o : set) {
          o.cls = r.below(churn_classes);
          o.p = alloc[o.cls]();
        }
        auto drain = [&] {
          {
            std::lock_guard<std::mutex> lk(mine.m);
            incoming.swap(mine.items);
          }
          for (const churn_obj &o : incoming) dealloc[o.cls](o.p);
          incoming.clear();
        };
        auto post = [&] {
          std::lock_guard<std::mutex> lk(next.m);
          next.items.insert(next.items.end(), outgoing.begin(), outgoing.end());
          outgoing.clear();
        };
        probe->start(st);
        std::uint64_t n = 0;
        for (auto _ : st) {
          std::uint64_t x = r.next();
          churn_obj &o = set[(x >> 32) % working_set];
          if ((x & 7) == 0) {
            outgoing.push_back(o);
          } else {
            dealloc[o.cls](o.p);
          }
          o.cls = static_cast<std::uint32_t>((x >> 8) % churn_classes);
          o.p = alloc[o.cls]();
          benchmark::DoNotOptimize(o.p);
          if ((++n & 255) == 0) {
            post();
            drain();
            if ((n & 0xFFFF) == 0) probe->sample_peak();  // /proc costs microseconds: rarely
          }
        }
        st.SetItemsProcessed(st.iterations());
        post();
        probe->finish(st, static_cast<double>(working_set * threads));
        // Every thread has posted; free what is left (untimed).
        for (auto &o : set) dealloc[o.cls](o.p);
        drain();
      })
      ->ThreadRange(1, 4)
      ->UseRealTime();
}

template <class F>
void register_family(const config &cfg) {
  if constexpr (F::cross_thread) {
    register_prodcons<F>(cfg, 1, 1);
    register_prodcons<F>(cfg, 1, 3);
    register_prodcons<F>(cfg, 3, 1);
    register_churn<F>(cfg);
  }
}

}  // namespace

void register_cross_thread(const config &cfg) {
  for_each_family([&](auto f) { register_family<decltype(f)>(cfg); }, [](const char *, const char *) {});
}

}  // namespace mtpool_bench
