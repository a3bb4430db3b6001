# Every dependency comes from the distribution's packages (tools/setup.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(LIBEVENT REQUIRED IMPORTED_TARGET libevent_core libevent_extra libevent_pthreads)
pkg_check_modules(MSGPACK REQUIRED IMPORTED_TARGET msgpack)
pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
pkg_check_modules(CHECK REQUIRED IMPORTED_TARGET check)   # Debian ships no CMake config for Check
# the cluster role (salusd --cluster): etcd's JSON gateway over libcurl, JSON by json-c, the
# daemon links' HMAC and random nonces by OpenSSL's libcrypto
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
pkg_check_modules(JSONC REQUIRED IMPORTED_TARGET json-c)
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
# the parameter servers' data plane between daemons (salusd/ps_net*.c): UCX's UCP
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
pkg_check_modules(SYSTEMD IMPORTED_TARGET libsystemd)      # optional: sd_notify

if(NOT EXISTS "${SALUS_CUDA_HOME}/include/cuda.h")
  message(FATAL_ERROR "CUDA toolkit headers not found: ${SALUS_CUDA_HOME}/include/cuda.h is missing "
                      "(set SALUS_CUDA_HOME or CUDA_HOME)")
endif()
set(SALUS_CUDA_INCLUDE "${SALUS_CUDA_HOME}/include")
find_program(SALUS_NVCC nvcc HINTS "${SALUS_CUDA_HOME}/bin" NO_DEFAULT_PATH)
find_program(SALUS_CLANG clang)
