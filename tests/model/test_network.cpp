// Gradients of the whole model (features -> input_proj -> BiLSTM -> projection
// -> centered cumsum -> semi-CRF NLL + L2 penalty) against central finite
// differences in float64, with an independent brute-force CRF (enumeration of
// every segmentation) as the loss; batch invariance of the encoder; the float
// training step (loss_and_grad with the reference backend) against that oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "crf/backend_kind.h"
#include "model/model.h"
#include "model/cpu/cpu_executor.h"
#include "model/cpu/network.h"
#include "model/frame_ce.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

// ---- brute-force semi-CRF in double (tiny T only) --------------------------
struct CrfParams {
  int C, K;
  std::vector<double> A, D, s, e;  // [C][C], [K][C], [C], [C]
};

struct Seg {
  int b, d, c;
};

// Enumerate every segmentation of [0, L).
void enumerate(int L, int K, int C, std::vector<Seg>& cur, const std::function<void(const std::vector<Seg>&)>& f,
               int pos = 0) {
  if (pos == L) {
    f(cur);
    return;
  }
  for (int d = 1; d <= K && pos + d <= L; ++d)
    for (int c = 0; c < C; ++c) {
      cur.push_back({pos, d, c});
      enumerate(L, K, C, cur, f, pos + d);
      cur.pop_back();
    }
}

// Score of y and, optionally, its feature counts (d Score / d inputs) added with weight w.
double score(const std::vector<Seg>& y, const double* cum, const CrfParams& p, double w, double* gcum, double* gA,
             double* gD, double* gs, double* ge) {
  const int C = p.C;
  double s = p.s[y.front().c] + p.e[y.back().c];
  if (gs) gs[y.front().c] += w, ge[y.back().c] += w;
  for (size_t i = 0; i < y.size(); ++i) {
    const Seg& g = y[i];
    s += cum[(g.b + g.d) * C + g.c] - cum[g.b * C + g.c] + p.D[(g.d - 1) * C + g.c];
    if (gcum) {
      gcum[(g.b + g.d) * C + g.c] += w;
      gcum[g.b * C + g.c] -= w;
      gD[(g.d - 1) * C + g.c] += w;
    }
    if (i > 0) {
      s += p.A[y[i - 1].c * C + g.c];
      if (gA) gA[y[i - 1].c * C + g.c] += w;
    }
  }
  return s;
}

std::vector<Seg> gold_of(const int32_t* labels, int L, int K) {
  std::vector<Seg> y;
  int t = 0;
  while (t < L) {
    int r = 1;
    while (t + r < L && labels[t + r] == labels[t]) ++r;
    for (int done = 0; done < r;) {
      const int d = std::min(K, r - done);
      y.push_back({t + done, d, labels[t]});
      done += d;
    }
    t += r;
  }
  return y;
}

// NLL of one utterance (cum [L+1][C]) and its gradients (added, scaled by w).
double nll_brute(const double* cum, int L, const int32_t* labels, const CrfParams& p, double w, double* gcum,
                 double* gA, double* gD, double* gs, double* ge) {
  std::vector<double> scores;
  std::vector<std::vector<Seg>> ys;
  std::vector<Seg> cur;
  enumerate(L, p.K, p.C, cur, [&](const std::vector<Seg>& y) {
    ys.push_back(y);
    scores.push_back(score(y, cum, p, 0, nullptr, nullptr, nullptr, nullptr, nullptr));
  });
  double m = -INFINITY;
  for (double s : scores) m = std::max(m, s);
  double z = 0;
  for (double s : scores) z += std::exp(s - m);
  const double logz = m + std::log(z);
  const std::vector<Seg> gold = gold_of(labels, L, p.K);
  const double gs_ = score(gold, cum, p, -w, gcum, gA, gD, gs, ge);
  if (gcum)
    for (size_t i = 0; i < ys.size(); ++i) score(ys[i], cum, p, w * std::exp(scores[i] - logz), gcum, gA, gD, gs, ge);
  return logz - gs_;
}

