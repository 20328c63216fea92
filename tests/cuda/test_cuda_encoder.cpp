// The cuDNN encoder (model/cuda/cuda_encoder.h) against the CPU executor
// Network<float> (model/cpu/network.h) with dropout off: per-layer outputs,
// scores, cum, and the gradient of every parameter tensor by name. Also:
// batch invariance (padding never matters), determinism, dropout keys, a
// finite-difference check of the gradient with dropout on, the other cuDNN
// algos, inference mode and input validation. Every test skips (saying why)
// without a CUDA device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/cpu/network.h"
#include "model/cuda/cuda_encoder.h"
#include "model/cuda/lstm_fused.h"
#include "model/cuda/ops.h"
#include "model/params.h"
#include "tests/cuda/test_stream.h"

namespace timitseg::model {
namespace {

constexpr float kCrfSentinel = 777.f;  // CRF parameters' gradient entries: backward must leave them

using testsupport::Stream;

struct Problem {
  ModelDims dims;
  int B = 0, T = 0;
  std::vector<int32_t> lengths;  // [B]
  std::vector<float> params;     // flat layout
  std::vector<float> features;   // [B][T][D], padding frames large garbage
  std::vector<float> dcum;       // [B][T+1][C], every entry random (ignored ones included)
};

bool is_encoder_param(const std::string& name) {
  return name.rfind("encoder.", 0) == 0 || name.rfind("crf.projection.", 0) == 0;
}

std::vector<float> init_model_params(const ModelDims& d, uint64_t seed) {
  ParamLayout layout(d);
  std::mt19937_64 rng(seed);
  std::vector<float> p;
  init_params(layout, rng, p);
  for (const ParamInfo& info : layout.params()) {
    if (info.name.find("bias") != std::string::npos && is_encoder_param(info.name))
      for (size_t i = 0; i < info.size; ++i) p[info.offset + i] += static_cast<float>(0.4 * uniform01(rng) - 0.2);
    if (!is_encoder_param(info.name))  // CRF parameters: never read by the encoder
      for (size_t i = 0; i < info.size; ++i) p[info.offset + i] = static_cast<float>(uniform01(rng));
  }
  return p;
}

Problem make_problem(const ModelDims& d, int B, int T, std::vector<int32_t> lengths, uint64_t seed) {
  Problem pr;
  pr.dims = d;
  pr.B = B;
  pr.T = T;
  pr.lengths = std::move(lengths);
  pr.params = init_model_params(d, seed);
  std::mt19937_64 rng(seed * 7919 + 1);
  pr.features.resize(size_t(B) * T * d.input_dim);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < d.input_dim; ++k)
        pr.features[(size_t(b) * T + t) * d.input_dim + k] =
            t < pr.lengths[b] ? static_cast<float>(2.0 * uniform01(rng) - 1.0)
                              : static_cast<float>(1e4 * (2.0 * uniform01(rng) - 1.0));  // padding garbage
  pr.dcum.resize(size_t(B) * (T + 1) * d.num_classes);
  for (float& x : pr.dcum) x = static_cast<float>(2.0 * uniform01(rng) - 1.0);
  return pr;
}

struct CpuResult {
  Activations<float> act;
  std::vector<float> grad;
};

CpuResult run_cpu(const Problem& pr) {
  Network<float> net(pr.dims);
  BatchInput<float> in;
  in.B = pr.B;
  in.T = pr.T;
  in.features = pr.features;
  in.lengths = pr.lengths;
  CpuResult r;
  net.forward(pr.params, in, 0.0, nullptr, r.act);
  net.backward(pr.params, r.act, pr.dcum, r.grad, nullptr);
  return r;
}

struct GpuResult {
  std::vector<float> cum, grad, scores;
  std::vector<std::vector<float>> layer_out;  // [L][B][T][2H]
};

// Uploads, runs forward (+ backward when `backward`), downloads. Outputs are
// poisoned first (cum NaN, encoder grads NaN, CRF grads a sentinel) so that an
// entry that is not written shows up.
GpuResult run_gpu(CudaEncoder& enc, const Problem& pr, const ForwardOptions& fo, cudaStream_t stream,
                  bool backward = true, const std::vector<float>* params_override = nullptr) {
  const ModelDims& d = pr.dims;
  const ParamLayout layout(d);
  const std::vector<float>& params = params_override ? *params_override : pr.params;
  const size_t ncum = size_t(pr.B) * (pr.T + 1) * d.num_classes;
  void* s = stream;
  Buffer dp(Memory::device, params.size() * sizeof(float)), dfeat(Memory::device, pr.features.size() * sizeof(float));
  Buffer dlen(Memory::device, pr.lengths.size() * sizeof(int32_t)), ddcum(Memory::device, ncum * sizeof(float));
  Buffer dcum(Memory::device, ncum * sizeof(float)), dgrad(Memory::device, params.size() * sizeof(float));
  dp.upload(params, s);
  dfeat.upload(pr.features, s);
  dlen.upload(pr.lengths, s);
  ddcum.upload(pr.dcum, s);
  dcum.upload(std::vector<float>(ncum, std::numeric_limits<float>::quiet_NaN()), s);
  std::vector<float> g0(params.size(), std::numeric_limits<float>::quiet_NaN());
  for (const ParamInfo& info : layout.params())
    if (!is_encoder_param(info.name)) std::fill_n(g0.begin() + info.offset, info.size, kCrfSentinel);
  dgrad.upload(g0, s);

  EncoderBatch batch;
  batch.B = pr.B;
  batch.T = pr.T;
  batch.features = dfeat.as<float>();
  batch.lengths = pr.lengths.data();
  batch.lengths_dev = dlen.as<int32_t>();
  enc.forward(dp.as<float>(), batch, fo, dcum.as<float>());
  if (backward) enc.backward(dp.as<float>(), ddcum.as<float>(), dgrad.as<float>());
  cuda::stream_synchronize(s);
  GpuResult r;
  r.cum.resize(ncum);
  dcum.download(r.cum.data(), ncum * sizeof(float));
  if (backward) {
    r.grad.resize(params.size());
    dgrad.download(r.grad.data(), r.grad.size() * sizeof(float));
  }
  const size_t BT = size_t(pr.B) * pr.T;
  r.scores.resize(BT * d.num_classes);
  cuda::copy_to_host(r.scores.data(), enc.scores(), r.scores.size() * sizeof(float));
  for (int k = 0; k < d.num_layers; ++k) {
    r.layer_out.emplace_back(BT * d.hidden_dim);
    cuda::copy_to_host(r.layer_out.back().data(), enc.layer_output(k), BT * d.hidden_dim * sizeof(float));
  }
  return r;
}

// Row of frame t of utterance b in the CPU executor's activations: plain
// time-major (t*B + b) for scores, slice-blocked for the layer outputs
// (model/cpu/network.h: slices of kSliceRows utterances, row b0*T + t*nb + (b-b0)).
int64_t cpu_row(int B, int T, int b, int t, bool slice_blocked) {
  if (!slice_blocked) return int64_t(t) * B + b;
  const int k = Network<float>::kSliceRows;
  const int b0 = b / k * k, nb = std::min(k, B - b0);
  return int64_t(b0) * T + int64_t(t) * nb + (b - b0);
}

// max |gpu - cpu| / max|cpu| over a [B][T][cols] GPU tensor vs the CPU one (rows by cpu_row).
double batch_major_rel_err(const std::vector<float>& gpu, const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>& cpu,
                           int B, int T, int cols, std::string* where, bool slice_blocked = false) {
  double mx = 0, worst = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < cols; ++c) mx = std::max(mx, std::fabs(double(cpu(cpu_row(B, T, b, t, slice_blocked), c))));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < cols; ++c) {
        const double g = gpu[(size_t(b) * T + t) * cols + c], h = cpu(cpu_row(B, T, b, t, slice_blocked), c);
        const double e = std::isfinite(g) ? std::fabs(g - h) : std::numeric_limits<double>::infinity();
        if (e > worst || (worst == 0 && !std::isfinite(e))) {
          worst = e;
          std::ostringstream o;
          o << "[b=" << b << "][t=" << t << "][c=" << c << "] gpu " << g << " cpu " << h;
          *where = o.str();
        }
      }
  return worst / std::max(mx, 1e-30);
}

