// GPU numeric checks (issue 9, model/numerics.h, model/cuda/numerics_taps.h):
//  - the device stats kernels against tensor_stats() on the host (the oracle),
//    with planted NaN/Inf, strided tensors, float64 and an all-NaN tensor;
//  - a fault planted at every layer and pass, at step 2, through the cuda
//    executor's train_step with check_numerics: the NumericsError names exactly
//    that layer and pass, step 1 passes, and nothing is updated (rnn_algo
//    standard and, where the kernel runs, fused);
//  - check off: no slot work; check on: exactly the documented number of taps;
//  - deterministic: two runs with one seed give bitwise identical state
//    (dropout 0.3), with and without the checks; persist_* is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "model/cuda/cuda_executor.h"
#include "model/cuda/lstm_fused.h"
#include "model/cuda/numerics_taps.h"
#include "model/cuda/ops.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/support/model_problems.h"
#include "tests/support/gpu.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

void expect_same_stats(const TensorStats& got, const TensorStats& want, const std::string& what) {
  EXPECT_EQ(got.nan, want.nan) << what;
  EXPECT_EQ(got.inf, want.inf) << what;
  EXPECT_EQ(got.finite, want.finite) << what;
  EXPECT_EQ(got.min, want.min) << what;  // exact: min/max of the same values
  EXPECT_EQ(got.max, want.max) << what;
}

TensorStats to_stats(const gpu::StatsSlot& s) {
  TensorStats t;
  t.nan = static_cast<int64_t>(s.nan);
  t.inf = static_cast<int64_t>(s.inf);
  t.finite = static_cast<int64_t>(s.finite);
  t.min = s.min;
  t.max = s.max;
  return t;
}

// ModelDims with H = 64 per direction, so that the fused kernel can run.
ModelDims dims64() {
  ModelDims d;
  d.input_dim = 13;
  d.hidden_dim = 128;
  d.num_layers = 3;
  d.num_classes = 9;
  d.max_duration = 6;
  return d;
}

Batch random_batch(const ModelDims& d, int B, int T, uint64_t seed) {
  return testsupport::random_model_batch(d, B, T, seed);
}
std::vector<float> init(const ModelDims& d, uint64_t seed) { return testsupport::random_model_params(d, seed); }

StepOptions step_options(int64_t step, bool check) {
  StepOptions o;
  o.lr = 1e-3;
  o.dropout = 0.2;
  o.clip_norm = 5.0;
  o.crf_reg = 1e-3;
  o.check_numerics = check;
  o.step = step;
  o.seed = 7;
  return o;
}

std::vector<std::string> algos_here(const ModelDims& d) {
  std::vector<std::string> a{"standard"};
  std::string why;
  if (fused::supported(d.per_direction(), &why))
    a.push_back("fused");
  else
    std::printf("[ numerics ] fused LSTM kernel not supported here (%s): standard only\n", why.c_str());
  return a;
}

}  // namespace

// ---- the stats kernels ----------------------------------------------------------------

