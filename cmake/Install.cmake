# `cmake --install BUILD --prefix P`: the libraries, the tools, the public headers and
# P/lib/cmake/distrl/{distrlConfig,distrlConfigVersion,distrlTargets}.cmake, so that another
# CMake project writes find_package(distrl REQUIRED) and links distrl::transport, distrl::envs ...
# (each carrying its own dependencies: Torch's targets, ZeroMQ, msgpack).
#
# Public headers: those each library lists as HEADERS (cmake/DistrlHelpers.cmake), nothing else.
# The list must be closed: a public header that includes another header of the tree which is
# not listed would install broken, so configuring fails naming both. `make consumer` then
# compiles every installed header on its own against the install (examples/consumer).
include(CMakePackageConfigHelpers)

get_property(_distrl_headers GLOBAL PROPERTY DISTRL_PUBLIC_HEADERS)
foreach(h ${_distrl_headers})
  file(STRINGS ${PROJECT_SOURCE_DIR}/${h} _includes REGEX "^#include \"")
  foreach(line ${_includes})
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" inc "${line}")
    if(EXISTS ${PROJECT_SOURCE_DIR}/${inc} AND NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${inc} AND
       NOT inc IN_LIST _distrl_headers)
      message(FATAL_ERROR "public header ${h} includes ${inc}, which is not public: add it to HEADERS in its "
                          "folder's CMakeLists.txt, or include it from a .cpp instead")
    endif()
  endforeach()
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/distrl/${dir})
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/distrl/common/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/distrl/common)

# The tools (distrl-launch finds distrl-agent, distrl-observer, distrl-train ... beside itself)
# and the example configs.
foreach(tool distrl-launch distrl-agent distrl-learner distrl-observer distrl-train distrl-rnn distrl-ps distrl-pipeline
             distrl-bench distrl-keygen distrl-render)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/distrl/configs)

if(TARGET distrl_nccl_deps)  # a library's private dependency: the export must carry it
  install(TARGETS distrl_nccl_deps EXPORT distrlTargets)
endif()
install(EXPORT distrlTargets NAMESPACE distrl:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/distrl)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/distrlConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/distrlConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/distrl)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/distrlConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/distrlConfig.cmake ${PROJECT_BINARY_DIR}/distrlConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/distrl)
