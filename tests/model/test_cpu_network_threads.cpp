// The CPU encoder's thread partition (model/cpu/network.h): forward and
// backward give BITWISE identical cum, scores, parameter gradients and feature
// gradients for 1, 2, 3 and 7 threads (float and double, dropout on and off),
// and the float results agree with the float64 executor run single-threaded
// (the oracle; its math is checked against finite differences in
// test_network.cpp and against the torch LSTM equations in
// test_lstm_layout.cpp) within 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/cpu/network.h"

using namespace timitseg::model;

namespace {

struct Case {
  const char* name;
  ModelDims dims;
  int T;
  std::vector<int32_t> lengths;  // B = lengths.size()
};

std::vector<Case> cases() {
  std::vector<Case> v;
  {
    Case c{"small", {}, 17, {17, 1, 9, 16, 3, 17, 2, 11, 5, 8, 13}};  // 11 rows: 3 slices, the last one short
    c.dims.input_dim = 5;
    c.dims.hidden_dim = 16;
    c.dims.num_layers = 3;
    c.dims.num_classes = 4;
    v.push_back(c);
  }
  {
    Case c{"wider", {}, 40, {}};  // sizes past Eigen's small-product paths
    c.dims.input_dim = 13;
    c.dims.hidden_dim = 64;
    c.dims.num_layers = 2;
    c.dims.num_classes = 7;
    std::mt19937_64 rng(3);
    for (int b = 0; b < 13; ++b) c.lengths.push_back(b == 4 ? 40 : 1 + static_cast<int32_t>(rng() % 40));
    v.push_back(c);
  }
  return v;
}

template <class S>
struct Result {
  std::vector<S> cum, scores, grad, dfeatures;
};

// One forward (dropout p with rng seed 7) + backward from a fixed dcum, with
// every input given in float precision (so float and double see equal inputs).
template <class S>
Result<S> run(const Case& c, int threads, double p) {
  Network<S> net(c.dims, threads);
  EXPECT_EQ(net.threads(), threads);
  std::mt19937_64 rng(11);
  std::vector<float> pf;
  init_params(net.layout(), rng, pf);
  const std::vector<S> params(pf.begin(), pf.end());
  BatchInput<S> in;
  in.B = static_cast<int>(c.lengths.size());
  in.T = c.T;
  in.lengths = c.lengths;
  in.features.resize(size_t(in.B) * c.T * c.dims.input_dim);
  for (S& x : in.features) x = static_cast<float>(2 * uniform01(rng) - 1);
  std::vector<S> dcum(size_t(in.B) * (c.T + 1) * c.dims.num_classes);
  for (S& x : dcum) x = static_cast<float>(2 * uniform01(rng) - 1);
  std::mt19937_64 drop_rng(7);
  Activations<S> act;
  net.forward(params, in, p, &drop_rng, act);
  Result<S> r;
  r.cum = act.cum;
  r.scores.assign(act.scores.data(), act.scores.data() + act.scores.size());
  net.backward(params, act, dcum, r.grad, &r.dfeatures);
  return r;
}

template <class S>
bool bitwise_equal(const std::vector<S>& a, const std::vector<S>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0);
}

template <class S>
void check_invariance() {
  for (const Case& c : cases())
    for (double p : {0.0, 0.25}) {
      const Result<S> one = run<S>(c, 1, p);
      for (int threads : {2, 3, 7}) {
        const Result<S> r = run<S>(c, threads, p);
        const std::string what = std::string(c.name) + ", dropout " + std::to_string(p) + ", " +
                                 std::to_string(threads) + " threads vs 1";
        EXPECT_TRUE(bitwise_equal(r.cum, one.cum)) << "cum differs: " << what;
        EXPECT_TRUE(bitwise_equal(r.scores, one.scores)) << "scores differ: " << what;
        EXPECT_TRUE(bitwise_equal(r.grad, one.grad)) << "parameter gradients differ: " << what;
        EXPECT_TRUE(bitwise_equal(r.dfeatures, one.dfeatures)) << "feature gradients differ: " << what;
      }
    }
}

