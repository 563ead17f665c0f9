// mtpool C++ adapter: standard allocators over the C core.
//
// Header-only; C++11 and later. Three types:
//   mtpool::allocator<T>       stateless, the process-wide default pool, like std::allocator<T>.
//   mtpool::pool               owns one mtp_pool_t (an independent pool, released in one call).
//   mtpool::pool_allocator<T>  stateful, bound to one pool; compares equal by pool.
//
// Properties that hold for both allocators:
//   1. allocate(n) never returns null: n > max_size() throws std::bad_array_new_length, memory
//      running out throws std::bad_alloc. (Built with -fno-exceptions, both abort instead.)
//   2. deallocate(p, n) passes the size to the core (mtp_free_sized), so the core skips its
//      size lookup. n must be the n given to allocate, as the allocator requirements demand.
//   3. alignof(T) <= 16: the plain API, whose blocks are aligned to min(16, largest power of two
//      dividing the block size), and n * sizeof(T) is a multiple of alignof(T). alignof(T) > 16:
//      the aligned API. The choice is made at compile time; it costs nothing at run time. Even
//      allocate(0) returns a pointer aligned for T.
//   4. Every member may be called from any thread at the same time, and a block may be
//      deallocated by a thread other than the one that allocated it.
//   5. No locks, no counters and no virtual calls are added over the C core: with n known at
//      compile time, allocate + deallocate compile to the same calls as using the C API directly.
#ifndef MTPOOL_ALLOCATOR_HPP
#define MTPOOL_ALLOCATOR_HPP

#include <mtpool/mtpool.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#if __cplusplus >= 201703L
#define MTPOOL_NODISCARD [[nodiscard]]
#else
#define MTPOOL_NODISCARD
#endif

namespace mtpool {

namespace detail {

// Largest alignment the plain allocation functions guarantee (for sizes that are multiples of it).
constexpr std::size_t plain_alignment = 16;

#if defined(__GNUC__)
#define MTPOOL_DETAIL_COLD __attribute__((noinline, cold))
#else
#define MTPOOL_DETAIL_COLD
#endif

// The throw sites sit out of line so that allocate() inlines to a call and a test.
[[noreturn]] MTPOOL_DETAIL_COLD inline void throw_bad_alloc() {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  throw std::bad_alloc();
#else
  std::fputs("mtpool: out of memory\n", stderr);
  std::abort();
#endif
}

[[noreturn]] MTPOOL_DETAIL_COLD inline void throw_bad_array_new_length() {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  throw std::bad_array_new_length();
#else
  std::fputs("mtpool: array length too large\n", stderr);
  std::abort();
#endif
}

#undef MTPOOL_DETAIL_COLD

// The most objects of T one allocation may hold: no object may exceed PTRDIFF_MAX bytes.
template <class T>
constexpr std::size_t max_count() noexcept {
  return static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(T);
}

// Smallest alignment of any block the plain API gives (its smallest size class, 8 bytes).
constexpr std::size_t min_block_alignment = 8;

// Bytes to ask for n objects of T. allocate(0) still returns a pointer aligned for T: for T
// aligned above the smallest block's alignment (alignof 16), n == 0 asks for one object's worth
// (deallocate computes the same size). For every other T the test folds away at compile time.
template <class T>
constexpr std::size_t bytes_for(std::size_t n) noexcept {
  return (alignof(T) > min_block_alignment && n == 0) ? sizeof(T) : n * sizeof(T);
}

template <class T>
struct is_over_aligned : std::integral_constant<bool, (alignof(T) > plain_alignment)> {};

// n objects of T must fit in one object: n <= max_count<T>().
template <class T>
inline void check_count(std::size_t n) {
  if (n > max_count<T>()) throw_bad_array_new_length();
}

// A null result from the core means out of memory.
template <class T>
inline T *checked(void *p) {
  if (p == nullptr) throw_bad_alloc();
  return static_cast<T *>(p);
}

// Bytes for objects of T from the default pool; the aligned API only for over-aligned T.
template <class T>
inline void *alloc_default(std::size_t bytes, std::false_type) noexcept {
  return mtp_alloc(bytes);
}
template <class T>
inline void *alloc_default(std::size_t bytes, std::true_type) noexcept {
  return mtp_alloc_aligned(bytes, alignof(T));
}

// Bytes for objects of T from pool (never null here).
template <class T>
inline void *alloc_in(mtp_pool_t *pool, std::size_t bytes, std::false_type) noexcept {
  return mtp_pool_alloc(pool, bytes);
}
template <class T>
inline void *alloc_in(mtp_pool_t *pool, std::size_t bytes, std::true_type) noexcept {
  return mtp_pool_alloc_aligned(pool, bytes, alignof(T));
}

}  // namespace detail

// ------------------------------------------------------------------------------------------------
// mtpool::allocator<T>
// ------------------------------------------------------------------------------------------------

// Stateless allocator over the default pool (mtp_default_pool()). All instances are equal and
// interchangeable, so containers may move and swap their memory freely, as with std::allocator.
template <class T>
class allocator {
 public:
  typedef T value_type;
  typedef std::size_t size_type;
  typedef std::ptrdiff_t difference_type;
  // Every instance can free every other's memory.
  typedef std::true_type is_always_equal;
  // Moving a container moves its memory (nothing is copied element by element).
  typedef std::true_type propagate_on_container_move_assignment;

