# The fuzz targets, one per parser: built as libFuzzer targets (BRAID_FUZZ=ON) or as replayers
# (every other build); tests/fuzz/CMakeLists.txt defines braid_fuzz_target for each.
braid_fuzz_target(config LIBS braid_transport braid_net braid_base)
braid_fuzz_target(unique_id LIBS braid_net braid_base)
braid_fuzz_target(handshake LIBS braid_net braid_base)
braid_fuzz_target(bootstrap_client LIBS braid_net braid_base)
braid_fuzz_target(rendezvous LIBS braid_net braid_base)
braid_fuzz_target(shm_blob LIBS braid_transport braid_net braid_base)
braid_fuzz_target(tuner LIBS braid_algorithms braid_base)
braid_fuzz_target(link_profile LIBS braid_algorithms braid_base)
braid_fuzz_target(topology_file LIBS braid_topology braid_base
                  ARGS -dict=${CMAKE_CURRENT_LIST_DIR}/topology_file.dict)
# The perf binaries' parser is compiled in directly: braid_perf_harness links the whole shared
# library and MPI, none of which the parser needs. -close_fd_mask=3 silences its usage messages
# (sanitizer reports still reach the terminal).
set(perf_common ${PROJECT_SOURCE_DIR}/perf/common)
braid_fuzz_target(perf_options
                  SOURCES ${perf_common}/options.cc ${perf_common}/datatypes.cc
                          ${perf_common}/data_model.cc
                  ARGS -close_fd_mask=3)
target_include_directories(fuzz_perf_options PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_compile_options(fuzz_perf_options PRIVATE -iquote ${PROJECT_SOURCE_DIR}/perf)
