// Per-layer numeric checks and fault injection on the CPU executor
// (model/numerics.h): for EVERY layer of a 2-layer model and every pass in
// which that layer has taps, a fault planted at step 3 is named by the check
// with exactly that layer and pass, the steps before it are clean, and the
// failed step leaves parameters and AdamW state untouched (except the
// optimizer layer, which is tapped after the update). With the checks off the
// same faults reach the older stop (CRF input, log Z / gold, loss, CRF or
// parameter gradients) or pass silently (d features, which nothing reads; the
// optimizer's updated parameters); each case asserts which. Also: the taps of a clean step change no result
// (bitwise), and FaultSpec parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/cpu/cpu_executor.h"
#include "model/numerics.h"
#include "model/params.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

struct Fixture {
  ModelDims dims;
  Batch batch;
  std::vector<float> params;
  Fixture() {
    dims.input_dim = 3;
    dims.hidden_dim = 8;
    dims.num_layers = 2;
    dims.num_classes = 4;
    dims.max_duration = 3;
    const int B = 5, T = 7;  // 2 slices of the CPU partition
    batch.input.B = B;
    batch.input.T = T;
    batch.input.lengths = {7, 3, 5, 6, 2};
    std::mt19937_64 rng(11);
    batch.input.features.resize(size_t(B) * T * dims.input_dim);
    for (float& f : batch.input.features) f = static_cast<float>(2.0 * uniform01(rng) - 1.0);
    batch.labels.resize(size_t(B) * T);
    for (size_t i = 0; i < batch.labels.size(); ++i) batch.labels[i] = static_cast<int32_t>((i / 2) % 4);
    for (int b = 0; b < B; ++b) batch.ids.push_back("utt" + std::to_string(b));
    for (int32_t l : batch.input.lengths) batch.frames += l;
    std::mt19937_64 prng(5);
    init_params(ParamLayout(dims), prng, params);
  }
};

StepOptions options(int64_t step, const FaultSpec& fault, bool check, std::mt19937_64* rng) {
  StepOptions o;
  o.lr = 1e-2;
  o.dropout = 0.2;
  o.clip_norm = 5.0;
  o.crf_reg = 0.01;
  o.check_numerics = check;
  o.step = step;
  o.fault = fault;
  o.rng = rng;
  return o;
}

struct Case {
  std::string layer;
  Pass pass;
};

std::vector<Case> all_cases(int L) {
  std::vector<Case> v;
  for (const std::string& l : numerics_layers(L)) {
    if (l != "optimizer") v.push_back({l, Pass::forward});
    v.push_back({l, Pass::backward});
  }
  return v;
}

std::string case_name(const Case& c) { return c.layer + "/" + pass_name(c.pass); }

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

TEST(Numerics, FaultSpecParse) {
  const FaultSpec f = FaultSpec::parse("layer=lstm.1.bwd,pass=backward,step=2,value=inf", 2);
  EXPECT_EQ(f.layer, "lstm.1.bwd");
  EXPECT_EQ(f.pass, Pass::backward);
  EXPECT_EQ(f.step, 2);
  EXPECT_TRUE(std::isinf(f.value));
  EXPECT_EQ(f.to_string(), "layer=lstm.1.bwd,pass=backward,step=2,value=inf");
  EXPECT_TRUE(FaultSpec::parse("", 2).empty());
  EXPECT_THROW(FaultSpec::parse("layer=lstm.2.fwd,pass=forward,step=1,value=nan", 2), std::invalid_argument);
  EXPECT_THROW(FaultSpec::parse("layer=crf,pass=sideways,step=1,value=nan", 2), std::invalid_argument);
  EXPECT_THROW(FaultSpec::parse("layer=crf,pass=forward,step=0,value=nan", 2), std::invalid_argument);
  EXPECT_THROW(FaultSpec::parse("layer=crf,pass=forward,step=1", 2), std::invalid_argument);
}