struct Tiny {
  ModelDims dims;
  int B = 3, T = 5;
  std::vector<int32_t> lengths{5, 3, 4};
  std::vector<int32_t> labels;  // [B][T]
  std::vector<double> features; // [B][T][D]
  double reg = 0.05;
  double ce_weight = 0.0;     // crf.frame_ce_weight
  bool frame_norm = false;    // crf.loss_normalization: frame (else utterance)
  double norm() const {
    if (!frame_norm) return B;
    double f = 0;
    for (int32_t l : lengths) f += l;
    return f;
  }
  Tiny() {
    dims.input_dim = 3;
    dims.hidden_dim = 4;
    dims.num_layers = 2;
    dims.num_classes = 3;
    dims.max_duration = 3;
    std::mt19937_64 rng(7);
    features.resize(size_t(B) * T * dims.input_dim);
    for (double& f : features) f = 2.0 * uniform01(rng) - 1.0;
    labels = {0, 0, 0, 0, 2,  1, 1, 2, 0, 0,  2, 0, 0, 1, 1};  // run of 4 > K=3 in row 0
  }
};

// Frame cross-entropy written out independently of model/frame_ce.h: the sum
// over valid frames of log(sum_c exp(x[c])) - x[label] (no max shift: the
// tiny scores are far from overflow). scores: the network's time-major rows.
double frame_ce_plain(const Activations<double>& act, const Tiny& tc) {
  double s = 0;
  for (int b = 0; b < tc.B; ++b)
    for (int t = 0; t < tc.lengths[b]; ++t) {
      double z = 0;
      for (int c = 0; c < tc.dims.num_classes; ++c) z += std::exp(act.scores(t * tc.B + b, c));
      s += std::log(z) - act.scores(t * tc.B + b, tc.labels[b * tc.T + t]);
    }
  return s;
}

// Total loss in double: sum_b NLL_b / norm + reg (|A|^2 + |D|^2) + ce_weight *
// frame CE / norm; gradients when asked (the CE's through model/frame_ce.h
// and Network::backward's dscores).
double total_loss(const Network<double>& net, const std::vector<double>& params, const Tiny& tc,
                  const std::vector<double>& features, double dropout, uint64_t seed, std::vector<double>* grad,
                  std::vector<double>* dfeat) {
  BatchInput<double> in;
  in.B = tc.B;
  in.T = tc.T;
  in.features = features;
  in.lengths = tc.lengths;
  Activations<double> act;
  std::mt19937_64 rng(seed);
  net.forward(params, in, dropout, &rng, act);
  const ParamLayout& lay = net.layout();
  const int C = tc.dims.num_classes, K = tc.dims.max_duration;
  CrfParams p{C, K, {}, {}, {}, {}};
  auto get = [&](const char* n) {
    const ParamInfo& i = lay.get(n);
    return std::vector<double>(params.begin() + i.offset, params.begin() + i.offset + i.size);
  };
  p.A = get("crf.transition");
  p.D = get("crf.duration_bias");
  p.s = get("crf.start");
  p.e = get("crf.end");
  std::vector<double> dcum(act.cum.size(), 0.0), gA(C * C, 0.0), gD(K * C, 0.0), gs(C, 0.0), ge(C, 0.0);
  double loss = 0;
  for (int b = 0; b < tc.B; ++b)
    loss += nll_brute(act.cum.data() + size_t(b) * (tc.T + 1) * C, tc.lengths[b], tc.labels.data() + b * tc.T, p,
                      1.0 / tc.norm(), grad ? dcum.data() + size_t(b) * (tc.T + 1) * C : nullptr, gA.data(),
                      gD.data(), gs.data(), ge.data());
  loss /= tc.norm();
  std::vector<double> dce;
  if (tc.ce_weight > 0) {
    loss += tc.ce_weight * frame_ce_plain(act, tc) / tc.norm();
    dce.resize(size_t(tc.B) * tc.T * C);
    frame_cross_entropy<double>(tc.B, tc.T, C, act.scores.data(), C, int64_t(tc.B) * C, tc.lengths.data(),
                                tc.labels.data(), tc.ce_weight / tc.norm(), nullptr, dce.data());
  }
  double pen = 0;
  for (double a : p.A) pen += a * a;
  for (double d : p.D) pen += d * d;
  loss += tc.reg * pen;
  if (grad) {
    net.backward(params, act, dcum, *grad, dfeat, nullptr, tc.ce_weight > 0 ? &dce : nullptr);
    auto put = [&](const char* n, const std::vector<double>& g, const std::vector<double>* w) {
      const ParamInfo& i = lay.get(n);
      for (size_t k = 0; k < i.size; ++k) (*grad)[i.offset + k] = g[k] + (w ? 2 * tc.reg * (*w)[k] : 0.0);
    };
    put("crf.transition", gA, &p.A);
    put("crf.duration_bias", gD, &p.D);
    put("crf.start", gs, nullptr);
    put("crf.end", ge, nullptr);
  }
  return loss;
}