TEST(GpuNumerics, StatsKernelsMatchTheHostOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n01(0.f, 3.f);
  // sizes: below one chunk, not a multiple of the chunk count, several chunks per block
  for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(1 << 20) + 13}) {
    std::vector<float> x(n);
    for (float& v : x) v = n01(rng);
    if (n >= 7) {
      x[0] = kNaN;
      x[n - 1] = kInf;
      x[n / 2] = -kInf;
      x[n / 3] = kNaN;
    }
    std::vector<double> xd(x.begin(), x.end());
    Buffer dx(Memory::device, 0), dd(Memory::device, 0);
    dx.upload(x);
    dd.upload(xd);
    // contiguous float, contiguous double, then strided views (cols < and > the block size)
    std::vector<gpu::StatsEntry> e = {{dx.data(), 1, static_cast<int64_t>(n), static_cast<int64_t>(n), 0, 0},
                                      {dd.data(), 1, static_cast<int64_t>(n), static_cast<int64_t>(n), 1, 1}};
    std::vector<TensorStats> want = {tensor_stats(x.data(), n), tensor_stats(xd.data(), n)};
    for (int64_t cols : {int64_t(5), int64_t(300)}) {
      const int64_t stride = cols + 2 + cols / 3, rows = static_cast<int64_t>(n) / stride;
      if (rows < 1) continue;
      e.push_back({dx.data(), rows, cols, stride, 0, static_cast<int>(e.size())});
      std::vector<float> view;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) view.push_back(x[r * stride + c]);
      want.push_back(tensor_stats(view.data(), view.size()));
    }
    const int nslots = static_cast<int>(e.size());
    Buffer partials(Memory::device, size_t(nslots) * gpu::kStatsChunks * sizeof(gpu::StatsSlot));
    Buffer slots(Memory::device, size_t(nslots) * sizeof(gpu::StatsSlot));
    gpu::stats_partials(e.data(), nslots, partials.as<gpu::StatsSlot>(), nullptr);
    gpu::stats_final(partials.as<gpu::StatsSlot>(), 0, nslots, slots.as<gpu::StatsSlot>(), nullptr);
    std::vector<gpu::StatsSlot> got(nslots);
    slots.download(got.data(), got.size() * sizeof(gpu::StatsSlot));
    for (int i = 0; i < nslots; ++i)
      expect_same_stats(to_stats(got[i]), want[i], "n=" + std::to_string(n) + " entry " + std::to_string(i));
    if (n >= 7) {
      EXPECT_EQ(got[0].nan, 2u);
      EXPECT_EQ(got[0].inf, 2u);
    }
  }
  // all NaN: no finite value, min/max stay +inf/-inf
  std::vector<float> nan(4099, kNaN);
  Buffer dn(Memory::device, 0);
  dn.upload(nan);
  Buffer partials(Memory::device, gpu::kStatsChunks * sizeof(gpu::StatsSlot)), slot(Memory::device, sizeof(gpu::StatsSlot));
  gpu::StatsEntry e{dn.data(), 1, 4099, 4099, 0, 0};
  gpu::stats_partials(&e, 1, partials.as<gpu::StatsSlot>(), nullptr);
  gpu::stats_final(partials.as<gpu::StatsSlot>(), 0, 1, slot.as<gpu::StatsSlot>(), nullptr);
  gpu::StatsSlot s;
  slot.download(&s, sizeof(s));
  expect_same_stats(to_stats(s), tensor_stats(nan.data(), nan.size()), "all NaN");
  EXPECT_EQ(s.nan, 4099u);
  EXPECT_EQ(s.finite, 0u);
}

