// mtpool C++ adapter, everything at once: the allocators and the pool, the container aliases,
// and (C++17 and later, where the standard library has <memory_resource>) the pmr memory
// resource. MTPOOL_HAS_MEMORY_RESOURCE is 1 when mtpool::memory_resource was included, else 0
// (before C++17, or a standard library without std::pmr: libc++ 14 and 15).
#ifndef MTPOOL_MTPOOL_HPP
#define MTPOOL_MTPOOL_HPP

#include <mtpool/allocator.hpp>
#include <mtpool/containers.hpp>
#if __cplusplus >= 201703L && defined(__has_include)
#if __has_include(<memory_resource>)
#define MTPOOL_HAS_MEMORY_RESOURCE 1
#include <mtpool/memory_resource.hpp>
#endif
#endif
#ifndef MTPOOL_HAS_MEMORY_RESOURCE
#define MTPOOL_HAS_MEMORY_RESOURCE 0
#endif

#endif  // MTPOOL_MTPOOL_HPP
