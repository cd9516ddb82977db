# Fails unless BINARY (a dynamically linked executable) loads no LibTorch library: used to keep
# distrl-observer and distrl-launch light (they link distrl::transport_core, never LibTorch).
#   cmake -DBINARY=path -P cmake/check_no_torch.cmake
execute_process(COMMAND ldd ${BINARY} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "libc\\.so")
  message(FATAL_ERROR "ldd ${BINARY} failed (${rc}): ${err}${out}")
endif()
string(REGEX MATCHALL "lib(torch|c10|shm)[^ ]*" torch_libs "${out}")
if(torch_libs)
  list(REMOVE_DUPLICATES torch_libs)
  message(FATAL_ERROR "${BINARY} loads LibTorch (${torch_libs}): something it links pulled in distrl::transport or torch; "
                      "it must link distrl::transport_core only (not distrl::transport, distrl::training or torch)")
endif()
message(STATUS "${BINARY}: no LibTorch library among its dependencies")
