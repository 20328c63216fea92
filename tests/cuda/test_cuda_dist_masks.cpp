// Dropout masks of a rank's share on the GPU (docs/multigpu.md, EncoderBatch::
// share_rows): the cuDNN encoder with dropout on, run on a whole batch of 4
// utterances and on shares of it, gives each row of a share the output that
// row has in the whole batch (the encoder is per row, so only the masks could
// make them differ), and the shares' gradients sum to the whole batch's (the
// backward pass recomputes the same masks). Without share_rows a share's rows
// get other masks, so the comparison can fail. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/cuda/cuda_encoder.h"
#include "model/params.h"
#include "tests/cuda/test_stream.h"
#include "tests/support/gpu.h"

namespace timitseg::model {
namespace {

using testsupport::Stream;

ModelDims dims() {
  ModelDims d;
  d.input_dim = 11;
  d.hidden_dim = 32;
  d.num_layers = 3;  // dropout sites 0, 1, 2
  d.num_classes = 7;
  d.max_duration = 5;
  return d;
}

// A batch (whole or share): features [B][T][D] (padding frames garbage), dcum [B][T+1][C].
struct Rows {
  int B = 0, T = 0;
  std::vector<int32_t> lengths, share;  // share: the rows in the whole batch (empty: whole)
  int global_B = 0, global_T = 0;
  std::vector<float> features, dcum;
};

Rows whole_batch(const ModelDims& d, uint64_t seed) {
  Rows w;
  w.B = 4;
  w.lengths = {23, 7, 15, 19};
  w.T = 23;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  w.features.resize(size_t(w.B) * w.T * d.input_dim);
  for (int b = 0; b < w.B; ++b)
    for (int t = 0; t < w.T; ++t)
      for (int k = 0; k < d.input_dim; ++k)
        w.features[(size_t(b) * w.T + t) * d.input_dim + k] = t < w.lengths[b] ? u(rng) : 1e4f * u(rng);
  w.dcum.resize(size_t(w.B) * (w.T + 1) * d.num_classes);
  for (float& x : w.dcum) x = u(rng);
  return w;
}

// Rows `rows` of the whole batch, padded to their own longest length; with
// mark_share the share names its rows (else it is a batch of its own).
Rows share_of(const ModelDims& d, const Rows& w, const std::vector<int32_t>& rows, bool mark_share) {
  Rows s;
  s.B = static_cast<int>(rows.size());
  for (int32_t r : rows) s.T = std::max(s.T, w.lengths[r]);
  const int D = d.input_dim, C = d.num_classes;
  for (int32_t r : rows) {
    s.lengths.push_back(w.lengths[r]);
    for (int t = 0; t < s.T; ++t)
      for (int k = 0; k < D; ++k) s.features.push_back(w.features[(size_t(r) * w.T + t) * D + k]);
    for (int t = 0; t <= s.T; ++t)
      for (int c = 0; c < C; ++c) s.dcum.push_back(w.dcum[(size_t(r) * (w.T + 1) + t) * C + c]);
  }
  if (mark_share) {
    s.share = rows;
    s.global_B = w.B;
    s.global_T = w.T;
  }
  return s;
}

struct Out {
  std::vector<float> cum, grad;  // [B][T+1][C], the flat gradient (encoder tensors; CRF entries 0)
};

Out run(CudaEncoder& enc, const std::vector<float>& params, const Rows& r, const ForwardOptions& fo, cudaStream_t st) {
  const ModelDims& d = enc.dims();
  const size_t ncum = size_t(r.B) * (r.T + 1) * d.num_classes;
  void* s = st;
  Buffer dp(Memory::device, 0), df(Memory::device, 0), dl(Memory::device, 0), ddcum(Memory::device, 0);
  Buffer dcum(Memory::device, ncum * sizeof(float)), dgrad(Memory::device, 0);
  dp.upload(params, s);
  df.upload(r.features, s);
  dl.upload(r.lengths, s);
  ddcum.upload(r.dcum, s);
  dgrad.upload(std::vector<float>(params.size(), 0.f), s);
  EncoderBatch eb;
  eb.B = r.B;
  eb.T = r.T;
  eb.features = df.as<float>();
  eb.lengths = r.lengths.data();
  eb.lengths_dev = dl.as<int32_t>();
  if (!r.share.empty()) {
    eb.share_rows = r.share.data();
    eb.global_B = r.global_B;
    eb.global_T = r.global_T;
  }
  enc.forward(dp.as<float>(), eb, fo, dcum.as<float>());
  enc.backward(dp.as<float>(), ddcum.as<float>(), dgrad.as<float>());
  cuda::stream_synchronize(s);
  Out o;
  o.cum.resize(ncum);
  dcum.download(o.cum.data(), ncum * sizeof(float));
  o.grad.resize(params.size());
  dgrad.download(o.grad.data(), o.grad.size() * sizeof(float));
  return o;
}

// max over the share's rows and their frames 0..length of |share cum - whole cum|,
// relative to max |whole cum| over those entries.
double share_vs_whole(const ModelDims& d, const Rows& w, const Out& whole, const Rows& s, const Out& share) {
  const int C = d.num_classes;
  double worst = 0, scale = 0;
  for (int j = 0; j < s.B; ++j) {
    const int r = s.share.empty() ? -1 : s.share[j];
    const int g = r >= 0 ? r : j;
    for (int t = 0; t <= s.lengths[j]; ++t)
      for (int c = 0; c < C; ++c) {
        const double a = share.cum[(size_t(j) * (s.T + 1) + t) * C + c];
        const double b = whole.cum[(size_t(g) * (w.T + 1) + t) * C + c];
        worst = std::max(worst, std::isfinite(a) ? std::fabs(a - b) : INFINITY);
        scale = std::max(scale, std::fabs(b));
      }
  }
  return worst / std::max(scale, 1e-30);
}

// What every test here sets up: parameters drawn from `seed`, a stream, a
// CUDA encoder on it, and the forward options with dropout p at (mask_seed, step).
struct Rig {
  ModelDims d = dims();
  std::vector<float> params;
  Stream stream;
  std::unique_ptr<CudaEncoder> enc;
  ForwardOptions fo;
  Rig(uint64_t seed, double p, uint64_t mask_seed, uint64_t step) {
    std::mt19937_64 rng(seed);
    init_params(ParamLayout(d), rng, params);
    CudaEncoderOptions eo;
    eo.stream = stream.s;
    enc = make_cuda_encoder(d, eo);
    fo.dropout = p;
    fo.seed = mask_seed;
    fo.step = step;
  }
  Out run(const Rows& r) { return model::run(*enc, params, r, fo, stream.s); }
};

TEST(CudaDistMasks, ShareRowsGetTheWholeBatchMasks) {
  REQUIRE_GPU();
  Rig rig(3, 0.3, 1234, 7);
  const ModelDims& d = rig.d;
  const std::vector<float>& params = rig.params;
  const Rows w = whole_batch(d, 17);
  const Out whole = rig.run(w);

  const Rows a = share_of(d, w, {3, 1}, true);  // T = 19 < 23: the index must use the global T
  const Out oa = rig.run(a);
  const double rel = share_vs_whole(d, w, whole, a, oa);
  std::printf("[ masks ] share {3, 1} vs the whole batch's rows: max rel diff %.3g\n", rel);
  EXPECT_LT(rel, 1e-5);

  // The same rows as a batch of their own get other masks: the check above can fail.
  Rows alone = share_of(d, w, {3, 1}, false);
  const Out ol = rig.run(alone);
  Rows alone_named = alone;  // compared against the whole batch's rows 3 and 1
  alone_named.share = {3, 1};
  const double rel_alone = share_vs_whole(d, w, whole, alone_named, ol);
  std::printf("[ masks ] the same rows without share_rows: max rel diff %.3g\n", rel_alone);
  EXPECT_GT(rel_alone, 1e-2) << "dropout 0.3 with other masks must change the rows";

  // The other share; the two shares' gradients sum to the whole batch's (masks in backward).
  const Rows b = share_of(d, w, {0, 2}, true);
  const Out ob = rig.run(b);
  EXPECT_LT(share_vs_whole(d, w, whole, b, ob), 1e-5);
  double diff = 0, ref = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const double sum = double(oa.grad[i]) + double(ob.grad[i]);
    diff += (sum - whole.grad[i]) * (sum - whole.grad[i]);
    ref += double(whole.grad[i]) * whole.grad[i];
  }
  const double grel = std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
  std::printf("[ masks ] gradient of share {3, 1} + share {0, 2} vs the whole batch: rel %.3g\n", grel);
  EXPECT_LT(grel, 1e-5);
}

TEST(CudaDistMasks, WholeBatchNamedAsAShareOfItselfIsBitwiseTheWholeBatch) {
  REQUIRE_GPU();
  Rig rig(5, 0.25, 99, 2);
  const ModelDims& d = rig.d;
  const Rows w = whole_batch(d, 19);
  const Out whole = rig.run(w);
  const Out self = rig.run(share_of(d, w, {0, 1, 2, 3}, true));  // global index == flat index
  ASSERT_EQ(whole.cum.size(), self.cum.size());
  EXPECT_EQ(0, std::memcmp(whole.cum.data(), self.cum.data(), whole.cum.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(whole.grad.data(), self.grad.data(), whole.grad.size() * sizeof(float)));
}

TEST(CudaDistMasks, BadShareRowsAreRefused) {
  REQUIRE_GPU();
  Rig rig(5, 0.1, 0, 0);
  const ModelDims& d = rig.d;
  const Rows w = whole_batch(d, 21);
  Rows bad = share_of(d, w, {3, 1}, true);
  bad.share = {3, 4};  // row 4 of a batch of 4
  EXPECT_THROW(rig.run(bad), std::invalid_argument);
  bad.share = {1, 1};
  EXPECT_THROW(rig.run(bad), std::invalid_argument);
  bad.share = {3, 1};
  bad.global_T = 10;  // shorter than the share's T = 19
  EXPECT_THROW(rig.run(bad), std::invalid_argument);
}

}  // namespace
}  // namespace timitseg::model
