# Engine trust on the command line: kiln keygen, build --sign, run/inspect
# --verify, --no-code / --allow-code, and inspect saying whether an engine
# carries native code.  Signing needs libsodium; without it keygen must say so.
if(TARGET kiln_cli AND TARGET kiln_samples_ops)
  set(KT $<TARGET_FILE:kiln_cli>)
  set(KT_LIB $<TARGET_FILE:kiln_samples_ops>)
  set(KT_DIR ${CMAKE_BINARY_DIR}/cli-trust)
  set(KT_FAIL bash ${CMAKE_SOURCE_DIR}/scripts/expect_fail.sh)
  set(KT_MODEL ${CMAKE_SOURCE_DIR}/tests/fixtures/add_relu.onnx)
  function(kiln_trust_test name)
    add_test(NAME ${name} COMMAND ${ARGN} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(${name} PROPERTIES LABELS "cli" TIMEOUT 120
                         ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  endfunction()
  # keys are never overwritten: start from an empty folder
  kiln_trust_test(cli_trust_setup ${CMAKE_COMMAND} -E rm -rf ${KT_DIR})
  kiln_trust_test(cli_trust_mkdir ${CMAKE_COMMAND} -E make_directory ${KT_DIR})
  set_tests_properties(cli_trust_setup PROPERTIES FIXTURES_SETUP cli_trust_clean)
  set_tests_properties(cli_trust_mkdir PROPERTIES FIXTURES_SETUP cli_trust_dir FIXTURES_REQUIRED cli_trust_clean)
  kiln_trust_test(cli_keygen_help ${KT} keygen --help)
  kiln_trust_test(cli_inspect_no_code ${KT} inspect ${CMAKE_BINARY_DIR}/cli-trust/unsigned.kiln)
  kiln_trust_test(cli_build_unsigned ${KT} build ${KT_MODEL} -o ${KT_DIR}/unsigned.kiln)
  set_tests_properties(cli_build_unsigned PROPERTIES FIXTURES_SETUP cli_trust_unsigned
                       FIXTURES_REQUIRED cli_trust_dir)
  set_tests_properties(cli_inspect_no_code PROPERTIES FIXTURES_REQUIRED cli_trust_unsigned
                       PASS_REGULAR_EXPRESSION "native code: none.*signature: none")
  if(SODIUM_FOUND)
    kiln_trust_test(cli_keygen ${KT} keygen ${KT_DIR}/k)
    kiln_trust_test(cli_keygen_other ${KT} keygen ${KT_DIR}/other)
    kiln_trust_test(cli_keygen_no_overwrite ${KT_FAIL} "keys are never overwritten" ${KT} keygen ${KT_DIR}/k)
    kiln_trust_test(cli_build_signed ${KT} build ${KT_MODEL} --sign ${KT_DIR}/k.key -o ${KT_DIR}/signed.kiln)
    kiln_trust_test(cli_build_sign_pubkey ${KT_FAIL} "expected 128 hex digits \\(a secret key\\), found 64"
                    ${KT} build ${KT_MODEL} --sign ${KT_DIR}/k.pub -o ${KT_DIR}/x.kiln)
    kiln_trust_test(cli_run_verified ${KT} run ${KT_DIR}/signed.kiln --verify ${KT_DIR}/k.pub)
    kiln_trust_test(cli_inspect_verified ${KT} inspect ${KT_DIR}/signed.kiln --verify ${KT_DIR}/k.pub)
    kiln_trust_test(cli_run_other_key ${KT_FAIL} "engine is signed by another key"
                    ${KT} run ${KT_DIR}/signed.kiln --verify ${KT_DIR}/other.pub)
    kiln_trust_test(cli_run_unsigned_verify ${KT_FAIL} "engine is not signed, and a signature was required"
                    ${KT} run ${KT_DIR}/unsigned.kiln --verify ${KT_DIR}/k.pub)
    kiln_trust_test(cli_bench_verified ${KT} bench ${KT_DIR}/signed.kiln --verify ${KT_DIR}/k.pub --iterations 3
                    --warmup 1)
    set_tests_properties(cli_keygen cli_keygen_other PROPERTIES FIXTURES_SETUP cli_trust_keys
                         FIXTURES_REQUIRED cli_trust_dir)
    set_tests_properties(cli_keygen_no_overwrite cli_build_sign_pubkey PROPERTIES FIXTURES_REQUIRED cli_trust_keys)
    set_tests_properties(cli_build_signed PROPERTIES FIXTURES_SETUP cli_trust_signed FIXTURES_REQUIRED cli_trust_keys)
    set_tests_properties(cli_run_verified cli_run_other_key cli_bench_verified PROPERTIES
                         FIXTURES_REQUIRED "cli_trust_signed;cli_trust_keys")
    set_tests_properties(cli_run_unsigned_verify PROPERTIES FIXTURES_REQUIRED "cli_trust_unsigned;cli_trust_keys")
    set_tests_properties(cli_inspect_verified PROPERTIES FIXTURES_REQUIRED "cli_trust_signed;cli_trust_keys"
                         PASS_REGULAR_EXPRESSION "native code: none.*signature: Ed25519, verified")
  else()
    kiln_trust_test(cli_keygen_no_sodium ${KT_FAIL} "built without libsodium" ${KT} keygen ${KT_DIR}/k)
  endif()
  # Native code: an AOT engine loads here (built on this machine), is refused
  # with --no-code, and inspect says it carries code.
  kiln_trust_test(cli_build_aot ${KT} build --network circ_pad --plugins ${KT_LIB} --prefer-aot
                  -o ${KT_DIR}/aot.kiln)
  set_tests_properties(cli_build_aot PROPERTIES FIXTURES_SETUP cli_trust_aot FIXTURES_REQUIRED cli_trust_dir)
  kiln_trust_test(cli_inspect_code ${KT} inspect --plugins ${KT_LIB} ${KT_DIR}/aot.kiln)
  kiln_trust_test(cli_run_no_code ${KT_FAIL} "engine carries native code \\(2 AOT kernels"
                  ${KT} run ${KT_DIR}/aot.kiln --plugins ${KT_LIB} --no-code)
  kiln_trust_test(cli_run_allow_code ${KT} run ${KT_DIR}/aot.kiln --plugins ${KT_LIB} --allow-code)
  set_tests_properties(cli_inspect_code cli_run_no_code cli_run_allow_code PROPERTIES FIXTURES_REQUIRED cli_trust_aot)
  set_tests_properties(cli_inspect_code PROPERTIES PASS_REGULAR_EXPRESSION "native code: yes \\(2 AOT kernels")
endif()
