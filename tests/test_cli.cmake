# The `kiln` CLI on the samples' networks: build, run, bench, inspect,
# plugins, and the error for an engine whose plugin library is missing.
if(TARGET kiln_cli AND TARGET kiln_samples_ops)
  set(KC $<TARGET_FILE:kiln_cli>)
  set(KLIB $<TARGET_FILE:kiln_samples_ops>)
  set(KC_DIR ${CMAKE_BINARY_DIR}/cli-artifacts)
  set(EXPECT_FAIL bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh)
  file(MAKE_DIRECTORY ${KC_DIR})

  function(kiln_cli_test name)
    add_test(NAME ${name} COMMAND ${ARGN} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(${name} PROPERTIES LABELS "cli" TIMEOUT 120)
  endfunction()

  kiln_cli_test(cli_help ${KC} --help)
  kiln_cli_test(cli_unknown_verb ${EXPECT_FAIL} "unknown verb 'frobnicate'" ${KC} frobnicate)
  foreach(verb build run bench inspect plugins)
    kiln_cli_test(cli_${verb}_help ${KC} ${verb} --help)
  endforeach()
  kiln_cli_test(cli_plugins ${KC} plugins --plugins ${KLIB} sample::)
  set_tests_properties(cli_plugins PROPERTIES PASS_REGULAR_EXPRESSION "sample::circ_pad v3 +\\(quick op")
  kiln_cli_test(cli_build_no_output ${EXPECT_FAIL} "kiln build: expected -o ENGINE"
                ${KC} build --network circ_pad --plugins ${KLIB})
  kiln_cli_test(cli_build_bad_plugin ${EXPECT_FAIL} "kiln build: .*no_such_lib.so"
                ${KC} build --network circ_pad --plugins ${KC_DIR}/no_such_lib.so -o ${KC_DIR}/x.kiln)

  # circ_pad: build (two tactics timed), inspect, run (outputs as .npy),
  # run again comparing with those outputs, bench.
  kiln_cli_test(cli_build_circ_pad ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} -v -o ${KC_DIR}/circ_pad.kiln)
  set_tests_properties(cli_build_circ_pad PROPERTIES FIXTURES_SETUP cli_circ_pad)
  kiln_cli_test(cli_inspect_circ_pad ${KC} inspect --plugins ${KLIB} ${KC_DIR}/circ_pad.kiln)
  kiln_cli_test(cli_run_circ_pad ${KC} run ${KC_DIR}/circ_pad.kiln --plugins ${KLIB} --seed 7
                --output-dir ${KC_DIR}/run1)
  kiln_cli_test(cli_run_circ_pad_compare ${KC} run ${KC_DIR}/circ_pad.kiln --plugins ${KLIB} --seed 7
                --compare pa=${KC_DIR}/run1/pa.npy --compare pb=${KC_DIR}/run1/pb.npy --atol 0 --rtol 0)
  kiln_cli_test(cli_run_circ_pad_compare_mismatch ${EXPECT_FAIL} "kiln run: output pa differs"
                ${KC} run ${KC_DIR}/circ_pad.kiln --plugins ${KLIB} --seed 7
                --compare pa=${KC_DIR}/run1/pb.npy)
  kiln_cli_test(cli_run_circ_pad_debug ${KC} run ${KC_DIR}/circ_pad.kiln --plugins ${KLIB} --debug)
  kiln_cli_test(cli_bench_circ_pad ${KC} bench ${KC_DIR}/circ_pad.kiln --plugins ${KLIB}
                --warmup 2 --iterations 20 --per-layer)
  # Without the plugin library the engine cannot run: the message names the
  # op's identity and version.
  kiln_cli_test(cli_run_missing_plugin ${EXPECT_FAIL} "sample::circ_pad.*(version|v)[ :=]*2"
                ${KC} run ${KC_DIR}/circ_pad.kiln)
  set_tests_properties(cli_inspect_circ_pad cli_run_circ_pad cli_bench_circ_pad cli_run_circ_pad_debug
                       cli_run_missing_plugin PROPERTIES FIXTURES_REQUIRED cli_circ_pad)
  set_tests_properties(cli_inspect_circ_pad PROPERTIES
                       PASS_REGULAR_EXPRESSION "'pad_b' sample::circ_pad v2 +JIT +tactic [12]")
  set_tests_properties(cli_run_circ_pad PROPERTIES FIXTURES_SETUP cli_circ_pad_run)
  set_tests_properties(cli_run_circ_pad_compare cli_run_circ_pad_compare_mismatch PROPERTIES
                       FIXTURES_REQUIRED "cli_circ_pad;cli_circ_pad_run")

  # elemwise_add: inputs from .npy files (the outputs of a first run).
  kiln_cli_test(cli_build_elemwise_add ${KC} build --network elemwise_add --plugins ${KLIB}
                -o ${KC_DIR}/add.kiln)
  kiln_cli_test(cli_run_elemwise_add ${KC} run ${KC_DIR}/add.kiln --plugins ${KLIB}
                --output-dir ${KC_DIR}/add1)
  kiln_cli_test(cli_run_elemwise_add_npy_input ${KC} run ${KC_DIR}/add.kiln --plugins ${KLIB}
                --input x=${KC_DIR}/add1/z.npy --input y=${KC_DIR}/add1/z.npy --output-dir ${KC_DIR}/add2)
  kiln_cli_test(cli_run_bad_input_name ${EXPECT_FAIL} "no input of that name"
                ${KC} run ${KC_DIR}/add.kiln --plugins ${KLIB} --input nope=${KC_DIR}/add1/z.npy)
  set_tests_properties(cli_build_elemwise_add PROPERTIES FIXTURES_SETUP cli_add)
  set_tests_properties(cli_run_elemwise_add PROPERTIES FIXTURES_REQUIRED cli_add FIXTURES_SETUP cli_add_run)
  set_tests_properties(cli_run_elemwise_add_npy_input cli_run_bad_input_name PROPERTIES
                       FIXTURES_REQUIRED "cli_add;cli_add_run")

  # non_zero (data-dependent output shape) through the CLI.
  kiln_cli_test(cli_build_non_zero ${KC} build --network non_zero --plugins ${KLIB} -o ${KC_DIR}/nz.kiln)
  kiln_cli_test(cli_run_non_zero ${KC} run ${KC_DIR}/nz.kiln --plugins ${KLIB})
  set_tests_properties(cli_build_non_zero PROPERTIES FIXTURES_SETUP cli_nz)
  set_tests_properties(cli_run_non_zero PROPERTIES FIXTURES_REQUIRED cli_nz
                       PASS_REGULAR_EXPRESSION "output indices: i32 \\[[0-9]+, 2\\]")

  # chain100: per-layer overhead (median latency / 100 layers).
  kiln_cli_test(cli_build_chain100 ${KC} build --network chain100 --plugins ${KLIB} -o ${KC_DIR}/chain100.kiln)
  kiln_cli_test(cli_bench_chain100 ${KC} bench ${KC_DIR}/chain100.kiln --plugins ${KLIB} --threads 1
                --warmup 20 --iterations 500)
  set_tests_properties(cli_build_chain100 PROPERTIES FIXTURES_SETUP cli_chain100)
  set_tests_properties(cli_bench_chain100 PROPERTIES FIXTURES_REQUIRED cli_chain100
                       PASS_REGULAR_EXPRESSION "per layer: [0-9.]+ us")
  # Timing cache: the second build answers every candidate from the file.
  kiln_cli_test(cli_timing_cache_write ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --timing-cache ${KC_DIR}/circ_pad.cache -o ${KC_DIR}/tc1.kiln)
  kiln_cli_test(cli_timing_cache_read ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --timing-cache ${KC_DIR}/circ_pad.cache -o ${KC_DIR}/tc2.kiln)
  set_tests_properties(cli_timing_cache_write PROPERTIES FIXTURES_SETUP cli_tc)
  set_tests_properties(cli_timing_cache_read PROPERTIES FIXTURES_REQUIRED cli_tc
                       PASS_REGULAR_EXPRESSION "candidates, 0 timed, [1-9][0-9]* timing-cache hits")

  # ONNX models with .pb inputs and references computed outside kiln:
  # the backend test case for Add, and the circ_pad case whose reference is
  # numpy's np.pad(mode="wrap") (scripts/gen_circ_pad_onnx.py).
  set(ADD_CASE /usr/share/libonnx-testdata/data/node/test_add)
  if(EXISTS ${ADD_CASE}/model.onnx)
    kiln_cli_test(cli_onnx_add_build ${KC} build ${ADD_CASE}/model.onnx -o ${KC_DIR}/onnx_add.kiln)
    kiln_cli_test(cli_onnx_add_run ${KC} run ${KC_DIR}/onnx_add.kiln
                  --input x=${ADD_CASE}/test_data_set_0/input_0.pb
                  --input y=${ADD_CASE}/test_data_set_0/input_1.pb
                  --compare sum=${ADD_CASE}/test_data_set_0/output_0.pb --rtol 1e-6 --atol 1e-6)
    set_tests_properties(cli_onnx_add_build PROPERTIES FIXTURES_SETUP cli_onnx_add)
    set_tests_properties(cli_onnx_add_run PROPERTIES FIXTURES_REQUIRED cli_onnx_add
                         PASS_REGULAR_EXPRESSION "compare sum with .*: 60 elements.* 0 outside")
  endif()
  set(CP_CASE ${CMAKE_SOURCE_DIR}/tests/fixtures/circ_pad_case)
  if(EXISTS ${CP_CASE}/model.onnx)
    kiln_cli_test(cli_onnx_circ_pad_build ${KC} build ${CP_CASE}/model.onnx --plugins ${KLIB}
                  -o ${KC_DIR}/onnx_circ_pad.kiln)
    kiln_cli_test(cli_onnx_circ_pad_run ${KC} run ${KC_DIR}/onnx_circ_pad.kiln --plugins ${KLIB}
                  --input x=${CP_CASE}/test_data_set_0/input_0.pb
                  --compare y=${CP_CASE}/test_data_set_0/output_0.pb --rtol 0 --atol 0
                  --output-dir ${KC_DIR}/onnx_circ_pad)
    set_tests_properties(cli_onnx_circ_pad_build PROPERTIES FIXTURES_SETUP cli_onnx_cp)
    set_tests_properties(cli_onnx_circ_pad_run PROPERTIES FIXTURES_REQUIRED cli_onnx_cp
                         PASS_REGULAR_EXPRESSION "compare y with .* 0 outside")
  endif()
  # Dynamic shapes: an optimization profile at build, actual shapes at run,
  # a clear error outside the profile.
  kiln_cli_test(cli_build_non_zero_dynamic ${KC} build --network non_zero --network-opts dynamic
                --plugins ${KLIB} --min-shapes x:1x1 --opt-shapes x:4x8 --max-shapes x:16x16
                -o ${KC_DIR}/nz_dyn.kiln)
  kiln_cli_test(cli_build_non_zero_no_profile ${EXPECT_FAIL} "kiln build: .*x"
                ${KC} build --network non_zero --network-opts dynamic --plugins ${KLIB} -o ${KC_DIR}/nz_bad.kiln)
  kiln_cli_test(cli_run_non_zero_dynamic ${KC} run ${KC_DIR}/nz_dyn.kiln --plugins ${KLIB} --shapes x:5x9)
  kiln_cli_test(cli_run_non_zero_outside_profile ${EXPECT_FAIL} "kiln run: .*x.*16"
                ${KC} run ${KC_DIR}/nz_dyn.kiln --plugins ${KLIB} --shapes x:20x3)
  set_tests_properties(cli_build_non_zero_dynamic PROPERTIES FIXTURES_SETUP cli_nz_dyn)
  set_tests_properties(cli_run_non_zero_dynamic PROPERTIES FIXTURES_REQUIRED cli_nz_dyn
                       PASS_REGULAR_EXPRESSION "output indices: i32 \\[45, 2\\]")
  set_tests_properties(cli_run_non_zero_outside_profile PROPERTIES FIXTURES_REQUIRED cli_nz_dyn)
  # AOT: the circ_pad kernel baked into the engine; it runs with NO plugin
  # library and reproduces the JIT engine's outputs (same seed) exactly.
  kiln_cli_test(cli_build_circ_pad_aot ${KC} build --network circ_pad --network-opts aot,multi-tactic
                --plugins ${KLIB} -o ${KC_DIR}/circ_pad_aot.kiln)
  kiln_cli_test(cli_run_circ_pad_aot_no_plugins ${KC} run ${KC_DIR}/circ_pad_aot.kiln --seed 7
                --compare pa=${KC_DIR}/run1/pa.npy --compare pb=${KC_DIR}/run1/pb.npy --atol 0 --rtol 0)
  set_tests_properties(cli_build_circ_pad_aot PROPERTIES FIXTURES_SETUP cli_cp_aot)
  set_tests_properties(cli_run_circ_pad_aot_no_plugins PROPERTIES
                       FIXTURES_REQUIRED "cli_cp_aot;cli_circ_pad;cli_circ_pad_run")
  # Clear errors for bad files and inputs.
  kiln_cli_test(cli_run_missing_engine ${EXPECT_FAIL} "kiln run: .*nonexistent.kiln.*No such file"
                ${KC} run ${KC_DIR}/nonexistent.kiln)
  kiln_cli_test(cli_run_not_npy ${EXPECT_FAIL} "kiln run: .*not a .npy file"
                ${KC} run ${KC_DIR}/add.kiln --plugins ${KLIB} --input x=${CMAKE_SOURCE_DIR}/README.md)
  kiln_cli_test(cli_run_wrong_rank ${EXPECT_FAIL} "kiln run: .*'a'.*4 dims"
                ${KC} run ${KC_DIR}/circ_pad.kiln --plugins ${KLIB} --input a=${KC_DIR}/add1/z.npy)
  set_tests_properties(cli_run_not_npy PROPERTIES FIXTURES_REQUIRED cli_add)
  set_tests_properties(cli_run_wrong_rank PROPERTIES FIXTURES_REQUIRED "cli_circ_pad;cli_add;cli_add_run")
  kiln_cli_test(cli_bench_duration ${KC} bench ${KC_DIR}/add.kiln --plugins ${KLIB} --duration 0.2 --warmup 1)
  set_tests_properties(cli_bench_duration PROPERTIES FIXTURES_REQUIRED cli_add
                       PASS_REGULAR_EXPRESSION "runs, latency (us|ms): min [0-9.]+ +median")
  # A real trained model end to end through the CLI: build with a fixed
  # shape, run on its .pb input (by position), compare with ONNX Runtime's
  # output (tolerances from the models' README).
  set(CLS ${CMAKE_SOURCE_DIR}/../shared/models/ppocr_cls)
  if(EXISTS ${CLS}/model.onnx)
    kiln_cli_test(cli_model_ppocr_cls_build ${KC} build ${CLS}/model.onnx --shapes x:1x3x48x192
                  -o ${KC_DIR}/ppocr_cls.kiln)
    kiln_cli_test(cli_model_ppocr_cls_run ${KC} run ${KC_DIR}/ppocr_cls.kiln
                  --input 0=${CLS}/test_data_set_0/input_0.pb
                  --compare 0=${CLS}/test_data_set_0/output_0.pb --rtol 1e-3 --atol 1e-4)
    set_tests_properties(cli_model_ppocr_cls_build PROPERTIES FIXTURES_SETUP cli_cls)
    set_tests_properties(cli_model_ppocr_cls_run PROPERTIES FIXTURES_REQUIRED cli_cls
                         PASS_REGULAR_EXPRESSION "compare .*: 2 elements, .* 0 outside")
  endif()
endif()