// Per-tensor ||g_gpu - g_cpu|| / max(||g_cpu||, 1e-12) for every encoder tensor, printed.
struct GradReport {
  double worst = 0;
  std::string worst_name, table;
};
GradReport compare_grads(const ModelDims& d, const std::vector<float>& gpu, const std::vector<float>& cpu) {
  GradReport r;
  std::ostringstream table;
  const ParamLayout layout(d);  // (a temporary's params() would dangle in the loop)
  for (const ParamInfo& info : layout.params()) {
    if (!is_encoder_param(info.name)) continue;
    double num = 0, den = 0;
    for (size_t i = 0; i < info.size; ++i) {
      const double g = gpu[info.offset + i], c = cpu[info.offset + i];
      num += (g - c) * (g - c);
      den += c * c;
    }
    // crf.projection.bias: its gradient is exactly 0 in exact arithmetic (the
    // centered cumsum removes a per-class constant), so both sides hold only
    // rounding noise; its error is measured against the projection weight's
    // gradient instead.
    double scale = std::sqrt(den);
    if (info.name == "crf.projection.bias") {
      const ParamInfo& w = layout.get("crf.projection.weight");
      double wn = 0;
      for (size_t i = 0; i < w.size; ++i) wn += double(cpu[w.offset + i]) * cpu[w.offset + i];
      scale = std::max(scale, std::sqrt(wn));
    }
    double rel = std::sqrt(num) / std::max(scale, 1e-12);
    if (!std::isfinite(rel)) rel = std::numeric_limits<double>::infinity();
    table << "  " << info.name << ": rel err " << rel << " (||cpu|| " << std::sqrt(den) << ")\n";
    if (rel > r.worst || r.worst_name.empty()) {
      r.worst = rel;
      r.worst_name = info.name;
    }
  }
  r.table = table.str();
  return r;
}

