// The forward stages of the CPU network (model/cpu/network_stages.h): input
// projection, BiLSTM layers, projection + onset scores + zero-centered cumsum.
// Dropout masks are drawn by one extra task that runs beside the compute tasks
// of the stage before the one that needs them. Taps (model/numerics.h, an
// enabled Probe): after the parallel section of a stage, on whole tensors
// (padding rows are 0). With a probe, the x0 fill and the input projection run
// as two stages, so that a fault planted in the features reaches z0; the
// projection and the cumsum always are two stages.
#include <algorithm>
#include <cmath>

#include "common/parallel.h"
#include "crf/cumsum.h"
#include "model/cpu/network_stages.h"
#include "model/gaussian_head.h"
#include "model/heads_fold.h"

namespace timitseg::model::cpu_detail {

namespace {

// The anchored heads (crf.onset_features): o = out Wo^T + bo with the heads'
// weight [A*C][W] and bias [A*C] (raw: no centering, no cumsum) into act.heads
// [B][T][A][C], padding frames 0. Nothing without a head.
template <class S>
void heads_forward(ForwardContext<S>& c) {
  using Mat = typename ForwardContext<S>::Mat;
  using Vec = typename ForwardContext<S>::Vec;
  const ParamLayout& layout = c.layout;
  Activations<S>& act = c.act;
  const AnchoredHeads heads = layout.crf().heads();
  if (heads.count() == 0) return;
  const int B = act.B, T = act.T, C = heads.count() * layout.dims().num_classes, W = layout.dims().hidden_dim;
  Eigen::Map<const Mat> Wo(c.P(*heads.weight), C, W);
  Eigen::Map<const Vec> bo(c.P(*heads.bias), C);
  const Mat& out = act.layer_out.back();
  act.heads.assign(static_cast<size_t>(B) * T * C, S(0));
  parallel_for(static_cast<int64_t>(c.slices.size()), c.nthreads, [&](int64_t si, int) {
    const Slice& s = c.slices[si];
    Mat o = out.middleRows(s.row0, s.rows) * Wo.transpose();  // [Ts*nb][C]
    o.rowwise() += bo.transpose();
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j;
      for (int t = 0; t < c.in.lengths[b]; ++t)
        for (int q = 0; q < C; ++q) act.heads[(static_cast<size_t>(b) * T + t) * C + q] = o(int64_t(t) * s.nb + j, q);
    }
  });
  if (c.pr) c.pr->tap("onset_projection", config::Pass::forward, "onset_scores", act.heads.data(), act.heads.size());
}

// The recurrence of one (direction, slice) of layer k: gates = X Wih^T + b,
// then per step the [1][H] x [H][4H] products and the activations.
template <class S>
void lstm_forward_task(ForwardContext<S>& c, int k, int dir, const Slice& s) {
  using Mat = typename ForwardContext<S>::Mat;
  using Vec = typename ForwardContext<S>::Vec;
  Activations<S>& act = c.act;
  const int T = c.in.T, H = c.layout.dims().per_direction(), W = c.layout.dims().hidden_dim;
  const int in_k = k == 0 ? W : 2 * H;
  const int nb = s.nb, Ts = s.Tmax;
  const std::string l = lstm_suffix(k, dir);
  Eigen::Map<const Mat> Wih(c.P("encoder.lstm.weight_ih" + l), 4 * H, in_k);
  Eigen::Map<const Mat> Whh(c.P("encoder.lstm.weight_hh" + l), 4 * H, H);
  Eigen::Map<const Vec> bih(c.P("encoder.lstm.bias_ih" + l), 4 * H);
  Eigen::Map<const Vec> bhh(c.P("encoder.lstm.bias_hh" + l), 4 * H);
  Mat& G = act.gates[dir][k];
  Mat& cell = act.cell[dir][k];
  Mat& tcell = act.tcell[dir][k];
  Mat& out = act.layer_out[k];
  // rows past the slice's longest utterance: all state is 0
  const int64_t tail0 = s.row0 + s.rows, ntail = int64_t(T) * nb - s.rows;
  G.middleRows(tail0, ntail).setZero();
  cell.middleRows(tail0, ntail).setZero();
  tcell.middleRows(tail0, ntail).setZero();
  out.block(tail0, dir * H, ntail, H).setZero();
  auto Gs = G.middleRows(s.row0, s.rows);
  Gs.noalias() = act.layer_in[k].middleRows(s.row0, s.rows) * Wih.transpose();  // [Ts*nb][4H] input part
  const Vec bsum = bih + bhh;
  Gs.rowwise() += bsum.transpose();
  Mat g(nb, 4 * H), h(nb, H), cs(nb, H);
  h.setZero();
  cs.setZero();
  for (int st = 0; st < Ts; ++st) {
    const int t = dir == 0 ? st : Ts - 1 - st;  // reverse: from the slice's last frame
    const int64_t r = s.row0 + int64_t(t) * nb;
    auto Gt = G.middleRows(r, nb);
    g = Gt;
    // One [1][H] x [H][4H] product per row: at slice sizes Eigen's GEMV
    // beats its GEMM, which repacks Whh on every call.
    for (int j = 0; j < nb; ++j)
      if (t < c.in.lengths[s.b0 + j]) g.row(j).noalias() += h.row(j) * Whh.transpose();
    // activations in place: i, f, o sigmoid; g tanh
    auto a = g.array();
    a.leftCols(2 * H) = S(1) / (S(1) + (-a.leftCols(2 * H)).exp());
    a.middleCols(2 * H, H) = a.middleCols(2 * H, H).tanh();
    a.rightCols(H) = S(1) / (S(1) + (-a.rightCols(H)).exp());
    cs = (a.middleCols(H, H) * cs.array() + a.leftCols(H) * a.middleCols(2 * H, H)).matrix();
    auto tc = tcell.middleRows(r, nb);
    tc = cs.array().tanh().matrix();
    h = (a.rightCols(H) * tc.array()).matrix();
    for (int j = 0; j < nb; ++j)
      if (t >= c.in.lengths[s.b0 + j]) {  // padding: state stays zero, so the reverse
        g.row(j).setZero();               // direction starts at each utterance's own
        h.row(j).setZero();               // last frame
        cs.row(j).setZero();
        tc.row(j).setZero();
      }
    Gt = g;
    cell.middleRows(r, nb) = cs;
    out.block(r, dir * H, nb, H) = h;
  }
}

}  // namespace

