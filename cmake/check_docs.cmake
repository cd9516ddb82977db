# The pages that list every thread and every test cannot drift silently:
#   cmake -DROOT=<source dir> -P cmake/check_docs.cmake
# - every thread name the code sets (name_this_thread("x"), ThreadPool(n, "x", ...)) appears in
#   docs/threads.md as `x`;
# - every test CTest registers from tests/CMakeLists.txt (distrl_add_test(<binary> ...),
#   add_test(NAME <Suite.Name> ...), in any CMakeLists.txt under tests/) appears in
#   tests/README.md as `name`.
# Prints what is missing and where to document it, and fails; prints nothing when all is there.
set(missing "")

file(GLOB_RECURSE sources RELATIVE ${ROOT}
  ${ROOT}/common/*.cpp ${ROOT}/common/*.h ${ROOT}/transport/*.cpp ${ROOT}/transport/*.h
  ${ROOT}/autograd/*.cpp ${ROOT}/autograd/*.h ${ROOT}/envs/*.cpp ${ROOT}/envs/*.h
  ${ROOT}/models/*.cpp ${ROOT}/models/*.h ${ROOT}/rl/*.cpp ${ROOT}/rl/*.h
  ${ROOT}/agent/*.cpp ${ROOT}/agent/*.h ${ROOT}/observer/*.cpp ${ROOT}/observer/*.h
  ${ROOT}/training/*.cpp ${ROOT}/training/*.h ${ROOT}/tools/*.cpp ${ROOT}/tools/*.h)
file(READ ${ROOT}/docs/threads.md threads_page)
foreach(f IN LISTS sources)
  file(READ ${ROOT}/${f} text)
  string(REGEX MATCHALL "name_this_thread\\([^\"\n]*\"[^\"\n]+\"|ThreadPool>?\\([^,\"\n]+, *\"[^\"\n]+\"" calls "${text}")
  foreach(call IN LISTS calls)
    string(REGEX MATCH "\"([^\"]+)\"" _ "${call}")
    set(name "${CMAKE_MATCH_1}")
    string(FIND "${threads_page}" "`${name}`" at)
    if(at EQUAL -1)
      string(APPEND missing "docs: thread `${name}` (named in ${f}) is not in docs/threads.md: add a row saying how many run, who starts them and what they run\n")
    endif()
  endforeach()
endforeach()

file(GLOB_RECURSE test_lists ${ROOT}/tests/CMakeLists.txt)
set(registered "")
foreach(list_file IN LISTS test_lists)
  file(READ ${list_file} tests_cmake)
  string(REGEX MATCHALL "distrl_add_test\\([A-Za-z0-9_]+|add_test\\(NAME [A-Za-z0-9_.]+" found "${tests_cmake}")
  list(APPEND registered ${found})
endforeach()
file(READ ${ROOT}/tests/README.md tests_page)
foreach(reg IN LISTS registered)
  string(REGEX REPLACE "^(distrl_add_test\\(|add_test\\(NAME )" "" name "${reg}")
  string(FIND "${tests_page}" "`${name}`" at)
  if(at EQUAL -1)
    string(APPEND missing "docs: test `${name}` (registered under tests/) is not in tests/README.md: add a row saying what it covers\n")
  endif()
endforeach()

if(NOT missing STREQUAL "")
  message(FATAL_ERROR "${missing}")
endif()
