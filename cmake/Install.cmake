# `cmake --install BUILD --prefix P`: the libraries, the tools, the public headers and
# P/lib/cmake/distrl/{distrlConfig,distrlConfigVersion,distrlTargets}.cmake, so that another
# CMake project writes find_package(distrl REQUIRED) and links distrl::transport, distrl::envs ...
# (each carrying its own dependencies: Torch's targets, ZeroMQ, msgpack).
#
# Public headers: every header of the library folders outside detail/ and transport/shm/, plus
# whatever those include (a public template may need a detail header: rref.h needs
# rpc/detail/callable.h). The rest stays out of the install.
include(CMakePackageConfigHelpers)

set(_distrl_public_folders common transport autograd envs models rl run agent observer training)
set(_distrl_todo)
foreach(folder ${_distrl_public_folders})
  file(GLOB_RECURSE _headers RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/${folder}/*.h)
  foreach(h ${_headers})
    if(NOT h MATCHES "/detail/" AND NOT h MATCHES "^transport/shm/")
      list(APPEND _distrl_todo ${h})
    endif()
  endforeach()
endforeach()
set(_distrl_headers)
while(_distrl_todo)
  list(POP_FRONT _distrl_todo h)
  if(h IN_LIST _distrl_headers)
    continue()
  endif()
  list(APPEND _distrl_headers ${h})
  file(STRINGS ${PROJECT_SOURCE_DIR}/${h} _includes REGEX "^#include \"")
  foreach(line ${_includes})
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" inc "${line}")
    if(EXISTS ${PROJECT_SOURCE_DIR}/${inc} AND NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${inc})
      list(APPEND _distrl_todo ${inc})
    endif()
  endforeach()
endwhile()
foreach(h ${_distrl_headers})
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
