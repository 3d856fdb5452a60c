# FindNCCL: NCCL ships no CMake config. Looks in NCCL_ROOT (hint, e.g. a Python wheel's
# nvidia/nccl), then the CUDA toolkit. NAMES_PER_DIR makes a NCCL_ROOT hit win over the
# toolkit's libnccl.so (TOOLCHAIN.md pitfall). Defines NCCL::nccl and NCCL_VERSION_CODE.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
list(APPEND _nccl_hints /usr/local/cuda)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include NO_CMAKE_SYSTEM_PATH)
find_path(NCCL_INCLUDE_DIR nccl.h)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
             HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64 NO_CMAKE_SYSTEM_PATH)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_code REGEX "^#define NCCL_VERSION_CODE")
  string(REGEX REPLACE "^#define NCCL_VERSION_CODE +([0-9]+).*" "\\1" NCCL_VERSION_CODE "${_nccl_code}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR NCCL_VERSION_CODE)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
