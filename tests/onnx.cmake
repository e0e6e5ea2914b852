# tests/onnx.cmake — ONNX importer tests (included by CMakeLists.txt).
#
#  - test_onnx (tests/test_onnx.c) sees the generated protobuf-c header.
#  - onnx_circ_pad_*: samples/circ_pad.onnx builds with the sample plugin
#    library and fails without it with one message naming node and plugin;
#    the circ_pad test case (expected data from numpy np.pad wrap) passes.
#  - onnx_conformance_*: `kiln test-onnx` over the ONNX backend test data
#    (Debian libonnx-testdata) with tests/onnx_skip.txt; label "heavy".
#  - onnx_model_*: every real model in ../shared/models (rtol 1e-3,
#    atol 1e-4, as the models' README says); label "heavy".

if(TARGET test_onnx)
  target_include_directories(test_onnx PRIVATE ${KILN_PROTO_OUT} ${PROTOBUF_C_INCLUDE})
endif()

if(TARGET kiln_cli AND TARGET kiln_samples_ops)
  add_test(NAME onnx_circ_pad_build
    COMMAND kiln_cli build ${CMAKE_SOURCE_DIR}/samples/circ_pad.onnx
            --plugins $<TARGET_FILE:kiln_samples_ops> -o ${CMAKE_BINARY_DIR}/circ_pad_onnx.kiln)
  # Without --plugins: exit status 1 and exactly one error line that names
  # the node and the missing plugin.
  add_test(NAME onnx_circ_pad_missing_plugin
    COMMAND sh -c "! $<TARGET_FILE:kiln_cli> build ${CMAKE_SOURCE_DIR}/samples/circ_pad.onnx -o ${CMAKE_BINARY_DIR}/circ_pad_noplug.kiln 2> ${CMAKE_BINARY_DIR}/circ_pad_noplug.err && cat ${CMAKE_BINARY_DIR}/circ_pad_noplug.err && test $(wc -l < ${CMAKE_BINARY_DIR}/circ_pad_noplug.err) -eq 1 && grep -q \"circ_pad_0\" ${CMAKE_BINARY_DIR}/circ_pad_noplug.err && grep -q \"sample::circ_pad\" ${CMAKE_BINARY_DIR}/circ_pad_noplug.err")
  add_test(NAME onnx_circ_pad_case
    COMMAND kiln_cli test-onnx --plugins $<TARGET_FILE:kiln_samples_ops>
            ${CMAKE_SOURCE_DIR}/tests/fixtures/circ_pad_case)
endif()

if(TARGET kiln_cli)
  # A MobileNetV2 block (1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1 project,
  # residual Add; one kiln::mbconv layer on AVX-512 CPUs) against outputs
  # ONNX Runtime computed for it.
  add_test(NAME onnx_mbconv_block_case
    COMMAND kiln_cli test-onnx ${CMAKE_SOURCE_DIR}/tests/fixtures/mbconv_block_case)
endif()

