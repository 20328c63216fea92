/* The layout of include/timitseg.h as the C compiler sees it, printed as one
 * JSON object: every struct's sizeof and each field's offsetof (and size),
 * every enum constant and the #define'd sizes. python/tests/test_layout.py
 * compares python/timitseg/_lib.py's ctypes mirrors with it. */
#include <stddef.h>
#include <stdio.h>

#include "timitseg.h"

static int first;

static void open_struct(const char* name, size_t size) {
  printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": {", first ? "" : ",", name, size);
  first = 0;
}

#define FIELD(T, f, sep) printf("%s\"%s\": [%zu, %zu]", sep, #f, offsetof(T, f), sizeof(((T*)0)->f))
#define ENUM(name, sep) printf("%s\"%s\": %d", sep, #name, (int)(name))

int main(void) {
  first = 1;
  printf("{\"structs\": {");
  open_struct("timitseg_tensor", sizeof(timitseg_tensor));
  FIELD(timitseg_tensor, data, "");
  FIELD(timitseg_tensor, dtype, ", ");
  FIELD(timitseg_tensor, device, ", ");
  FIELD(timitseg_tensor, device_index, ", ");
  FIELD(timitseg_tensor, ndim, ", ");
  FIELD(timitseg_tensor, shape, ", ");
  FIELD(timitseg_tensor, strides, ", ");
  printf("}}");
  open_struct("timitseg_crf_params", sizeof(timitseg_crf_params));
  FIELD(timitseg_crf_params, num_labels, "");
  FIELD(timitseg_crf_params, max_duration, ", ");
  FIELD(timitseg_crf_params, backend, ", ");
  FIELD(timitseg_crf_params, threads, ", ");
  FIELD(timitseg_crf_params, duration_model, ", ");
  FIELD(timitseg_crf_params, reg, ", ");
  FIELD(timitseg_crf_params, phone_bonus, ", ");
  printf("}}");
  open_struct("timitseg_crf_batch", sizeof(timitseg_crf_batch));
  FIELD(timitseg_crf_batch, scores, "");
  FIELD(timitseg_crf_batch, cumulative, ", ");
  FIELD(timitseg_crf_batch, lengths, ", ");
  FIELD(timitseg_crf_batch, onset, ", ");
  FIELD(timitseg_crf_batch, stream, ", ");
  printf("}}");
  open_struct("timitseg_crf_gold", sizeof(timitseg_crf_gold));
  FIELD(timitseg_crf_gold, labels, "");
  FIELD(timitseg_crf_gold, segments, ", ");
  FIELD(timitseg_crf_gold, num_segments, ", ");
  printf("}}");
  open_struct("timitseg_crf_grads", sizeof(timitseg_crf_grads));
  FIELD(timitseg_crf_grads, scores, "");
  FIELD(timitseg_crf_grads, transition, ", ");
  FIELD(timitseg_crf_grads, duration_bias, ", ");
  FIELD(timitseg_crf_grads, start, ", ");
  FIELD(timitseg_crf_grads, end, ", ");
  FIELD(timitseg_crf_grads, duration_lognormal, ", ");
  FIELD(timitseg_crf_grads, onset, ", ");
  printf("}}");
  open_struct("timitseg_model_params", sizeof(timitseg_model_params));
  FIELD(timitseg_model_params, device, "");
  FIELD(timitseg_model_params, backend, ", ");
  FIELD(timitseg_model_params, threads, ", ");
  FIELD(timitseg_model_params, device_kind, ", ");
  FIELD(timitseg_model_params, backend_kind, ", ");
  printf("}}");
  open_struct("timitseg_align_words_options", sizeof(timitseg_align_words_options));
  FIELD(timitseg_align_words_options, closures, "");
  FIELD(timitseg_align_words_options, edge_silence, ", ");
  FIELD(timitseg_align_words_options, word_silence, ", ");
  FIELD(timitseg_align_words_options, obligatory_silence, ", ");
  FIELD(timitseg_align_words_options, dict_format, ", ");
  printf("}}");
  printf("\n},\n\"enums\": {");
  ENUM(TIMITSEG_OK, "");
  ENUM(TIMITSEG_ERR_ARGUMENT, ", ");
  ENUM(TIMITSEG_ERR_SHAPE, ", ");
  ENUM(TIMITSEG_ERR_DTYPE, ", ");
  ENUM(TIMITSEG_ERR_DEVICE, ", ");
  ENUM(TIMITSEG_ERR_LENGTH, ", ");
  ENUM(TIMITSEG_ERR_RUNTIME, ", ");
  ENUM(TIMITSEG_ERR_MEMORY, ", ");
  ENUM(TIMITSEG_F32, ", ");
  ENUM(TIMITSEG_F64, ", ");
  ENUM(TIMITSEG_I32, ", ");
  ENUM(TIMITSEG_I64, ", ");
  ENUM(TIMITSEG_DEVICE_CPU, ", ");
  ENUM(TIMITSEG_DEVICE_CUDA, ", ");
  ENUM(TIMITSEG_BACKEND_AUTO, ", ");
  ENUM(TIMITSEG_BACKEND_REFERENCE, ", ");
  ENUM(TIMITSEG_BACKEND_CPU, ", ");
  ENUM(TIMITSEG_BACKEND_CUDA, ", ");
  ENUM(TIMITSEG_DURATION_TABLE, ", ");
  ENUM(TIMITSEG_DURATION_LOGNORMAL, ", ");
  ENUM(TIMITSEG_MODEL_DEVICE_AUTO, ", ");
  ENUM(TIMITSEG_MODEL_DEVICE_CPU, ", ");
  ENUM(TIMITSEG_MODEL_DEVICE_CUDA, ", ");
  ENUM(TIMITSEG_SILENCE_EDGES_AUTO, ", ");
  ENUM(TIMITSEG_SILENCE_EDGES_ON, ", ");
  ENUM(TIMITSEG_SILENCE_EDGES_OFF, ", ");
  ENUM(TIMITSEG_BOUNDARIES_AUTO, ", ");
  ENUM(TIMITSEG_BOUNDARIES_VITERBI, ", ");
  ENUM(TIMITSEG_BOUNDARIES_POSTERIOR, ", ");
  ENUM(TIMITSEG_BOUNDARIES_POSTERIOR_FRAMES, ", ");
  printf("},\n\"defines\": {");
  ENUM(TIMITSEG_API_VERSION, "");
  ENUM(TIMITSEG_MAX_DIMS, ", ");
  ENUM(TIMITSEG_SEGMENT_POSTERIORS_MAX_ENTRIES, ", ");
  printf("}}\n");
  return 0;
}