void expect_crf_grads_untouched(const ModelDims& d, const std::vector<float>& grad) {
  const ParamLayout layout(d);  // (a temporary's params() would dangle in the loop)
  for (const ParamInfo& info : layout.params()) {
    if (is_encoder_param(info.name)) continue;
    for (size_t i = 0; i < info.size; ++i)
      if (grad[info.offset + i] != kCrfSentinel) {
        ADD_FAILURE() << "backward wrote " << info.name << "[" << i << "] (CRF parameters must be left untouched)";
        break;
      }
  }
}

// Full comparison against the CPU executor: layers, scores, cum, gradients.
void compare_with_cpu(const Problem& pr, const std::string& algo) {
  Stream stream;
  CudaEncoderOptions opt;
  opt.rnn_algo = config::enum_value<config::RnnAlgo>(algo, "algo");
  opt.stream = stream.s;
  auto enc = make_cuda_encoder(pr.dims, opt);
  const CpuResult cpu = run_cpu(pr);
  const GpuResult gpu = run_gpu(*enc, pr, ForwardOptions{}, stream.s);
  std::cout << "[ info     ] " << enc->describe() << "\n";
  const ModelDims& d = pr.dims;

  // per layer first: the first one that diverges is the one to look at
  for (int k = 0; k < d.num_layers; ++k) {
    std::string where;
    const double e = batch_major_rel_err(gpu.layer_out[k], cpu.act.layer_out[k], pr.B, pr.T, d.hidden_dim, &where,
                                         /*slice_blocked=*/true);
    std::cout << "[ info     ] lstm layer " << k << " output: max rel err " << e << " at " << where << "\n";
    EXPECT_LT(e, 1e-4) << "lstm layer " << k << " output differs from the CPU, worst " << where;
  }
  {
    std::string where;
    const double e = batch_major_rel_err(gpu.scores, cpu.act.scores, pr.B, pr.T, d.num_classes, &where);
    EXPECT_LT(e, 1e-4) << "projection scores differ from the CPU, worst " << where;
  }
  double mx = 0;
  for (float v : cpu.act.cum) mx = std::max(mx, std::fabs(double(v)));
  size_t bad = 0;
  for (size_t i = 0; i < cpu.act.cum.size(); ++i) {
    const double e = std::fabs(double(gpu.cum[i]) - cpu.act.cum[i]);
    if (!(e <= 1e-4 * mx) && bad++ < 5) {
      const size_t C = d.num_classes, T1 = pr.T + 1;
      ADD_FAILURE() << "cum[b=" << i / (T1 * C) << "][t=" << (i / C) % T1 << "][c=" << i % C << "] gpu " << gpu.cum[i]
                    << " cpu " << cpu.act.cum[i] << " (max|cum| " << mx << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << "cum entries off by more than 1e-4 * max|cum|";

  const GradReport rep = compare_grads(d, gpu.grad, cpu.grad);
  std::cout << "[ info     ] worst gradient tensor " << rep.worst_name << ": rel err " << rep.worst << "\n";
  EXPECT_LT(rep.worst, 1e-3) << "worst gradient tensor " << rep.worst_name << "\n" << rep.table;
  expect_crf_grads_untouched(d, gpu.grad);
}

ModelDims tiny_encoder_dims() {
  ModelDims d;
  d.input_dim = 13;
  d.hidden_dim = 16;
  d.num_layers = 2;
  d.num_classes = 7;
  d.max_duration = 4;
  return d;
}

ModelDims recipe_dims() {
  ModelDims d;
  d.input_dim = 39;
  d.hidden_dim = 256;
  d.num_layers = 3;
  d.num_classes = 39;
  d.max_duration = 30;
  return d;
}

Problem small_problem(uint64_t seed = 11) { return make_problem(tiny_encoder_dims(), 5, 37, {37, 1, 20, 33, 9}, seed); }
Problem recipe_problem(uint64_t seed = 12) {
  return make_problem(recipe_dims(), 8, 300, {300, 1, 157, 299, 42, 250, 2, 120}, seed);
}

TEST(CudaEncoder, SmallMatchesCpu) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  compare_with_cpu(small_problem(), "standard");
}

TEST(CudaEncoder, RecipeSizeMatchesCpu) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  compare_with_cpu(recipe_problem(), "standard");
}