TEST(GpuNumerics, DeviceNumericsReportsTheFirstBadSlotAndPlantsFaults) {
  REQUIRE_GPU();
  std::vector<float> a(300, 1.f), b(500, 2.f), c(70, -1.f);
  b[17] = kInf;
  c[3] = kNaN;
  Buffer da(Memory::device, 0), db(Memory::device, 0), dc(Memory::device, 0);
  da.upload(a);
  db.upload(b);
  dc.upload(c);
  gpu::DeviceNumerics num(8);
  using gpu::TapTensor;
  // check on, no fault: b (the first bad one in tap order) is reported, with its stats
  num.begin_step(true, FaultSpec{}, 1, nullptr);
  num.tap("input", Pass::forward, {TapTensor::f32("a", da.as<float>(), a.size())});
  num.tap("projection", Pass::backward,
          {TapTensor::f32("b", db.as<float>(), b.size()), TapTensor::f32("c", dc.as<float>(), c.size())});
  EXPECT_EQ(num.slots(), 3);
  num.queue_readback();
  cuda::stream_synchronize(nullptr);
  auto hit = num.first_hit();
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->layer, "projection");
  EXPECT_EQ(hit->pass, Pass::backward);
  EXPECT_EQ(hit->tensor, "b");
  expect_same_stats(hit->stats, tensor_stats(b.data(), b.size()), "slot b");
  expect_same_stats(num.stats(2), tensor_stats(c.data(), c.size()), "slot c");
  // check off, fault at (input, forward, step 4): planted into element 0 of a, no slot
  FaultSpec f = FaultSpec::parse("layer=input,pass=forward,step=4,value=inf", 1);
  num.begin_step(false, f, 3, nullptr);
  EXPECT_FALSE(num.active());
  num.tap("input", Pass::forward, {TapTensor::f32("a", da.as<float>(), a.size())});
  num.begin_step(false, f, 4, nullptr);
  EXPECT_TRUE(num.active());
  num.tap("input", Pass::backward, {TapTensor::f32("a", da.as<float>(), a.size())});  // other pass: nothing
  num.tap("input", Pass::forward, {TapTensor::f32("a", da.as<float>(), a.size())});
  EXPECT_EQ(num.slots(), 0);
  std::vector<float> back(a.size());
  da.download(back.data(), back.size() * sizeof(float));
  EXPECT_EQ(back[0], kInf);
  for (size_t i = 1; i < back.size(); ++i) ASSERT_EQ(back[i], 1.f) << i;
}

// ---- faults through the executor ---------------------------------------------------------

TEST(GpuNumerics, EveryLayerAndPassIsNamedAtTheFaultStep) {
  REQUIRE_GPU();
  const ModelDims d = dims64();
  const std::vector<float> params = init(d, 5);
  AdamW opt0;
  opt0.reset(params.size());
  const Batch b1 = random_batch(d, 4, 23, 1), b2 = random_batch(d, 4, 19, 2);
  for (const std::string& algo : algos_here(d)) {
    ExecutorOptions xo;
    xo.crf_backend = crf::BackendKind::cuda;
    xo.rnn_algo = enum_value<RnnAlgo>(algo, "algo");
    auto gpu = make_executor(Device::cuda, d, xo);
    int cases = 0;
    for (const std::string& layer : numerics_layers(d.num_layers)) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        if (layer == "optimizer" && pass == Pass::forward) continue;  // the optimizer has backward taps only
        SCOPED_TRACE(algo + ": layer " + layer + ", " + pass_name(pass) + " pass");
        const bool inf = (cases++ % 2) == 1;
        const FaultSpec fault = FaultSpec::parse("layer=" + layer + ",pass=" + pass_name(pass) +
                                                     ",step=2,value=" + (inf ? "inf" : "nan"),
                                                 d.num_layers);
        gpu->set_state(params, opt0);
        StepOptions o = step_options(1, true);
        o.fault = fault;
        ASSERT_NO_THROW(gpu->train_step(b1, o)) << "step 1 has no fault";
        std::vector<float> p1;
        AdamW s1;
        gpu->get_state(p1, s1);
        ASSERT_EQ(s1.step, 1);
        o.step = 2;
        try {
          gpu->train_step(b2, o);
          ADD_FAILURE() << "no NumericsError at step 2";
        } catch (const NumericsError& e) {
          EXPECT_EQ(e.hit().layer, layer) << e.what();
          EXPECT_EQ(e.hit().pass, pass) << e.what();
          if (inf)
            EXPECT_GE(e.hit().stats.inf, 1) << e.what();
          else
            EXPECT_GE(e.hit().stats.nan, 1) << e.what();
        } catch (const std::exception& e) {
          ADD_FAILURE() << "not a NumericsError: " << e.what();
        }
        std::vector<float> p2;
        AdamW s2;
        gpu->get_state(p2, s2);
        if (layer == "optimizer") {
          EXPECT_EQ(s2.step, 2);  // after the update by definition: nothing restored
        } else {
          EXPECT_EQ(s2.step, 1);
          EXPECT_TRUE(p2 == p1) << "parameters changed by the failed step";
          EXPECT_TRUE(s2.m == s1.m && s2.v == s1.v) << "AdamW moments changed by the failed step";
        }
      }
    }
    EXPECT_EQ(cases, 2 * static_cast<int>(numerics_layers(d.num_layers).size()) - 1);
  }
}

