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
