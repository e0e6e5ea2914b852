# CUDA backend tests (label `cuda`; scripts/test_gpu.sh runs them on the GPU
# machine).  test_cuda needs a GPU: without one it prints why and exits 77,
# which ctest reports as skipped.  test_cuda_placement and test_cuda_coverage
# run anywhere (a fake device stands in for the GPU).
set_tests_properties(test_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
set_tests_properties(test_cuda_placement PROPERTIES LABELS cuda)
set_tests_properties(test_cuda_fusion PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
set_tests_properties(test_cuda_coverage PROPERTIES LABELS cuda)
set_tests_properties(test_cuda_cudnn PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
set_tests_properties(test_cuda_conv_igemm PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
