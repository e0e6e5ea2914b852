# fuzz/run.sh leaves its summary over what ran however it is stopped: TERM,
# INT, `timeout` around a pipeline, KILL (a stand-in fuzzer: no libFuzzer
# build needed).
find_program(KILN_PYTHON3_FUZZ python3)
if(KILN_PYTHON3_FUZZ)
  add_test(NAME fuzz_run_stopped COMMAND ${KILN_PYTHON3_FUZZ} ${CMAKE_SOURCE_DIR}/tests/fuzz_run_stop.py
           ${CMAKE_SOURCE_DIR})
endif()
