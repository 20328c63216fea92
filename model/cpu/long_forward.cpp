// The encoder in windows (long_forward.h).
#include "model/cpu/long_forward.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "common/progress.h"
#include "crf/cumsum.h"
#include "model/heads_fold.h"

namespace timitseg::model {

bool long_input(const BatchInput<float>& in, int window) { return in.B == 1 && in.lengths[0] > window; }

void forward_in_windows(const Network<float>& net, const std::vector<float>& params, const BatchInput<float>& in,
                        Activations<float>& act, Probe* probe, int window, int context, int64_t centre_frames) {
  if (in.B != 1) throw std::invalid_argument("forward_in_windows: one utterance at a time (B = " + std::to_string(in.B) + ")");
  if (window < 1 || context < 0) throw std::invalid_argument("forward_in_windows: window must be >= 1, context >= 0");
  const ModelDims& d = net.layout().dims();
  const int64_t T = in.lengths[0], C = d.num_classes;
  const int64_t D = static_cast<int64_t>(in.features.size()) / in.T;
  const auto t0 = std::chrono::steady_clock::now();
  act = Activations<float>{};
  act.B = 1;
  act.T = in.T;
  act.lengths = in.lengths;
  act.scores.setZero(in.T, C);
  std::vector<float> heads;  // [1][T][A][C]
  const AnchoredHeads head_view = net.layout().crf().heads();
  const int64_t AC = head_view.count() * C;
  std::unique_ptr<Progress> bar;
  if (T > window) bar = std::make_unique<Progress>("encoder (windows of " + std::to_string(window) + " frames)", T, "frame");
  Activations<float> w;  // one window's activations
  for (const Window& win : windows_of(T, window, context)) {
    const int64_t a = win.a, b = win.b, wa = win.wa, wb = win.wb;
    BatchInput<float> sub;
    sub.B = 1;
    sub.T = static_cast<int>(wb - wa);
    sub.lengths = {sub.T};
    sub.features.assign(in.features.begin() + wa * D, in.features.begin() + wb * D);
    net.forward(params, sub, 0.0, nullptr, w, probe);
    act.scores.middleRows(a, b - a) = w.scores.middleRows(a - wa, b - a);  // B = 1: row t is frame t
    if (!w.heads.empty()) {
      heads.resize(static_cast<size_t>(in.T) * AC, 0.0f);
      std::copy(w.heads.begin() + (a - wa) * AC, w.heads.begin() + (b - wa) * AC, heads.begin() + a * AC);
    }
    if (bar) bar->advance(b - a);
  }
  std::vector<float> x(static_cast<size_t>(in.T) * C);  // [T][C], as Network::forward hands it to the cumsum
  for (int64_t t = 0; t < T; ++t)
    for (int64_t q = 0; q < C; ++q) x[t * C + q] = act.scores(t, q);
  act.cum.assign(static_cast<size_t>(in.T + 1) * C, 0.0f);
  long_cumsum(in.T, C, x.data(), in.lengths[0], centre_frames, act.cum.data());
  act.heads = std::move(heads);
  fold_heads(head_view, 1, in.T, static_cast<int>(C), in.lengths, act.heads, act.cum, act.onset);
  if (T > window)
    spdlog::info("{} frames: encoder in {} window(s) and cumsum in {:.2f} s", T, windows_of(T, window, context).size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace timitseg::model
