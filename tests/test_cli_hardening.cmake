# Bad input to the CLI: each case must fail with one clear line (what and
# where) and a non-zero exit, never be silently ignored.  Regressions for
# defects found by acceptance testing.  Uses kiln_cli_test, KC, KLIB, KC_DIR
# and EXPECT_FAIL from test_cli.cmake (included before this file).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  set(KH_DIR ${CMAKE_BINARY_DIR}/cli-hardening)
  file(MAKE_DIRECTORY ${KH_DIR})

  kiln_cli_test(cli_harden_build_circ_pad ${KC} build --network circ_pad --plugins ${KLIB}
                --prefer-jit -o ${KH_DIR}/cp.kiln)
  set_tests_properties(cli_harden_build_circ_pad PROPERTIES FIXTURES_SETUP cli_harden_cp)
  set(KH_CP ${KH_DIR}/cp.kiln)

  # --iterations 0 used to exit 2 without a word.
  kiln_cli_test(cli_harden_run_iterations_zero ${EXPECT_FAIL}
                "^kiln run: --iterations expects an integer >= 1, found '0'"
                ${KC} run ${KH_CP} --plugins ${KLIB} --iterations 0)
  kiln_cli_test(cli_harden_bench_iterations_zero ${EXPECT_FAIL}
                "^kiln bench: --iterations expects an integer from 1 to 100000000, found '0'"
                ${KC} bench ${KH_CP} --plugins ${KLIB} --iterations 0)
  kiln_cli_test(cli_harden_run_threads_negative ${EXPECT_FAIL}
                "^kiln run: --threads expects a non-negative integer, found '-3'"
                ${KC} run ${KH_CP} --plugins ${KLIB} --threads -3)
  # --seed garbage used to run with seed 0.
  kiln_cli_test(cli_harden_run_bad_seed ${EXPECT_FAIL}
                "^kiln run: --seed expects a non-negative integer, found 'x1'"
                ${KC} run ${KH_CP} --plugins ${KLIB} --seed x1)
  # --shapes naming no input used to be ignored (the run used the profile's
  # opt shapes).
  kiln_cli_test(cli_harden_run_shapes_unknown_input ${EXPECT_FAIL}
                "^kiln run: --shapes: the engine has no input 'zz' \\(its inputs: 'a', 'b'\\)"
                ${KC} run ${KH_CP} --plugins ${KLIB} --shapes zz:2x3x8x10)
  kiln_cli_test(cli_harden_bench_shapes_unknown_input ${EXPECT_FAIL}
                "^kiln bench: --shapes: the engine has no input 'zz'"
                ${KC} bench ${KH_CP} --plugins ${KLIB} --shapes zz:2x3x8x10 --iterations 1)
  kiln_cli_test(cli_harden_run_shapes_garbage ${EXPECT_FAIL}
                "^kiln run: expected shapes as name:AxBxC, found 'garbage'"
                ${KC} run ${KH_CP} --plugins ${KLIB} --shapes garbage)
  kiln_cli_test(cli_harden_run_input_missing_file ${EXPECT_FAIL}
                "^kiln run: .*no_such.npy: No such file or directory"
                ${KC} run ${KH_CP} --plugins ${KLIB} --input a=${KH_DIR}/no_such.npy)
  kiln_cli_test(cli_harden_run_input_directory ${EXPECT_FAIL}
                "^kiln run: .*cli-hardening: is a directory, expected a .npy or .pb tensor file"
                ${KC} run ${KH_CP} --plugins ${KLIB} --input a=${KH_DIR})
  kiln_cli_test(cli_harden_run_input_not_npy ${EXPECT_FAIL}
                "^kiln run: .*cp.kiln: not a .npy file"
                ${KC} run ${KH_CP} --plugins ${KLIB} --input a=${KH_CP})
  set_tests_properties(cli_harden_run_iterations_zero cli_harden_bench_iterations_zero
                       cli_harden_run_threads_negative cli_harden_run_bad_seed
                       cli_harden_run_shapes_unknown_input cli_harden_bench_shapes_unknown_input
                       cli_harden_run_shapes_garbage cli_harden_run_input_missing_file
                       cli_harden_run_input_directory cli_harden_run_input_not_npy
                       PROPERTIES FIXTURES_REQUIRED cli_harden_cp)

  # A network option nobody understands used to build the default network.
  kiln_cli_test(cli_harden_network_opts_unknown ${EXPECT_FAIL}
                "^kiln build: circ_pad: unknown network option 'bogus'"
                ${KC} build --network circ_pad --network-opts multi-tactic,bogus --plugins ${KLIB}
                --prefer-jit -o ${KH_DIR}/never.kiln)

  # A shared library that registers no ops used to load silently (and the
  # build then failed far away with "op not registered").
  kiln_cli_test(cli_harden_plugin_registers_nothing ${EXPECT_FAIL}
                "^kiln plugins: .*noops.so: loaded, but it registered no ops"
                sh -c "cc -shared -fPIC -x c /dev/null -o ${KH_DIR}/noops.so && exec ${KC} plugins --plugins ${KH_DIR}/noops.so")
  kiln_cli_test(cli_harden_plugin_not_elf ${EXPECT_FAIL}
                "^kiln plugins: .*notelf.so: .*dlopen failed"
                sh -c "printf 'hello\\n' > ${KH_DIR}/notelf.so && exec ${KC} plugins --plugins ${KH_DIR}/notelf.so")

  # The ONNX importer's messages start with the model path: the CLI used to
  # print it twice ("kiln build: m.onnx: m.onnx: ...").
  kiln_cli_test(cli_harden_onnx_garbage ${EXPECT_FAIL}
                "^kiln build: [^ ]*garbage.onnx: not a valid ONNX model"
                sh -c "printf 'not an onnx model\\377\\377\\377' > ${KH_DIR}/garbage.onnx && exec ${KC} build ${KH_DIR}/garbage.onnx -o ${KH_DIR}/never.kiln")