std::vector<double> tiny_params(const Network<double>& net) {
  std::mt19937_64 rng(3);
  std::vector<double> params;
  init_params(net.layout(), rng, params);
  for (const char* n : {"crf.transition", "crf.duration_bias", "crf.start", "crf.end"}) {
    const ParamInfo& i = net.layout().get(n);
    for (size_t k = 0; k < i.size; ++k) params[i.offset + k] = 2.0 * uniform01(rng) - 1.0;
  }
  // larger encoder weights so every gate is away from its linear regime
  for (size_t k = 0; k < net.layout().get("crf.projection.weight").offset; ++k) params[k] *= 2.0;
  return params;
}

void expect_close(double got, double want, double tol, const std::string& what) {
  EXPECT_LE(std::abs(got - want), tol * (1.0 + std::abs(want))) << what << ": analytic " << got << " vs FD " << want;
}

// ce_weight / frame_norm: crf.frame_ce_weight and crf.loss_normalization
void finite_differences_whole_model(double ce_weight, bool frame_norm) {
  for (double dropout : {0.0, 0.3}) {
    Tiny tc;
    tc.ce_weight = ce_weight;
    tc.frame_norm = frame_norm;
    Network<double> net(tc.dims);
    std::vector<double> params = tiny_params(net);
    std::vector<double> grad, dfeat;
    const uint64_t seed = 11;
    const double loss = total_loss(net, params, tc, tc.features, dropout, seed, &grad, &dfeat);
    ASSERT_TRUE(std::isfinite(loss));
    ASSERT_GT(loss, 0.0);
    const double h = 1e-6;
    size_t checked = 0;
    double max_abs_grad = 0;
    for (const ParamInfo& p : net.layout().params())
      for (size_t k = 0; k < p.size; ++k) {
        std::vector<double> pp = params, pm = params;
        pp[p.offset + k] += h;
        pm[p.offset + k] -= h;
        const double fd = (total_loss(net, pp, tc, tc.features, dropout, seed, nullptr, nullptr) -
                           total_loss(net, pm, tc, tc.features, dropout, seed, nullptr, nullptr)) /
                          (2 * h);
        expect_close(grad[p.offset + k], fd, 1e-6, p.name + "[" + std::to_string(k) + "] dropout " +
                                                       std::to_string(dropout));
        max_abs_grad = std::max(max_abs_grad, std::abs(fd));
        ++checked;
      }
    EXPECT_EQ(checked, net.layout().total());
    EXPECT_GT(max_abs_grad, 1e-2);  // the check is not vacuous
    // input features (valid frames); padding frames must have zero gradient
    for (int b = 0; b < tc.B; ++b)
      for (int t = 0; t < tc.T; ++t)
        for (int d = 0; d < tc.dims.input_dim; ++d) {
          const size_t idx = (size_t(b) * tc.T + t) * tc.dims.input_dim + d;
          std::vector<double> fp = tc.features, fm = tc.features;
          fp[idx] += h;
          fm[idx] -= h;
          const double fd = (total_loss(net, params, tc, fp, dropout, seed, nullptr, nullptr) -
                             total_loss(net, params, tc, fm, dropout, seed, nullptr, nullptr)) /
                            (2 * h);
          if (t >= tc.lengths[b]) {
            EXPECT_EQ(dfeat[idx], 0.0);
            EXPECT_EQ(fd, 0.0) << "padding frame influences the loss";
          } else {
            expect_close(dfeat[idx], fd, 1e-6, "features[" + std::to_string(idx) + "]");
          }
        }
  }
}

}  // namespace

