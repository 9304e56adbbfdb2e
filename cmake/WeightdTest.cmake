# wd_add_test(NAME SOURCES files... [LIBS libs...] [LABELS labels...] [TIMEOUT s])
# One cmocka test executable registered with ctest. Every test links weightd-core and cmocka.
function(wd_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} weightd-core PkgConfig::CMOCKA)
  target_compile_options(${name} PRIVATE -iquote${CMAKE_SOURCE_DIR}/tests/common)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                       ENVIRONMENT "WD_BUILD_DIR=${CMAKE_BINARY_DIR};WD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()
