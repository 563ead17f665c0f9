# Installed manual pages and Debian packages (CPack DEB). Included last by the top-level
# CMakeLists.txt, so that every target (the drop-in malloc library among them) exists here.
#
#   cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_PREFIX=/usr
#   cmake --build build-deb -j && (cd build-deb && cpack -G DEB)
#
# Install components, one package each:
#   runtime  libmtpool0         libmtpool.so.0 (the soname) and libmtpool.so.0.x.y
#   dev      libmtpool-dev      headers, libmtpool.so, libmtpool.a, CMake package, mtpool.pc, mtpool(3)
#   malloc   libmtpool-malloc   the drop-in malloc library and mtpool-malloc(7), when the tree has
#                               the target mtpool_malloc (its install() says COMPONENT malloc)
include(GNUInstallDirs)

# Manual pages. mtpool-malloc(7) describes the drop-in library, so it goes with it.
install(FILES ${PROJECT_SOURCE_DIR}/man/mtpool.3 DESTINATION ${CMAKE_INSTALL_MANDIR}/man3
        COMPONENT dev)
if(TARGET mtpool_malloc)
  install(FILES ${PROJECT_SOURCE_DIR}/man/mtpool-malloc.7 DESTINATION ${CMAKE_INSTALL_MANDIR}/man7
          COMPONENT malloc)
endif()

# The pages render without a groff warning (ctest test man_pages).
find_program(MTPOOL_GROFF groff)
if(MTPOOL_BUILD_TESTS AND MTPOOL_GROFF)
  add_test(NAME man_pages COMMAND sh -c
    "for f in \"$@\"; do w=$(${MTPOOL_GROFF} -man -Tutf8 -ww -z \"$f\" 2>&1); \
     if [ -n \"$w\" ]; then echo \"$f: $w\"; exit 1; fi; done; echo \"$# pages, no warning\""
    sh ${PROJECT_SOURCE_DIR}/man/mtpool.3 ${PROJECT_SOURCE_DIR}/man/mtpool-malloc.7)
endif()

# The development package carries the static library beside the shared one (Debian's custom):
# a shared build compiles the core a second time as libmtpool.a. The CMake package and mtpool.pc
# name the shared library; the archive is for `pkg-config --static` and -static links.
option(MTPOOL_INSTALL_STATIC "With BUILD_SHARED_LIBS, also build and install libmtpool.a" ON)
if(BUILD_SHARED_LIBS AND MTPOOL_INSTALL_STATIC)
  get_target_property(_mtp_srcs mtpool SOURCES)
  get_target_property(_mtp_dir mtpool SOURCE_DIR)
  set(_mtp_static_srcs "")
  foreach(s ${_mtp_srcs})
    if(IS_ABSOLUTE ${s})
      list(APPEND _mtp_static_srcs ${s})
    else()
      list(APPEND _mtp_static_srcs ${_mtp_dir}/${s})
    endif()
  endforeach()
  add_library(mtpool_static STATIC ${_mtp_static_srcs})
  target_include_directories(mtpool_static PRIVATE ${_mtp_dir}/include ${_mtp_dir}/src)
  get_target_property(_mtp_defs mtpool COMPILE_DEFINITIONS)
  if(_mtp_defs)
    target_compile_definitions(mtpool_static PRIVATE ${_mtp_defs})
  endif()
  target_link_libraries(mtpool_static PRIVATE mtpool_project_flags)
  set_target_properties(mtpool_static PROPERTIES OUTPUT_NAME mtpool
    C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS ON
    C_VISIBILITY_PRESET hidden POSITION_INDEPENDENT_CODE ON)
  install(TARGETS mtpool_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mtpool)
set(CPACK_PACKAGE_VENDOR "mtpool")
set(CPACK_PACKAGE_CONTACT "mtpool maintainers <mtpool@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
if(TARGET mtpool_malloc)
  list(APPEND CPACK_COMPONENTS_ALL malloc)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)         # name_version_arch.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)          # libc6 from dpkg-shlibdeps
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# dpkg-shlibdeps finds libmtpool.so.0 in the build tree, not in an installed package.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/c_core)

set(_mtp_ver "${PROJECT_VERSION}-1")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libmtpool${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON) # a shlibs file for packages that link libmtpool.so.0
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "multi-threaded pool allocator (shared library)\nlibmtpool.so.${PROJECT_VERSION_MAJOR}: the mtpool C library.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libmtpool-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libmtpool${PROJECT_VERSION_MAJOR} (= ${_mtp_ver})")
if(TARGET mtpool_malloc)
  # The CMake package's targets file names libmtpool-malloc.so (mtpool::malloc), and
  # find_package fails when a file it names is missing.
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libmtpool-malloc (= ${_mtp_ver})")
endif()
set(CPACK_DEBIAN_DEV_DESCRIPTION
    "multi-threaded pool allocator (development files)\nHeaders (C and the header-only C++ adapter), libmtpool.so, libmtpool.a,\nthe CMake package (find_package(mtpool)), mtpool.pc and mtpool(3).")

set(CPACK_DEBIAN_MALLOC_PACKAGE_NAME libmtpool-malloc)
set(CPACK_DEBIAN_MALLOC_PACKAGE_SECTION libs)
if(TARGET mtpool_malloc)
  # Linked against the shared core: depend on that exact build (dpkg-shlibdeps cannot, the library
  # is in the build tree). A library with the core built in needs nothing but libc.
  get_target_property(_mtp_malloc_libs mtpool_malloc LINK_LIBRARIES)
  if(BUILD_SHARED_LIBS AND _mtp_malloc_libs AND (_mtp_malloc_libs MATCHES "(^|;)(mtpool|mtpool::mtpool)(;|$)"))
    set(CPACK_DEBIAN_MALLOC_PACKAGE_DEPENDS "libmtpool${PROJECT_VERSION_MAJOR} (= ${_mtp_ver})")
  endif()
endif()
set(CPACK_DEBIAN_MALLOC_DESCRIPTION
    "multi-threaded pool allocator (drop-in malloc)\nlibmtpool-malloc.so replaces malloc, free and C++ new/delete for a whole\nprocess (LD_PRELOAD or linking); libmtpool-debug.so, a heap debugger to\npreload; see mtpool-malloc(7).")
include(CPack)