template <class S>
void reset_activations(ForwardContext<S>& c) {
  using Mat = typename ForwardContext<S>::Mat;
  const ModelDims& d = c.layout.dims();
  const int B = c.in.B, T = c.in.T, D = d.input_dim, W = d.hidden_dim, H = d.per_direction(), L = d.num_layers;
  const int64_t TB = int64_t(T) * B;
  Activations<S>& act = c.act;
  act.B = B;
  act.T = T;
  act.cum.clear();  // filled only when the forward reaches the cumsum
  act.heads.clear();
  act.onset.clear();
  act.lengths = c.in.lengths;
  act.x0.resize(TB, D);
  act.layer_in.assign(L, Mat());
  act.layer_out.assign(L, Mat());
  act.drop.assign(L > 1 ? L - 1 : 0, Mat());
  if (c.train) {
    act.drop0.resize(TB, W);  // every element is drawn (padding rows too, as always)
    for (Mat& m : act.drop) m.resize(TB, 2 * H);
  } else {
    act.drop0.resize(0, 0);
  }
  for (int dir = 0; dir < 2; ++dir) {
    act.gates[dir].assign(L, Mat());
    act.cell[dir].assign(L, Mat());
    act.tcell[dir].assign(L, Mat());
  }
}

template <class S>
void forward_input(ForwardContext<S>& c) {
  using Mat = typename ForwardContext<S>::Mat;
  using Vec = typename ForwardContext<S>::Vec;
  const ModelDims& d = c.layout.dims();
  const int B = c.in.B, T = c.in.T, D = d.input_dim, W = d.hidden_dim;
  const int64_t TB = int64_t(T) * B;
  const int NS = static_cast<int>(c.slices.size());
  Activations<S>& act = c.act;
  Eigen::Map<const Mat> Win(c.P("encoder.input_proj.weight"), W, D);
  Eigen::Map<const Vec> bin(c.P("encoder.input_proj.bias"), W);
  Mat& z0 = act.layer_in[0];
  z0.resize(TB, W);
  const int mask_task = c.train ? 1 : 0;
  auto fill_x0 = [&](const Slice& s) {
    auto x = act.x0.middleRows(s.row0, int64_t(T) * s.nb);
    x.setZero();  // padding frames stay 0
    for (int j = 0; j < s.nb; ++j)
      for (int t = 0; t < c.in.lengths[s.b0 + j]; ++t)
        for (int k = 0; k < D; ++k)
          x(int64_t(t) * s.nb + j, k) = c.in.features[(static_cast<size_t>(s.b0 + j) * T + t) * D + k];
  };
  auto input_proj = [&](const Slice& s) {
    auto z = z0.middleRows(s.row0, s.rows);
    z.noalias() = act.x0.middleRows(s.row0, s.rows) * Win.transpose();
    z.rowwise() += bin.transpose();
    z0.middleRows(s.row0 + s.rows, int64_t(T) * s.nb - s.rows).setZero();
  };
  if (c.pr) {  // tap x0 between the two halves, so that a planted fault reaches z0
    parallel_for(NS + mask_task, c.nthreads, [&](int64_t task, int) {
      if (task < mask_task) return dropout_mask(act.drop0, c.slices, T, W, c.dropout, *c.rng, c.in);
      fill_x0(c.slices[task - mask_task]);
    });
    c.pr->tap_mat("input", config::Pass::forward, "features", act.x0);
    parallel_for(NS, c.nthreads, [&](int64_t si, int) { input_proj(c.slices[si]); });
  } else {
    parallel_for(NS + mask_task, c.nthreads, [&](int64_t task, int) {
      if (task < mask_task) return dropout_mask(act.drop0, c.slices, T, W, c.dropout, *c.rng, c.in);
      fill_x0(c.slices[task - mask_task]);
      input_proj(c.slices[task - mask_task]);
    });
  }
}

