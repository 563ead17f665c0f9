// Allocator families compared by the mtpool benchmark suite.
//
// A family is a struct that names an allocator template and tells the workloads how to use it:
//   key, label          short id used in benchmark names and tables / the name users know
//   alloc<T>            the allocator type for T (containers rebind it as usual)
//   make<T>()           an allocator instance: stateless families default-construct one, stateful
//                       ones (pool_allocator, polymorphic_allocator) bind it to the family's pool
//   cross_thread        false if a block must not be freed by another thread than its allocator's
//                       (pmr unsynchronized_pool_resource, used one per thread)
//   trim_thread()/trim_all()  give cached memory back to the OS where the allocator offers a call
//                       for it; they return a word naming what was called, or nullptr if the
//                       allocator has no such call
//
// This header is shared by the Google Benchmark binary and the process-level driver, which is also
// built with -D_GLIBCXX_USE_CXX11_ABI=0 (copy-on-write std::string), so it must not depend on
// Google Benchmark nor on the string ABI.
#ifndef MTPOOL_BENCH_FAMILIES_H
#define MTPOOL_BENCH_FAMILIES_H

#include <dlfcn.h>
#include <malloc.h>

#include "tools/malloc_name.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <string>
#include <utility>

#include <ext/bitmap_allocator.h>
#include <ext/malloc_allocator.h>
#include <ext/mt_allocator.h>
#include <ext/pool_allocator.h>

#if MTPOOL_BENCH_HAVE_BOOST
#include <boost/pool/pool_alloc.hpp>
#endif
#if MTPOOL_BENCH_HAVE_TBB
#include <tbb/scalable_allocator.h>
#endif
#if MTPOOL_BENCH_HAVE_MTPOOL
#include <mtpool/allocator.hpp>
#include <mtpool/mtpool.h>
#endif

namespace mtpool_bench {

// A block of exactly N bytes, 8-byte aligned like a typical node, for fixed-size workloads.
template <std::size_t N>
struct alignas(8) blk {
  unsigned char bytes[N];
};

// Keep a value alive without Google Benchmark (the driver does not link it).
template <class T>
inline void escape(T const &v) {
  asm volatile("" : : "r,m"(v) : "memory");
}

// Trim whatever malloc is in the process: glibc, or tcmalloc / jemalloc / mimalloc when preloaded.
// Looked up at run time so the same binary serves every LD_PRELOAD run.
inline const char *malloc_trim_thread() {
  if (auto idle = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "MallocExtension_MarkThreadIdle"))) {
    idle();
    return "MallocExtension_MarkThreadIdle";
  }
  if (auto mallctl = reinterpret_cast<int (*)(const char *, void *, std::size_t *, void *, std::size_t)>(
          dlsym(RTLD_DEFAULT, "mallctl"))) {
    mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
    return "thread.tcache.flush";
  }
  if (auto collect = reinterpret_cast<void (*)(bool)>(dlsym(RTLD_DEFAULT, "mi_collect"))) {
    collect(true);
    return "mi_collect(true)";
  }
  return "";  // glibc: malloc_trim in trim_all covers every arena
}

inline const char *malloc_trim_all() {
  if (auto rel = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"))) {
    rel();
    return "MallocExtension::ReleaseFreeMemory";
  }
  if (auto mallctl = reinterpret_cast<int (*)(const char *, void *, std::size_t *, void *, std::size_t)>(
          dlsym(RTLD_DEFAULT, "mallctl"))) {
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);  // 4096 == MALLCTL_ARENAS_ALL
    return "mallctl(arena.<all>.purge)";
  }
  if (auto collect = reinterpret_cast<void (*)(bool)>(dlsym(RTLD_DEFAULT, "mi_collect"))) {
    collect(true);
    return "mi_collect(true)";
  }
  malloc_trim(0);
  return "malloc_trim(0)";
}

