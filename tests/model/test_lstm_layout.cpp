// The PyTorch layout claim, checked independently of model/network.cpp: a plain
// scalar float64 encoder written straight from the torch.nn.Linear and
// torch.nn.LSTM equations (bidirectional, batch_first, gate order i, f, g, o,
// weight_ih_l{k} [4H][In] with row blocks i, f, g, o, weight_hh_l{k} [4H][H]),
// reading its parameters by the checkpoint names, must reproduce the model's
// projection scores. A gate-order swap or a transposed weight fails here.
//
//   i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)     f = sigmoid(... rows H..2H)
//   g = tanh(... rows 2H..3H)                      o = sigmoid(... rows 3H..4H)
//   c' = f * c + i * g                             h' = o * tanh(c')
// The reverse direction starts at each utterance's own last valid frame; the
// input of layer k > 0 is concat(forward h, reverse h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/cpu/network.h"

using namespace timitseg::model;

namespace {

using Vec = std::vector<double>;

// A named parameter as a row-major [rows][cols] matrix (cols = 1 for a vector).
struct Named {
  const double* p;
  int rows, cols;
  double at(int r, int c) const { return p[static_cast<size_t>(r) * cols + c]; }
};

class Params {
 public:
  Params(const ParamLayout& layout, const std::vector<double>& values) : layout_(layout), values_(values) {}
  Named get(const std::string& name, int rows, int cols) const {
    const ParamInfo& info = layout_.get(name);
    EXPECT_EQ(info.size, static_cast<size_t>(rows) * cols) << name;
    if (cols > 1) EXPECT_EQ(info.shape, (std::vector<int64_t>{rows, cols})) << name;
    else EXPECT_EQ(info.shape, (std::vector<int64_t>{rows})) << name;
    return {values_.data() + info.offset, rows, cols};
  }

