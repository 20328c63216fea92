// align_banded_bench: times the host passes of a long forced alignment
// (crf/cpu/align_banded.h) on one thread: the forward and the backward
// centre passes (together: the band placement) and one banded pass, on a
// planted problem of --frames frames: random runs of 1..--max-run frames, each
// labelled with a random class, frame scores N(0,1) plus --signal on the run's
// class, K = --max-duration, C = --classes, random transitions and duration
// biases N(0, 0.5^2), onset scores N(0, 0.5^2) when --onset. One warm-up, then
// --repeats timed runs of each pass; prints the median and the min seconds,
// the band's cells and checksums of the spans and of the centres (equal
// across builds whose passes give the same results).
//
//   align_banded_bench --frames 60000 --repeats 5
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "crf/cpu/align_banded.h"

using namespace timitseg::crf;

namespace {

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Timing {
  double median = 0, min = 0;
};

Timing timed(int repeats, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) s.push_back(seconds_of(fn));
  std::sort(s.begin(), s.end());
  return Timing{s[s.size() / 2], s.front()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times the host passes of the banded forced alignment (band placement, banded pass) on one thread"};
  int64_t frames = 60000, K = 60, C = 39;
  int max_run = 16, repeats = 5;
  double signal = 2.0;
  bool onset = false;
  uint32_t seed = 1;
  app.add_option("--frames", frames, "Frames of the planted recording (L)")->check(CLI::Range(100, 2000000));
  app.add_option("--max-duration", K, "Longest segment K (frames)")->check(CLI::Range(2, 1000));
  app.add_option("--classes", C, "Classes C")->check(CLI::Range(2, 200));
  app.add_option("--max-run", max_run, "Longest planted run (frames), <= --max-duration")->check(CLI::Range(1, 1000));
  app.add_option("--signal", signal, "Score added to the planted class of every frame");
  app.add_flag("--onset", onset, "Add onset scores");
  app.add_option("--repeats", repeats, "Timed runs of each pass (after one warm-up)")->check(CLI::Range(1, 100));
  app.add_option("--seed", seed, "Random seed");
  CLI11_PARSE(app, argc, argv);
  if (max_run > K) {
    std::fprintf(stderr, "error: --max-run %d exceeds --max-duration %lld\n", max_run, static_cast<long long>(K));
    return 2;
  }

  std::mt19937 rng(seed);
  std::normal_distribution<float> unit(0.f, 1.f), half(0.f, 0.5f);
  std::uniform_int_distribution<int32_t> ucls(0, static_cast<int32_t>(C - 1)), urun(1, max_run);
  std::vector<int32_t> y;  // the planted labels [np], one a run
  std::vector<int32_t> frame_class(static_cast<size_t>(frames));
  for (int64_t t = 0; t < frames;) {
    int32_t c = ucls(rng);
    if (!y.empty() && c == y.back()) c = (c + 1) % static_cast<int32_t>(C);
    const int64_t run = std::min<int64_t>(urun(rng), frames - t);
    for (int64_t i = 0; i < run; ++i) frame_class[t + i] = c;
    y.push_back(c);
    t += run;
  }
  const int64_t np = static_cast<int64_t>(y.size());
  std::vector<float> cum(static_cast<size_t>((frames + 1) * C), 0.f);  // [L+1][C]
  for (int64_t t = 0; t < frames; ++t)
    for (int64_t c = 0; c < C; ++c)
      cum[(t + 1) * C + c] = cum[t * C + c] + unit(rng) + (c == frame_class[t] ? static_cast<float>(signal) : 0.f);
  std::vector<float> A(static_cast<size_t>(C * C)), D(static_cast<size_t>(K * C)), on;
  for (float& v : A) v = half(rng);
  for (float& v : D) v = half(rng);
  if (onset) {
    on.resize(static_cast<size_t>(frames * C));
    for (float& v : on) v = half(rng);
  }
  const int32_t length = static_cast<int32_t>(frames);
  Params p;
  p.cum_scores = cum.data();
  p.transition = A.data();
  p.duration_bias = D.data();
  p.lengths = &length;
  p.onset = onset ? on.data() : nullptr;
  const cpu::AlignUtterance u{frames, np, K, C, y.data(), nullptr, cum.data(), p.onset, &p};

  const int64_t W = cpu::kBandStartWidth;
  std::vector<int32_t> fwd, bwd;
  const Timing tf = timed(repeats, [&] { fwd = cpu::forward_centres(u, W); });
  const Timing tb = timed(repeats, [&] { bwd = cpu::backward_centres(u, W); });
  const cpu::Band band = cpu::band_between(fwd, bwd, np, W / 2);
  std::vector<int32_t> spans(static_cast<size_t>(2 * np));
  cpu::BandPass pass;
  const Timing tp = timed(repeats, [&] { pass = cpu::align_in_band(u, band, spans.data()); });
  auto fnv1a = [](const std::vector<int32_t>& xs) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t v : xs) h = (h ^ static_cast<uint32_t>(v)) * 1099511628211ull;
    return static_cast<unsigned long long>(h);
  };
  std::printf("frames %lld, phones %lld, K %lld, C %lld, onset %s, band cells %lld (mean %.1f a row)\n",
              static_cast<long long>(frames), static_cast<long long>(np), static_cast<long long>(K),
              static_cast<long long>(C), onset ? "yes" : "no", static_cast<long long>(band.cells()),
              static_cast<double>(band.cells()) / static_cast<double>(frames + 1));
  std::printf("forward centres   median %.4f s  min %.4f s\n", tf.median, tf.min);
  std::printf("backward centres  median %.4f s  min %.4f s\n", tb.median, tb.min);
  std::printf("banded pass       median %.4f s  min %.4f s\n", tp.median, tp.min);
  std::printf("score %.17g, touches edge %s; checksums: spans %016llx, forward centres %016llx, backward %016llx\n",
              pass.score, pass.touches_edge ? "yes" : "no", fnv1a(spans), fnv1a(fwd), fnv1a(bwd));
  return 0;
}