// Name of the malloc actually serving this process (for reports). The driver links mtpool's core,
// so mtpool's symbols say nothing here: its drop-in is told by the object that defines malloc.
inline const char *malloc_in_use() {
  const char *obj = malloc_object();
  if (obj != nullptr && std::strstr(obj, "libmtpool-malloc") != nullptr) return "mtpool";
  if (dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory")) return "tcmalloc";
  if (dlsym(RTLD_DEFAULT, "mallctl")) return "jemalloc";
  if (dlsym(RTLD_DEFAULT, "mi_collect")) return "mimalloc";
  return "glibc";
}

// ---------------------------------------------------------------------------------------------
// Families
// ---------------------------------------------------------------------------------------------

// Defaults shared by the stateless families.
struct stateless_family {
  static constexpr bool cross_thread = true;
  static const char *trim_thread() { return nullptr; }
  static const char *trim_all() { return nullptr; }
};

struct fam_std {
  static constexpr const char *key = "std";
  static constexpr const char *label = "std::allocator";
  template <class T> using alloc = std::allocator<T>;
  template <class T> static alloc<T> make() { return {}; }
  static constexpr bool cross_thread = true;
  static const char *trim_thread() { return malloc_trim_thread(); }
  static const char *trim_all() { return malloc_trim_all(); }
};

struct fam_malloc : stateless_family {
  static constexpr const char *key = "malloc_alloc";
  static constexpr const char *label = "__gnu_cxx::malloc_allocator";
  template <class T> using alloc = __gnu_cxx::malloc_allocator<T>;
  template <class T> static alloc<T> make() { return {}; }
  static const char *trim_thread() { return malloc_trim_thread(); }
  static const char *trim_all() { return malloc_trim_all(); }
};

struct fam_mt : stateless_family {
  static constexpr const char *key = "mt_alloc";
  static constexpr const char *label = "__gnu_cxx::__mt_alloc";
  template <class T> using alloc = __gnu_cxx::__mt_alloc<T>;
  template <class T> static alloc<T> make() { return {}; }
};

struct fam_pool : stateless_family {
  static constexpr const char *key = "pool_alloc";
  static constexpr const char *label = "__gnu_cxx::__pool_alloc";
  template <class T> using alloc = __gnu_cxx::__pool_alloc<T>;
  template <class T> static alloc<T> make() { return {}; }
};

struct fam_bitmap : stateless_family {
  static constexpr const char *key = "bitmap_alloc";
  static constexpr const char *label = "__gnu_cxx::bitmap_allocator";
  template <class T> using alloc = __gnu_cxx::bitmap_allocator<T>;
  template <class T> static alloc<T> make() { return {}; }
};

#if MTPOOL_BENCH_HAVE_BOOST
// Boost.Pool keeps one singleton pool per element size; release_memory() frees the blocks of a pool
// whose chunks are all free. "Trim" calls it for every size a node of these workloads can have.
template <class Tag, std::size_t... S>
inline void boost_release(std::index_sequence<S...>) {
  (boost::singleton_pool<Tag, (S + 1) * 8>::release_memory(), ...);
}

struct fam_boost_fast : stateless_family {
  static constexpr const char *key = "boost_fast_pool";
  static constexpr const char *label = "boost::fast_pool_allocator";
  template <class T> using alloc = boost::fast_pool_allocator<T>;
  template <class T> static alloc<T> make() { return {}; }
  static const char *trim_all() {
    boost_release<boost::fast_pool_allocator_tag>(std::make_index_sequence<32>());
    boost::singleton_pool<boost::fast_pool_allocator_tag, 1>::release_memory();
    return "singleton_pool::release_memory";
  }
};

struct fam_boost_pool : stateless_family {
  static constexpr const char *key = "boost_pool";
  static constexpr const char *label = "boost::pool_allocator";
  template <class T> using alloc = boost::pool_allocator<T>;
  template <class T> static alloc<T> make() { return {}; }
  static const char *trim_all() {
    boost_release<boost::pool_allocator_tag>(std::make_index_sequence<32>());
    boost::singleton_pool<boost::pool_allocator_tag, 1>::release_memory();
    return "singleton_pool::release_memory";
  }
};
#endif

// One synchronized_pool_resource for the whole process, as a program shares one.
struct fam_pmr_sync {
  static constexpr const char *key = "pmr_sync";
  static constexpr const char *label = "std::pmr::synchronized_pool_resource";
  static std::pmr::synchronized_pool_resource &resource() {
    static std::pmr::synchronized_pool_resource r;
    return r;
  }
  template <class T> using alloc = std::pmr::polymorphic_allocator<T>;
  template <class T> static alloc<T> make() { return alloc<T>(&resource()); }
  static constexpr bool cross_thread = true;
  // release() frees blocks still in use too: it is a destroy, not a trim.
  static const char *trim_thread() { return nullptr; }
  static const char *trim_all() { return nullptr; }
};

// One unsynchronized_pool_resource per thread, the only way it may be used by several threads.
struct fam_pmr_unsync {
  static constexpr const char *key = "pmr_unsync";
  static constexpr const char *label = "std::pmr::unsynchronized_pool_resource";
  static std::pmr::unsynchronized_pool_resource &resource() {
    static thread_local std::pmr::unsynchronized_pool_resource r;
    return r;
  }
  template <class T> using alloc = std::pmr::polymorphic_allocator<T>;
  template <class T> static alloc<T> make() { return alloc<T>(&resource()); }
  static constexpr bool cross_thread = false;
  static const char *trim_thread() { return nullptr; }
  static const char *trim_all() { return nullptr; }
};

#if MTPOOL_BENCH_HAVE_TBB
struct fam_tbb {
  static constexpr const char *key = "tbb";
  static constexpr const char *label = "tbb::scalable_allocator";
  template <class T> using alloc = tbb::scalable_allocator<T>;
  template <class T> static alloc<T> make() { return {}; }
  static constexpr bool cross_thread = true;
  static const char *trim_thread() {
    scalable_allocation_command(TBBMALLOC_CLEAN_THREAD_BUFFERS, nullptr);
    return "TBBMALLOC_CLEAN_THREAD_BUFFERS";
  }
  static const char *trim_all() {
    scalable_allocation_command(TBBMALLOC_CLEAN_ALL_BUFFERS, nullptr);
    return "TBBMALLOC_CLEAN_ALL_BUFFERS";
  }
};
#endif

#if MTPOOL_BENCH_HAVE_MTPOOL
struct fam_mtpool {
  static constexpr const char *key = "mtpool";
  static constexpr const char *label = "mtpool::allocator";
  template <class T> using alloc = mtpool::allocator<T>;
  template <class T> static alloc<T> make() { return {}; }
  static constexpr bool cross_thread = true;
  static const char *trim_thread() { return nullptr; }  // mtp_pool_trim covers every thread
  static const char *trim_all() {
    mtp_pool_trim(nullptr);
    return "mtp_pool_trim";
  }
};

// A pool of its own, created once per process, as an application would keep one per subsystem.
struct fam_mtpool_pool {
  static constexpr const char *key = "mtpool_pool";
  static constexpr const char *label = "mtpool::pool_allocator";
  static mtpool::pool &the_pool() {
    static mtpool::pool p;
    return p;
  }
  template <class T> using alloc = mtpool::pool_allocator<T>;
  template <class T> static alloc<T> make() { return alloc<T>(the_pool()); }
  static constexpr bool cross_thread = true;
  static const char *trim_thread() { return nullptr; }
  static const char *trim_all() {
    mtp_pool_trim(the_pool().get());
    return "mtp_pool_trim";
  }
};
#endif

// Visit every family compiled into this binary, in table order (mtpool first), and report the
// missing ones through `missing(label, why)`.
template <class Fn, class Missing>
inline void for_each_family(Fn &&fn, [[maybe_unused]] Missing &&missing) {
#if MTPOOL_BENCH_HAVE_MTPOOL
  fn(fam_mtpool{});
  fn(fam_mtpool_pool{});
#else
  missing("mtpool::allocator / mtpool::pool_allocator", "mtpool::cxx target not found at configure time");
#endif
  fn(fam_std{});
  fn(fam_malloc{});
  fn(fam_mt{});
  fn(fam_pool{});
  fn(fam_bitmap{});
#if MTPOOL_BENCH_HAVE_BOOST
  fn(fam_boost_fast{});
  fn(fam_boost_pool{});
#else
  missing("boost::fast_pool_allocator / boost::pool_allocator", "Boost headers not found (apt-get install libboost-dev)");
#endif
  fn(fam_pmr_sync{});
  fn(fam_pmr_unsync{});
#if MTPOOL_BENCH_HAVE_TBB
  fn(fam_tbb{});
#else
  missing("tbb::scalable_allocator", "TBB::tbbmalloc not found (apt-get install libtbb-dev)");
#endif
}

// std::basic_string and std::list of those, built on a family's allocator.
template <class F>
using str_t = std::basic_string<char, std::char_traits<char>, typename F::template alloc<char>>;

}  // namespace mtpool_bench

#endif
