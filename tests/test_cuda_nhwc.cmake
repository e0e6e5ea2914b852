# test_cuda_nhwc needs a GPU: without one it exits 77, which ctest reports as skipped (with the reason).
set_tests_properties(test_cuda_nhwc PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