// The persistent algos match the CPU too where cuDNN accepts them; a refusal
// must be the one clear error naming the algo (reported, not a failure).
TEST(CudaEncoder, PersistentAlgosMatchCpuOrRefuseClearly) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  for (const char* algo : {"persist_static", "persist_dynamic"}) {
    for (int which = 0; which < 2; ++which) {
      SCOPED_TRACE(std::string(algo) + (which ? " recipe size" : " small"));
      try {
        compare_with_cpu(which ? recipe_problem() : small_problem(), algo);
      } catch (const std::runtime_error& e) {
        const std::string msg = e.what();
        if (msg.find("cuDNN refused rnn_algo '" + std::string(algo) + "'") == std::string::npos) throw;
        std::cout << "[ info     ] " << msg << "\n";
      }
    }
  }
}

// rnn_algo "fused" (model/cuda/lstm_fused: the recurrence in one persistent
// kernel per layer) against the CPU, at the recipe size (H = 128) and with
// H = 64; skipped where the kernel cannot run (no Hopper GPU).
TEST(CudaEncoder, FusedMatchesCpu) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  std::string why;
  if (!fused::supported(128, &why)) GTEST_SKIP() << "fused LSTM kernel not supported here: " << why;
  compare_with_cpu(recipe_problem(), "fused");
  ModelDims d = recipe_dims();
  d.hidden_dim = 128;
  d.num_layers = 2;
  compare_with_cpu(make_problem(d, 11, 90, {90, 1, 45, 89, 3, 60, 77, 12, 90, 30, 2}, 33), "fused");
}

