/* The C API from C (C99, -pedantic): the header compiles as C and the shared
 * library links and runs. One frame, two labels, parameters 0: exactly two
 * segmentations of score 0, so log Z = log 2; a bad length is
 * TIMITSEG_ERR_LENGTH with a message; the deferred nll (gold label 0: NLL =
 * log 2) and its check. Exit 0 when all holds. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "timitseg.h"

static timitseg_tensor tensor(void* data, int dtype, int ndim, const int64_t* shape) {
  timitseg_tensor t;
  int64_t stride = 1;
  int i;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device = TIMITSEG_DEVICE_CPU;
  t.ndim = ndim;
  for (i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

int main(void) {
  timitseg_crf_params p = timitseg_crf_default_params();
  timitseg_crf* h = NULL;
  float x[2] = {0.5f, -0.5f};
  int32_t len[1] = {1};
  double lz[1] = {0.0};
  const int64_t sx[3] = {1, 1, 2}, s1[1] = {1};
  timitseg_crf_batch in;
  timitseg_crf_gold gold;
  int32_t gold_labels[1] = {0};
  const int64_t s11[2] = {1, 1};
  uint64_t ticket = 0;
  int rerun = -1;
  timitseg_tensor out;
  int rc;
  if (timitseg_api_version() != TIMITSEG_API_VERSION) return 1;
  p.num_labels = 2;
  p.max_duration = 1;
  p.backend = TIMITSEG_BACKEND_CPU;
  if (timitseg_crf_create(&p, &h) != TIMITSEG_OK) {
    fprintf(stderr, "%s\n", timitseg_last_error());
    return 2;
  }
  memset(&in, 0, sizeof in);
  in.scores = tensor(x, TIMITSEG_F32, 3, sx);
  in.lengths = tensor(len, TIMITSEG_I32, 1, s1);
  out = tensor(lz, TIMITSEG_F64, 1, s1);
  rc = timitseg_crf_log_partition(h, &in, &out);
  if (rc != TIMITSEG_OK || fabs(lz[0] - log(2.0)) > 1e-6) {
    fprintf(stderr, "log Z %.9f (status %d: %s), expected log 2\n", lz[0], rc, timitseg_last_error());
    return 3;
  }
  len[0] = 2;
  rc = timitseg_crf_log_partition(h, &in, &out);
  if (rc != TIMITSEG_ERR_LENGTH || strstr(timitseg_last_error(), "lengths[0] = 2") == NULL) {
    fprintf(stderr, "status %d (%s), expected TIMITSEG_ERR_LENGTH\n", rc, timitseg_last_error());
    return 4;
  }
  len[0] = 1;
  gold_labels[0] = 0;
  memset(&gold, 0, sizeof gold);
  gold.labels = tensor(gold_labels, TIMITSEG_I32, 2, s11);
  lz[0] = 0.0;
  if (timitseg_crf_nll_deferred(h, &in, &gold, 1.0, &out, NULL, &ticket) != TIMITSEG_OK ||
      timitseg_crf_check(h, ticket, &rerun) != TIMITSEG_OK || ticket != 1 || rerun != 0 ||
      fabs(lz[0] - log(2.0)) > 1e-6) {
    fprintf(stderr, "deferred nll %.9f (ticket %llu, rerun %d: %s), expected log 2\n", lz[0],
            (unsigned long long)ticket, rerun, timitseg_last_error());
    return 5;
  }
  timitseg_crf_free(h);
  printf("C API from C: log Z = %.6f = log 2; bad length: %s\n", log(2.0), timitseg_status_name(rc));
  return 0;
}