TEST(GpuNumerics, CheckOffDoesNoSlotWorkAndCheckOnTapsEveryDocumentedTensor) {
  REQUIRE_GPU();
  const ModelDims d = dims64();
  const std::vector<float> params = init(d, 6);
  AdamW opt0;
  opt0.reset(params.size());
  const Batch b = random_batch(d, 3, 17, 4);
  // forward 8 + 2L taps, backward 21 + 9L (crf 5, cumsum 1, center 1, projection 3,
  // per layer 5 + 4, input_proj 3, input 1, penalty 4, optimizer 3)
  const int want = 29 + 11 * d.num_layers;
  for (const std::string& algo : algos_here(d)) {
    ExecutorOptions xo;
    xo.crf_backend = crf::BackendKind::cuda;
    xo.rnn_algo = enum_value<RnnAlgo>(algo, "algo");
    auto gpu = make_executor(Device::cuda, d, xo);
    gpu->set_state(params, opt0);
    gpu->train_step(b, step_options(1, false));
    EXPECT_EQ(cuda_numerics_slots(*gpu), 0) << algo;
    gpu->train_step(b, step_options(2, true));
    EXPECT_EQ(cuda_numerics_slots(*gpu), want) << algo;
    // check off with a fault planned at another step: still nothing
    StepOptions o = step_options(3, false);
    o.fault = FaultSpec::parse("layer=lstm.1.fwd,pass=forward,step=9,value=nan", d.num_layers);
    gpu->train_step(b, o);
    EXPECT_EQ(cuda_numerics_slots(*gpu), 0) << algo;
    // check off, the fault at this step: the planted NaN reaches the CRF, which refuses it
    o.step = 9;
    EXPECT_THROW(gpu->train_step(b, o), NonFiniteError) << algo;
    EXPECT_EQ(cuda_numerics_slots(*gpu), 0) << algo;
  }
}

TEST(GpuNumerics, TapsFollowTheDocumentedOrderAndMeasureTheRightTensors) {
  REQUIRE_GPU();
  const ModelDims d = dims64();
  const std::vector<float> params = init(d, 9);
  AdamW opt0;
  opt0.reset(params.size());
  const Batch b = random_batch(d, 4, 21, 6);
  // (layer, pass) runs in tap order (model/numerics.h)
  std::vector<std::pair<std::string, Pass>> want;
  for (const std::string& l : numerics_layers(d.num_layers))
    if (l != "optimizer") want.emplace_back(l, Pass::forward);
  for (const char* l : {"crf", "cumsum", "center", "projection"}) want.emplace_back(l, Pass::backward);
  for (int k = d.num_layers - 1; k >= 0; --k) {
    want.emplace_back("lstm." + std::to_string(k) + ".bwd", Pass::backward);
    want.emplace_back("lstm." + std::to_string(k) + ".fwd", Pass::backward);
  }
  for (const char* l : {"input_proj", "input", "penalty", "optimizer"}) want.emplace_back(l, Pass::backward);
  // the oracle of the first slot: the features with padding rows zeroed
  std::vector<float> x0 = b.input.features;
  for (int i = 0; i < b.input.B; ++i)
    for (int t = b.input.lengths[i]; t < b.input.T; ++t)
      for (int c = 0; c < d.input_dim; ++c) x0[(static_cast<size_t>(i) * b.input.T + t) * d.input_dim + c] = 0.f;
  for (const std::string& algo : algos_here(d)) {
    ExecutorOptions xo;
    xo.crf_backend = crf::BackendKind::cuda;
    xo.rnn_algo = enum_value<RnnAlgo>(algo, "algo");
    auto gpu = make_executor(Device::cuda, d, xo);
    gpu->set_state(params, opt0);
    gpu->train_step(b, step_options(1, true));
    const std::vector<NumericsHit> rep = cuda_numerics_report(*gpu);
    std::vector<std::pair<std::string, Pass>> runs;
    for (const NumericsHit& h : rep) {
      if (runs.empty() || runs.back().first != h.layer || runs.back().second != h.pass)
        runs.emplace_back(h.layer, h.pass);
      EXPECT_FALSE(h.stats.bad()) << algo << ": " << h.describe();
      EXPECT_GT(h.stats.finite, 0) << algo << ": " << h.describe();
    }
    ASSERT_EQ(runs.size(), want.size()) << algo;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(runs[i].first, want[i].first) << algo << " run " << i;
      EXPECT_EQ(runs[i].second, want[i].second) << algo << " run " << i;
    }
    ASSERT_FALSE(rep.empty());
    expect_same_stats(rep.front().stats, tensor_stats(x0.data(), x0.size()), algo + ": input features");
    // the last three: params, exp_avg, exp_avg_sq after the update
    std::vector<float> p;
    AdamW s;
    gpu->get_state(p, s);
    ASSERT_GE(rep.size(), 3u);
    expect_same_stats(rep[rep.size() - 3].stats, tensor_stats(p.data(), p.size()), algo + ": params");
    expect_same_stats(rep[rep.size() - 2].stats, tensor_stats(s.m.data(), s.m.size()), algo + ": exp_avg");
    expect_same_stats(rep[rep.size() - 1].stats, tensor_stats(s.v.data(), s.v.size()), algo + ": exp_avg_sq");
  }
}

