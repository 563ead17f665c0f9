// mtpool C++ adapter, everything at once: the allocators and the pool, the container aliases,
// and (C++17 and later) the pmr memory resource.
#ifndef MTPOOL_MTPOOL_HPP
#define MTPOOL_MTPOOL_HPP

#include <mtpool/allocator.hpp>
#include <mtpool/containers.hpp>
#if __cplusplus >= 201703L
#include <mtpool/memory_resource.hpp>
#endif

#endif  // MTPOOL_MTPOOL_HPP
