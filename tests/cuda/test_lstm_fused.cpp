// Tests of the fused persistent BiLSTM layer kernels (model/cuda/lstm_fused.h)
// against a plain float64 LSTM written here from the torch.nn.LSTM equations
// (forward and backward through time, both directions, variable lengths),
// itself checked against central finite differences. The GPU tests skip with
// a message without a CUDA device, and with supported()'s reason on GPUs
// without thread-block clusters (compute capability < 9.0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "model/cuda/lstm_fused.h"

namespace timitseg::model::fused {
namespace {

// ---------------------------------------------------------------------------
// Problem and float64 oracle.

struct Problem {
  int B = 0, T = 0, H = 0;
  std::vector<int32_t> len;  // [B]
  std::vector<float> xg;     // [B][T][2][4H]
  std::vector<float> w;      // [2][4H][H]
  std::vector<float> dy;     // [B][T][2H], NaN on padding frames (must be ignored)
};

struct Result {  // float64 oracle outputs, same layouts as the kernel's
  std::vector<double> y, gates, cell, hprev, dxg;
};

Problem make_problem(int B, int T, int H, std::vector<int32_t> len, uint64_t seed) {
  Problem p;
  p.B = B;
  p.T = T;
  p.H = H;
  p.len = std::move(len);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nrm(0.0f, 1.0f);
  // A bit wider than torch's U(-1/sqrt(H), 1/sqrt(H)) so that the gates are
  // not all near 0.5 and the recurrence matters.
  const float a = 1.5f / std::sqrt(static_cast<float>(H));
  std::uniform_real_distribution<float> uni(-a, a);
  p.xg.resize(size_t(B) * T * 2 * 4 * H);
  for (float& v : p.xg) v = nrm(rng);
  p.w.resize(size_t(2) * 4 * H * H);
  for (float& v : p.w) v = uni(rng);
  p.dy.resize(size_t(B) * T * 2 * H);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < 2 * H; ++k)
        p.dy[(size_t(b) * T + t) * 2 * H + k] = t < p.len[b] ? nrm(rng) : std::numeric_limits<float>::quiet_NaN();
  return p;
}

double sigm(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// torch.nn.LSTM, one bidirectional layer, recurrent part only (xg holds
// W_ih x + b_ih + b_hh), utterance b run on its own frames [0, len_b); the
// reverse direction starts at t = len_b - 1. loss = sum over valid frames of dy . y.
Result oracle(const Problem& p, bool with_backward = true) {
  const int B = p.B, T = p.T, H = p.H, G = 4 * H;
  Result r;
  r.y.assign(size_t(B) * T * 2 * H, 0.0);
  r.gates.assign(size_t(2) * B * T * G, 0.0);
  r.cell.assign(size_t(2) * B * T * H, 0.0);
  r.hprev.assign(size_t(2) * B * T * H, 0.0);
  r.dxg.assign(size_t(B) * T * 2 * G, 0.0);
  auto W = [&](int d, int row, int k) { return double(p.w[(size_t(d) * G + row) * H + k]); };
  for (int d = 0; d < 2; ++d)
    for (int b = 0; b < B; ++b) {
      const int L = p.len[b];
      std::vector<int> order(L);
      for (int s = 0; s < L; ++s) order[s] = d == 0 ? s : L - 1 - s;
      std::vector<double> h(H, 0.0), c(H, 0.0), pre(G);
      for (int t : order) {
        for (int row = 0; row < G; ++row) {
          double v = p.xg[((size_t(b) * T + t) * 2 + d) * G + row];
          for (int k = 0; k < H; ++k) v += W(d, row, k) * h[k];
          pre[row] = v;
        }
        const size_t f0 = (size_t(d) * B + b) * T + t;  // frame in [2][B][T]
        for (int j = 0; j < H; ++j) {
          const double i = sigm(pre[j]), f = sigm(pre[H + j]), g = std::tanh(pre[2 * H + j]),
                       o = sigm(pre[3 * H + j]);
          r.gates[f0 * G + j] = i;
          r.gates[f0 * G + H + j] = f;
          r.gates[f0 * G + 2 * H + j] = g;
          r.gates[f0 * G + 3 * H + j] = o;
          r.hprev[f0 * H + j] = h[j];
          c[j] = f * c[j] + i * g;
          r.cell[f0 * H + j] = c[j];
        }
        for (int j = 0; j < H; ++j) {
          h[j] = r.gates[f0 * G + 3 * H + j] * std::tanh(c[j]);
          r.y[(size_t(b) * T + t) * 2 * H + d * H + j] = h[j];
        }
      }
      if (!with_backward) continue;
      std::vector<double> dh(H, 0.0), dc(H, 0.0), dpre(G);
      for (int s = L - 1; s >= 0; --s) {
        const int t = order[s];
        const size_t f0 = (size_t(d) * B + b) * T + t;
        for (int j = 0; j < H; ++j) {
          const double i = r.gates[f0 * G + j], f = r.gates[f0 * G + H + j], g = r.gates[f0 * G + 2 * H + j],
                       o = r.gates[f0 * G + 3 * H + j];
          const double ct = r.cell[f0 * H + j], tc = std::tanh(ct);
          const double cprev = s > 0 ? r.cell[((size_t(d) * B + b) * T + order[s - 1]) * H + j] : 0.0;
          const double dht = double(p.dy[(size_t(b) * T + t) * 2 * H + d * H + j]) + dh[j];
          const double dct = dht * o * (1.0 - tc * tc) + dc[j];
          dpre[j] = dct * g * i * (1.0 - i);
          dpre[H + j] = dct * cprev * f * (1.0 - f);
          dpre[2 * H + j] = dct * i * (1.0 - g * g);
          dpre[3 * H + j] = dht * tc * o * (1.0 - o);
          dc[j] = dct * f;
        }
        std::fill(dh.begin(), dh.end(), 0.0);
        for (int row = 0; row < G; ++row) {
          r.dxg[((size_t(b) * T + t) * 2 + d) * G + row] = dpre[row];
          for (int k = 0; k < H; ++k) dh[k] += dpre[row] * W(d, row, k);
        }
      }
    }
  return r;
}

// The oracle's backward against central finite differences of
// loss = sum_{valid b,t} dy[b][t] . y[b][t] with respect to xg (CPU only).
TEST(LstmFusedOracle, BackwardMatchesFiniteDifferences) {
  Problem p = make_problem(3, 5, 3, {5, 2, 4}, 11);
  const Result r = oracle(p);
  auto loss = [&](const Problem& q) {
    const Result o = oracle(q, false);
    double l = 0;
    for (int b = 0; b < q.B; ++b)
      for (int t = 0; t < q.len[b]; ++t)
        for (int k = 0; k < 2 * q.H; ++k) {
          const size_t n = (size_t(b) * q.T + t) * 2 * q.H + k;
          l += double(q.dy[n]) * o.y[n];
        }
    return l;
  };
  // xg is float32: divide by the step actually taken (x0 +- eps rounded to float).
  const float eps = 1.0f / 4096.0f;
  double worst = 0;
  for (size_t n = 0; n < p.xg.size(); ++n) {
    const float x0 = p.xg[n], xp = x0 + eps, xm = x0 - eps;
    p.xg[n] = xp;
    const double lp = loss(p);
    p.xg[n] = xm;
    const double lm = loss(p);
    p.xg[n] = x0;
    const double fd = (lp - lm) / (double(xp) - double(xm));
    worst = std::max(worst, std::abs(fd - r.dxg[n]));
    EXPECT_NEAR(fd, r.dxg[n], 1e-5) << "xg flat index " << n;
  }
  // Padding frames have no gradient; at least one entry is far from 0.
  double maxabs = 0;
  for (double v : r.dxg) maxabs = std::max(maxabs, std::abs(v));
  EXPECT_GT(maxabs, 0.05);
  EXPECT_LT(worst, 1e-5);
}

// ---------------------------------------------------------------------------
// Host checks that need no GPU.

TEST(LstmFused, RefusesUnsupportedSizes) {
  std::string why;
  EXPECT_FALSE(supported(100, &why));
  EXPECT_NE(why.find("100"), std::string::npos) << why;
  EXPECT_THROW(forward(0, 5, 128, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(backward(2, 5, 100, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

// ---------------------------------------------------------------------------
// GPU runs.

#define SKIP_WITHOUT_FUSED(H)                                                              \
  do {                                                                                     \
    if (::timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found"; \
    std::string why_;                                                                      \
    if (!supported(H, &why_)) GTEST_SKIP() << why_;                                        \
  } while (0)

struct Gpu {  // float32 outputs of the kernels
  std::vector<float> y, gates, cell, hprev, dxg;
};

// Runs forward then backward; every output buffer is first filled with NaN
// (0xff bytes) so that an element the kernels do not write shows up.
Gpu run_gpu(const Problem& p) {
  const size_t B = p.B, T = p.T, H = p.H;
  Buffer xg(Memory::device, 0), w(Memory::device, 0), len(Memory::device, 0), dy(Memory::device, 0);
  xg.upload(p.xg);
  w.upload(p.w);
  len.upload(p.len);
  dy.upload(p.dy);
  const size_t ny = B * T * 2 * H, ng = 2 * B * T * 4 * H, nc = 2 * B * T * H, nx = B * T * 2 * 4 * H;
  Buffer y(Memory::device, ny * 4), gates(Memory::device, ng * 4), cell(Memory::device, nc * 4),
      hprev(Memory::device, nc * 4), dxg(Memory::device, nx * 4);
  cuda::memset_device(y.data(), 0xff, ny * 4);
  cuda::memset_device(gates.data(), 0xff, ng * 4);
  cuda::memset_device(cell.data(), 0xff, nc * 4);
  cuda::memset_device(hprev.data(), 0xff, nc * 4);
  cuda::memset_device(dxg.data(), 0xff, nx * 4);
  forward(p.B, p.T, p.H, xg.as<float>(), w.as<float>(), len.as<int32_t>(), y.as<float>(), gates.as<float>(),
          cell.as<float>(), hprev.as<float>(), nullptr);
  backward(p.B, p.T, p.H, w.as<float>(), len.as<int32_t>(), dy.as<float>(), gates.as<float>(), cell.as<float>(),
           dxg.as<float>(), nullptr);
  cuda::synchronize();
  Gpu g;
  g.y.resize(ny);
  g.gates.resize(ng);
  g.cell.resize(nc);
  g.hprev.resize(nc);
  g.dxg.resize(nx);
  y.download(g.y.data(), ny * 4);
  gates.download(g.gates.data(), ng * 4);
  cell.download(g.cell.data(), nc * 4);
  hprev.download(g.hprev.data(), nc * 4);
  dxg.download(g.dxg.data(), nx * 4);
  return g;
}

// "[i][j][k]" of a flat index in a tensor of the given dims.
std::string index_of(size_t n, const std::vector<size_t>& dims) {
  std::vector<size_t> idx(dims.size());
  for (size_t a = dims.size(); a-- > 0;) {
    idx[a] = n % dims[a];
    n /= dims[a];
  }
  std::ostringstream os;
  for (size_t v : idx) os << "[" << v << "]";
  return os.str();
}

// got within rel * max|want| of want everywhere; exactly 0 where pad(index).
template <class Pad>
void expect_close(const char* name, const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<size_t>& dims, Pad pad, double rel = 1e-4) {
  ASSERT_EQ(got.size(), want.size()) << name;
  double maxabs = 0;
  for (double v : want) maxabs = std::max(maxabs, std::abs(v));
  ASSERT_GT(maxabs, 0.0) << name << ": the oracle is all zero (a test that cannot fail)";
  double worst = -1;
  size_t worst_at = 0;
  size_t pad_bad = 0, pad_first = 0, pad_count = 0;
  for (size_t n = 0; n < got.size(); ++n) {
    if (pad(n)) {
      ++pad_count;
      if (got[n] != 0.0f || std::signbit(got[n])) {
        if (pad_bad++ == 0) pad_first = n;
      }
      continue;
    }
    const double e = std::isfinite(got[n]) ? std::abs(double(got[n]) - want[n]) : std::numeric_limits<double>::infinity();
    if (e > worst) {
      worst = e;
      worst_at = n;
    }
  }
  EXPECT_EQ(pad_bad, 0u) << name << ": " << pad_bad << " of " << pad_count << " padding elements are not 0, first "
                         << index_of(pad_first, dims) << " = " << got[pad_first];
  EXPECT_LE(worst, rel * maxabs) << name << ": worst error " << worst << " (max |value| " << maxabs << ") at "
                                 << index_of(worst_at, dims) << ": got " << got[worst_at] << ", want "
                                 << want[worst_at];
}

void check_case(const Problem& p) {
  const Result want = oracle(p);
  const Gpu got = run_gpu(p);
  const size_t B = p.B, T = p.T, H = p.H;
  auto pad_bt = [&](size_t b, size_t t) { return t >= size_t(p.len[b]); };
  // [B][T][X] and [2][B][T][X] tensors.
  auto pad3 = [&](size_t X) { return [&, X](size_t n) { return pad_bt((n / X / T) % B, (n / X) % T); }; };
  expect_close("y [B][T][2H]", got.y, want.y, {B, T, 2 * H}, pad3(2 * H));
  expect_close("gates [2][B][T][4H]", got.gates, want.gates, {2, B, T, 4 * H}, pad3(4 * H));
  expect_close("cell [2][B][T][H]", got.cell, want.cell, {2, B, T, H}, pad3(H));
  expect_close("hprev [2][B][T][H]", got.hprev, want.hprev, {2, B, T, H}, pad3(H));
  expect_close("dxg [B][T][2][4H]", got.dxg, want.dxg, {B, T, 2, 4 * H}, pad3(2 * 4 * H));
  // Deterministic: a second run gives the same bits.
  const Gpu again = run_gpu(p);
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(got.y, again.y)) << "y differs between two runs";
  EXPECT_TRUE(same(got.gates, again.gates)) << "gates differ between two runs";
  EXPECT_TRUE(same(got.cell, again.cell)) << "cell differs between two runs";
  EXPECT_TRUE(same(got.hprev, again.hprev)) << "hprev differs between two runs";
  EXPECT_TRUE(same(got.dxg, again.dxg)) << "dxg differs between two runs";
}

std::vector<int32_t> random_lengths(int B, int lo, int hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> len(B);
  for (auto& l : len) l = lo + static_cast<int32_t>(rng() % uint64_t(hi - lo + 1));
  return len;
}

TEST(LstmFused, SmallH64) {
  SKIP_WITHOUT_FUSED(64);
  check_case(make_problem(3, 7, 64, {7, 1, 4}, 1));
}

TEST(LstmFused, Batch32T400H128) {
  SKIP_WITHOUT_FUSED(128);
  std::vector<int32_t> len = random_lengths(32, 150, 400, 2);
  len[5] = 400;
  len[17] = 1;
  check_case(make_problem(32, 400, 128, len, 2));
}

TEST(LstmFused, PartialGroupH128) {  // B = 5: not a multiple of the group size
  SKIP_WITHOUT_FUSED(128);
  std::vector<int32_t> len = random_lengths(5, 1, 50, 3);
  len[2] = 50;
  check_case(make_problem(5, 50, 128, len, 3));
}

TEST(LstmFused, TwoGroupsH256) {  // B = 9: a full group and a group of one
  SKIP_WITHOUT_FUSED(256);
  std::vector<int32_t> len = random_lengths(9, 1, 20, 4);
  len[0] = 20;
  check_case(make_problem(9, 20, 256, len, 4));
}

}  // namespace
}  // namespace timitseg::model::fused
