# Cross-compile mtpool for 64-bit Arm Linux with Debian's cross compilers, and run the tests under
# qemu-user (ctest prefixes every test executable with CMAKE_CROSSCOMPILING_EMULATOR).
#   apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# The target's libraries are searched under /usr/aarch64-linux-gnu only (plus any extra roots a
# caller puts in CMAKE_FIND_ROOT_PATH, e.g. a cross-built GoogleTest); programs run at build time
# (cmake, the host compilers the header checks use) come from the host.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(MTPOOL_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${MTPOOL_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${MTPOOL_CROSS_TRIPLE}-g++)

set(MTPOOL_CROSS_SYSROOT /usr/${MTPOOL_CROSS_TRIPLE})
list(APPEND CMAKE_FIND_ROOT_PATH ${MTPOOL_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# -L: where qemu finds the aarch64 dynamic loader and libc (Debian's libc6-arm64-cross). Without
# binfmt_misc a guest process cannot exec a guest binary, so tests that run themselves again read
# the emulator from MTP_TEST_EMULATOR (mtp_test_exec_self in tests/testhelper.h), set here for every test ctest runs.
find_program(MTPOOL_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(MTPOOL_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR
      /usr/bin/env "MTP_TEST_EMULATOR=${MTPOOL_QEMU_AARCH64} -L ${MTPOOL_CROSS_SYSROOT}"
      ${MTPOOL_QEMU_AARCH64} -L ${MTPOOL_CROSS_SYSROOT})
endif()
