// cpu_encoder_bench: times one training step of the CPU encoder
// (model/cpu/network: forward with dropout + backward, Network<float>) at a
// given size. Random utterance lengths in [--min-frames, --max-frames] from a
// fixed seed, T = the longest; random features N(0,1), PyTorch-default
// parameters and a random d loss / d cum. One warm-up step, then --repeats
// timed steps; prints the median ms per step and frames/s (valid frames, i.e.
// the sum of the lengths, per second), plus min and max.
//
//   cpu_encoder_bench --batch 32 --hidden 256 --layers 3 --input-dim 39 \
//       --classes 39 --min-frames 150 --max-frames 600 --threads 2 --repeats 5
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "model/cpu/network.h"
#include "model/params.h"

using namespace timitseg::model;

int main(int argc, char** argv) {
  CLI::App app{"Times forward+backward of the CPU encoder (Network<float>)"};
  int batch = 32, hidden = 256, layers = 3, input_dim = 39, classes = 39, min_frames = 150, max_frames = 600;
  int threads = 0, repeats = 5;
  double dropout = 0.1;
  uint64_t seed = 1;
  app.add_option("--batch", batch, "Utterances per batch")->check(CLI::Range(1, 4096));
  app.add_option("--hidden", hidden, "Hidden width W (2 x per-direction H)")->check(CLI::Range(2, 8192));
  app.add_option("--layers", layers, "BiLSTM layers")->check(CLI::Range(1, 64));
  app.add_option("--input-dim", input_dim, "Feature dimension D")->check(CLI::Range(1, 8192));
  app.add_option("--classes", classes, "Output classes C")->check(CLI::Range(1, 8192));
  app.add_option("--min-frames", min_frames, "Shortest utterance")->check(CLI::Range(1, 1000000));
  app.add_option("--max-frames", max_frames, "Longest utterance")->check(CLI::Range(1, 1000000));
  app.add_option("--threads", threads, "Encoder threads (0 = all cores)")->check(CLI::Range(0, 1024));
  app.add_option("--repeats", repeats, "Timed steps (the median is printed)")->check(CLI::Range(1, 100000));
  app.add_option("--dropout", dropout, "Dropout probability (0 = off)")->check(CLI::Range(0.0, 0.99));
  app.add_option("--seed", seed, "Seed of lengths, features, parameters");
  CLI11_PARSE(app, argc, argv);
  if (min_frames > max_frames) {
    std::fprintf(stderr, "cpu_encoder_bench: --min-frames %d > --max-frames %d\n", min_frames, max_frames);
    return 2;
  }
  if (hidden % 2 != 0) {
    std::fprintf(stderr, "cpu_encoder_bench: --hidden %d must be even (two directions)\n", hidden);
    return 2;
  }

  ModelDims d;
  d.input_dim = input_dim;
  d.hidden_dim = hidden;
  d.num_layers = layers;
  d.num_classes = classes;
  Network<float> net(d, threads);
  std::mt19937_64 rng(seed);
  std::vector<float> params, grad;
  init_params(net.layout(), rng, params);

  BatchInput<float> in;
  in.B = batch;
  in.lengths.resize(batch);
  std::uniform_int_distribution<int> len_dist(min_frames, max_frames);
  int64_t frames = 0;
  for (auto& l : in.lengths) {
    l = len_dist(rng);
    frames += l;
    in.T = std::max(in.T, static_cast<int>(l));
  }
  std::normal_distribution<float> nrm(0.0f, 1.0f);
  in.features.resize(static_cast<size_t>(batch) * in.T * input_dim);
  for (float& x : in.features) x = nrm(rng);
  std::vector<float> dcum(static_cast<size_t>(batch) * (in.T + 1) * classes);
  for (float& x : dcum) x = 1e-3f * nrm(rng);

  Activations<float> act;
  std::mt19937_64 drop_rng(seed + 1);
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {  // r == 0: warm-up
    const auto t0 = std::chrono::steady_clock::now();
    net.forward(params, in, dropout, &drop_rng, act);
    net.backward(params, act, dcum, grad, nullptr);
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  std::printf(
      "cpu_encoder_bench: B=%d T=%d D=%d W=%d L=%d C=%d dropout=%.2f threads=%d frames=%lld repeats=%d\n"
      "ms/step median %.2f (min %.2f, max %.2f)  frames/s %.0f\n",
      batch, in.T, input_dim, hidden, layers, classes, dropout, net.threads(), static_cast<long long>(frames), repeats,
      med, ms.front(), ms.back(), 1000.0 * static_cast<double>(frames) / med);
  return 0;
}
