# Runs a command and fails unless it exits 0 AND its output matches every regular expression
# given. (CTest's PASS_REGULAR_EXPRESSION ignores the exit code, so a crash after the
# expected line would pass.)
#   cmake -DCMD="prog;arg;..." -DEXPECT="regex;regex" -P expect_output.cmake
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exited with ${rc}: ${CMD}")
endif()
foreach(re IN LISTS EXPECT)
  if(NOT "${out}${err}" MATCHES "${re}")
    message(FATAL_ERROR "output lacks '${re}'")
  endif()
endforeach()