if(TARGET kiln_cli)
  set(KILN_ONNX_TESTDATA /usr/share/libonnx-testdata/data)
  # How many cases of each suite pass today (tests/onnx_failures.md): fewer
  # is a regression even when nothing FAILs (a case turned into a SKIP).
  set(KILN_MIN_PASS_node 906)
  set(KILN_MIN_PASS_pytorch_converted 82)
  set(KILN_MIN_PASS_pytorch_operator 35)
  set(KILN_MIN_PASS_simple 21)
  foreach(suite node pytorch-converted pytorch-operator simple)
    if(EXISTS ${KILN_ONNX_TESTDATA}/${suite})
      string(REPLACE "-" "_" sname ${suite})
      add_test(NAME onnx_conformance_${sname}
        COMMAND kiln_cli test-onnx --skip-list ${CMAKE_SOURCE_DIR}/tests/onnx_skip.txt
                --min-pass ${KILN_MIN_PASS_${sname}} ${KILN_ONNX_TESTDATA}/${suite})
      set_tests_properties(onnx_conformance_${sname} PROPERTIES LABELS heavy TIMEOUT 3600)
    endif()
  endforeach()

  set(KILN_MODELS_DIR ${CMAKE_SOURCE_DIR}/../shared/models CACHE PATH "the shared real models (onnx_model_* tests)")
  file(GLOB KILN_SHARED_MODELS LIST_DIRECTORIES true ${KILN_MODELS_DIR}/*)
  set(KILN_NMODELS 0)
  foreach(m ${KILN_SHARED_MODELS})
    if(EXISTS ${m}/model.onnx)
      get_filename_component(mname ${m} NAME)
      add_test(NAME onnx_model_${mname}
        COMMAND kiln_cli test-onnx --rtol 1e-3 --atol 1e-4 ${m})
      set_tests_properties(onnx_model_${mname} PROPERTIES LABELS heavy TIMEOUT 1800)
      math(EXPR KILN_NMODELS "${KILN_NMODELS} + 1")
    endif()
  endforeach()
  # Absent data is a visible skip with the reason, never a silently smaller suite.
  set(KILN_SKIPPED_DATA "")
  if(KILN_NMODELS EQUAL 0)
    list(APPEND KILN_SKIPPED_DATA "onnx_model_all|no model directory with a model.onnx in ${KILN_MODELS_DIR} (the shared real models: link ../shared to them or set KILN_MODELS_DIR, then re-run cmake)")
  endif()
  foreach(suite node pytorch-converted pytorch-operator simple)
    if(NOT EXISTS ${KILN_ONNX_TESTDATA}/${suite})
      string(REPLACE "-" "_" sname ${suite})
      list(APPEND KILN_SKIPPED_DATA "onnx_conformance_${sname}|no ONNX backend test data in ${KILN_ONNX_TESTDATA}/${suite} (Debian package libonnx-testdata)")
    endif()
  endforeach()
  foreach(entry ${KILN_SKIPPED_DATA})
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 tname)
    list(GET parts 1 why)
    add_test(NAME ${tname} COMMAND sh -c "echo 'skipped: ${why}'; exit 77")
    set_tests_properties(${tname} PROPERTIES SKIP_RETURN_CODE 77 LABELS heavy)
  endforeach()
endif()

# The CLI with sequence and string values: one ONNX .pb per value for
# --input and --compare (kiln run fills NAME and NAME:shapes / NAME:lens);
# random data for a sequence's parts is refused with a clear message.
set(KILN_NODE_DATA /usr/share/libonnx-testdata/data/node)
if(TARGET kiln_cli AND EXISTS ${KILN_NODE_DATA}/test_sequence_insert_at_back)
  set(SQ ${KILN_NODE_DATA}/test_sequence_insert_at_back)
  set(ST ${KILN_NODE_DATA}/test_cast_STRING_to_FLOAT)
  set(KV_DIR ${CMAKE_BINARY_DIR}/cli-values)
  file(MAKE_DIRECTORY ${KV_DIR})
  add_test(NAME cli_sequence_build
    COMMAND kiln_cli build ${SQ}/model.onnx --shapes "sequence:9,sequence:shapes:3x1" -o ${KV_DIR}/seq.kiln)
  add_test(NAME cli_sequence_run
    COMMAND kiln_cli run ${KV_DIR}/seq.kiln --input sequence=${SQ}/test_data_set_0/input_0.pb
            --input tensor=${SQ}/test_data_set_0/input_1.pb --compare output_sequence=${SQ}/test_data_set_0/output_0.pb)
  set_tests_properties(cli_sequence_run PROPERTIES DEPENDS cli_sequence_build
                       PASS_REGULAR_EXPRESSION "compare output_sequence:shapes with [^\n]*: 4 elements, max abs error 0, 0 outside"
                       FAIL_REGULAR_EXPRESSION "differs from|kiln run:")
  add_test(NAME cli_sequence_random
    COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh "SequenceInsert: the sequence's shapes describe"
            $<TARGET_FILE:kiln_cli> run ${KV_DIR}/seq.kiln)
  set_tests_properties(cli_sequence_random PROPERTIES DEPENDS cli_sequence_build)
  add_test(NAME cli_string_build
    COMMAND kiln_cli build ${ST}/model.onnx --min-shapes "input:0,input:lens:3x4" --opt-shapes "input:64,input:lens:3x4"
            --max-shapes "input:4096,input:lens:3x4" -o ${KV_DIR}/str.kiln)
  add_test(NAME cli_string_run
    COMMAND kiln_cli run ${KV_DIR}/str.kiln --input input=${ST}/test_data_set_0/input_0.pb
            --compare output=${ST}/test_data_set_0/output_0.pb)
  set_tests_properties(cli_string_run PROPERTIES DEPENDS cli_string_build
                       PASS_REGULAR_EXPRESSION "12 elements, max abs error [^,]*, 0 outside"
                       FAIL_REGULAR_EXPRESSION "differs from|kiln run:")
  set_tests_properties(cli_sequence_build cli_sequence_run cli_sequence_random cli_string_build cli_string_run
                       PROPERTIES LABELS cli)
endif()

# String tensors through an If with a run-time condition (branches of different
# byte lengths) and StringNormalizer (scripts/gen_if_string_case.py).
if(TARGET kiln_cli)
  add_test(NAME onnx_if_string_case
    COMMAND kiln_cli test-onnx --min-pass 1 ${CMAKE_SOURCE_DIR}/tests/fixtures/if_string_case)
endif()

# The same case with the node attribute aot = 1: the plugin's AOT kernel,
# compiled at build time and embedded in the engine.
if(TARGET kiln_cli AND TARGET kiln_samples_ops)
  add_test(NAME onnx_circ_pad_aot_case
    COMMAND kiln_cli test-onnx --plugins $<TARGET_FILE:kiln_samples_ops>
            ${CMAKE_SOURCE_DIR}/tests/fixtures/circ_pad_aot_case)
endif()

# Engines with retyped tensors (test_type_sweep.c): skipped without the
# ONNX node test data.
if(TARGET test_type_sweep)
  set_tests_properties(test_type_sweep PROPERTIES SKIP_RETURN_CODE 77)
endif()