// An utterance gives the same cum rows and gradient contribution whatever
// batch it sits in (other lengths, other T, large garbage in padding frames).
TEST(CudaEncoder, PaddingAndBatchDoNotMatter) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const ModelDims d = tiny_encoder_dims();
  const int C = d.num_classes, D = d.input_dim, Lu = 7;
  Problem a = make_problem(d, 3, 20, {20, Lu, 13}, 21);  // utterance u = row 1
  Problem b = make_problem(d, 4, 31, {31, 5, Lu, 2}, 22);  // u = row 2
  b.params = a.params;
  for (int t = 0; t < Lu; ++t)
    for (int k = 0; k < D; ++k) b.features[(size_t(2) * b.T + t) * D + k] = a.features[(size_t(1) * a.T + t) * D + k];
  // d loss / d cum: only u's rows, the same in both batches
  std::fill(a.dcum.begin(), a.dcum.end(), 0.f);
  std::fill(b.dcum.begin(), b.dcum.end(), 0.f);
  std::mt19937_64 rng(5);
  for (int t = 0; t <= Lu; ++t)
    for (int c = 0; c < C; ++c)
      a.dcum[(size_t(1) * (a.T + 1) + t) * C + c] = b.dcum[(size_t(2) * (b.T + 1) + t) * C + c] =
          static_cast<float>(2.0 * uniform01(rng) - 1.0);
  Stream stream;
  CudaEncoderOptions opt;
  opt.stream = stream.s;
  auto enc = make_cuda_encoder(d, opt);
  const GpuResult ra = run_gpu(*enc, a, ForwardOptions{}, stream.s);
  const GpuResult rb = run_gpu(*enc, b, ForwardOptions{}, stream.s);
  double mx = 0;
  for (int t = 0; t <= Lu; ++t)
    for (int c = 0; c < C; ++c) mx = std::max(mx, std::fabs(double(ra.cum[(size_t(1) * (a.T + 1) + t) * C + c])));
  for (int t = 0; t <= b.T; ++t)
    for (int c = 0; c < C; ++c) {
      const double vb = rb.cum[(size_t(2) * (b.T + 1) + t) * C + c];
      const double va = t <= a.T ? ra.cum[(size_t(1) * (a.T + 1) + t) * C + c] : 0.0;
      EXPECT_NEAR(vb, va, 1e-5 * mx) << "cum row t=" << t << " c=" << c << " of the utterance";
      if (t > Lu) EXPECT_EQ(vb, 0.0) << "cum rows past the length must be 0";
    }
  const GradReport rep = compare_grads(d, rb.grad, ra.grad);
  EXPECT_LT(rep.worst, 1e-5) << "gradient contribution depends on the batch; worst " << rep.worst_name << "\n"
                             << rep.table;
}

// Same inputs -> bitwise identical cum and gradients (same encoder twice and a
// second encoder), with dropout off and on.
TEST(CudaEncoder, Deterministic) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const Problem pr = recipe_problem(31);
  const ParamLayout layout(pr.dims);
  Stream stream;
  CudaEncoderOptions opt;
  opt.stream = stream.s;
  auto e1 = make_cuda_encoder(pr.dims, opt);
  auto e2 = make_cuda_encoder(pr.dims, opt);
  for (double p : {0.0, 0.2}) {
    ForwardOptions fo;
    fo.dropout = p;
    fo.seed = 99;
    fo.step = 3;
    const GpuResult r1 = run_gpu(*e1, pr, fo, stream.s);
    const GpuResult r2 = run_gpu(*e1, pr, fo, stream.s);
    const GpuResult r3 = run_gpu(*e2, pr, fo, stream.s);
    for (const GpuResult* r : {&r2, &r3}) {
      const char* who = r == &r2 ? "same encoder" : "second encoder";
      EXPECT_EQ(std::memcmp(r1.cum.data(), r->cum.data(), r1.cum.size() * sizeof(float)), 0)
          << "cum differs between two runs (" << who << ", dropout " << p << ")";
      size_t first = r1.grad.size();
      for (size_t i = 0; i < r1.grad.size() && first == r1.grad.size(); ++i)
        if (std::memcmp(&r1.grad[i], &r->grad[i], sizeof(float))) first = i;
      if (first != r1.grad.size()) {
        std::string name;
        for (const ParamInfo& info : layout.params())
          if (first >= info.offset && first < info.offset + info.size) name = info.name;
        ADD_FAILURE() << "gradients differ between two runs (" << who << ", dropout " << p << "), first at " << name;
      }
    }
  }
}