 private:
  const ParamLayout& layout_;
  const std::vector<double>& values_;
};

// y = W x + b (torch.nn.Linear: weight [out][in]).
Vec linear(const Named& W, const Named& b, const Vec& x) {
  Vec y(W.rows);
  for (int r = 0; r < W.rows; ++r) {
    double s = b.at(r, 0);
    for (int c = 0; c < W.cols; ++c) s += W.at(r, c) * x[c];
    y[r] = s;
  }
  return y;
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// One utterance [L][D] -> projection scores [L][C].
std::vector<Vec> reference_scores(const Params& P, const ModelDims& d, const std::vector<Vec>& feats) {
  const int L = static_cast<int>(feats.size());
  const int W = d.hidden_dim, H = W / 2;
  const Named Win = P.get("encoder.input_proj.weight", W, d.input_dim), bin = P.get("encoder.input_proj.bias", W, 1);
  std::vector<Vec> x(L);
  for (int t = 0; t < L; ++t) x[t] = linear(Win, bin, feats[t]);
  for (int k = 0; k < d.num_layers; ++k) {
    const int in = k == 0 ? W : 2 * H;
    std::vector<Vec> out(L, Vec(2 * H));
    for (int dir = 0; dir < 2; ++dir) {
      const std::string suf = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
      const Named Wih = P.get("encoder.lstm.weight_ih" + suf, 4 * H, in);
      const Named Whh = P.get("encoder.lstm.weight_hh" + suf, 4 * H, H);
      const Named bih = P.get("encoder.lstm.bias_ih" + suf, 4 * H, 1);
      const Named bhh = P.get("encoder.lstm.bias_hh" + suf, 4 * H, 1);
      Vec h(H, 0.0), c(H, 0.0);
      for (int s = 0; s < L; ++s) {
        const int t = dir == 0 ? s : L - 1 - s;
        // pre-activation of gate block `blk` (0 i, 1 f, 2 g, 3 o), unit j
        auto pre = [&](int blk, int j) {
          const int r = blk * H + j;
          double z = bih.at(r, 0) + bhh.at(r, 0);
          for (int q = 0; q < in; ++q) z += Wih.at(r, q) * x[t][q];
          for (int q = 0; q < H; ++q) z += Whh.at(r, q) * h[q];
          return z;
        };
        Vec hn(H), cn(H);
        for (int j = 0; j < H; ++j) {
          const double i = sigmoid(pre(0, j)), f = sigmoid(pre(1, j)), g = std::tanh(pre(2, j)),
                       o = sigmoid(pre(3, j));
          cn[j] = f * c[j] + i * g;
          hn[j] = o * std::tanh(cn[j]);
        }
        h = hn;
        c = cn;
        for (int j = 0; j < H; ++j) out[t][dir * H + j] = h[j];
      }
    }
    x = out;
  }
  const Named Wp = P.get("crf.projection.weight", d.num_classes, W), bp = P.get("crf.projection.bias", d.num_classes, 1);
  std::vector<Vec> scores(L);
  for (int t = 0; t < L; ++t) scores[t] = linear(Wp, bp, x[t]);
  return scores;
}

ModelDims tiny_dims() {
  ModelDims d;
  d.input_dim = 3;
  d.hidden_dim = 4;  // 2 per direction
  d.num_layers = 2;
  d.num_classes = 3;
  d.max_duration = 4;
  return d;
}

// Parameters: every entry uniform in [-1, 1) (CRF ones included), so that every
// gate and bias matters (PyTorch's init would also do; larger values make a
// layout error larger).
std::vector<double> random_params(const ParamLayout& layout, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> p(layout.total());
  for (double& v : p) v = 2.0 * uniform01(rng) - 1.0;
  return p;
}

template <class S>
void check_against_reference(double tol) {
  const ModelDims d = tiny_dims();
  Network<S> net(d);
  const std::vector<double> pd = random_params(net.layout(), 11);
  const std::vector<S> params(pd.begin(), pd.end());
  const std::vector<double> pref(params.begin(), params.end());  // what the model really holds
  const Params P(net.layout(), pref);

  const int B = 2, T = 5;
  const std::vector<int> lens = {5, 3};
  std::mt19937_64 rng(7);
  BatchInput<S> in;
  in.B = B;
  in.T = T;
  in.lengths = {lens[0], lens[1]};
  in.features.assign(static_cast<size_t>(B) * T * d.input_dim, S(0));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int q = 0; q < d.input_dim; ++q)  // padding frames get garbage: they must not matter
        in.features[(static_cast<size_t>(b) * T + t) * d.input_dim + q] =
            static_cast<S>(t < lens[b] ? 4.0 * uniform01(rng) - 2.0 : 50.0 + t);

  Activations<S> act;
  net.forward(params, in, 0.0, nullptr, act);
  ASSERT_EQ(act.scores.rows(), T * B);
  ASSERT_EQ(act.scores.cols(), d.num_classes);

  double max_diff = 0, max_abs = 0;
  for (int b = 0; b < B; ++b) {
    std::vector<Vec> feats(lens[b], Vec(d.input_dim));
    for (int t = 0; t < lens[b]; ++t)
      for (int q = 0; q < d.input_dim; ++q)
        feats[t][q] = static_cast<double>(in.features[(static_cast<size_t>(b) * T + t) * d.input_dim + q]);
    const std::vector<Vec> ref = reference_scores(P, d, feats);
    for (int t = 0; t < lens[b]; ++t)
      for (int c = 0; c < d.num_classes; ++c) {
        const double got = static_cast<double>(act.scores(t * B + b, c));  // time-major row t*B + b
        EXPECT_NEAR(got, ref[t][c], tol) << "utterance " << b << " frame " << t << " class " << c;
        max_diff = std::max(max_diff, std::abs(got - ref[t][c]));
        max_abs = std::max(max_abs, std::abs(ref[t][c]));
      }
  }
  EXPECT_GT(max_abs, 0.1);  // the scores are not trivially small
  ::testing::Test::RecordProperty("max_abs_diff", std::to_string(max_diff));
}

// Sanity of the oracle itself: swapping the f and o row blocks of one weight
// (a gate-order error) changes its scores by far more than the tolerance.
TEST(LstmLayout, OracleIsSensitiveToGateOrder) {
  const ModelDims d = tiny_dims();
  const ParamLayout layout(d);
  std::vector<double> p = random_params(layout, 11);
  const std::vector<Vec> feats = {{0.5, -1.0, 1.5}, {1.0, 0.2, -0.3}, {-0.7, 0.9, 0.1}};
  const std::vector<Vec> a = reference_scores(Params(layout, p), d, feats);
  const ParamInfo& w = layout.get("encoder.lstm.weight_ih_l0");
  const int H = d.hidden_dim / 2, in = d.hidden_dim;
  for (int j = 0; j < H; ++j)
    for (int q = 0; q < in; ++q)
      std::swap(p[w.offset + static_cast<size_t>(1 * H + j) * in + q], p[w.offset + static_cast<size_t>(3 * H + j) * in + q]);
  const std::vector<Vec> b = reference_scores(Params(layout, p), d, feats);
  double diff = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (int c = 0; c < d.num_classes; ++c) diff = std::max(diff, std::abs(a[t][c] - b[t][c]));
  EXPECT_GT(diff, 1e-3);
}

TEST(LstmLayout, DoubleModelMatchesTorchEquations) { check_against_reference<double>(1e-10); }

TEST(LstmLayout, FloatModelMatchesTorchEquations) { check_against_reference<float>(1e-5); }

}  // namespace