endif()

# -o naming a directory: refused before building, with the path (it used to
# build, then fail on "rename 'X.tmp.PID' -> 'X'").
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_build_output_is_directory ${EXPECT_FAIL}
                "^kiln build: -o [^ ]*cli-hardening: is a directory, expected the engine file to write"
                ${KC} build --network circ_pad --plugins ${KLIB} --prefer-jit -o ${KH_DIR})
  kiln_cli_test(cli_harden_build_output_unwritable ${EXPECT_FAIL}
                "^kiln build: .*cannot save engine to '[^']*no_such_dir/x.kiln': creating"
                ${KC} build --network circ_pad --plugins ${KLIB} --prefer-jit -o ${KH_DIR}/no_such_dir/x.kiln)
endif()

# A huge shape inside a (huge) profile: random input data that cannot be
# allocated used to crash (SIGSEGV, ASan abort); a dim beyond int64 used to
# saturate silently.
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_build_nz_huge ${KC} build --network non_zero --network-opts dynamic
                --plugins ${KLIB} --min-shapes x:1x1 --opt-shapes x:4x8 --max-shapes x:99999999999999x8
                -o ${KH_DIR}/nz_huge.kiln)
  set_tests_properties(cli_harden_build_nz_huge PROPERTIES FIXTURES_SETUP cli_harden_nz)
  kiln_cli_test(cli_harden_run_huge_input ${EXPECT_FAIL}
                "^kiln run: input 'x': cannot allocate 319999999999968 bytes"
                ${KC} run ${KH_DIR}/nz_huge.kiln --plugins ${KLIB} --shapes x:9999999999999x8)
  kiln_cli_test(cli_harden_bench_huge_input ${EXPECT_FAIL}
                "^kiln bench: input 'x': cannot allocate"
                ${KC} bench ${KH_DIR}/nz_huge.kiln --plugins ${KLIB} --shapes x:9999999999999x8)
  set_tests_properties(cli_harden_run_huge_input cli_harden_bench_huge_input PROPERTIES
                       FIXTURES_REQUIRED cli_harden_nz ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=1;KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  kiln_cli_test(cli_harden_shape_dim_overflow ${EXPECT_FAIL}
                "^kiln run: dim too large in shape 'x:99999999999999999999x8'"
                ${KC} run ${KH_DIR}/nz_huge.kiln --shapes x:99999999999999999999x8)
endif()

# A dynamic input without a profile: kiln build used to fail; it now builds
# for dims at 1 and says which option changes that (issue 12, friction 11).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_build_no_profile_hint ${KC} build --network non_zero --network-opts dynamic
                --plugins ${KLIB} -o ${KH_DIR}/nz_default.kiln)
  set_tests_properties(cli_harden_build_no_profile_hint PROPERTIES PASS_REGULAR_EXPRESSION
                       "^kiln build: input 'x' has dynamic dims: building for x:1x1 \\(dynamic dims at 1; --shapes x:... to change\\)")