// Every layer and pass: the check names exactly the faulty layer and pass at step 3.
TEST(Numerics, CheckNamesEveryFaultyLayerAndPassOnTheCpu) {
  const Fixture fx;
  ExecutorOptions xo;
  xo.threads = 2;
  xo.crf_backend = crf::BackendKind::cpu;
  const auto cases = all_cases(fx.dims.num_layers);
  ASSERT_EQ(cases.size(), 2 * numerics_layers(2).size() - 1);
  for (const Case& c : cases) {
    for (const char* value : {"nan", "inf"}) {
      SCOPED_TRACE(case_name(c) + " " + value);
      const FaultSpec fault = FaultSpec::parse(
          "layer=" + c.layer + ",pass=" + pass_name(c.pass) + ",step=3,value=" + value, fx.dims.num_layers);
      auto exec = make_cpu_executor(fx.dims, xo);
      AdamW opt;
      opt.reset(fx.params.size());
      exec->set_state(fx.params, opt);
      std::mt19937_64 rng(1);
      for (int64_t step = 1; step <= 2; ++step) {  // clean before the fault's step
        const StepResult r = exec->train_step(fx.batch, options(step, fault, true, &rng));
        EXPECT_TRUE(std::isfinite(r.loss));
      }
      std::vector<float> before_p, after_p;
      AdamW before_o, after_o;
      exec->get_state(before_p, before_o);
      try {
        exec->train_step(fx.batch, options(3, fault, true, &rng));
        ADD_FAILURE() << "no NumericsError";
        continue;
      } catch (const NumericsError& e) {
        EXPECT_EQ(e.hit().layer, c.layer);
        EXPECT_EQ(e.hit().pass, c.pass);
        EXPECT_FALSE(e.hit().tensor.empty());
        EXPECT_EQ(e.hit().stats.nan, std::string(value) == "nan" ? 1 : 0) << e.what();
        EXPECT_EQ(e.hit().stats.inf, std::string(value) == "inf" ? 1 : 0) << e.what();
        const std::string msg = e.what();
        EXPECT_NE(msg.find("layer " + c.layer + ", " + pass_name(c.pass) + " pass"), std::string::npos) << msg;
      }
      exec->get_state(after_p, after_o);
      if (c.layer != "optimizer") {  // nothing updated: the state before the step
        EXPECT_EQ(after_p, before_p);
        EXPECT_EQ(after_o.m, before_o.m);
        EXPECT_EQ(after_o.v, before_o.v);
        EXPECT_EQ(after_o.step, before_o.step);
      } else {
        EXPECT_EQ(after_o.step, before_o.step + 1);
        EXPECT_FALSE(all_finite(after_p));
      }
    }
  }
}

// With the checks off: which older stop (if any) catches each fault.
TEST(Numerics, FaultWithoutCheckReachesTheOlderStop) {
  const Fixture fx;
  ExecutorOptions xo;
  xo.threads = 2;
  for (const Case& c : all_cases(fx.dims.num_layers)) {
    SCOPED_TRACE(case_name(c));
    const FaultSpec fault =
        FaultSpec::parse("layer=" + c.layer + ",pass=" + pass_name(c.pass) + ",step=1,value=nan", fx.dims.num_layers);
    auto exec = make_cpu_executor(fx.dims, xo);
    AdamW opt;
    opt.reset(fx.params.size());
    exec->set_state(fx.params, opt);
    std::mt19937_64 rng(1);
    std::string stop;
    try {
      exec->train_step(fx.batch, options(1, fault, false, &rng));
    } catch (const NumericsError& e) {
      FAIL() << "a NumericsError with the checks off: " << e.what();
    } catch (const NonFiniteError& e) {
      stop = e.tensor();
    }
    std::vector<float> p;
    AdamW o;
    exec->get_state(p, o);
    if (c.layer == "optimizer") {
      // tapped after the update: no older check looks there, the model is poisoned silently
      EXPECT_EQ(stop, "");
      EXPECT_FALSE(all_finite(p));
    } else if (c.pass == Pass::forward) {
      // forward faults propagate into the CRF (input validation or log Z) or the loss
      EXPECT_TRUE(stop == "CRF input" || stop == "log_partition" || stop == "gold_score" || stop == "loss") << stop;
    } else if (c.layer == "crf") {
      // the older check of the CRF backend's gradients
      EXPECT_EQ(stop, "grad_cum_scores");
    } else if (c.layer == "input") {
      // d features is the end of the backward: nothing reads it, the step passes
      EXPECT_EQ(stop, "") << stop;
      EXPECT_TRUE(all_finite(p));
    } else {
      // backward faults reach a parameter gradient
      EXPECT_EQ(stop.rfind("gradient of ", 0), 0u) << stop;
    }
  }
}