  // For code that still spells Alloc::rebind<U>::other (std::allocator_traits does not need it).
  template <class U>
  struct rebind {
    typedef allocator<U> other;
  };

  // Effects: none (the allocator holds no state). Throws nothing.
  allocator() noexcept {}
  // Effects: none; converting copy, as rebinding requires. Throws nothing.
  template <class U>
  allocator(const allocator<U> &) noexcept {}

  // Effects: allocates n objects' worth of uninitialised memory from the default pool.
  // Returns: a pointer aligned for T, never null (n == 0 gives a unique block).
  // Throws: std::bad_array_new_length if n > max_size(); std::bad_alloc when out of memory.
  // Thread safety: any thread, concurrently.
  MTPOOL_NODISCARD T *allocate(std::size_t n) {
    detail::check_count<T>(n);
    return detail::checked<T>(
        detail::alloc_default<T>(detail::bytes_for<T>(n), detail::is_over_aligned<T>()));
  }

  // Effects: returns p's block, which allocate(n) gave, with its size (sized free). Any thread.
  // Throws nothing. A pointer or n the allocator did not give out is reported by the core.
  void deallocate(T *p, std::size_t n) noexcept { mtp_free_sized(p, detail::bytes_for<T>(n)); }

  // Returns: the largest n that allocate(n) may succeed for (PTRDIFF_MAX / sizeof(T)).
  constexpr std::size_t max_size() const noexcept { return detail::max_count<T>(); }

  // Same-type comparisons as non-template friends: a non-template beats any template, so an
  // unconstrained global template operator==(const T&, const T&) in the program cannot make
  // the standard library's own comparisons of allocators ambiguous (libstdc++ PR 33807).
  friend constexpr bool operator==(const allocator &, const allocator &) noexcept { return true; }
  friend constexpr bool operator!=(const allocator &, const allocator &) noexcept { return false; }
};

// Returns true: every mtpool::allocator can free what any other gave out (the cross-type
// comparisons the allocator requirements ask for; same-type ones are the friends above).
template <class T, class U>
constexpr bool operator==(const allocator<T> &, const allocator<U> &) noexcept {
  return true;
}
template <class T, class U>
constexpr bool operator!=(const allocator<T> &, const allocator<U> &) noexcept {
  return false;
}

// ------------------------------------------------------------------------------------------------
// mtpool::pool
// ------------------------------------------------------------------------------------------------

// Owns one independent pool (mtp_pool_create). Destroying the object destroys the pool and
// releases all its memory at once, blocks in use included: every container using it must be
// gone (or must never be touched again) by then. Movable, not copyable. A moved-from pool holds
// no pool: get() returns nullptr, stats() is zero and trim() does nothing.
// Thread safety: get(), name(), stats(), class_stats(), trim() and print_stats() may be called
// from any thread while other threads allocate from the pool; construction, assignment,
// release() and destruction may not run concurrently with any other use of the object or the
// pool.
class pool {
 public:
  // Effects: creates a pool with the default options and a generated name ("pool-<id>").
  // Throws: std::bad_alloc when the core cannot create a pool (out of memory, too many pools).
  pool() : pool_(create(nullptr)) {}

  // Effects: creates a pool with options opt (fill it with mtp_options_init first).
  // Throws: std::bad_alloc when the core cannot create a pool.
  explicit pool(const mtp_options_t &opt) : pool_(create(&opt)) {}