endif()

# An ONNX model given where an engine is expected is built in memory and
# run (issue 12, friction 11; it used to say "build an engine from it
# first"); engine messages are not prefixed with the path twice.
# A plugin's failing impl is reported as "execution failed" (was "run: run:").
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_run_onnx_as_engine ${KC} run ${CMAKE_SOURCE_DIR}/tests/fixtures/add_relu.onnx)
  set_tests_properties(cli_harden_run_onnx_as_engine PROPERTIES PASS_REGULAR_EXPRESSION
                       "kiln run: built [^ ]*add_relu.onnx in memory")
  kiln_cli_test(cli_harden_inspect_missing_engine ${EXPECT_FAIL}
                "^kiln inspect: cannot open engine '[^']*no_such.kiln': No such file or directory$"
                ${KC} inspect ${KH_DIR}/no_such.kiln)
  kiln_cli_test(cli_harden_bench_missing_plugin ${EXPECT_FAIL}
                "^kiln bench: engine '[^']*cp.kiln': engine needs plugin sample::circ_pad version 1"
                ${KC} bench ${KH_DIR}/cp.kiln --iterations 1)
  set_tests_properties(cli_harden_bench_missing_plugin PROPERTIES FIXTURES_REQUIRED cli_harden_cp)
endif()

# --threads beyond the thread pool's limit used to be clamped silently to
# 1024 threads (a typo started a thousand threads).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_threads_too_many ${EXPECT_FAIL}
                "^kiln build: --threads expects 0 \\(default\\) to 1024, found '99999999999'"
                ${KC} build --network circ_pad --plugins ${KLIB} --prefer-jit --threads 99999999999
                -o ${KH_DIR}/never.kiln)
endif()

# A malformed .npy header: the message quotes it on one line (the padding
# and its newline used to split the message over two lines).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_npy_bad_header ${EXPECT_FAIL}
                "^kiln run: [^ ]*npy_negative_dim.npy: malformed shape .*'shape': \\(-1, 4\\), }$"
                ${KC} run ${KH_DIR}/cp.kiln --plugins ${KLIB}
                --input a=${CMAKE_SOURCE_DIR}/tests/hardening/npy_negative_dim.npy)
  set_tests_properties(cli_harden_npy_bad_header PROPERTIES FIXTURES_REQUIRED cli_harden_cp)
endif()

