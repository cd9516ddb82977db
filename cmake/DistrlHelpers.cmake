# distrl_add_library(folder SOURCES ... DEPS ...): one static library per top-level folder,
# exported as distrl::<folder>. The repository root is the include root:
# code writes #include "transport/rpc/rpc_agent.h"; the generated config is "common/config.h".
set(DISTRL_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(DISTRL_WERROR)
  list(APPEND DISTRL_WARNINGS -Werror)
endif()
# GCC 12 at -O3 warns (stringop-overflow, array-bounds, restrict) on std::string concatenation in C++20 (LibTorch 2.x's CMake asks for
# C++20) with a bound it computes wrongly (GCC bugs 105329, 105651); GCC 13 fixed it.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13 AND
   Torch_VERSION VERSION_GREATER_EQUAL 2)
  list(APPEND DISTRL_WARNINGS -Wno-stringop-overflow -Wno-array-bounds -Wno-restrict)
endif()

function(distrl_target_defaults target)
  target_compile_options(${target} PRIVATE ${DISTRL_WARNINGS})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                              $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated/distrl>
                                              $<INSTALL_INTERFACE:include/distrl>)
endfunction()

# distrl_add_library(folder SOURCES ... [HEADERS ...] [DEPS ...] [PRIVATE_DEPS ...] [INTERNAL]).
# HEADERS (relative to the folder): its public headers, the only ones `cmake --install` ships
# (cmake/Install.cmake, which checks that they include no other header of the tree). A library
# with HEADERS is installed and exported as distrl::<folder> to find_package(distrl) users;
# INTERNAL ones (the tools' own code: rl, agent, observer, training) are neither.
function(distrl_add_library folder)
  cmake_parse_arguments(ARG "INTERNAL" "" "SOURCES;HEADERS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(distrl_${folder} STATIC ${ARG_SOURCES})
  add_library(distrl::${folder} ALIAS distrl_${folder})
  set_target_properties(distrl_${folder} PROPERTIES EXPORT_NAME ${folder})
  distrl_target_defaults(distrl_${folder})
  target_link_libraries(distrl_${folder} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(ARG_INTERNAL)
    if(ARG_HEADERS)
      message(FATAL_ERROR "distrl_add_library(${folder}): an INTERNAL library has no public HEADERS")
    endif()
    return()
  endif()
  file(RELATIVE_PATH dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(h ${ARG_HEADERS})
    if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${h})
      message(FATAL_ERROR "distrl_add_library(${folder}): HEADERS names ${dir}/${h}, which does not exist")
    endif()
    set_property(GLOBAL APPEND PROPERTY DISTRL_PUBLIC_HEADERS ${dir}/${h})
  endforeach()
  install(TARGETS distrl_${folder} EXPORT distrlTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

function(distrl_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  distrl_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# One precompiled LibTorch header shared by every target that opts in (REUSE_FROM needs
# identical flags, so the PCH is built once in a tiny object library).
if(DISTRL_PCH)
  file(WRITE ${PROJECT_BINARY_DIR}/generated/pch_stub.cpp "// PCH anchor\n")
  add_library(distrl_torch_pch OBJECT ${PROJECT_BINARY_DIR}/generated/pch_stub.cpp)
  target_compile_options(distrl_torch_pch PRIVATE ${DISTRL_WARNINGS})
  target_link_libraries(distrl_torch_pch PUBLIC torch)
  target_precompile_headers(distrl_torch_pch PRIVATE <torch/torch.h>)
endif()

function(distrl_use_torch_pch target)
  if(DISTRL_PCH)
    target_precompile_headers(${target} REUSE_FROM distrl_torch_pch)
  endif()
endfunction()
