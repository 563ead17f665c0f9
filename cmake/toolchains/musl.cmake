# Build mtpool against musl (Alpine's C library) on a glibc machine, with Debian's musl-tools
# (musl-gcc: gcc with musl's headers, crt files, libc.a, libc.so and the dynamic loader
# /lib/ld-musl-x86_64.so.1). Not a cross build: the programs run here, under musl's loader.
#   apt-get install musl-tools
#   cmake -S . -B build-musl -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/musl.cmake
#   cmake -S . -B build-musl-static -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/musl.cmake \
#         -DMTPOOL_MUSL_STATIC=ON      # every program linked statically against musl's libc.a
# Debian has no C++ runtime built for musl, so the C++ parts are left out (MTPOOL_CXX=OFF): the
# adapter's tests and the drop-in's own operator new (a musl C++ program's operator new, e.g.
# Alpine's libstdc++, calls malloc, which the drop-in replaces). On Alpine itself no toolchain
# file is needed: its gcc and g++ target musl, and the whole project builds.
find_program(MTPOOL_MUSL_GCC musl-gcc)
if(NOT MTPOOL_MUSL_GCC)
  message(FATAL_ERROR "musl-gcc not found: install Debian's musl-tools (apt-get install musl-tools)")
endif()
set(CMAKE_C_COMPILER ${MTPOOL_MUSL_GCC})
set(MTPOOL_CXX OFF CACHE BOOL "Build the C++ parts (no C++ runtime for musl-gcc)" FORCE)
set(MTPOOL_LIBC musl CACHE STRING "The C library the build targets" FORCE)

option(MTPOOL_MUSL_STATIC "Link every program statically against musl's libc.a" OFF)
if(MTPOOL_MUSL_STATIC)
  set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
endif()
