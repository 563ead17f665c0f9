# cmake -P check_headers.cmake: compile each public header of the C++ adapter on its own, then
# compile_modes.cpp, with COMPILER in language mode STD (11, 14, 17, 20), warnings as errors,
# syntax only. Fails on the first error. Variables: COMPILER, STD, SOURCE_DIR, WORK_DIR, and
# FLAGS (optional, a ;-list: e.g. -stdlib=libc++). Where the standard library has no
# <memory_resource> (libc++ 14 and 15), <mtpool/memory_resource.hpp> must stop with its #error,
# and the others compile.
separate_arguments(extra UNIX_COMMAND "${FLAGS}")
set(flags ${extra} -std=c++${STD} -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
          -Wold-style-cast -Werror -fsyntax-only
          -I${SOURCE_DIR}/c_core/include -I${SOURCE_DIR}/cxx_adapter/include)
set(headers allocator.hpp containers.hpp mtpool.hpp)
if(STD GREATER_EQUAL 17)
  list(APPEND headers memory_resource.hpp)
endif()
file(MAKE_DIRECTORY ${WORK_DIR})
set(has_pmr TRUE)
if(STD GREATER_EQUAL 17)
  file(WRITE ${WORK_DIR}/has_pmr.cpp "#include <memory_resource>\nint main() { return 0; }\n")
  execute_process(COMMAND ${COMPILER} ${extra} -std=c++${STD} -fsyntax-only ${WORK_DIR}/has_pmr.cpp
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    set(has_pmr FALSE)
    list(REMOVE_ITEM headers memory_resource.hpp)
    set(tu ${WORK_DIR}/only_memory_resource.hpp.cpp)
    file(WRITE ${tu} "#include <mtpool/memory_resource.hpp>\nint main() { return 0; }\n")
    execute_process(COMMAND ${COMPILER} ${flags} ${tu} RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(rc EQUAL 0 OR NOT err MATCHES "has no <memory_resource>")
      message(FATAL_ERROR "${COMPILER} -std=c++${STD}: no <memory_resource>, and "
              "<mtpool/memory_resource.hpp> does not say so:\n${err}")
    endif()
    message(STATUS "${COMPILER} -std=c++${STD}: no <memory_resource>; the pmr header says so")
  endif()
endif()
foreach(h ${headers})
  set(tu ${WORK_DIR}/only_${h}.cpp)
  file(WRITE ${tu} "#include <mtpool/${h}>\n#include <mtpool/${h}>\nint main() { return 0; }\n")
  execute_process(COMMAND ${COMPILER} ${flags} ${tu} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${COMPILER} -std=c++${STD}: <mtpool/${h}> does not compile on its own")
  endif()
endforeach()
execute_process(COMMAND ${COMPILER} ${flags} ${SOURCE_DIR}/tests/cxx/compile_modes.cpp
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${COMPILER} -std=c++${STD}: compile_modes.cpp does not compile cleanly")
endif()
message(STATUS "${COMPILER} -std=c++${STD}: headers clean")