// ---- determinism ----------------------------------------------------------------------------

TEST(GpuNumerics, DeterministicRunsAreBitwiseIdentical) {
  REQUIRE_GPU();
  const ModelDims d = dims64();
  const std::vector<float> params = init(d, 8);
  AdamW opt0;
  opt0.reset(params.size());
  std::vector<Batch> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(random_batch(d, 5, 31 - 3 * i, 40 + i));
  for (const std::string& algo : algos_here(d)) {
    auto run = [&](bool check) {
      ExecutorOptions xo;
      xo.crf_backend = crf::BackendKind::cuda;
      xo.rnn_algo = enum_value<RnnAlgo>(algo, "algo");
      xo.deterministic = true;
      auto gpu = make_executor(Device::cuda, d, xo);
      gpu->set_state(params, opt0);
      for (int i = 0; i < 3; ++i) {
        StepOptions o = step_options(i + 1, check);
        o.dropout = 0.3;
        gpu->train_step(batches[i], o);
      }
      std::vector<float> p;
      AdamW s;
      gpu->get_state(p, s);
      EXPECT_EQ(s.step, 3);
      return std::make_tuple(p, s.m, s.v);
    };
    const auto a = run(false), b = run(false), c = run(true);
    EXPECT_NE(std::get<0>(a), params) << algo << ": the steps moved nothing";
    EXPECT_TRUE(a == b) << algo << ": two deterministic runs differ";
    EXPECT_TRUE(a == c) << algo << ": the numeric checks changed the result";
  }
}

// The refusal comes before any device work, so this runs without a GPU too.
TEST(GpuNumerics, DeterministicRefusesThePersistentAlgorithms) {
  const ModelDims d = dims64();
  for (const char* algo : {"persist_static", "persist_dynamic"}) {
    ExecutorOptions xo;
    xo.crf_backend = crf::BackendKind::cuda;
    xo.rnn_algo = enum_value<RnnAlgo>(algo, "algo");
    xo.deterministic = true;
    try {
      make_cuda_executor(d, xo);
      ADD_FAILURE() << algo << " accepted under deterministic";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--deterministic"), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("'") + algo + "'"), std::string::npos) << m;
    }
  }
}
