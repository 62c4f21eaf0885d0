# ctest device_hip_build: proves that the HIP build of the GPU kernels (braid_device_hip, the
# sources of src/device/cuda compiled by hipcc) happened and holds what it should, with no AMD GPU:
#   - the library exists;
#   - it defines the host entry points of every kernel family (nm);
#   - it carries an AMD code object for every architecture it was built for (the offload bundle's
#     target id, hipv4-amdgcn-amd-amdhsa--<arch>), with the kernels of each family in it.
# Usage: cmake -DEXPECTED=ON|OFF -DWHY=<text> -DLIB=<path> -DNM=<nm> -DARCHS=<a,b> -P this file
# EXPECTED is OFF where hipcc was not found or BRAID_HIP_KERNELS=OFF: the check prints "skipped:
# no HIP build" (the test's SKIP_REGULAR_EXPRESSION; cmake -P cannot exit 77). Where hipcc was
# found, a missing library, entry point or code object fails it.
cmake_minimum_required(VERSION 3.20)

if(NOT EXPECTED)
  message("skipped: no HIP build (${WHY})")
  return()
endif()
string(REPLACE "," ";" ARCHS "${ARCHS}")
if(NOT LIB OR NOT EXISTS "${LIB}")
  message(FATAL_ERROR "hipcc was found, but the HIP kernel library is missing: '${LIB}' (${WHY})")
endif()

execute_process(COMMAND ${NM} -C --defined-only "${LIB}" RESULT_VARIABLE rc OUTPUT_VARIABLE syms
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIB}: ${err}")
endif()
set(entry_points
    "braid::cuda::DeviceAvailable(" "braid::cuda::Reduce(" "braid::cuda::Scale("
    "braid::cuda::Divide(" "braid::cuda::Copy(" "braid::quant::cuda::Quantize("
    "braid::quant::cuda::Dequantize(" "braid::quant::cuda::DequantizeReduce(")
set(missing "")
foreach(sym ${entry_points})
  string(FIND "${syms}" " T ${sym}" at)
  if(at EQUAL -1)
    list(APPEND missing "${sym}")
  endif()
endforeach()
execute_process(COMMAND ${NM} -C --undefined-only "${LIB}" OUTPUT_VARIABLE undefined)
if(NOT undefined MATCHES "__hipRegisterFatBinary")
  list(APPEND missing "__hipRegisterFatBinary (no device code registered)")
endif()

# The offload bundles hold each architecture's code object, whose symbol table names its kernels.
file(STRINGS "${LIB}" bundle_ids REGEX "hipv4-amdgcn-amd-amdhsa--")
foreach(arch ${ARCHS})
  set(of_arch ${bundle_ids})
  list(FILTER of_arch INCLUDE REGEX "amdhsa--${arch}")
  if(NOT of_arch)
    list(APPEND missing "code object for ${arch}")
  endif()
endforeach()
foreach(kernel ReduceKernel ScaleKernel DivideKernel CopyKernel QuantizeLanes QuantizeBlocks
               ParamsKernel CodesKernel DecodeUnits DecodeKernel)
  file(STRINGS "${LIB}" hits REGEX "${kernel}.*\\.kd" LIMIT_COUNT 1)
  if(NOT hits)
    list(APPEND missing "device kernel ${kernel}")
  endif()
endforeach()

if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "${LIB} lacks:\n  ${text}")
endif()
list(LENGTH entry_points n)
message("HIP build present: ${LIB}, ${n} entry points, code objects for ${ARCHS}")