  // Effects: creates a pool with the default options and the given name (copied; nullptr
  // gives the generated name). Throws: std::bad_alloc when the core cannot create a pool.
  explicit pool(const char *name) : pool_(create_named(name)) {}

  // Effects: destroys the pool, releasing all its memory. Throws nothing.
  ~pool() { mtp_pool_destroy(pool_); }

  pool(const pool &) = delete;
  pool &operator=(const pool &) = delete;

  // Effects: takes other's pool; other holds none afterwards. Throws nothing.
  pool(pool &&other) noexcept : pool_(other.pool_) { other.pool_ = nullptr; }

  // Effects: destroys this pool (as the destructor does), then takes other's. Throws nothing.
  pool &operator=(pool &&other) noexcept {
    if (this != &other) {
      mtp_pool_destroy(pool_);
      pool_ = other.pool_;
      other.pool_ = nullptr;
    }
    return *this;
  }

  // Effects: exchanges the pools held. Throws nothing.
  void swap(pool &other) noexcept { std::swap(pool_, other.pool_); }
  friend void swap(pool &a, pool &b) noexcept { a.swap(b); }

  // Returns: the C handle (nullptr for a moved-from pool). It stays owned by this object.
  mtp_pool_t *get() const noexcept { return pool_; }

  // Returns: whether the object holds a pool (false once moved from or released).
  explicit operator bool() const noexcept { return pool_ != nullptr; }

  // Effects: gives up ownership without destroying the pool; the caller must destroy the
  // returned handle with mtp_pool_destroy. Returns: the handle (nullptr if none was held).
  mtp_pool_t *release() noexcept {
    mtp_pool_t *p = pool_;
    pool_ = nullptr;
    return p;
  }

  // Returns: the pool's name ("" for a moved-from pool). Valid while the pool lives.
  const char *name() const noexcept { return pool_ != nullptr ? mtp_pool_name(pool_) : ""; }

  // Returns: the pool's statistics (see mtp_stats_t: its classes[] holds the first
  // MTP_STATS_MAX_CLASSES size classes; class_stats gives every one; exact when no thread is
  // using the pool). All zero for a moved-from pool. Throws nothing.
  mtp_stats_t stats() const noexcept {
    mtp_stats_t s;
    if (pool_ != nullptr) {
      mtp_pool_stats(pool_, &s);
    } else {
      std::memset(&s, 0, sizeof s);
    }
    return s;
  }

  // Effects: fills out[0 .. count) with the statistics of the pool's size classes, smallest
  // first (mtp_pool_class_stats). Returns: the number of size classes (out null and count 0 ask
  // for it alone); -1 (errno EINVAL) for out null with count not 0; 0 for a moved-from pool,
  // which fills nothing. Throws nothing.
  int class_stats(mtp_class_stats_t *out, unsigned count) const noexcept {
    return pool_ != nullptr ? mtp_pool_class_stats(pool_, out, count) : 0;
  }

  // Effects: returns the pool's empty pages to the OS now (mtp_pool_trim).
  // Returns: the bytes returned (0 for a moved-from pool). Throws nothing.
  std::size_t trim() noexcept { return pool_ != nullptr ? mtp_pool_trim(pool_) : 0; }

  // Effects: prints the pool's statistics table to out (mtp_pool_print_stats).
  // Returns: 0, EINVAL (out null or a moved-from pool) or EIO. Throws nothing.
  int print_stats(std::FILE *out) const noexcept {
    return pool_ != nullptr ? mtp_pool_print_stats(pool_, out) : EINVAL;
  }

 private:
  static mtp_pool_t *create(const mtp_options_t *opt) {
    mtp_pool_t *p = mtp_pool_create(opt);
    if (p == nullptr) detail::throw_bad_alloc();
    return p;
  }
  static mtp_pool_t *create_named(const char *name) {
    mtp_options_t opt;
    mtp_options_init(&opt);
    opt.name = name;
    return create(&opt);
  }

