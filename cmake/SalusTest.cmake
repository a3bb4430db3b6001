# salus_unit_test(NAME SOURCES src... LIBS lib...)
#   One Check program per module: tests/unit/check_<module>.c, labelled "unit".
function(salus_unit_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CHECK Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 300)
endfunction()

# salus_integration_test(NAME SCRIPT path [LABELS l...] [TIMEOUT s])
#   Integration tests are shell scripts that start real processes; they get the build
#   directory and the source directory in their environment.
function(salus_integration_test name)
  cmake_parse_arguments(T "" "SCRIPT;TIMEOUT" "LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND bash ${T_SCRIPT})
  set_tests_properties(${name} PROPERTIES
    LABELS "integration;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "SALUS_BUILD_DIR=${CMAKE_BINARY_DIR};SALUS_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
