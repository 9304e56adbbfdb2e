# SPDX-License-Identifier: Apache-2.0
# wd_add_test(NAME SOURCES files... [LIBS libs...] [LABELS labels...] [TIMEOUT s])
# One cmocka test executable registered with ctest. Every test links the test-support library
# (tests/common: wd_testsupport), weightd-core and cmocka.
function(wd_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} wd_testsupport weightd-core PkgConfig::CMOCKA)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(WD_SANITIZE)
    # ASan+UBSan run the same work 2-5x slower (unit.convert's exhaustive kernel checks take about
    # 100 s alone there): the limits are there to catch hangs, not to time the code.
    math(EXPR T_TIMEOUT "${T_TIMEOUT} * 4")
    set(T_SCALE 4)
  else()
    set(T_SCALE 1)
  endif()
  # WD_TIME_SCALE stretches the harness's own hang-catching waits the same way. No test may
  # look for EC2 instance metadata off this machine: the credential chain's last step is off.
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                       ENVIRONMENT "WD_BUILD_DIR=${CMAKE_BINARY_DIR};WD_SOURCE_DIR=${CMAKE_SOURCE_DIR};WD_TIME_SCALE=${T_SCALE};AWS_EC2_METADATA_DISABLED=true")
endfunction()
