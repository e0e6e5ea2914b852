# The reference samples, in every flag combination the issue lists.  Each
# run uses fresh random inputs and checks against the runner's naive
# reference; the runner exits non-zero on any mismatch.
if(TARGET kiln-samples AND TARGET kiln_samples_ops)
  set(KS $<TARGET_FILE:kiln-samples>)
  set(KS_ART ${CMAKE_BINARY_DIR}/artifacts)

  # AOT kernels and compiled plugin sources are cached under the build tree.
  set(KS_CACHE ${CMAKE_BINARY_DIR}/kiln-cache)
  function(kiln_sample name)
    add_test(NAME ${name} COMMAND ${KS} ${ARGN} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(${name} PROPERTIES LABELS "samples" TIMEOUT 120
                         ENVIRONMENT "KILN_CACHE_DIR=${KS_CACHE}")
  endfunction()

  kiln_sample(sample_elemwise_add elemwise_add)
  kiln_sample(sample_elemwise_add_autotune elemwise_add --autotune -v)
  kiln_sample(sample_inplace_add_autotune inplace_add --autotune -v)
  kiln_sample(sample_inplace_add inplace_add)
  kiln_sample(sample_non_zero non_zero)
  kiln_sample(sample_non_zero_wide non_zero --shape 3x40)
  kiln_sample(sample_circ_pad circ_pad)
  kiln_sample(sample_circ_pad_v circ_pad -v)
  kiln_sample(sample_circ_pad_multi_tactic circ_pad --multi-tactic -v)
  kiln_sample(sample_circ_pad_per_format_tactics circ_pad --per-format-tactics)
  kiln_sample(sample_circ_pad_fp16 circ_pad --precision fp16)
  kiln_sample(sample_circ_pad_multi_tactic_fp16 circ_pad --multi-tactic --precision fp16)
  kiln_sample(sample_circ_pad_per_format_tactics_fp16 circ_pad --per-format-tactics --precision fp16 -v)
  kiln_sample(sample_circ_pad_1d circ_pad --multi-tactic --shape 5x7 --pads 3,7)
  kiln_sample(sample_circ_pad_2d circ_pad --multi-tactic --shape 3x4x6 --pads 0,2,4,1)
  kiln_sample(sample_circ_pad_3d circ_pad --multi-tactic --shape 2x3x4x5 --pads 1,0,2,3,3,1)
  kiln_sample(sample_circ_pad_4d circ_pad --multi-tactic --shape 2x3x4x5 --pads 1,1,2,0,1,1,0,2)
  kiln_sample(sample_circ_pad_threads1 circ_pad --multi-tactic --threads 1)
  kiln_sample(sample_chain100 chain100)
  kiln_sample(sample_circ_pad_aot circ_pad --aot --multi-tactic)
  kiln_sample(sample_circ_pad_aot_2d circ_pad --aot --shape 7x9 --pads 2,3,0,7)

  # Save then load: the load run reuses the saved inputs and must reproduce
  # the saved outputs bit for bit (and match the reference).
  kiln_sample(sample_circ_pad_save circ_pad --multi-tactic --save-engine --artifacts-dir ${KS_ART})
  kiln_sample(sample_circ_pad_load circ_pad --multi-tactic --load-engine --artifacts-dir ${KS_ART})
  set_tests_properties(sample_circ_pad_save PROPERTIES FIXTURES_SETUP circ_pad_engine)
  set_tests_properties(sample_circ_pad_load PROPERTIES FIXTURES_REQUIRED circ_pad_engine)
  # The runner lists where each layer runs and fails when a sample layer is
  # not on the device asked for: the CPU engine loaded under --device cuda.
  add_test(NAME sample_circ_pad_load_misplaced COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "layer pad_a runs on cpu, not on cuda"
           ${KS} circ_pad --multi-tactic --load-engine --device cuda --artifacts-dir ${KS_ART})
  set_tests_properties(sample_circ_pad_load_misplaced PROPERTIES LABELS "samples" FIXTURES_REQUIRED circ_pad_engine)

  kiln_sample(sample_circ_pad_save_fp16 circ_pad --per-format-tactics --precision fp16 --save-engine
              --artifacts-dir ${KS_ART}/fp16)
  kiln_sample(sample_circ_pad_load_fp16 circ_pad --per-format-tactics --precision fp16 --load-engine
              --artifacts-dir ${KS_ART}/fp16)
  set_tests_properties(sample_circ_pad_save_fp16 PROPERTIES FIXTURES_SETUP circ_pad_engine_fp16)
  set_tests_properties(sample_circ_pad_load_fp16 PROPERTIES FIXTURES_REQUIRED circ_pad_engine_fp16)
  kiln_sample(sample_circ_pad_save_aot circ_pad --aot --save-engine --artifacts-dir ${KS_ART}/aot)
  kiln_sample(sample_circ_pad_load_aot circ_pad --aot --load-engine --artifacts-dir ${KS_ART}/aot)
  set_tests_properties(sample_circ_pad_save_aot PROPERTIES FIXTURES_SETUP circ_pad_engine_aot)
  set_tests_properties(sample_circ_pad_load_aot PROPERTIES FIXTURES_REQUIRED circ_pad_engine_aot
                       PASS_REGULAR_EXPRESSION "library in this process after the run: absent")

  if(EXISTS ${CMAKE_SOURCE_DIR}/samples/circ_pad.onnx)
    # ONNX mode with the node attribute aot = 1: save, then load and run in a
    # process that never loads the sample plugin library.
    kiln_sample(sample_circ_pad_onnx_save_aot circ_pad --mode onnx --aot --save-engine
                --artifacts-dir ${KS_ART}/onnx_aot)
    kiln_sample(sample_circ_pad_onnx_load_aot circ_pad --mode onnx --aot --load-engine
                --artifacts-dir ${KS_ART}/onnx_aot)
    set_tests_properties(sample_circ_pad_onnx_save_aot PROPERTIES FIXTURES_SETUP circ_pad_engine_onnx_aot)
    set_tests_properties(sample_circ_pad_onnx_load_aot PROPERTIES FIXTURES_REQUIRED circ_pad_engine_onnx_aot
                         PASS_REGULAR_EXPRESSION "library in this process after the run: absent")
    kiln_sample(sample_circ_pad_onnx circ_pad --mode onnx)
    kiln_sample(sample_circ_pad_onnx_fp16 circ_pad --mode onnx --precision fp16 -v)
  endif()

  # interpolate: samples/interpolate/interpolate.c compiled at first use
  # through the compile cache: a run in an empty cache compiles; a second
  # run loads the cached library.  Each test has a cache dir of its own and
  # makes the state it checks itself (emptied, or warmed by a first run in
  # the same test), so none depends on another's order, rerun or cache:
  # sample_interpolate_bilinear used to expect the hit that
  # sample_interpolate_first's run had to leave in a shared dir.
  set(KS_ICACHE ${CMAKE_BINARY_DIR}/samples-interp-cache)
  add_test(NAME sample_interpolate_first
           COMMAND ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${KS_ICACHE}/first
                   bash -c "rm -rf \"$KILN_CACHE_DIR\" && exec \"$0\" interpolate -v" ${KS}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  add_test(NAME sample_interpolate_second
           COMMAND ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${KS_ICACHE}/second
                   bash -c "rm -rf \"$KILN_CACHE_DIR\" && \"$0\" interpolate -v && exec \"$0\" interpolate -v" ${KS}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  add_test(NAME sample_interpolate_bilinear
           COMMAND ${CMAKE_COMMAND} -E env KILN_CACHE_DIR=${KS_ICACHE}/bilinear
                   ${KS} interpolate --mode bilinear --scale 1.5 --shape 2x3x9x11 -v
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(sample_interpolate_first sample_interpolate_second sample_interpolate_bilinear
                       PROPERTIES LABELS "samples" TIMEOUT 120)
  set_tests_properties(sample_interpolate_first PROPERTIES
                       PASS_REGULAR_EXPRESSION "compile cache miss [0-9a-f]+.*nearest x2.*max abs error 0\nPASS")
  set_tests_properties(sample_interpolate_second PROPERTIES
                       PASS_REGULAR_EXPRESSION "compile cache miss [0-9a-f]+.*PASS.*compile cache hit [0-9a-f]+ \\([^)]*interpolate-[0-9a-f]+\\.so\\).*PASS")
  set_tests_properties(sample_interpolate_bilinear PROPERTIES
                       PASS_REGULAR_EXPRESSION "bilinear x1.5, \\[2,3,9,11\\] -> \\[2,3,13,16\\].*PASS")
  add_test(NAME sample_interpolate_bad_mode COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "interpolate: --mode expects nearest or bilinear, found 'onnx'" ${KS} interpolate --mode onnx)

  # Usage errors are reported, not crashed on.
  add_test(NAME sample_unknown_name COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "unknown sample network 'nope'" ${KS} nope)
endif()

if(TARGET kiln-samples)
  add_test(NAME sample_option_mismatch COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "--autotune \\(elemwise_add, inplace_add\\) does not apply to sample 'chain100'" $<TARGET_FILE:kiln-samples> chain100 --autotune)
endif()

if(TARGET kiln-samples)
  # The AOT kernel's limit is reported with the layer and op identity.
  add_test(NAME sample_circ_pad_aot_rank5 COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "layer 'pad_a' \\(sample::circ_pad v1\\).*rank <= 4, found rank 5"
           $<TARGET_FILE:kiln-samples> circ_pad --aot --shape 1x2x3x4x5 --pads 1,1)
endif()

if(TARGET kiln-samples)
  # --device takes cpu or cuda; the GPU runs themselves are scripts/test_gpu.sh's.
  add_test(NAME sample_device_bad COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh
           "--device expects cpu or cuda, found 'tpu'" $<TARGET_FILE:kiln-samples> circ_pad --device tpu)
  add_test(NAME sample_device_cpu COMMAND $<TARGET_FILE:kiln-samples> circ_pad --multi-tactic --device cpu)
  set_tests_properties(sample_device_cpu PROPERTIES PASS_REGULAR_EXPRESSION "layer pad_a +sample::circ_pad v2 on cpu.*PASS")
endif()
