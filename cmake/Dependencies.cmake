# Every find_package of the project lives here; code uses the imported targets.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)          # cppzmq finds libzmq through pkg-config
find_package(cppzmq REQUIRED)             # target: cppzmq
find_package(msgpack REQUIRED)            # Debian 4.1.3: config "msgpack", target msgpackc-cxx
find_package(Torch REQUIRED)              # target: torch (CPU-only on Debian)
# Two LibTorch installs on one machine (Debian's and a downloaded one) mix silently: TorchConfig
# from one, libtorch.so from the system's library path. Refuse that.
get_filename_component(_torch_prefix "${Torch_DIR}/../../.." ABSOLUTE)
if(TORCH_LIBRARY AND NOT TORCH_LIBRARY MATCHES "^${_torch_prefix}/")
  message(FATAL_ERROR "LibTorch's CMake files are from ${Torch_DIR} but libtorch was found at ${TORCH_LIBRARY}: "
                      "two LibTorch installs are mixed. Put the one you want first with "
                      "-DCMAKE_PREFIX_PATH=<its prefix> (the directory holding lib/ and share/cmake/Torch; "
                      "make LIBTORCH=wheel does this).")
endif()
message(STATUS "distrl: LibTorch ${Torch_VERSION} from ${_torch_prefix}")
find_package(CLI11 REQUIRED)              # target: CLI11::CLI11
find_package(yaml-cpp REQUIRED)           # target: yaml-cpp
find_package(ZLIB REQUIRED)               # target: ZLIB::ZLIB (gzipped IDX datasets)
find_package(box2d REQUIRED)              # target: box2d::box2d (LunarLander)
find_package(GIF REQUIRED)                # target: GIF::GIF (giflib: distrl-render's animated GIFs)
if(DISTRL_BUILD_TESTS)
  find_package(GTest REQUIRED)            # targets: GTest::gtest_main, GTest::gmock
  find_package(Python3 REQUIRED COMPONENTS Interpreter)  # the docs' figure check (cmake/check_figures.py)
  include(GoogleTest)
endif()

# msgpack without ~1,000 Boost headers in every file (applies to the whole project).
add_compile_definitions(MSGPACK_NO_BOOST)

# --- CUDA: AUTO turns it on only when the found LibTorch was built with CUDA.
set(_torch_has_cuda OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
  set(_torch_has_cuda ON)
endif()
if(DISTRL_CUDA STREQUAL "ON" AND NOT _torch_has_cuda)
  message(FATAL_ERROR "DISTRL_CUDA=ON but the LibTorch found at ${Torch_DIR} has no CUDA. "
                      "Point Torch_DIR at a CUDA LibTorch or use -DDISTRL_CUDA=AUTO.")
endif()
if(DISTRL_CUDA STREQUAL "OFF")
  set(DISTRL_WITH_CUDA OFF)
else()
  set(DISTRL_WITH_CUDA ${_torch_has_cuda})
endif()
message(STATUS "distrl: CUDA ${DISTRL_WITH_CUDA} (DISTRL_CUDA=${DISTRL_CUDA}, LibTorch CUDA=${_torch_has_cuda})")

# --- NCCL: compiles whenever nccl.h is found in the CUDA toolkit, even with a CPU LibTorch.
set(DISTRL_WITH_NCCL OFF)
if(NOT DISTRL_NCCL STREQUAL "OFF")
  set(_cuda_hints $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)
  # A LibTorch from the torch wheel links its own NCCL (site-packages' nvidia/nccl, found through
  # its RPATH) and needs symbols an older toolkit's lacks: build against that one when present.
  set(_wheel_nccl ${_torch_prefix}/../nvidia/nccl)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_wheel_nccl} ${_cuda_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_wheel_nccl} ${_cuda_hints} PATH_SUFFIXES lib lib64
               NO_DEFAULT_PATH)
  find_path(CUDART_INCLUDE_DIR cuda_runtime_api.h HINTS ${_cuda_hints} PATH_SUFFIXES include)
  find_library(CUDART_LIBRARY cudart HINTS ${_cuda_hints} PATH_SUFFIXES lib64 lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND CUDART_INCLUDE_DIR AND CUDART_LIBRARY)
    set(DISTRL_WITH_NCCL ON)
    add_library(distrl_nccl_deps INTERFACE)
    target_include_directories(distrl_nccl_deps SYSTEM INTERFACE ${NCCL_INCLUDE_DIR} ${CUDART_INCLUDE_DIR})
    target_link_libraries(distrl_nccl_deps INTERFACE ${NCCL_LIBRARY} ${CUDART_LIBRARY})
  elseif(DISTRL_NCCL STREQUAL "ON")
    message(FATAL_ERROR "DISTRL_NCCL=ON but nccl.h/libnccl or the CUDA runtime was not found under "
                        "CUDA_HOME='$ENV{CUDA_HOME}'. Set CUDA_HOME to the toolkit or use -DDISTRL_NCCL=AUTO.")
  endif()
endif()
message(STATUS "distrl: NCCL ${DISTRL_WITH_NCCL} (DISTRL_NCCL=${DISTRL_NCCL})")