# --input / --compare naming no tensor: the message lists what there is.
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_run_input_name_lists ${EXPECT_FAIL}
                "^kiln run: --input q: the engine has no input of that name \\(or position\\). its inputs: 0 'a', 1 'b'$"
                ${KC} run ${KH_DIR}/cp.kiln --plugins ${KLIB} --input q=${KH_DIR}/x.npy)
  kiln_cli_test(cli_harden_run_compare_position_lists ${EXPECT_FAIL}
                "^kiln run: --compare 7: the engine has no output of that name \\(or position\\). its outputs: 0 'pa', 1 'pb'$"
                ${KC} run ${KH_DIR}/cp.kiln --plugins ${KLIB} --compare 7=${KH_DIR}/x.npy)
  set_tests_properties(cli_harden_run_input_name_lists cli_harden_run_compare_position_lists
                       PROPERTIES FIXTURES_REQUIRED cli_harden_cp)
endif()

# --timing-cache naming a directory: refused up front (it was read as "not
# a kiln timing cache" and the write failed with a warning after the build).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_timing_cache_directory ${EXPECT_FAIL}
                "^kiln build: --timing-cache [^ ]*cli-hardening: is a directory, expected a timing cache file$"
                ${KC} build --network circ_pad --plugins ${KLIB} --prefer-jit --timing-cache ${KH_DIR}
                -o ${KH_DIR}/never.kiln)
endif()

# kiln-samples: --threads -1 and --seed x used to be accepted (atoi/strtoull).
if(TARGET kiln-samples)
  add_test(NAME sample_harden_bad_threads COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "^kiln-samples: --threads expects 0 \\(default\\) to 1024, found '-1'" $<TARGET_FILE:kiln-samples> circ_pad --threads -1)
  add_test(NAME sample_harden_bad_seed COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "^kiln-samples: --seed expects a non-negative integer, found 'x'" $<TARGET_FILE:kiln-samples> circ_pad --seed x)
endif()

# kiln plugins FILTER matching nothing used to print nothing and exit 0.
if(COMMAND kiln_cli_test AND TARGET kiln_cli)
  kiln_cli_test(cli_harden_plugins_filter_no_match ${EXPECT_FAIL}
                "^kiln plugins: no registered op matches 'no_such_op_xyz'"
                ${KC} plugins no_such_op_xyz)
  kiln_cli_test(cli_harden_plugins_filter_match ${KC} plugins ai.onnx::Relu)
  set_tests_properties(cli_harden_plugins_filter_match PROPERTIES PASS_REGULAR_EXPRESSION "ai.onnx::Relu v[0-9]+ +\\(quick op")
endif()

# -o naming the model itself used to replace the model with the engine.
if(COMMAND kiln_cli_test AND TARGET kiln_cli)
  kiln_cli_test(cli_harden_build_output_is_model ${EXPECT_FAIL}
                "^kiln build: -o [^ ]*model_copy.onnx is the model itself"
                sh -c "cp ${CMAKE_SOURCE_DIR}/tests/fixtures/add_relu.onnx ${CMAKE_BINARY_DIR}/cli-hardening/model_copy.onnx && exec ${KC} build ${CMAKE_BINARY_DIR}/cli-hardening/model_copy.onnx -o ${CMAKE_BINARY_DIR}/cli-hardening/../cli-hardening/model_copy.onnx")
endif()

# --output-dir naming a file: refused before the run (the run used to
# complete and print its outputs, then fail writing "FILE/x.npy").
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_run_output_dir_is_file ${EXPECT_FAIL}
                "^kiln run: --output-dir [^ ]*cp.kiln: exists and is not a directory$"
                ${KC} run ${KH_DIR}/cp.kiln --plugins ${KLIB} --output-dir ${KH_DIR}/cp.kiln)
  set_tests_properties(cli_harden_run_output_dir_is_file PROPERTIES FIXTURES_REQUIRED cli_harden_cp)
endif()