TEST(ModelGradients, FiniteDifferencesWholeModelFloat64) { finite_differences_whole_model(0.0, false); }

// crf.frame_ce_weight > 0: the CE's gradient enters the network at the
// projection's scores (before the centering); both loss normalisations.
TEST(ModelGradients, FiniteDifferencesWholeModelFloat64WithFrameCrossEntropy) {
  finite_differences_whole_model(0.7, false);
  finite_differences_whole_model(2.5, true);
}

// An utterance's encoder outputs (scores, cum_scores) do not depend on the
// batch it sits in: its row, the padded length T and its neighbours.
TEST(ModelEncoder, BatchInvariance) {
  ModelDims d;
  d.input_dim = 5;
  d.hidden_dim = 8;
  d.num_layers = 2;
  d.num_classes = 4;
  d.max_duration = 3;
  Network<double> netd(d);
  Network<float> netf(d);
  std::mt19937_64 rng(5);
  std::vector<double> pd;
  init_params(netd.layout(), rng, pd);
  std::vector<float> pf(pd.begin(), pd.end());
  const int L = 7;
  std::vector<double> utt(L * d.input_dim);
  for (double& x : utt) x = 2 * uniform01(rng) - 1;
  // alone: B = 1, T = L
  auto run = [&](auto& net, const auto& params, int B, int T, int row, std::vector<int32_t> lengths) {
    using S = typename std::decay_t<decltype(params)>::value_type;
    BatchInput<S> in;
    in.B = B;
    in.T = T;
    in.lengths = lengths;
    in.features.assign(size_t(B) * T * d.input_dim, S(0));
    std::mt19937_64 r2(99);
    for (auto& x : in.features) x = S(50 * (2 * uniform01(r2) - 1));  // junk everywhere (incl. padding)
    for (int t = 0; t < L; ++t)
      for (int k = 0; k < d.input_dim; ++k) in.features[(size_t(row) * T + t) * d.input_dim + k] = S(utt[t * d.input_dim + k]);
    Activations<S> act;
    net.forward(params, in, 0.0, nullptr, act);
    std::vector<double> cum(act.cum.begin() + size_t(row) * (T + 1) * d.num_classes,
                            act.cum.begin() + size_t(row) * (T + 1) * d.num_classes + (L + 1) * d.num_classes);
    for (int t = 0; t < L; ++t)
      for (int c = 0; c < d.num_classes; ++c) cum.push_back(act.scores(t * B + row, c));
    return cum;
  };
  const auto alone_d = run(netd, pd, 1, L, 0, {L});
  const auto alone_f = run(netf, pf, 1, L, 0, {L});
  for (auto [B, T, row, lengths] : {std::tuple<int, int, int, std::vector<int32_t>>{3, 12, 1, {12, L, 3}},
                                    {4, 9, 3, {1, 9, 2, L}}, {2, L + 1, 0, {L, L + 1}}}) {
    const auto got_d = run(netd, pd, B, T, row, lengths);
    const auto got_f = run(netf, pf, B, T, row, lengths);
    ASSERT_EQ(got_d.size(), alone_d.size());
    for (size_t i = 0; i < got_d.size(); ++i) {
      EXPECT_NEAR(got_d[i], alone_d[i], 1e-12 * (1 + std::abs(alone_d[i]))) << "double, B=" << B << " T=" << T;
      EXPECT_NEAR(got_f[i], alone_f[i], 1e-5 * (1 + std::abs(alone_f[i]))) << "float, B=" << B << " T=" << T;
    }
  }
}