template <class S>
void forward_lstm_layer(ForwardContext<S>& c, int k) {
  using Mat = typename ForwardContext<S>::Mat;
  const ModelDims& d = c.layout.dims();
  const int B = c.in.B, T = c.in.T, H = d.per_direction(), L = d.num_layers;
  const int64_t TB = int64_t(T) * B;
  const int NS = static_cast<int>(c.slices.size());
  Activations<S>& act = c.act;
  const bool train = c.train;
  // layer input: z0 * drop0 (in place) or out[k-1] * drop[k-1]
  if (k > 0) act.layer_in[k].resize(TB, 2 * H);
  if (k > 0 || train)
    parallel_for(NS, c.nthreads, [&](int64_t si, int) {
      const Slice& s = c.slices[si];
      const int64_t n = int64_t(T) * s.nb;
      auto dst = act.layer_in[k].middleRows(s.row0, n);
      if (k == 0) {
        dst.array() *= act.drop0.middleRows(s.row0, n).array();
      } else if (train) {
        dst = (act.layer_out[k - 1].middleRows(s.row0, n).array() * act.drop[k - 1].middleRows(s.row0, n).array())
                  .matrix();
      } else {
        dst = act.layer_out[k - 1].middleRows(s.row0, n);
      }
    });
  if (c.pr && k == 0) c.pr->tap_mat("input_proj", config::Pass::forward, "input_proj_out", act.layer_in[0]);
  Mat& out = act.layer_out[k];
  out.resize(TB, 2 * H);
  for (int dir = 0; dir < 2; ++dir) {
    act.gates[dir][k].resize(TB, 4 * H);
    act.cell[dir][k].resize(TB, H);
    act.tcell[dir][k].resize(TB, H);
  }
  // Task 0 (when training and another layer follows) draws drop[k] while the
  // other tasks run the recurrences; tasks 1.. are (dir, slice), dir-major.
  const int mt = train && k + 1 < L ? 1 : 0;
  parallel_for(mt + 2 * NS, c.nthreads, [&](int64_t task, int) {
    if (task < mt) return dropout_mask(act.drop[k], c.slices, T, 2 * H, c.dropout, *c.rng, c.in);
    const int dir = static_cast<int>((task - mt) / NS), si = static_cast<int>((task - mt) % NS);
    lstm_forward_task(c, k, dir, c.slices[si]);
  });
  if (c.pr)
    for (int dir = 0; dir < 2; ++dir)
      c.pr->tap_mat("lstm." + std::to_string(k) + (dir ? ".bwd" : ".fwd"), config::Pass::forward, "lstm_out",
                    out.middleCols(dir * H, H));
}

