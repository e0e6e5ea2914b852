#!/bin/sh
# fuzz/make_engine_corpus.sh — (re)build the engine fuzzer's seed corpus:
# small engines of ONNX node tests (libonnx-testdata), of tests/fixtures,
# of the samples, and CUDA engines made on the stand-in GPU.  Engines are
# build outputs tied to this machine's CPU (device signature) and to the
# format version, so the corpus is made here, not committed; fuzz/build.sh
# calls this when build-fuzz/seed_engine/ is missing.  Rerun it after a format version change.
#   fuzz/make_engine_corpus.sh [BUILD_DIR [OUT_DIR]]   (default: build, build-fuzz/seed_engine)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$ROOT/build}
K=$B/kiln
LIB=$B/libkiln_samples_ops.so
OUT=${2:-$ROOT/build-fuzz/seed_engine}
D=/usr/share/libonnx-testdata/data/node
rm -rf "$OUT"; mkdir -p "$OUT"
n=0
one() { # name model [build options]
  name=$1; shift
  if timeout 120 "$K" build "$@" -o "$OUT/$name.engine" >/dev/null 2>&1; then n=$((n + 1)); fi
}
for t in add add_bcast and_bcast3v1d argmax_keepdims_random averagepool_2d_pads batchnorm_example \
         bitshift_right_uint32 cast_FLOAT_to_DOUBLE celu clip compress_0 concat_3d_axis_1 constant_pad \
         conv_with_strides_padding convtranspose cumsum_2d_axis_1 depthtospace_crd_mode dequantizelinear \
         det_2d dft div_bcast edge_pad einsum_batch_matmul equal_bcast expand_dim_changed eyelike_with_dtype \
         flatten_axis1 gather_0 gather_elements_0 gathernd_example_int32 gemm_all_attributes \
         gemm_default_vector_bias gemm_transposeA gridsample gru_defaults hardmax_axis_1 if if_seq \
         instancenorm_example isnan layer_normalization_2d_axis0 lrn lstm_defaults matmul_3d \
         matmulinteger max_example maxpool_2d_pads mean_example mod_mixed_sign_int32 mul_bcast mvn \
         nonmaxsuppression_two_batches nonzero_example not_2d pow_bcast_array qlinearmatmul_2D relu \
         reshape_negative_dim reshape_reordered_all_dims reversesequence_batch reversesequence_time \
         rnn_seq_length roialign_aligned_false scatter_elements_with_axis scatternd shape sigmoid size \
         softmax_axis_1 spacetodepth split_equal_parts_1d split_variable_parts_2d stft sub_bcast \
         sum_example tfidfvectorizer_tf_only_bigrams_skip0 tile transpose_default \
         unique_sorted_with_axis where_example; do
  [ -f "$D/test_$t/model.onnx" ] && one "$t" "$D/test_$t/model.onnx"
done
for t in sequence_insert_at_back sequence_insert_at_front; do
  [ -f "$D/test_$t/model.onnx" ] && one "$t" "$D/test_$t/model.onnx" --shapes "sequence:9,sequence:shapes:3x1"
done
[ -f "$D/test_identity_sequence/model.onnx" ] &&
  one identity_sequence "$D/test_identity_sequence/model.onnx" --shapes "x:6,x:shapes:2x2"
for f in "$ROOT"/tests/fixtures/*.onnx; do
  one "fx_$(basename "$f" .onnx)" "$f" --plugins "$LIB"
done
one fx_dynamic "$ROOT/tests/fixtures/dynamic.onnx" --min-shapes x:1x3 --opt-shapes x:2x3 --max-shapes x:8x3
one circ_pad "$ROOT/samples/circ_pad.onnx" --plugins "$LIB"
one fx_mbconv_block "$ROOT/tests/fixtures/mbconv_block_case/model.onnx"
# engines with CUDA layers, built on the stand-in GPU (the fuzzer runs them on it too)
if [ -x "$B/test_engine_cuda_crafted" ] && "$B/test_engine_cuda_crafted" --write "$OUT" >/dev/null 2>&1; then
  n=$((n + 6))
fi
echo "$n engines in $OUT ($(du -sh "$OUT" | cut -f1))"