  mtp_pool_t *pool_;
};

// ------------------------------------------------------------------------------------------------
// mtpool::pool_allocator<T>
// ------------------------------------------------------------------------------------------------

// Stateful allocator bound to one pool (a pointer; the allocator does not own the pool, which
// must outlive every block allocated from it). Two pool_allocators are equal when bound to the
// same pool, whatever their T. Rebinding (std::allocator_traits::rebind_alloc) keeps the pool.
//
// Propagation, chosen so that an allocator always travels with the memory it gave out:
//   copy assignment (false): a = b copies b's elements into a's own pool, reusing a's storage;
//     a copy never moves a container to another pool.
//   move assignment (true):  a = std::move(b) takes b's memory and therefore b's pool, in O(1)
//     and without throwing; a then lives in b's pool.
//   swap (true):             swap(a, b) exchanges memory and pools together in O(1); swapping
//     containers on different pools is always allowed (with false it would be undefined).
//   copy construction:       the copy uses the same pool as the source
//     (select_on_container_copy_construction returns *this).
template <class T>
class pool_allocator {
 public:
  typedef T value_type;
  typedef std::size_t size_type;
  typedef std::ptrdiff_t difference_type;
  typedef std::false_type is_always_equal;
  typedef std::false_type propagate_on_container_copy_assignment;
  typedef std::true_type propagate_on_container_move_assignment;
  typedef std::true_type propagate_on_container_swap;

  // For code that still spells Alloc::rebind<U>::other; the rebound allocator keeps the pool.
  template <class U>
  struct rebind {
    typedef pool_allocator<U> other;
  };

  // Effects: binds to the default pool (mtp_default_pool()). Throws nothing.
  pool_allocator() noexcept : pool_(mtp_default_pool()) {}

  // Effects: binds to p's pool, which must outlive the allocations (a moved-from p, which holds
  // no pool, gives the default pool, as nullptr does). Throws nothing.
  pool_allocator(mtpool::pool &p) noexcept : pool_(or_default(p.get())) {}

  // Effects: binds to the C pool p; nullptr means the default pool. Throws nothing.
  explicit pool_allocator(mtp_pool_t *p) noexcept : pool_(or_default(p)) {}

  // Effects: binds to other's pool (rebinding keeps the pool). Throws nothing.
  template <class U>
  pool_allocator(const pool_allocator<U> &other) noexcept : pool_(other.pool_handle()) {}

  // Effects: allocates n objects' worth of uninitialised memory from the bound pool.
  // Returns: a pointer aligned for T, never null (n == 0 gives a unique block).
  // Throws: std::bad_array_new_length if n > max_size(); std::bad_alloc when out of memory.
  // Thread safety: any thread, concurrently (also with other allocators on the same pool).
  MTPOOL_NODISCARD T *allocate(std::size_t n) {
    detail::check_count<T>(n);
    return detail::checked<T>(
        detail::alloc_in<T>(pool_, detail::bytes_for<T>(n), detail::is_over_aligned<T>()));
  }

  // Effects: returns p's block, which allocate(n) on an equal allocator gave, with its size.
  // Any thread. Throws nothing.
  void deallocate(T *p, std::size_t n) noexcept { mtp_free_sized(p, detail::bytes_for<T>(n)); }

  // Returns: the largest n that allocate(n) may succeed for (PTRDIFF_MAX / sizeof(T)).
  constexpr std::size_t max_size() const noexcept { return detail::max_count<T>(); }

  // Returns: *this (a copied container stays in the source's pool).
  pool_allocator select_on_container_copy_construction() const noexcept { return *this; }

  // Returns: the C handle of the bound pool (never null).
  mtp_pool_t *pool_handle() const noexcept { return pool_; }

  // Returns: whether a and b are bound to the same pool. Non-template friends, so that an
  // unconstrained global template operator== cannot make them ambiguous (see allocator).
  friend bool operator==(const pool_allocator &a, const pool_allocator &b) noexcept {
    return a.pool_ == b.pool_;
  }
  friend bool operator!=(const pool_allocator &a, const pool_allocator &b) noexcept {
    return a.pool_ != b.pool_;
  }

 private:
  static mtp_pool_t *or_default(mtp_pool_t *p) noexcept {
    return p != nullptr ? p : mtp_default_pool();
  }

  mtp_pool_t *pool_;
};

// Returns: whether a and b are bound to the same pool (each can free the other's memory); for
// allocators of different value types (same-type ones are the friends above).
template <class T, class U>
inline bool operator==(const pool_allocator<T> &a, const pool_allocator<U> &b) noexcept {
  return a.pool_handle() == b.pool_handle();
}
template <class T, class U>
inline bool operator!=(const pool_allocator<T> &a, const pool_allocator<U> &b) noexcept {
  return a.pool_handle() != b.pool_handle();
}

}  // namespace mtpool

#endif  // MTPOOL_ALLOCATOR_HPP