# --shapes that disagrees with an --input file's shape used to be ignored.
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_run_shapes_vs_input ${EXPECT_FAIL}
                "^kiln run: input 'x': --shapes gives 2x3 but [^ ]*npy_4x2.npy holds 4x2$"
                ${KC} run ${KH_DIR}/nz_huge.kiln --plugins ${KLIB} --shapes x:2x3
                --input x=${CMAKE_SOURCE_DIR}/tests/hardening/npy_4x2.npy)
  set_tests_properties(cli_harden_run_shapes_vs_input PROPERTIES FIXTURES_REQUIRED cli_harden_nz)
  kiln_cli_test(cli_harden_run_shapes_agree_input ${KC} run ${KH_DIR}/nz_huge.kiln --plugins ${KLIB}
                --shapes x:4x2 --input x=${CMAKE_SOURCE_DIR}/tests/hardening/npy_4x2.npy)
  set_tests_properties(cli_harden_run_shapes_agree_input PROPERTIES FIXTURES_REQUIRED cli_harden_nz
                       PASS_REGULAR_EXPRESSION "output count: i64 \\[\\] +sum 5 ")
endif()

# bench --iterations huge used to crash (an unchecked latency array of that
# size); --duration inf ran forever, nan ran nothing.
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_bench_iterations_huge ${EXPECT_FAIL}
                "^kiln bench: --iterations expects an integer from 1 to 100000000, found '99999999999999'"
                ${KC} bench ${KH_DIR}/cp.kiln --plugins ${KLIB} --iterations 99999999999999)
  kiln_cli_test(cli_harden_bench_duration_inf ${EXPECT_FAIL}
                "^kiln bench: --duration expects a finite non-negative number, found 'inf'"
                ${KC} bench ${KH_DIR}/cp.kiln --plugins ${KLIB} --duration inf)
  kiln_cli_test(cli_harden_bench_duration_nan ${EXPECT_FAIL}
                "^kiln bench: --duration expects a finite non-negative number, found 'nan'"
                ${KC} bench ${KH_DIR}/cp.kiln --plugins ${KLIB} --duration nan)
  set_tests_properties(cli_harden_bench_iterations_huge cli_harden_bench_duration_inf
                       cli_harden_bench_duration_nan PROPERTIES FIXTURES_REQUIRED cli_harden_cp)
endif()

# --values with --network used to be ignored silently.
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_values_with_network ${EXPECT_FAIL}
                "^kiln build: --values applies to ONNX models \\(graph inputs\\), not to --network circ_pad$"
                ${KC} build --network circ_pad --plugins ${KLIB} --prefer-jit --values a=1 -o ${KH_DIR}/never.kiln)
endif()

# kiln test-onnx on a folder holding no test case used to report
# "0 passed, 0 failed, 0 skipped" and exit 0.
if(COMMAND kiln_cli_test AND TARGET kiln_cli)
  kiln_cli_test(cli_harden_test_onnx_no_cases ${EXPECT_FAIL}
                "^kiln test-onnx: no test cases \\(model.onnx \\+ test_data_set_\\*/\\) found under [^ ]*/tests/hardening$"
                ${KC} test-onnx ${CMAKE_SOURCE_DIR}/tests/hardening)
endif()

# Only some of --min/--opt/--max-shapes for an input used to pin the missing
# bounds to the given one silently.
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_harden_partial_profile ${EXPECT_FAIL}
                "^kiln build: input 'x': give --min-shapes, --opt-shapes and --max-shapes together \\(missing min opt \\)"
                ${KC} build --network non_zero --plugins ${KLIB} --max-shapes x:16x16
                -o ${CMAKE_BINARY_DIR}/cli-hardening/never.kiln)
endif()

# bench/compare.py --help used to pip-install numpy, onnx, onnxruntime and
# torch first: with a numpy that refuses to import, --help must still work.
find_program(KILN_PYTHON3 python3)
if(KILN_PYTHON3)
  add_test(NAME bench_compare_help COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${CMAKE_SOURCE_DIR}/tests/fixtures/poisoned_deps
           ${KILN_PYTHON3} ${CMAKE_SOURCE_DIR}/bench/compare.py --help)
  set_tests_properties(bench_compare_help PROPERTIES PASS_REGULAR_EXPRESSION "usage: compare.py")
endif()
