# Runs one fuzz target for a fixed time (the ctest tests of tests/fuzz/CMakeLists.txt):
#   cmake -DFUZZER=<binary> -DSEEDS=<seed dir> -DWORK=<scratch dir> -DARTIFACTS=<dir>
#         -DSECONDS=<n> [-DARGS=<extra fuzzer flags>] -P run_fuzzer.cmake
# libFuzzer adds every input that finds new coverage to the corpus directory it is given, so it
# gets a fresh copy of the checked-in seeds: the source tree is never modified. A crash, leak,
# sanitizer report, per-input timeout or oversized allocation makes it exit non-zero, which fails
# the test; the offending input is written to ARTIFACTS.
foreach(v FUZZER SEEDS WORK ARTIFACTS SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${v}=... is missing")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK} ${ARTIFACTS})
file(GLOB seeds ${SEEDS}/*)
if(seeds)
  file(COPY ${seeds} DESTINATION ${WORK})
endif()

execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
          -print_final_stats=1 -artifact_prefix=${ARTIFACTS}/ ${ARGS} ${WORK}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the input that failed is in ${ARTIFACTS}/ "
                      "(reproduce: ${FUZZER} <that file>)")
endif()
