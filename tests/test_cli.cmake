# The `kiln` CLI on the samples' networks: build, run, bench, inspect,
# plugins, and the error for an engine whose plugin library is missing.
if(TARGET kiln_cli AND TARGET kiln_samples_ops)
  set(KC $<TARGET_FILE:kiln_cli>)
  set(KLIB $<TARGET_FILE:kiln_samples_ops>)
  set(KC_DIR ${CMAKE_BINARY_DIR}/cli-artifacts)
  set(EXPECT_FAIL bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh)
  file(MAKE_DIRECTORY ${KC_DIR})

  # Compiled AOT kernels and plugin sources are cached under the build
  # tree, never in the user's ~/.cache.
  set(KC_CACHE ${CMAKE_BINARY_DIR}/kiln-cache)
  function(kiln_cli_test name)
    add_test(NAME ${name} COMMAND ${ARGN} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(${name} PROPERTIES LABELS "cli" TIMEOUT 120
                         ENVIRONMENT "KILN_CACHE_DIR=${KC_CACHE}")
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
  # circ_pad has a JIT impl and an AOT kernel: builds choose (--prefer-jit).
  kiln_cli_test(cli_build_circ_pad ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --prefer-jit -v -o ${KC_DIR}/circ_pad.kiln)
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
                       PASS_REGULAR_EXPRESSION "per layer: [0-9.]+ us"
                       FAIL_REGULAR_EXPRESSION "core round trip")
  # At 2 threads: how far apart two of the CPUs are (tools/core_rtt.c), on
  # hosts with two.
  cmake_host_system_information(RESULT KC_NCPU QUERY NUMBER_OF_LOGICAL_CORES)
  if(KC_NCPU GREATER 1)
    kiln_cli_test(cli_bench_chain100_rtt ${KC} bench ${KC_DIR}/chain100.kiln --plugins ${KLIB} --threads 2
                  --warmup 2 --iterations 20)
    set_tests_properties(cli_bench_chain100_rtt PROPERTIES FIXTURES_REQUIRED cli_chain100
                         PASS_REGULAR_EXPRESSION "max [0-9.]+\ncore round trip: [1-9][0-9]* ns \\(CPUs [0-9]+ and [0-9]+, after the timed runs\\)")
  endif()
  # --profile: the five slowest layers (op named) and the measured FMA peak.
  kiln_cli_test(cli_bench_chain100_profile ${KC} bench ${KC_DIR}/chain100.kiln --plugins ${KLIB} --threads 1
                --warmup 2 --iterations 20 --profile)
  set_tests_properties(cli_bench_chain100_profile PROPERTIES FIXTURES_REQUIRED cli_chain100
                       PASS_REGULAR_EXPRESSION "first run: [0-9.]+ ms.*top layers by time \\(mean of 20 profiled runs.*  5\\. [^ ]+ +elemwise_add .*%.*FMA peak: [0-9.]+ GFLOP/s \\(measured, 1 thread\\)")
  # Timing cache: the second build answers every candidate from the file.
  kiln_cli_test(cli_timing_cache_write ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --prefer-jit --timing-cache ${KC_DIR}/circ_pad.cache -o ${KC_DIR}/tc1.kiln)
  kiln_cli_test(cli_timing_cache_read ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --prefer-jit --timing-cache ${KC_DIR}/circ_pad.cache -o ${KC_DIR}/tc2.kiln)
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
                  --prefer-jit -o ${KC_DIR}/onnx_circ_pad.kiln)
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
  # no profile given: dynamic dims at 1 (issue 12, friction 11)
  kiln_cli_test(cli_build_non_zero_no_profile ${KC} build --network non_zero --network-opts dynamic
                --plugins ${KLIB} -o ${KC_DIR}/nz_default.kiln)
  set_tests_properties(cli_build_non_zero_no_profile PROPERTIES
                       PASS_REGULAR_EXPRESSION "input 'x' has dynamic dims: building for x:1x1")
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

  # JIT or AOT: an op with both and no flag times the AOT kernel against
  # the JIT tactics and takes the faster; -v logs both times.  Whichever
  # wins, the engine reproduces the JIT engine's outputs bit for bit.
  kiln_cli_test(cli_build_circ_pad_no_choice ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} -v -o ${KC_DIR}/no_choice.kiln)
  set_tests_properties(cli_build_circ_pad_no_choice PROPERTIES FIXTURES_SETUP cli_cp_no_choice
                       PASS_REGULAR_EXPRESSION
                       "layer 'pad_b' \\(sample::circ_pad v2\\): JIT tactic [12] [0-9]+\\.[0-9]+ ms vs AOT kernel [0-9]+\\.[0-9]+ ms: chose (JIT|AOT)")
  kiln_cli_test(cli_run_circ_pad_no_choice ${KC} run ${KC_DIR}/no_choice.kiln --plugins ${KLIB} --seed 7
                --compare pa=${KC_DIR}/run1/pa.npy --compare pb=${KC_DIR}/run1/pb.npy --atol 0 --rtol 0)
  set_tests_properties(cli_run_circ_pad_no_choice PROPERTIES
                       FIXTURES_REQUIRED "cli_cp_no_choice;cli_circ_pad;cli_circ_pad_run")
  # A forced choice times nothing of the other kind.
  set_tests_properties(cli_build_circ_pad PROPERTIES FAIL_REGULAR_EXPRESSION "AOT kernel")
  kiln_cli_test(cli_build_prefer_both ${EXPECT_FAIL} "--prefer-aot and --prefer-jit exclude each other"
                ${KC} build --network circ_pad --plugins ${KLIB} --prefer-aot --prefer-jit
                -o ${KC_DIR}/both.kiln)
  # --prefer-aot: every circ_pad layer AOT; the engine runs with no plugin
  # library and equals the JIT engine's outputs bit for bit.
  kiln_cli_test(cli_build_circ_pad_prefer_aot ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --prefer-aot -v -o ${KC_DIR}/circ_pad_prefer_aot.kiln)
  kiln_cli_test(cli_inspect_circ_pad_prefer_aot ${KC} inspect ${KC_DIR}/circ_pad_prefer_aot.kiln)
  kiln_cli_test(cli_run_circ_pad_prefer_aot_no_plugins ${KC} run ${KC_DIR}/circ_pad_prefer_aot.kiln --seed 7
                --compare pa=${KC_DIR}/run1/pa.npy --compare pb=${KC_DIR}/run1/pb.npy --atol 0 --rtol 0)
  set_tests_properties(cli_build_circ_pad_prefer_aot PROPERTIES FIXTURES_SETUP cli_cp_prefer_aot
                       PASS_REGULAR_EXPRESSION "layer 'pad_b' \\(sample::circ_pad v2\\): AOT kernel \\(forced\\) [0-9]+\\.[0-9]+ ms"
                       FAIL_REGULAR_EXPRESSION "vs AOT kernel")
  set_tests_properties(cli_inspect_circ_pad_prefer_aot PROPERTIES FIXTURES_REQUIRED cli_cp_prefer_aot
                       PASS_REGULAR_EXPRESSION
                       "'pad_b' sample::circ_pad v2 +AOT +tactic [12] \\(kernel 1\\) +[0-9]+\\.[0-9]+ ms.*required plugins \\(0\\)")
  set_tests_properties(cli_run_circ_pad_prefer_aot_no_plugins PROPERTIES
                       FIXTURES_REQUIRED "cli_cp_prefer_aot;cli_circ_pad;cli_circ_pad_run")

  # ONNX node attribute `aot` (tests/fixtures/circ_pad_aot{0,1}.onnx, from
  # scripts/gen_circ_pad_aot_onnx.py; same data as circ_pad_case, whose
  # reference is numpy's np.pad wrap).  aot=1: built with the plugin library
  # (its aot function supplies the kernel), run with none loaded.  aot=0:
  # the engine needs the library; without it the run fails naming it.  The
  # node's choice wins over the build flag.
  if(EXISTS ${CP_CASE}/model.onnx)
    set(CP_DATA ${CP_CASE}/test_data_set_0)
    kiln_cli_test(cli_onnx_aot1_build ${KC} build ${CMAKE_SOURCE_DIR}/tests/fixtures/circ_pad_aot1.onnx
                  --plugins ${KLIB} --prefer-jit -o ${KC_DIR}/onnx_aot1.kiln)
    kiln_cli_test(cli_onnx_aot1_run_no_plugins ${KC} run ${KC_DIR}/onnx_aot1.kiln
                  --input x=${CP_DATA}/input_0.pb --compare y=${CP_DATA}/output_0.pb --rtol 0 --atol 0)
    kiln_cli_test(cli_onnx_aot1_inspect ${KC} inspect ${KC_DIR}/onnx_aot1.kiln)
    kiln_cli_test(cli_onnx_aot0_build ${KC} build ${CMAKE_SOURCE_DIR}/tests/fixtures/circ_pad_aot0.onnx
                  --plugins ${KLIB} --prefer-aot -o ${KC_DIR}/onnx_aot0.kiln)
    kiln_cli_test(cli_onnx_aot0_run_no_plugins ${EXPECT_FAIL}
                  "engine needs plugin sample::circ_pad version 1 .*layer 'circ_pad_0'.*. load the library with --plugins LIB.so"
                  ${KC} run ${KC_DIR}/onnx_aot0.kiln --input x=${CP_DATA}/input_0.pb)
    kiln_cli_test(cli_onnx_aot0_run ${KC} run ${KC_DIR}/onnx_aot0.kiln --plugins ${KLIB}
                  --input x=${CP_DATA}/input_0.pb --compare y=${CP_DATA}/output_0.pb --rtol 0 --atol 0)
    set_tests_properties(cli_onnx_aot1_build PROPERTIES FIXTURES_SETUP cli_onnx_aot1)
    set_tests_properties(cli_onnx_aot1_run_no_plugins PROPERTIES FIXTURES_REQUIRED cli_onnx_aot1
                         PASS_REGULAR_EXPRESSION "compare y with .*: 363 elements.* 0 outside")
    set_tests_properties(cli_onnx_aot1_inspect PROPERTIES FIXTURES_REQUIRED cli_onnx_aot1
                         PASS_REGULAR_EXPRESSION "'circ_pad_0' sample::circ_pad v1 +AOT.*AOT kernels \\(1\\).*required plugins \\(0\\)")
    set_tests_properties(cli_onnx_aot0_build PROPERTIES FIXTURES_SETUP cli_onnx_aot0)
    set_tests_properties(cli_onnx_aot0_run_no_plugins PROPERTIES FIXTURES_REQUIRED cli_onnx_aot0)
    set_tests_properties(cli_onnx_aot0_run PROPERTIES FIXTURES_REQUIRED cli_onnx_aot0
                         PASS_REGULAR_EXPRESSION "compare y with .*: 363 elements.* 0 outside")
  endif()

  # Embedded plugins: the sample library stored in the engine; inspect lists
  # it; the engine runs with no --plugins and equals the JIT engine's
  # outputs (same seed) bit for bit.
  kiln_cli_test(cli_build_circ_pad_embed ${KC} build --network circ_pad --network-opts multi-tactic
                --plugins ${KLIB} --prefer-jit --embed-plugins -o ${KC_DIR}/circ_pad_embed.kiln)
  kiln_cli_test(cli_inspect_circ_pad_embed ${KC} inspect ${KC_DIR}/circ_pad_embed.kiln)
  kiln_cli_test(cli_run_circ_pad_embed_no_plugins ${KC} run ${KC_DIR}/circ_pad_embed.kiln --seed 7
                --compare pa=${KC_DIR}/run1/pa.npy --compare pb=${KC_DIR}/run1/pb.npy --atol 0 --rtol 0)
  set_tests_properties(cli_build_circ_pad_embed PROPERTIES FIXTURES_SETUP cli_cp_embed)
  set_tests_properties(cli_inspect_circ_pad_embed PROPERTIES FIXTURES_REQUIRED cli_cp_embed
                       PASS_REGULAR_EXPRESSION "embedded plugins \\(1\\):.*sample::circ_pad v[12] \\([0-9.]+ KiB\\).*required plugins \\(0\\)")
  set_tests_properties(cli_run_circ_pad_embed_no_plugins PROPERTIES
                       FIXTURES_REQUIRED "cli_cp_embed;cli_circ_pad;cli_circ_pad_run")

  # Plugins compiled from source through the compile cache: miss; miss then
  # hit; then --rebuild; other flags (another key: compiled, not a hit).
  # Each test empties a cache dir of its own and makes the state it checks
  # itself, so it passes alone, repeated (ctest --repeat) or beside any
  # other test (a shared dir emptied by one test and expected warm by
  # another was order- and rerun-dependent).
  set(KC_CCACHE ${CMAKE_BINARY_DIR}/cli-compile-cache)
  set(INTERP_SRC ${CMAKE_SOURCE_DIR}/samples/interpolate/interpolate.c)
  # kiln_compile_test(name "commands" regex): bash runs the commands with
  # $0 = kiln, $1 = the plugin source, KILN_CACHE_DIR emptied first.
  function(kiln_compile_test name cmds regex)
    kiln_cli_test(${name} ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${KC_CCACHE}/${name}
                  bash -c "rm -rf \"$KILN_CACHE_DIR\" && ${cmds}" ${KC} ${INTERP_SRC})
    set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${regex}")
  endfunction()
  kiln_compile_test(cli_compile_miss "exec \"$0\" plugins compile -v \"$1\""
                    "compile cache miss [0-9a-f]+.*interpolate-[0-9a-f]+\\.so \\(compiled\\)")
  kiln_compile_test(cli_compile_hit "\"$0\" plugins compile \"$1\" && exec \"$0\" plugins compile -v \"$1\""
                    "\\(compiled\\).*compile cache hit [0-9a-f]+.*interpolate-[0-9a-f]+\\.so \\(cache hit\\)")
  kiln_compile_test(cli_compile_rebuild
                    "\"$0\" plugins compile \"$1\" && exec \"$0\" plugins compile --rebuild -v \"$1\""
                    "compile cache rebuild [0-9a-f]+.*interpolate-[0-9a-f]+\\.so \\(compiled\\)")
  kiln_compile_test(cli_compile_cflags
                    "\"$0\" plugins compile \"$1\" && exec \"$0\" plugins compile --cflags '-O1 -DKILN_TEST_FLAG=1' \"$1\""
                    "\\(compiled\\).*interpolate-[0-9a-f]+\\.so \\(compiled\\)")
  # A broken source: the compiler's file:line messages, exit 1, and one
  # summary line naming the file and its first error.
  file(WRITE ${KC_DIR}/broken_plugin.c
       "#include <kiln/plugin.h>\n\nstatic int broken(void) {\n    return not_declared_anywhere;\n}\n")
  kiln_cli_test(cli_compile_broken ${EXPECT_FAIL}
                "^kiln plugins compile: [^ ]*broken_plugin.c: compiler failed .*. first error: [^ ]*broken_plugin.c:4:[0-9]+: error: .*not_declared_anywhere"
                ${KC} plugins compile ${KC_DIR}/broken_plugin.c)
  kiln_cli_test(cli_build_plugin_source_broken ${EXPECT_FAIL}
                "kiln build: [^ ]*broken_plugin.c: compiler failed .*first error: [^ ]*broken_plugin.c:4:"
                ${KC} build --network circ_pad --plugin-source ${KC_DIR}/broken_plugin.c -o ${KC_DIR}/b.kiln)
  kiln_cli_test(cli_compile_missing_source ${EXPECT_FAIL} "kiln plugins compile: .*no_such_plugin.c"
                ${KC} plugins compile ${KC_DIR}/no_such_plugin.c)
  # --plugin-source in build, run, bench, inspect, plugins: an ONNX model
  # with a sample::interpolate node (samples/interpolate/interpolate_case,
  # reference computed with numpy by scripts/gen_interpolate_onnx.py).
  set(IC ${CMAKE_SOURCE_DIR}/samples/interpolate/interpolate_case)
  if(EXISTS ${IC}/model.onnx)
    kiln_cli_test(cli_build_plugin_source ${KC} build ${IC}/model.onnx --plugin-source ${INTERP_SRC}
                  -o ${KC_DIR}/interp.kiln)
    kiln_cli_test(cli_run_plugin_source ${KC} run ${KC_DIR}/interp.kiln --plugin-source ${INTERP_SRC}
                  --input x=${IC}/test_data_set_0/input_0.pb
                  --compare y=${IC}/test_data_set_0/output_0.pb --rtol 1e-5 --atol 1e-6)
    kiln_cli_test(cli_bench_plugin_source ${KC} bench ${KC_DIR}/interp.kiln --plugin-source ${INTERP_SRC}
                  --warmup 1 --iterations 5)
    kiln_cli_test(cli_inspect_plugin_source ${KC} inspect ${KC_DIR}/interp.kiln --plugin-source ${INTERP_SRC})
    # the hint fits the origin: a plugin compiled from source, CLI options
    kiln_cli_test(cli_run_plugin_source_missing ${EXPECT_FAIL}
                  "engine needs plugin sample::interpolate version 1.*. it was compiled from source: pass its .c file with --plugin-source"
                  ${KC} run ${KC_DIR}/interp.kiln --input x=${IC}/test_data_set_0/input_0.pb)
    set_tests_properties(cli_build_plugin_source PROPERTIES FIXTURES_SETUP cli_interp)
    set_tests_properties(cli_run_plugin_source PROPERTIES FIXTURES_REQUIRED cli_interp
                         PASS_REGULAR_EXPRESSION "compare y with .*: 140 elements.* 0 outside")
    set_tests_properties(cli_bench_plugin_source cli_inspect_plugin_source cli_run_plugin_source_missing
                         PROPERTIES FIXTURES_REQUIRED cli_interp)
    set_tests_properties(cli_inspect_plugin_source PROPERTIES
                         PASS_REGULAR_EXPRESSION "'interp_0' sample::interpolate v1 +JIT.*required plugins \\(1\\)")
    # Compiled from source AND embedded: the engine travels alone.
    kiln_cli_test(cli_build_plugin_source_embed ${KC} build ${IC}/model.onnx --plugin-source ${INTERP_SRC}
                  --embed-plugins -o ${KC_DIR}/interp_embed.kiln)
    kiln_cli_test(cli_run_plugin_source_embed ${KC} run ${KC_DIR}/interp_embed.kiln
                  --input x=${IC}/test_data_set_0/input_0.pb
                  --compare y=${IC}/test_data_set_0/output_0.pb --rtol 1e-5 --atol 1e-6)
    set_tests_properties(cli_build_plugin_source_embed PROPERTIES FIXTURES_SETUP cli_interp_embed)
    set_tests_properties(cli_run_plugin_source_embed PROPERTIES FIXTURES_REQUIRED cli_interp_embed
                         PASS_REGULAR_EXPRESSION "compare y with .*: 140 elements.* 0 outside")
  endif()
  kiln_cli_test(cli_plugins_plugin_source ${KC} plugins --plugin-source ${INTERP_SRC} sample::interpolate)
  set_tests_properties(cli_plugins_plugin_source PROPERTIES
                       PASS_REGULAR_EXPRESSION "sample::interpolate v1 +\\(quick op")

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
  # Silero VAD: its sample rate input `sr` selects branches (If) and window
  # sizes, so the engine is built for one rate (--values, a build-time
  # constant) and one chunk shape (--shapes); compared with ONNX Runtime.
  set(VAD ${CMAKE_SOURCE_DIR}/../shared/models/silero_vad_v5)
  if(EXISTS ${VAD}/model.onnx)
    kiln_cli_test(cli_model_silero_build ${KC} build ${VAD}/model.onnx --values sr=16000
                  --shapes input:1x512,state:2x1x128 -o ${KC_DIR}/silero.kiln)
    kiln_cli_test(cli_model_silero_run ${KC} run ${KC_DIR}/silero.kiln
                  --input 0=${VAD}/test_data_set_0/input_0.pb --input 1=${VAD}/test_data_set_0/input_1.pb
                  --compare 0=${VAD}/test_data_set_0/output_0.pb --compare 1=${VAD}/test_data_set_0/output_1.pb
                  --rtol 1e-3 --atol 1e-4)
    set_tests_properties(cli_model_silero_build PROPERTIES FIXTURES_SETUP cli_vad)
    set_tests_properties(cli_model_silero_run PROPERTIES FIXTURES_REQUIRED cli_vad
                         PASS_REGULAR_EXPRESSION "compare stateN .*: 256 elements, .* 0 outside")
    kiln_cli_test(cli_values_unknown_input ${EXPECT_FAIL} "the model has no graph input 'rate'"
                  ${KC} build ${VAD}/model.onnx --values rate=16000 -o ${KC_DIR}/never.kiln)
    kiln_cli_test(cli_values_not_integer ${EXPECT_FAIL} "16000.5 is not an integer"
                  ${KC} build ${VAD}/model.onnx --values sr=16000.5 -o ${KC_DIR}/never.kiln)
    kiln_cli_test(cli_values_bad_spec ${EXPECT_FAIL} "expected NAME=V"
                  ${KC} build ${VAD}/model.onnx --values sr -o ${KC_DIR}/never.kiln)
  endif()
endif()
