// cuda_crf_bench: times the cuda semi-CRF backend on the issue-3 table
// (B,T) in {32x200, 32x400, 32x800, 8x10000, 32x400 K=1}, C=39, K=30,
// random zero-centred scores N(0, 3^2), parameters N(0, 1).
//
// Each backend call is synchronous (it reads back a status word), so a call's
// host wall time is its full device time, validation included. Warm-up calls
// first, then --reps timed calls rotating over 3 input sets (so that repeated
// calls do not just re-read one set from L2); the median is printed.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/cuda/cuda_backend.h"

using namespace timitseg::crf;

namespace {

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t n) : p(device_alloc(n)) {}
  ~Buf() { device_free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

struct InputSet {
  std::unique_ptr<Buf> cum, A, D, s, e, len, lab;
};

InputSet make_inputs(const Dims& d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nrm(0.0, 1.0);
  const size_t B = d.B, T = d.T, K = d.K, C = d.C;
  std::vector<float> cum(B * (T + 1) * C), A(C * C), D(K * C), s(C), e(C);
  std::vector<int32_t> len(B, static_cast<int32_t>(T)), lab(B * T);
  std::vector<double> x(T * C);
  for (size_t b = 0; b < B; ++b) {
    for (auto& v : x) v = 3.0 * nrm(rng);
    for (size_t c = 0; c < C; ++c) {
      double mean = 0, run = 0;
      for (size_t t = 0; t < T; ++t) mean += x[t * C + c];
      mean /= static_cast<double>(T);
      cum[(b * (T + 1)) * C + c] = 0.0f;
      for (size_t t = 0; t < T; ++t) {
        run += x[t * C + c] - mean;
        cum[(b * (T + 1) + t + 1) * C + c] = static_cast<float>(run);
      }
    }
    // labels: runs of 1..12 frames (TIMIT phones average ~8 frames at 10 ms)
    size_t t = 0;
    while (t < T) {
      const size_t r = std::min<size_t>(1 + rng() % 12, T - t);
      const int32_t c = static_cast<int32_t>(rng() % C);
      for (size_t i = 0; i < r; ++i) lab[b * T + t + i] = c;
      t += r;
    }
  }
  for (auto* v : {&A, &D, &s, &e})
    for (auto& y : *v) y = static_cast<float>(nrm(rng));
  InputSet in;
  auto up = [](const auto& v) {
    auto b = std::make_unique<Buf>(v.size() * sizeof(v[0]));
    copy_to_device(b->p, v.data(), v.size() * sizeof(v[0]));
    return b;
  };
  in.cum = up(cum);
  in.A = up(A);
  in.D = up(D);
  in.s = up(s);
  in.e = up(e);
  in.len = up(len);
  in.lab = up(lab);
  return in;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times the cuda semi-CRF backend (forward, forward+backward, Viterbi) on the issue-3 sizes."};
  int reps = 20;
  int warmup = 3;
  std::vector<std::string> sizes = {"32x200x30", "32x400x30", "32x800x30", "8x10000x30", "32x400x1"};
  int64_t C = 39;
  app.add_option("--reps", reps, "timed calls per measurement (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed calls before timing")->check(CLI::NonNegativeNumber);
  app.add_option("--sizes", sizes, "list of BxTxK sizes")->capture_default_str();
  app.add_option("-C,--classes", C, "number of labels C")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    auto be = make_cuda_backend();
    std::printf("device: %s\n", cuda_device_name().c_str());
    std::printf("%-12s %6s %12s %12s %12s %14s\n", "B x T", "K", "forward ms", "fwd+bwd ms", "viterbi ms",
                "workspace MiB");
    for (const std::string& sz : sizes) {
      Dims d;
      if (std::sscanf(sz.c_str(), "%ldx%ldx%ld", &d.B, &d.T, &d.K) != 3)
        throw std::invalid_argument("--sizes entry '" + sz + "' is not BxTxK");
      d.C = C;
      const size_t B = d.B, T = d.T, K = d.K, Cz = d.C;
      std::vector<InputSet> sets;
      for (uint64_t i = 0; i < 3; ++i) sets.push_back(make_inputs(d, 1234 + i));
      const size_t wsb = be->workspace_bytes(d);
      Buf ws(wsb), logz(B * 8), gold(B * 8), gcum(B * (T + 1) * Cz * 4), gA(Cz * Cz * 4), gD(K * Cz * 4), gs(Cz * 4),
          ge(Cz * 4), vs(B * 8), segs(B * T * 12), nseg(B * 4);
      auto params = [&](const InputSet& in) {
        Params p;
        p.cum_scores = static_cast<const float*>(in.cum->p);
        p.transition = static_cast<const float*>(in.A->p);
        p.duration_bias = static_cast<const float*>(in.D->p);
        p.start = static_cast<const float*>(in.s->p);
        p.end = static_cast<const float*>(in.e->p);
        p.lengths = static_cast<const int32_t*>(in.len->p);
        return p;
      };
      Grads g;
      g.cum_scores = static_cast<float*>(gcum.p);
      g.transition = static_cast<float*>(gA.p);
      g.duration_bias = static_cast<float*>(gD.p);
      g.start = static_cast<float*>(gs.p);
      g.end = static_cast<float*>(ge.p);
      auto time_it = [&](auto&& call) {
        for (int i = 0; i < warmup; ++i) call(sets[i % 3]);
        device_synchronize();
        std::vector<double> ms;
        for (int i = 0; i < reps; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          call(sets[i % 3]);
          device_synchronize();
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        return median(ms);
      };
      const double fwd = time_it([&](const InputSet& in) {
        be->log_partition(d, params(in), static_cast<double*>(logz.p), ws.p);
      });
      const double fb = time_it([&](const InputSet& in) {
        be->backward(d, params(in), static_cast<const int32_t*>(in.lab->p), 1.0 / d.B, static_cast<double*>(logz.p),
                     static_cast<double*>(gold.p), g, ws.p);
      });
      const double vit = time_it([&](const InputSet& in) {
        be->viterbi(d, params(in), static_cast<double*>(vs.p), static_cast<int32_t*>(segs.p),
                    static_cast<int32_t*>(nseg.p), ws.p);
      });
      char name[64];
      std::snprintf(name, sizeof(name), "%ld x %ld", d.B, d.T);
      std::printf("%-12s %6ld %12.3f %12.3f %12.3f %14.1f\n", name, d.K, fwd, fb, vit, wsb / 1048576.0);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