// The float training step (encoder + crf reference backend + penalty) equals
// the float64 brute-force oracle: loss and every gradient; also with
// crf.frame_ce_weight > 0 under both loss normalisations.
TEST(ModelGradients, TrainingStepMatchesOracle) {
  for (const auto& [ce_weight, frame_norm] : {std::pair<double, bool>{0.0, false}, {0.7, false}, {2.5, true}}) {
    SCOPED_TRACE("frame_ce_weight " + std::to_string(ce_weight) + (frame_norm ? ", frame" : ", utterance"));
    Tiny tc;
    tc.ce_weight = ce_weight;
    tc.frame_norm = frame_norm;
    Network<double> netd(tc.dims);
    Network<float> netf(tc.dims);
    const std::vector<double> pd = tiny_params(netd);
    const std::vector<float> pf(pd.begin(), pd.end());
    std::vector<float> ff(tc.features.begin(), tc.features.end());
    std::vector<double> fd(ff.begin(), ff.end());  // same (float-rounded) input
    std::vector<double> gd;
    const double loss_d = total_loss(netd, std::vector<double>(pf.begin(), pf.end()), tc, fd, 0.0, 0, &gd, nullptr);
    Batch batch;
    batch.input.B = tc.B;
    batch.input.T = tc.T;
    batch.input.features = ff;
    batch.input.lengths = tc.lengths;
    batch.labels = tc.labels;
    batch.ids = {"a", "b", "c"};
    for (int32_t l : tc.lengths) batch.frames += l;
    StepOptions o;
    o.crf_reg = tc.reg;
    o.frame_ce_weight = ce_weight;
    o.frame_normalization = frame_norm;
    for (const char* name : {"reference", "cpu"}) {
      auto backend = crf::make_backend(crf::backend_kind(name));
      std::vector<float> gf;
      Activations<float> act;
      const StepResult r = loss_and_grad(netf, pf, batch, *backend, o, gf, act);
      EXPECT_NEAR(r.loss, loss_d, 1e-5 * std::abs(loss_d)) << name;
      if (ce_weight == 0) EXPECT_EQ(r.frame_ce_sum, 0.0);
      if (ce_weight > 0) EXPECT_GT(r.frame_ce_sum, 0.5);  // the term is there (CE of 12 frames of 3 classes)
      double num = 0, den = 0;
      for (size_t i = 0; i < gd.size(); ++i) {
        num += (gf[i] - gd[i]) * (gf[i] - gd[i]);
        den += gd[i] * gd[i];
      }
      EXPECT_LT(std::sqrt(num / den), 1e-5) << name << ": relative gradient error";
    }
  }
}

TEST(ModelGradients, NonFiniteInputIsNamed) {
  Tiny tc;
  Network<float> net(tc.dims);
  std::mt19937_64 rng(1);
  std::vector<float> params;
  init_params(net.layout(), rng, params);
  Batch batch;
  batch.input.B = tc.B;
  batch.input.T = tc.T;
  batch.input.features.assign(tc.features.begin(), tc.features.end());
  batch.input.features[4] = INFINITY;  // utterance 0, frame 1
  batch.input.lengths = tc.lengths;
  batch.labels = tc.labels;
  batch.ids = {"a", "b", "c"};
  StepOptions o;  // debug.check_numerics on, as by default
  auto backend = crf::make_backend(crf::BackendKind::cpu);
  std::vector<float> grad;
  Activations<float> act;
  try {
    loss_and_grad(net, params, batch, *backend, o, grad, act);
    FAIL() << "no error";
  } catch (const NumericsError& e) {  // debug.check_numerics (default on): the per-layer taps
    EXPECT_EQ(e.hit().layer, "input");
    EXPECT_EQ(e.hit().pass, Pass::forward);
    EXPECT_EQ(e.hit().tensor, "features");
    EXPECT_EQ(e.hit().stats.inf, 1);
    EXPECT_EQ(e.hit().stats.nan, 0);
  }
  batch.input.features[4] = 0.f;
  params[net.layout().get("crf.projection.bias").offset + 1] = NAN;
  try {
    loss_and_grad(net, params, batch, *backend, o, grad, act);
    FAIL() << "no error";
  } catch (const NumericsError& e) {
    EXPECT_EQ(e.hit().layer, "projection");
    EXPECT_EQ(e.hit().tensor, "scores");
    EXPECT_EQ(e.hit().stats.nan, 5 + 3 + 4);  // the bias NaN reaches every real frame (padding rows are 0)
  }
  // with the checks off, the older stop names the CRF input
  o.check_numerics = false;
  try {
    loss_and_grad(net, params, batch, *backend, o, grad, act);
    FAIL() << "no error";
  } catch (const NonFiniteError& e) {
    EXPECT_EQ(e.tensor(), "CRF input");
  }
}