// Dropout: the key (seed, step) decides the mask; the same key gives bitwise
// the same outputs, another step another mask; p = 0 is no dropout.
TEST(CudaEncoder, DropoutKeys) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const Problem pr = small_problem(41);
  Stream stream;
  CudaEncoderOptions opt;
  opt.stream = stream.s;
  auto enc = make_cuda_encoder(pr.dims, opt);
  ForwardOptions fo;
  fo.dropout = 0.3;
  fo.seed = 5;
  fo.step = 10;
  const GpuResult r1 = run_gpu(*enc, pr, fo, stream.s);
  const GpuResult r2 = run_gpu(*enc, pr, fo, stream.s);
  EXPECT_EQ(std::memcmp(r1.cum.data(), r2.cum.data(), r1.cum.size() * sizeof(float)), 0) << "same (seed, step)";
  EXPECT_EQ(std::memcmp(r1.grad.data(), r2.grad.data(), r1.grad.size() * sizeof(float)), 0) << "same (seed, step)";
  fo.step = 11;
  const GpuResult r3 = run_gpu(*enc, pr, fo, stream.s);
  size_t differ = 0, nonzero = 0;
  for (size_t i = 0; i < r1.cum.size(); ++i) {
    differ += r1.cum[i] != r3.cum[i];
    nonzero += r1.cum[i] != 0.f;
  }
  EXPECT_GT(differ, nonzero / 2) << "another step must give another mask";
  const GpuResult off = run_gpu(*enc, pr, ForwardOptions{}, stream.s);
  differ = 0;
  for (size_t i = 0; i < r1.cum.size(); ++i) differ += r1.cum[i] != off.cum[i];
  EXPECT_GT(differ, nonzero / 2) << "dropout 0.3 must change the output";
  // the layer outputs (before dropout) are finite and 0 in padding rows
  Buffer count(Memory::device, sizeof(unsigned long long));
  const size_t BT = size_t(pr.B) * pr.T;
  for (int k = 0; k < pr.dims.num_layers; ++k) {
    gpu::count_nonfinite(enc->layer_output(k), BT * pr.dims.hidden_dim, count.as<unsigned long long>(), stream.s);
    unsigned long long n = 1;
    count.download(&n, sizeof(n), stream.s);
    cuda::stream_synchronize(stream.s);
    EXPECT_EQ(n, 0u) << "layer " << k;
    for (int b = 0; b < pr.B; ++b)
      for (int t = pr.lengths[b]; t < pr.T; ++t)
        for (int c = 0; c < pr.dims.hidden_dim; ++c)
          ASSERT_EQ(off.layer_out[k][(size_t(b) * pr.T + t) * pr.dims.hidden_dim + c], 0.f)
              << "layer " << k << " padding row b=" << b << " t=" << t;
  }
}

