// mtpool C++ adapter: a std::pmr::memory_resource over a pool. C++17 and later.
//
//   mtpool::pool p("requests");
//   mtpool::memory_resource res(p);
//   std::pmr::vector<int> v(&res);           // v's memory comes from p
//
// Properties:
//   1. The resource does not own its pool: the pool must outlive every block allocated through
//      the resource (destroying the pool releases them all at once).
//   2. do_allocate never returns null: it throws std::bad_alloc when memory runs out, or when the
//      alignment is not a power of two.
//   3. do_deallocate passes the size to the core (sized free); any thread may call it.
//   4. Two mtpool::memory_resource objects are equal when they are over the same pool, so
//      containers on either may exchange memory (needs RTTI; without it, only the same object).
//   5. Alignments up to 16 use the plain API (the fast path), with the size rounded up to a
//      multiple of the alignment (pmr containers' requests already are); larger alignments use
//      the aligned API.
#ifndef MTPOOL_MEMORY_RESOURCE_HPP
#define MTPOOL_MEMORY_RESOURCE_HPP

#if __cplusplus < 201703L
#error "<mtpool/memory_resource.hpp> needs C++17 (std::pmr); use <mtpool/allocator.hpp> before"
#endif
// C++17 is not enough: the standard library must ship <memory_resource> (libstdc++ 9 and later,
// libc++ 16 and later; libc++ 14 and 15 have none). <mtpool/mtpool.hpp> includes this header only
// where it can, and says which through MTPOOL_HAS_MEMORY_RESOURCE.
#if defined(__has_include)
#if !__has_include(<memory_resource>)
#error "<mtpool/memory_resource.hpp>: this C++ standard library has no <memory_resource> (libc++ before 16): use <mtpool/allocator.hpp>, or libc++ 16 or later"
#endif
#endif

#include <mtpool/allocator.hpp>

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <new>

namespace mtpool {

// A polymorphic memory resource that allocates from one pool (the default pool when none is
// given). Thread safety: allocate/deallocate may be called from any thread concurrently.
class memory_resource : public std::pmr::memory_resource {
 public:
  // Effects: a resource over the default pool. Throws nothing.
  memory_resource() noexcept : pool_(mtp_default_pool()) {}

  // Effects: a resource over p's pool, which must outlive the resource's blocks (a moved-from p,
  // which holds no pool, gives the default pool, as nullptr does). Throws nothing.
  explicit memory_resource(mtpool::pool &p) noexcept : memory_resource(p.get()) {}

  // Effects: a resource over the C pool p; nullptr means the default pool. Throws nothing.
  explicit memory_resource(mtp_pool_t *p) noexcept
      : pool_(p != nullptr ? p : mtp_default_pool()) {}

  // Copies are over the same pool (and compare equal).
  memory_resource(const memory_resource &) noexcept = default;
  memory_resource &operator=(const memory_resource &) noexcept = default;

  // Returns: the C handle of the pool (never null).
  mtp_pool_t *pool_handle() const noexcept { return pool_; }

  // Returns: a.is_equal(b) (the same object, or over the same pool). Exact-type non-template
  // friends: std::pmr's operator== needs a derived-to-base conversion, so without these an
  // unconstrained global template operator==(const T&, const T&) would be chosen instead.
  friend bool operator==(const memory_resource &a, const memory_resource &b) noexcept {
    return a.is_equal(b);
  }
  friend bool operator!=(const memory_resource &a, const memory_resource &b) noexcept {
    return !a.is_equal(b);
  }

 private:
  // Effects: allocates bytes aligned to alignment from the pool.
  // Throws: std::bad_alloc when memory runs out or alignment is not a power of two.
  void *do_allocate(std::size_t bytes, std::size_t alignment) override {
    // No object exceeds PTRDIFF_MAX bytes (which also keeps the rounding below from wrapping).
    if (bytes > max_request || alignment == 0 || (alignment & (alignment - 1)) != 0) {
      detail::throw_bad_alloc();
    }
    void *p = alignment <= detail::plain_alignment
                  ? mtp_pool_alloc(pool_, plain_size(bytes, alignment))
                  : mtp_pool_alloc_aligned(pool_, bytes, alignment);
    if (p == nullptr) detail::throw_bad_alloc();
    return p;
  }

  // Effects: frees p, which do_allocate(bytes, alignment) gave, with its size. Throws nothing.
  void do_deallocate(void *p, std::size_t bytes, std::size_t alignment) override {
    mtp_free_sized(p, alignment <= detail::plain_alignment ? plain_size(bytes, alignment) : bytes);
  }

  // Returns: whether other is this object, or an mtpool::memory_resource over the same pool.
  bool do_is_equal(const std::pmr::memory_resource &other) const noexcept override {
    if (this == &other) return true;
#if defined(__cpp_rtti) || defined(__GXX_RTTI)
    const memory_resource *o = dynamic_cast<const memory_resource *>(&other);
    return o != nullptr && o->pool_ == pool_;
#else
    return false;
#endif
  }

  // Requests up to 16-byte alignment go to the plain API (the fast path) with the size rounded
  // up to a multiple of the alignment: plain blocks of such sizes are aligned enough. Size 0
  // asks for one alignment's worth, so that even an empty block is aligned.
  static constexpr std::size_t max_request =
      static_cast<std::size_t>(PTRDIFF_MAX) - detail::plain_alignment;
  static std::size_t plain_size(std::size_t bytes, std::size_t alignment) noexcept {
    return bytes == 0 ? alignment : (bytes + alignment - 1) & ~(alignment - 1);
  }

  mtp_pool_t *pool_;
};

// Returns: a resource over the default pool that lives for the whole program (never destroyed,
// so it stays usable from other static objects' destructors), e.g. for
// std::pmr::set_default_resource(mtpool::default_resource()). Thread-safe. Throws nothing.
inline memory_resource *default_resource() noexcept {
  alignas(memory_resource) static unsigned char storage[sizeof(memory_resource)];
  static memory_resource *const res = ::new (static_cast<void *>(storage)) memory_resource();
  return res;
}

}  // namespace mtpool

#endif  // MTPOOL_MEMORY_RESOURCE_HPP
