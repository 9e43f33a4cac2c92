# ctxpar_library(NAME SOURCES ... [DEPS ...]): one static library per subsystem of src/.
function(ctxpar_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                                     PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# ctxpar_test(NAME SOURCES ... [LIBS ...] [LABELS ...]): a GoogleTest binary registered with CTest.
function(ctxpar_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       DISCOVERY_TIMEOUT 60)
endfunction()

# ctxpar_mpi_test(NAME RANKS n;m SOURCES ... [LIBS ...]): one GoogleTest binary run under mpiexec
# once per rank count, labelled mpi. Its main() must initialise MPI (tests/mpi_main.cpp does).
function(ctxpar_mpi_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "RANKS;SOURCES;LIBS" ${ARGN})
  if(NOT CTXPAR_HAVE_MPI)
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/mpi_main.cpp)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} MPI::MPI_C GTest::gtest)
  foreach(np IN LISTS ARG_RANKS)
    add_test(NAME ${name}.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}.np${np} PROPERTIES LABELS mpi TIMEOUT ${ARG_TIMEOUT}
                         PROCESSORS ${np}
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()

# ctxpar_emulated_test(NAME CPU model TARGET test-binary [FILTER gtest-filter]): a GoogleTest
# binary run under QEMU's user-mode emulator as CPU model (qemu-x86_64 -cpu), labelled emulated;
# a skip naming the missing package where the emulator is not found (CTXPAR_QEMU_X86_64).
function(ctxpar_emulated_test name)
  cmake_parse_arguments(ARG "" "CPU;TARGET;FILTER" "" ${ARGN})
  if(NOT ARG_FILTER)
    set(ARG_FILTER "*")
  endif()
  if(CTXPAR_QEMU_X86_64)
    add_test(NAME ${name} COMMAND ${CTXPAR_QEMU_X86_64} -cpu ${ARG_CPU}
                                  $<TARGET_FILE:${ARG_TARGET}> --gtest_filter=${ARG_FILTER})
  else()
    add_test(NAME ${name} COMMAND sh -c "echo '${CTXPAR_QEMU_MISSING}'; exit 77")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS emulated TIMEOUT 300 PROCESSORS 2
                                          SKIP_RETURN_CODE 77)
endfunction()