// With dropout on (so the masks in backward must be the forward's), the
// gradient matches central differences of loss = sum dcum * cum along a random
// direction of the encoder parameters. float32 on the device: 2% tolerance; a
// wrong mask in backward is off by O(1).
TEST(CudaEncoder, GradientMatchesFiniteDifferencesWithDropout) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const Problem pr = small_problem(51);
  const ParamLayout layout(pr.dims);
  Stream stream;
  CudaEncoderOptions opt;
  opt.stream = stream.s;
  auto enc = make_cuda_encoder(pr.dims, opt);
  std::mt19937_64 rng(77);
  std::vector<float> dir(pr.params.size(), 0.f);
  for (const ParamInfo& info : layout.params())
    if (is_encoder_param(info.name))
      for (size_t i = 0; i < info.size; ++i) dir[info.offset + i] = static_cast<float>(0.02 * uniform01(rng) - 0.01);
  auto loss = [&](const GpuResult& r) {
    double s = 0;
    for (int b = 0; b < pr.B; ++b)  // rows 1..L of cum are the ones that depend on the parameters
      for (int t = 1; t <= pr.lengths[b]; ++t)
        for (int c = 0; c < pr.dims.num_classes; ++c) {
          const size_t i = (size_t(b) * (pr.T + 1) + t) * pr.dims.num_classes + c;
          s += double(pr.dcum[i]) * r.cum[i];
        }
    return s;
  };
  for (double p : {0.0, 0.4}) {
    ForwardOptions fo;
    fo.dropout = p;
    fo.seed = 3;
    fo.step = 4;
    const GpuResult g = run_gpu(*enc, pr, fo, stream.s);
    double analytic = 0;
    for (size_t i = 0; i < dir.size(); ++i) if (dir[i] != 0.f) analytic += double(g.grad[i]) * dir[i];  // CRF entries hold the sentinel
    std::vector<float> plus = pr.params, minus = pr.params;
    for (size_t i = 0; i < dir.size(); ++i) {
      plus[i] += dir[i];
      minus[i] -= dir[i];
    }
    const double lp = loss(run_gpu(*enc, pr, fo, stream.s, false, &plus));
    const double lm = loss(run_gpu(*enc, pr, fo, stream.s, false, &minus));
    const double numeric = (lp - lm) / 2;
    std::cout << "[ info     ] dropout " << p << ": directional derivative " << analytic << ", central difference "
              << numeric << "\n";
    EXPECT_NEAR(analytic, numeric, 2e-2 * std::max(std::fabs(numeric), 1e-3)) << "dropout " << p;
  }
}

// set_training(false) with dropout 0: inference mode gives the same cum; a
// backward after it is refused clearly. Bad inputs are refused before any work.
TEST(CudaEncoder, InferenceModeAndValidation) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const Problem pr = small_problem(61);
  Stream stream;
  CudaEncoderOptions opt;
  opt.stream = stream.s;
  auto enc = make_cuda_encoder(pr.dims, opt);
  const GpuResult train = run_gpu(*enc, pr, ForwardOptions{}, stream.s, false);
  enc->set_training(false);
  EXPECT_FALSE(enc->training());
  const GpuResult infer = run_gpu(*enc, pr, ForwardOptions{}, stream.s, false);
  const CpuResult cpu = run_cpu(pr);
  double mx = 0;
  for (float v : cpu.act.cum) mx = std::max(mx, std::fabs(double(v)));
  for (size_t i = 0; i < cpu.act.cum.size(); ++i) {
    ASSERT_NEAR(infer.cum[i], cpu.act.cum[i], 1e-4 * mx) << "inference-mode cum[" << i << "]";
    ASSERT_NEAR(infer.cum[i], train.cum[i], 1e-5 * mx) << "inference vs training mode cum[" << i << "]";
  }
  EXPECT_THROW(run_gpu(*enc, pr, ForwardOptions{}, stream.s, true), std::logic_error);
  enc->set_training(true);

  Problem bad = pr;
  bad.lengths[2] = pr.T + 1;
  EXPECT_THROW(run_gpu(*enc, bad, ForwardOptions{}, stream.s, false), std::invalid_argument);
  bad.lengths[2] = 0;
  EXPECT_THROW(run_gpu(*enc, bad, ForwardOptions{}, stream.s, false), std::invalid_argument);
  CudaEncoderOptions wrong;
  wrong.rnn_algo = config::RnnAlgo::automatic;  // unresolved: the encoder refuses it
  EXPECT_THROW(make_cuda_encoder(pr.dims, wrong), std::invalid_argument);
  // backward without a forward of this encoder
  auto fresh = make_cuda_encoder(pr.dims, opt);
  float dummy = 0.f;
  EXPECT_THROW(fresh->backward(&dummy, &dummy, &dummy), std::logic_error);
}

}  // namespace
}  // namespace timitseg::model
