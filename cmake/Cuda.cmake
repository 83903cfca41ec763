# Decides whether exec/ builds its CUDA/cuBLAS/NCCL parts. Sets DOMINO_HAVE_CUDA and, when it is
# off, DOMINO_CUDA_REASON. DOMINO_CUDA=ON turns a missing toolkit into a configure error.
set(DOMINO_HAVE_CUDA OFF)
set(DOMINO_CUDA_REASON "DOMINO_CUDA=OFF")
if(NOT DOMINO_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # A100 (sm_80) and Hopper (sm_90, with PTX for later GPUs).
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
    endif()
    # CMake does not know nvcc 13's C++20 dialect flag; the .cu files need only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # nvcc's front end takes `e = Check(...)` for a discarded [[nodiscard]] Status (warning 2810:
    # the assignment's own Status&); the host compilers, which see every other use, do not.
    string(APPEND CMAKE_CUDA_FLAGS " -diag-suppress=2810")
    enable_language(CUDA)
    find_package(CUDAToolkit)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/lib)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(DOMINO_HAVE_CUDA ON)
    else()
      set(DOMINO_CUDA_REASON "cuBLAS or NCCL not found")
    endif()
  else()
    set(DOMINO_CUDA_REASON "nvcc not found")
  endif()
  if(DOMINO_CUDA STREQUAL "ON" AND NOT DOMINO_HAVE_CUDA)
    message(FATAL_ERROR "DOMINO_CUDA=ON but ${DOMINO_CUDA_REASON}")
  endif()
endif()
