# Bad input to the CLI tools (issue 12): no fixed-size list truncates
# silently, no file crashes or hangs a reader.  Uses kiln_cli_test, KC and
# EXPECT_FAIL from test_cli.cmake (included before this file).
if(COMMAND kiln_cli_test AND TARGET kiln_cli)
  set(KI_DIR ${CMAKE_BINARY_DIR}/cli-input)
  file(MAKE_DIRECTORY ${KI_DIR})

  # More than 256 folders: test-onnx used to run the first 256 and report
  # as if complete.  299 copies of one case, then a missing folder: all 300
  # are accounted for.
  set(KI_RELU /usr/share/libonnx-testdata/data/node/test_relu)
  if(EXISTS ${KI_RELU})
    set(ki_dirs)
    foreach(i RANGE 1 299)
      list(APPEND ki_dirs ${KI_RELU})
    endforeach()
    kiln_cli_test(cli_input_test_onnx_300_dirs ${EXPECT_FAIL}
                  "^299 passed, 1 failed, 0 skipped$"
                  ${KC} test-onnx ${ki_dirs} ${KI_DIR}/no_such_case)
  endif()
endif()

# .npy readers: a header claiming 57.6 PB used to malloc unchecked and
# segfault; a FIFO used to block the open forever.  Both are refused before
# any allocation or wait (cli_harden_cp from test_cli_hardening.cmake).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  set(KI_CP ${CMAKE_BINARY_DIR}/cli-hardening/cp.kiln)
  kiln_cli_test(cli_input_npy_huge_shape ${EXPECT_FAIL}
                "^kiln run: [^ ]*npy_huge_shape.npy: the header's shape \\(1,3,48,99999999999999\\) needs 57599999999999424 data bytes, the file has 64 after the 128-byte header$"
                ${KC} run ${KI_CP} --plugins ${KLIB}
                --input a=${CMAKE_SOURCE_DIR}/tests/hardening/npy_huge_shape.npy)
  kiln_cli_test(cli_input_npy_fifo ${EXPECT_FAIL}
                "^kiln run: [^ ]*fifo.npy: not a regular file, expected a regular .npy file$"
                sh -c "rm -f ${KI_DIR}/fifo.npy && mkfifo ${KI_DIR}/fifo.npy && exec timeout 60 ${KC} run ${KI_CP} --plugins ${KLIB} --input a=${KI_DIR}/fifo.npy")
  set_tests_properties(cli_input_npy_huge_shape cli_input_npy_fifo PROPERTIES FIXTURES_REQUIRED cli_harden_cp)
endif()

# Issue 12 frictions 6 and 11: every verb takes -v; a model with a dynamic
# dim builds without --shapes (dims at 1, said so); run/bench/inspect take
# an .onnx model (built in memory); bench prints the engine load time.
if(COMMAND kiln_cli_test AND TARGET kiln_cli)
  set(KI_DYN ${CMAKE_SOURCE_DIR}/tests/fixtures/dynamic.onnx)
  kiln_cli_test(cli_input_build_dynamic_default ${KC} build ${KI_DYN} -v -o ${KI_DIR}/dyn.kiln)
  set_tests_properties(cli_input_build_dynamic_default PROPERTIES
                       PASS_REGULAR_EXPRESSION "kiln build: input 'x' has dynamic dims: building for x:1x1 \\(dynamic dims at 1")
  kiln_cli_test(cli_input_run_onnx_v ${KC} run ${KI_DYN} -v --shapes x:2x3)
  set_tests_properties(cli_input_run_onnx_v PROPERTIES
                       PASS_REGULAR_EXPRESSION "built [^ ]*dynamic.onnx in memory.*output y: f32 \\[2, 3\\]")
  kiln_cli_test(cli_input_bench_onnx_load_time ${KC} bench ${KI_DYN} --iterations 3 -v)
  set_tests_properties(cli_input_bench_onnx_load_time PROPERTIES
                       PASS_REGULAR_EXPRESSION "engine load: [0-9.]+ ms \\(import and build in memory\\)")
  kiln_cli_test(cli_input_inspect_onnx_v ${KC} inspect ${KI_DYN} --verbose)
  # Friction 8: inspect shows the model's dim names (dim_param 'N'); an
  # unnamed dynamic dim keeps the default name x.dim1.
  kiln_cli_test(cli_input_inspect_dim_param sh -c
    "${KC} build ${KI_DYN} --min-shapes x:1x1 --opt-shapes x:2x3 --max-shapes x:4x5 -o ${KI_DIR}/dyn_named.kiln \
     >/dev/null && ${KC} inspect ${KI_DIR}/dyn_named.kiln")
  set_tests_properties(cli_input_inspect_dim_param PROPERTIES PASS_REGULAR_EXPRESSION
                       "'x' f32 LINEAR \\[N, x\\.dim1\\]\n.*'y' f32 LINEAR \\[N, x\\.dim1\\]")
  kiln_cli_test(cli_input_plugins_v ${KC} plugins -v ai.onnx::Relu)
  if(EXISTS ${KI_RELU})
    # --input by position: the model is built for the file's shape
    kiln_cli_test(cli_input_run_onnx_compare ${KC} run ${KI_RELU}/model.onnx
                  --input 0=${KI_RELU}/test_data_set_0/input_0.pb --compare 0=${KI_RELU}/test_data_set_0/output_0.pb)
    set_tests_properties(cli_input_run_onnx_compare PROPERTIES
                         PASS_REGULAR_EXPRESSION "0 outside atol")
  endif()