// max |got - want| <= tol * max |want| and ||got - want|| <= tol * ||want||;
// with scale > 0: max |got - want| <= tol * scale (a tensor that is 0 in exact math).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, size_t from, size_t n, double tol,
                  const std::string& what, double scale = 0) {
  ASSERT_LE(from + n, got.size()) << what;
  ASSERT_EQ(got.size(), want.size()) << what;
  double maxerr = 0, maxref = 0, err2 = 0, ref2 = 0;
  for (size_t i = from; i < from + n; ++i) {
    const double e = std::abs(double(got[i]) - want[i]);
    maxerr = std::max(maxerr, e);
    maxref = std::max(maxref, std::abs(want[i]));
    err2 += e * e;
    ref2 += want[i] * want[i];
  }
  if (scale > 0) {
    EXPECT_LE(maxerr, tol * scale) << what;
    return;
  }
  ASSERT_GT(maxref, 0.0) << what << ": the oracle is all zero (the test would prove nothing)";
  EXPECT_LE(maxerr, tol * maxref) << what;
  EXPECT_LE(std::sqrt(err2), tol * std::sqrt(ref2)) << what;
}

}  // namespace

TEST(CpuNetworkThreads, BitwiseIdenticalForAnyThreadCountFloat) { check_invariance<float>(); }
TEST(CpuNetworkThreads, BitwiseIdenticalForAnyThreadCountDouble) { check_invariance<double>(); }

TEST(CpuNetworkThreads, FloatMatchesSingleThreadedFloat64) {
  for (const Case& c : cases())
    for (double p : {0.0, 0.25}) {
      const Result<double> ref = run<double>(c, 1, p);
      for (int threads : {1, 3}) {
        const Result<float> r = run<float>(c, threads, p);
        const std::string what = std::string(c.name) + ", dropout " + std::to_string(p) + ", float with " +
                                 std::to_string(threads) + " threads vs float64 with 1: ";
        expect_close(r.cum, ref.cum, 0, ref.cum.size(), 1e-5, what + "cum");
        expect_close(r.scores, ref.scores, 0, ref.scores.size(), 1e-5, what + "scores");
        expect_close(r.dfeatures, ref.dfeatures, 0, ref.dfeatures.size(), 1e-5, what + "d features");
        const ParamLayout layout(c.dims);
        for (const ParamInfo& pi : layout.params()) {
          if (pi.name.rfind("crf.", 0) == 0 && pi.name != "crf.projection.weight" && pi.name != "crf.projection.bias")
            continue;  // CRF parameters: not the encoder's (left 0)
          if (pi.name == "crf.projection.bias") {
            // 0 in exact math (the centered cumsum removes each utterance's
            // mean score): rounding noise, measured against d projection.weight.
            const ParamInfo& wp = layout.get("crf.projection.weight");
            double scale = 0;
            for (size_t i = 0; i < wp.size; ++i) scale = std::max(scale, std::abs(ref.grad[wp.offset + i]));
            expect_close(r.grad, ref.grad, pi.offset, pi.size, 1e-5, what + "d " + pi.name, scale);
            continue;
          }
          expect_close(r.grad, ref.grad, pi.offset, pi.size, 1e-5, what + "d " + pi.name);
        }
      }
    }
}

// Threads resolve as documented: > 0 as given, 0 = all cores, < 0 = the process default.
TEST(CpuNetworkThreads, ThreadCountResolution) {
  ModelDims d;
  Network<float> net(d, 5);
  EXPECT_EQ(net.threads(), 5);
  net.set_threads(0);
  EXPECT_GE(net.threads(), 1);
  set_default_threads(3);
  Network<float> dflt(d);
  EXPECT_EQ(dflt.threads(), 3);
  set_default_threads(0);
  EXPECT_EQ(dflt.threads(), net.threads());
}
