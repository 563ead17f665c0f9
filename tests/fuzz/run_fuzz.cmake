# Runs the libFuzzer target for a bounded time on a copy of the seed corpus (the repository's
# corpus is never written), then prints the execution count. Called by ctest (label "fuzz"):
#   cmake -DFUZZER=... -DCORPUS=... -DWORK=... -DSECONDS=60 -P run_fuzz.cmake
if(DEFINED ENV{MTP_FUZZ_SECONDS})
  set(SECONDS $ENV{MTP_FUZZ_SECONDS})
endif()
file(REMOVE_RECURSE ${WORK}/corpus)
file(MAKE_DIRECTORY ${WORK}/corpus)
file(GLOB _seeds ${CORPUS}/*)
file(COPY ${_seeds} DESTINATION ${WORK}/corpus)
list(LENGTH _seeds _nseeds)
message(STATUS "fuzz_mtpool: ${_nseeds} seed inputs, ${SECONDS} s")
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -print_final_stats=1 -timeout=30 -rss_limit_mb=4096
          -max_len=4096 -artifact_prefix=${WORK}/ ${WORK}/corpus
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
string(REGEX MATCH "stat::number_of_executed_units: *([0-9]+)" _m "${_err}")
set(_execs "${CMAKE_MATCH_1}")
string(REGEX MATCH "#[0-9]+[ \t]+DONE[^\n]*" _m2 "${_err}")
file(GLOB _after ${WORK}/corpus/*)
list(LENGTH _after _nafter)
if(NOT _rc EQUAL 0)
  string(LENGTH "${_err}" _len)
  if(_len GREATER 20000)
    math(EXPR _from "${_len} - 20000")
    string(SUBSTRING "${_err}" ${_from} 20000 _err)
  endif()
  message("${_out}${_err}")
  message(FATAL_ERROR "fuzz_mtpool failed (exit ${_rc}) after ${_execs} executions; "
                      "reproduce with: ${FUZZER} ${WORK}/crash-*")
endif()
message("fuzz_mtpool: ${_execs} executions in ${SECONDS} s, corpus ${_nseeds} -> ${_nafter} inputs, "
        "${_m2}")