// The taps of a clean step change no result: check on and off give bitwise
// equal losses, parameters and moments over a few steps.
TEST(Numerics, ChecksDoNotChangeResults) {
  const Fixture fx;
  std::vector<float> p[2];
  AdamW o[2];
  double loss[2] = {0, 0};
  for (int check = 0; check < 2; ++check) {
    ExecutorOptions xo;
    xo.threads = 2;
    auto exec = make_cpu_executor(fx.dims, xo);
    AdamW opt;
    opt.reset(fx.params.size());
    exec->set_state(fx.params, opt);
    std::mt19937_64 rng(9);
    for (int64_t step = 1; step <= 3; ++step) loss[check] += exec->train_step(fx.batch, options(step, {}, check, &rng)).loss;
    exec->get_state(p[check], o[check]);
  }
  EXPECT_EQ(loss[0], loss[1]);
  EXPECT_EQ(p[0], p[1]);
  EXPECT_EQ(o[0].m, o[1].m);
  EXPECT_EQ(o[0].v, o[1].v);
}

// Probe::tap on large tensors (the parallel chunked all-finite test) and on a
// strided block: counts and finite range against direct enumeration, for 1 and
// 3 workers; values outside the block are not seen; a fault goes to element 0.
TEST(Numerics, ProbeTapCountsLargeAndStridedTensors) {
  for (int threads : {1, 3}) {
    SCOPED_TRACE(threads);
    std::vector<float> v(300000, 1.f);
    v[7] = -2.f;
    v[299999] = NAN;
    Probe p(true, FaultSpec{}, 1);
    p.set_threads(threads);
    try {
      p.tap("cumsum", Pass::forward, "cum_scores", v.data(), v.size());
      ADD_FAILURE() << "no error";
    } catch (const NumericsError& e) {
      EXPECT_EQ(e.hit().stats.nan, 1);
      EXPECT_EQ(e.hit().stats.inf, 0);
      EXPECT_EQ(e.hit().stats.finite, 299999);
      EXPECT_EQ(e.hit().stats.min, -2.0);
      EXPECT_EQ(e.hit().stats.max, 1.0);
    }
    // [1000][300] row-major, the block of columns [100, 200)
    std::vector<double> m(1000 * 300, 0.5);
    m[999 * 300 + 150] = -INFINITY;
    m[999 * 300 + 250] = NAN;  // outside the block
    m[3 * 300 + 100] = 4.0;
    try {
      p.tap("lstm.0.fwd", Pass::forward, "lstm_out", m.data() + 100, 1000, 100, 300);
      ADD_FAILURE() << "no error";
    } catch (const NumericsError& e) {
      EXPECT_EQ(e.hit().stats.nan, 0);
      EXPECT_EQ(e.hit().stats.inf, 1);
      EXPECT_EQ(e.hit().stats.finite, 1000 * 100 - 1);
      EXPECT_EQ(e.hit().stats.min, 0.5);
      EXPECT_EQ(e.hit().stats.max, 4.0);
    }
    m[999 * 300 + 150] = 0.5;
    EXPECT_NO_THROW(p.tap("lstm.0.fwd", Pass::forward, "lstm_out", m.data() + 100, 1000, 100, 300));
    // a fault: element 0 of the first tensor of its layer and pass, once
    Probe f(false, FaultSpec::parse("layer=input,pass=forward,step=4,value=inf", 1), 4);
    std::vector<float> a(10, 0.f), b(10, 0.f);
    f.tap("input", Pass::backward, "d_features", a.data(), a.size());
    EXPECT_EQ(a[0], 0.f);  // other pass
    f.tap("input", Pass::forward, "features", a.data(), a.size());
    f.tap("input", Pass::forward, "features", b.data(), b.size());
    EXPECT_TRUE(std::isinf(a[0]));
    EXPECT_EQ(b[0], 0.f);  // only the first tensor
    Probe g(true, FaultSpec::parse("layer=input,pass=forward,step=4,value=inf", 1), 5);  // another step
    EXPECT_FALSE(g.wants("input", Pass::forward) && !g.check());
    EXPECT_NO_THROW(g.tap("input", Pass::forward, "features", b.data(), b.size()));
  }
}