endif()

# kiln plugins says how a version asked for resolves (friction 10).
if(COMMAND kiln_cli_test AND TARGET kiln_cli)
  kiln_cli_test(cli_input_plugins_version_note ${KC} plugins ai.onnx::Relu)
  set_tests_properties(cli_input_plugins_version_note PROPERTIES PASS_REGULAR_EXPRESSION
                       "ai.onnx::Relu v6 .*note: a layer \\(or ONNX node\\) asking for an ai.onnx op at version V runs the highest version <= V")
endif()

# -v explains each candidate's cost: kernel + reformats (friction 2: FP16
# lost to FP32 and the log never said the reformats decided it).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_input_build_v_costs ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --prefer-jit --fp16 -v -o ${KI_DIR}/cp16.kiln)
  set_tests_properties(cli_input_build_v_costs PROPERTIES PASS_REGULAR_EXPRESSION
                       "candidate \\[FP16,FP16\\] LINEAR tactic [0-9]+: kernel [0-9.]+ ms \\+ reformat inputs [0-9.]+ ms \\+ outputs [0-9.]+ ms \\(estimate\\) = cost [0-9.]+ ms.*chose .* \\(kernel [0-9.]+ ms \\+ reformats [0-9.]+ ms = cost")
endif()

# kiln plugins cache --list / --clean (friction 7): entries the cache made
# are listed and removed, a foreign file in the directory is left alone.
if(COMMAND kiln_cli_test AND TARGET kiln_cli)
  set(KI_CACHE ${KI_DIR}/cache)
  kiln_cli_test(cli_input_plugins_cache_list_clean sh -c
    "rm -rf ${KI_CACHE} && mkdir -p ${KI_CACHE} && export KILN_CACHE_DIR=${KI_CACHE} && \
     ${KC} plugins compile ${CMAKE_SOURCE_DIR}/samples/interpolate/interpolate.c >/dev/null && \
     echo keep > ${KI_CACHE}/notes.txt && \
     ${KC} plugins cache --list | grep -q 'interpolate-[0-9a-f]*\\.so' && \
     ${KC} plugins cache --clean | grep -q '^removed 1 cache entry' && \
     ${KC} plugins cache | grep -q '^0 cache entries' && test -f ${KI_CACHE}/notes.txt")
endif()

# kiln inspect shows layer attributes (friction 8).
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_input_inspect_attrs ${KC} inspect ${CMAKE_BINARY_DIR}/cli-hardening/cp.kiln --plugins ${KLIB})
  set_tests_properties(cli_input_inspect_attrs PROPERTIES FIXTURES_REQUIRED cli_harden_cp
                       PASS_REGULAR_EXPRESSION "'pad_a' sample::circ_pad v[0-9]+ .*\n +attrs pads=\\[[0-9, ]+\\]\n +in  'a'")
endif()

# With AOT preferred, inspect printed a time the builder had measured for
# the JIT impl as the AOT kernel's (friction 3): now the AOT kernel itself is
# timed and inspect prints that time.
if(COMMAND kiln_cli_test AND TARGET kiln_cli AND TARGET kiln_samples_ops)
  kiln_cli_test(cli_input_aot_own_time sh -c
    "${KC} build --network circ_pad --network-opts multi-tactic --plugins ${KLIB} --prefer-aot \
     -o ${KI_DIR}/cp_aot.kiln >/dev/null && ${KC} inspect ${KI_DIR}/cp_aot.kiln | grep \"'pad_a' \"")
  set_tests_properties(cli_input_aot_own_time PROPERTIES PASS_REGULAR_EXPRESSION
                       "'pad_a' sample::circ_pad v[0-9]+  AOT  tactic [0-9]+ \\(kernel [0-9]+\\)  [0-9]+\\.[0-9]+ ms\n")
endif()