template <class S>
void forward_scores(ForwardContext<S>& c) {
  using Mat = typename ForwardContext<S>::Mat;
  using Vec = typename ForwardContext<S>::Vec;
  const ModelDims& d = c.layout.dims();
  const int B = c.in.B, T = c.in.T, H = d.per_direction(), L = d.num_layers, C = d.num_classes;
  const int64_t TB = int64_t(T) * B;
  const int NS = static_cast<int>(c.slices.size());
  Activations<S>& act = c.act;
  // ---- projection (time-major scores) and the zero-centered cumsum, per slice
  Eigen::Map<const Mat> Wp(c.P(c.layout.crf().projection_weight), C, 2 * H);
  Eigen::Map<const Vec> bp(c.P(c.layout.crf().projection_bias), C);
  // the Gaussian head (crf.gaussian_head, model/gaussian_head.h): + weight [x^2; x] + bias per valid frame,
  // x = the batch's head_features where it has them (a training batch before its spectral masks)
  const CrfTensor& gw = c.layout.crf().gaussian_weight;
  const S* gaussian_w = gw.present ? c.P(gw) : nullptr;
  const S* gaussian_b = gw.present ? c.P(c.layout.crf().gaussian_bias) : nullptr;
  const int D = d.input_dim;
  const S* head_x = c.in.head_features.empty() ? c.in.features.data() : c.in.head_features.data();
  act.head_reads_features = c.in.head_features.empty();
  act.scores.resize(TB, C);
  parallel_for(NS, c.nthreads, [&](int64_t si, int) {
    const Slice& s = c.slices[si];
    Mat sc = act.layer_out[L - 1].middleRows(s.row0, s.rows) * Wp.transpose();  // [Ts*nb][C]
    sc.rowwise() += bp.transpose();
    Vec row(C);
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j, len = c.in.lengths[b];
      for (int t = 0; t < T; ++t) {
        auto dst = act.scores.row(int64_t(t) * B + b);
        if (t >= len) {
          dst.setZero();
        } else if (gaussian_w) {
          row = sc.row(int64_t(t) * s.nb + j).transpose();
          add_gaussian_scores<S>(gaussian_w, gaussian_b, C, D, head_x + (size_t(b) * T + t) * D, row.data());
          dst = row.transpose();
        } else {
          dst = sc.row(int64_t(t) * s.nb + j);
        }
      }
    }
  });
  if (c.pr) c.pr->tap_mat("projection", config::Pass::forward, "scores", act.scores);
  heads_forward(c);
  act.cum.resize(static_cast<size_t>(B) * (T + 1) * C);
  parallel_for(NS, c.nthreads, [&](int64_t si, int) {
    const Slice& s = c.slices[si];
    std::vector<S> x(static_cast<size_t>(T) * C);  // one utterance, [T][C] (padding frames unread)
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j, len = c.in.lengths[b];
      for (int t = 0; t < len; ++t)
        for (int q = 0; q < C; ++q) x[static_cast<size_t>(t) * C + q] = act.scores(int64_t(t) * B + b, q);
      crf::centered_cumsum_forward<S>(1, T, C, x.data(), &c.in.lengths[b], act.cum.data() + size_t(b) * (T + 1) * C);
    }
  });
  if (c.pr) {  // one fused operation: both taps see cum_scores, the center tap first
    c.pr->tap("center", config::Pass::forward, "cum_scores", act.cum.data(), act.cum.size());
    c.pr->tap("cumsum", config::Pass::forward, "cum_scores", act.cum.data(), act.cum.size());
  }
  fold_heads(c.layout.crf().heads(), B, T, C, c.in.lengths, act.heads, act.cum, act.onset);
}

#define TIMITSEG_FORWARD_STAGES(S)                               \
  template void reset_activations<S>(ForwardContext<S>&);        \
  template void forward_input<S>(ForwardContext<S>&);            \
  template void forward_lstm_layer<S>(ForwardContext<S>&, int);  \
  template void forward_scores<S>(ForwardContext<S>&);
TIMITSEG_FORWARD_STAGES(float)
TIMITSEG_FORWARD_STAGES(double)
#undef TIMITSEG_FORWARD_STAGES

}  // namespace timitseg::model::cpu_detail
