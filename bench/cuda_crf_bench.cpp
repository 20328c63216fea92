// cuda_crf_bench: times the cuda semi-CRF backend on the table of sizes
// (B,T) in {32x200, 32x400, 32x800, 8x10000, 32x400 K=1}, C=39, K=30,
// random zero-centred scores N(0, 3^2), parameters N(0, 1).
//
// Each backend call is synchronous (it reads back a status word), so a call's
// host wall time is its full device time, validation included. Warm-up calls
// first, then --reps timed calls rotating over 3 input sets (so that repeated
// calls do not just re-read one set from L2); the median is printed. The
// timing loop is crf::time_calls, the one `timitseg bench crf` uses.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/session.h"
#include "crf/timing.h"

using namespace timitseg::crf;
using timitseg::Buffer;
using timitseg::Memory;

namespace {

struct InputSet {
  Buffer cum, A, D, s, e, len, lab;
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
  for (Buffer* b : {&in.cum, &in.A, &in.D, &in.s, &in.e, &in.len, &in.lab}) b->set_memory(Memory::device);
  in.cum.upload(cum);
  in.A.upload(A);
  in.D.upload(D);
  in.s.upload(s);
  in.e.upload(e);
  in.len.upload(len);
  in.lab.upload(lab);
  return in;
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
    auto be = make_backend(BackendKind::cuda);
    std::printf("device: %s\n", timitseg::cuda::device_name().c_str());
    std::printf("%-12s %6s %12s %12s %12s %14s\n", "B x T", "K", "forward ms", "fwd+bwd ms", "viterbi ms",
                "workspace MiB");
    Session session(*be);  // workspace kept across sizes, grown for the largest
    for (const std::string& sz : sizes) {
      Dims d;
      if (std::sscanf(sz.c_str(), "%ldx%ldx%ld", &d.B, &d.T, &d.K) != 3)
        throw std::invalid_argument("--sizes entry '" + sz + "' is not BxTxK");
      d.C = C;
      const size_t B = d.B, T = d.T, K = d.K, Cz = d.C;
      std::vector<InputSet> sets;
      for (uint64_t i = 0; i < 3; ++i) sets.push_back(make_inputs(d, 1234 + i));
      const size_t wsb = be->workspace_bytes(d);
      session.workspace(d);
      const Memory dev = Memory::device;
      Buffer logz(dev, B * 8), gold(dev, B * 8), gcum(dev, B * (T + 1) * Cz * 4), gA(dev, Cz * Cz * 4),
          gD(dev, K * Cz * 4), gs(dev, Cz * 4), ge(dev, Cz * 4), vs(dev, B * 8), segs(dev, B * T * 12),
          nseg(dev, B * 4);
      auto params = [&](const InputSet& in) {
        Params p;
        p.cum_scores = in.cum.as<float>();
        p.transition = in.A.as<float>();
        p.duration_bias = in.D.as<float>();
        p.start = in.s.as<float>();
        p.end = in.e.as<float>();
        p.lengths = in.len.as<int32_t>();
        return p;
      };
      Grads g;
      g.cum_scores = gcum.as<float>();
      g.transition = gA.as<float>();
      g.duration_bias = gD.as<float>();
      g.start = gs.as<float>();
      g.end = ge.as<float>();
      auto time_it = [&](auto&& call) {
        return time_calls(*be, warmup, reps, [&](int i) { call(sets[i % 3]); }).median_ms;
      };
      const double fwd = time_it([&](const InputSet& in) { session.log_partition(d, params(in), logz.as<double>()); });
      const double fb = time_it([&](const InputSet& in) {
        session.backward(d, params(in), in.lab.as<int32_t>(), 1.0 / d.B, logz.as<double>(), gold.as<double>(), g);
      });
      const double vit = time_it([&](const InputSet& in) {
        session.viterbi(d, params(in), vs.as<double>(), segs.as<int32_t>(), nseg.as<int32_t>());
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
