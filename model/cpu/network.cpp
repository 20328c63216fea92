// Encoder (input Linear, dropout, BiLSTM) + projection + zero-centered cumsum,
// forward and backward through time. See network.h for layouts and for the
// fixed task partition that makes results independent of the thread count.
//
// Stages (each one parallel_for; tasks never write the same element):
//   forward:  per slice: features -> x0 (slice-blocked), z0 = x0 Win^T + bin
//             per layer k: per slice: layer_in[k] = (z0 | out[k-1]) * mask
//                          per (direction, slice): gates = X Wih^T + b, then the
//                          recurrence over the slice's own frames
//             per slice: scores = out Wp^T + bp (time-major), cumsum;
//                        with crf.onset_features onset = out Wo^T + bo ([B][T][C])
//   backward: per slice: cumsum backward -> dS, partial dWp/dbp
//             per layer k: per (direction, slice): recurrence backward, partial
//                          dWih/dWhh/db, dIn_dir = dG Wih; then the partials
//                          are summed in slice order per (direction, row block)
//             per slice: dIn -> partial dWin/dbin, dfeatures
// Dropout masks are drawn by one extra task that runs beside the compute tasks
// of the stage before the one that needs them.
// Taps (model/numerics.h, an enabled Probe): after the parallel section of a
// stage, on whole tensors (padding rows are 0). With a probe, the x0 fill and
// the input projection run as two stages, so that a fault planted in the
// features reaches z0; the projection and the cumsum always are two stages.
#include "model/cpu/network.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "common/parallel.h"
#include "crf/cumsum.h"

namespace timitseg::model {

namespace {

std::atomic<int> g_default_threads{0};

// One slice of the batch: utterances [b0, b0 + nb), rows [row0, row0 + T*nb)
// of every slice-blocked [T*B][.] matrix; only its first `rows` = Tmax*nb rows
// (frames t < Tmax, the slice's longest utterance) are ever non-zero.
struct Slice {
  int b0 = 0, nb = 0, Tmax = 0;
  int64_t row0 = 0, rows = 0;
};

std::vector<Slice> make_slices(const std::vector<int32_t>& lengths, int T, int per_slice) {
  const int B = static_cast<int>(lengths.size());
  std::vector<Slice> v;
  for (int b0 = 0; b0 < B; b0 += per_slice) {
    Slice s;
    s.b0 = b0;
    s.nb = std::min(per_slice, B - b0);
    for (int j = 0; j < s.nb; ++j) s.Tmax = std::max<int>(s.Tmax, lengths[b0 + j]);
    s.row0 = int64_t(b0) * T;
    s.rows = int64_t(s.Tmax) * s.nb;
    v.push_back(s);
  }
  return v;
}

// Row of frame t of utterance b (b in slice s).
inline int64_t row_of(const Slice& s, int b, int t) { return s.row0 + int64_t(t) * s.nb + (b - s.b0); }

// Inverted dropout scale: 0 with probability p, else 1/(1-p), drawn in
// time-major (t, b, unit) order and stored at the slice-blocked rows.
template <class Mat>
void dropout_mask(Mat& mask, const std::vector<Slice>& slices, int T, int64_t cols, double p, std::mt19937_64& rng) {
  using S = typename Mat::Scalar;
  const S keep = static_cast<S>(1.0 / (1.0 - p));
  for (int t = 0; t < T; ++t)
    for (const Slice& s : slices)
      for (int j = 0; j < s.nb; ++j) {
        S* m = mask.data() + row_of(s, s.b0 + j, t) * cols;
        for (int64_t c = 0; c < cols; ++c) m[c] = uniform01(rng) < p ? S(0) : keep;
      }
}

// dx[i] += ds[i], i < n: a loss term on the scores themselves (Network::backward's dscores).
template <class S>
void add_dscores(S* dx, const S* ds, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] += ds[i];
}

std::string lstm_suffix(int k, int dir) { return "_l" + std::to_string(k) + (dir ? "_reverse" : ""); }

// crf.onset_features: onset scores o = out Wo^T + bo (raw: no centering, no
// cumsum) into act.onset [B][T][C], padding frames 0. Nothing without onset.
template <class S>
void onset_forward(const ParamLayout& layout, int nthreads, const std::vector<S>& params,
                   const std::vector<int32_t>& lengths, const std::vector<Slice>& slices, Activations<S>& act,
                   Probe* pr) {
  using Mat = typename Activations<S>::Mat;
  using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
  if (!layout.dims().onset) return;
  const int B = act.B, T = act.T, C = layout.dims().num_classes, W = layout.dims().hidden_dim;
  Eigen::Map<const Mat> Wo(params.data() + layout.get("crf.onset_projection.weight").offset, C, W);
  Eigen::Map<const Vec> bo(params.data() + layout.get("crf.onset_projection.bias").offset, C);
  const Mat& out = act.layer_out.back();
  act.onset.assign(static_cast<size_t>(B) * T * C, S(0));
  parallel_for(static_cast<int64_t>(slices.size()), nthreads, [&](int64_t si, int) {
    const Slice& s = slices[si];
    Mat o = out.middleRows(s.row0, s.rows) * Wo.transpose();  // [Ts*nb][C]
    o.rowwise() += bo.transpose();
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j;
      for (int t = 0; t < lengths[b]; ++t)
        for (int c = 0; c < C; ++c) act.onset[(static_cast<size_t>(b) * T + t) * C + c] = o(int64_t(t) * s.nb + j, c);
    }
  });
  if (pr) pr->tap("onset_projection", Pass::forward, "onset_scores", act.onset.data(), act.onset.size());
}

// Backward of onset_forward: d Wo, d bo (per-slice partials summed in slice
// order) into grad, and dOut += dO Wo (d loss / d encoder output, slice-blocked).
template <class S>
void onset_backward(const ParamLayout& layout, int nthreads, const std::vector<S>& params,
                    const Activations<S>& act, const std::vector<S>* donset, const std::vector<Slice>& slices,
                    std::vector<S>& grad, typename Activations<S>::Mat& dOut, Probe* pr) {
  using Mat = typename Activations<S>::Mat;
  using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
  if (!layout.dims().onset) return;
  const int B = act.B, T = act.T, C = layout.dims().num_classes, W = layout.dims().hidden_dim;
  if (!donset || donset->size() != static_cast<size_t>(B) * T * C)
    throw std::invalid_argument("model: crf.onset_features needs d onset [B][T][C] in the backward pass");
  const ParamInfo& wi = layout.get("crf.onset_projection.weight");
  const ParamInfo& bi = layout.get("crf.onset_projection.bias");
  Eigen::Map<const Mat> Wo(params.data() + wi.offset, C, W);
  const int NS = static_cast<int>(slices.size());
  std::vector<Mat> pW(NS);
  std::vector<Vec> pb(NS);
  parallel_for(NS, nthreads, [&](int64_t si, int) {
    const Slice& s = slices[si];
    Mat dO = Mat::Zero(s.rows, C);  // slice-blocked rows t*nb + j
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j;
      for (int t = 0; t < act.lengths[b]; ++t)
        for (int c = 0; c < C; ++c) dO(int64_t(t) * s.nb + j, c) = (*donset)[(static_cast<size_t>(b) * T + t) * C + c];
    }
    pW[si].noalias() = dO.transpose() * act.layer_out.back().middleRows(s.row0, s.rows);
    pb[si] = dO.colwise().sum().transpose();
    dOut.middleRows(s.row0, s.rows).noalias() += dO * Wo;
  });
  Eigen::Map<Mat> gW(grad.data() + wi.offset, C, W);
  Eigen::Map<Vec> gb(grad.data() + bi.offset, C);
  gW = pW[0];
  gb = pb[0];
  for (int si = 1; si < NS; ++si) gW += pW[si], gb += pb[si];  // slice order
  if (pr) {
    pr->tap("onset_projection", Pass::backward, "d_crf.onset_projection.weight", grad.data() + wi.offset, wi.size);
    pr->tap("onset_projection", Pass::backward, "d_crf.onset_projection.bias", grad.data() + bi.offset, bi.size);
    pr->tap_mat("onset_projection", Pass::backward, "d_lstm_out", dOut);
  }
}

}  // namespace

void set_default_threads(int threads) { g_default_threads.store(threads); }

template <class S>
void Probe::tap(const std::string& layer, Pass pass, const std::string& tensor, S* data, int64_t rows, int64_t cols,
                int64_t stride) {
  if (fault_now_ && !planted_ && fault_.layer == layer && fault_.pass == pass && rows > 0 && cols > 0) {
    data[0] = static_cast<S>(fault_.value);
    planted_ = true;
  }
  if (!check_) return;
  using Arr = Eigen::Array<S, Eigen::Dynamic, 1>;
  // rows [r0, r1) all finite? (a contiguous tensor is one long row)
  const bool contiguous = stride == cols;
  const int64_t R = contiguous ? 1 : rows, N = contiguous ? rows * cols : cols;
  auto rows_finite = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t r = r0; r < r1; ++r)
      if (!Eigen::Map<const Arr>(data + r * stride + c0, c1 - c0).allFinite()) return false;
    return true;
  };
  constexpr int64_t kChunk = int64_t(1) << 15;  // elements per task
  bool finite = true;
  if (threads_ > 1 && R * N >= 4 * kChunk) {
    const int64_t rows_per = contiguous ? 1 : std::max<int64_t>(1, kChunk / N);
    const int64_t cols_per = contiguous ? kChunk : N;
    const int64_t nr = (R + rows_per - 1) / rows_per, nc = (N + cols_per - 1) / cols_per;
    std::vector<char> ok(static_cast<size_t>(nr * nc), 1);
    parallel_for(nr * nc, threads_, [&](int64_t i, int) {
      const int64_t r0 = (i / nc) * rows_per, c0 = (i % nc) * cols_per;
      ok[i] = rows_finite(r0, std::min(R, r0 + rows_per), c0, std::min(N, c0 + cols_per));
    });
    for (char c : ok) finite = finite && c;
  } else {
    finite = rows_finite(0, R, 0, N);
  }
  if (finite) return;
  NumericsHit hit;
  hit.layer = layer;
  hit.pass = pass;
  hit.tensor = tensor;
  for (int64_t r = 0; r < rows; ++r) {
    const TensorStats t = tensor_stats(data + r * stride, static_cast<size_t>(cols));
    hit.stats.nan += t.nan;
    hit.stats.inf += t.inf;
    hit.stats.finite += t.finite;
    hit.stats.min = std::min(hit.stats.min, t.min);
    hit.stats.max = std::max(hit.stats.max, t.max);
  }
  throw NumericsError(hit);
}
void Probe::report(const std::string& layer, Pass pass, const std::string& tensor, const TensorStats& stats) const {
  if (!check_ || !stats.bad()) return;
  NumericsHit hit;
  hit.layer = layer;
  hit.pass = pass;
  hit.tensor = tensor;
  hit.stats = stats;
  throw NumericsError(hit);
}

template void Probe::tap<float>(const std::string&, Pass, const std::string&, float*, int64_t, int64_t, int64_t);
template void Probe::tap<double>(const std::string&, Pass, const std::string&, double*, int64_t, int64_t, int64_t);

template <class S>
int Network<S>::threads() const {
  return resolve_threads(threads_ >= 0 ? threads_ : g_default_threads.load());
}

template <class S>
void Network<S>::forward(const std::vector<S>& params, const BatchInput<S>& in, double dropout,
                         std::mt19937_64* rng, Activations<S>& act, Probe* probe) const {
  const ModelDims& d = layout_.dims();
  const int B = in.B, T = in.T, D = d.input_dim, W = d.hidden_dim, H = d.per_direction(), L = d.num_layers,
            C = d.num_classes;
  const int64_t TB = int64_t(T) * B;
  if (params.size() != layout_.total()) throw std::invalid_argument("model: parameter buffer has the wrong size");
  if (in.features.size() != static_cast<size_t>(TB) * D || in.lengths.size() != static_cast<size_t>(B))
    throw std::invalid_argument("model: batch features/lengths do not match [B][T][D]");
  for (int b = 0; b < B; ++b)
    if (in.lengths[b] < 1 || in.lengths[b] > T)
      throw std::invalid_argument("model: length " + std::to_string(in.lengths[b]) + " of batch row " +
                                  std::to_string(b) + " is outside [1, " + std::to_string(T) + "]");
  const bool train = dropout > 0.0;
  if (train && !rng) throw std::invalid_argument("model: dropout needs an rng");
  auto P = [&](const std::string& name) { return params.data() + layout_.get(name).offset; };
  Probe* const pr = probe && probe->enabled() ? probe : nullptr;  // null: taps cost nothing
  if (pr) pr->set_threads(threads());
  const int nthreads = threads();
  const std::vector<Slice> slices = make_slices(in.lengths, T, kSliceRows);
  const int NS = static_cast<int>(slices.size());

  act.B = B;
  act.T = T;
  act.cum.clear();  // filled only when the forward reaches the cumsum
  act.onset.clear();
  act.lengths = in.lengths;
  act.x0.resize(TB, D);
  act.layer_in.assign(L, Mat());
  act.layer_out.assign(L, Mat());
  act.drop.assign(L > 1 ? L - 1 : 0, Mat());
  if (train) {
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

  // ---- features -> x0 -> z0 (= layer_in[0] before dropout); task 0 draws drop0
  Eigen::Map<const Mat> Win(P("encoder.input_proj.weight"), W, D);
  Eigen::Map<const Vec> bin(P("encoder.input_proj.bias"), W);
  Mat& z0 = act.layer_in[0];
  z0.resize(TB, W);
  const int mask_task = train ? 1 : 0;
  auto fill_x0 = [&](const Slice& s) {
    auto x = act.x0.middleRows(s.row0, int64_t(T) * s.nb);
    x.setZero();  // padding frames stay 0
    for (int j = 0; j < s.nb; ++j)
      for (int t = 0; t < in.lengths[s.b0 + j]; ++t)
        for (int k = 0; k < D; ++k)
          x(int64_t(t) * s.nb + j, k) = in.features[(static_cast<size_t>(s.b0 + j) * T + t) * D + k];
  };
  auto input_proj = [&](const Slice& s) {
    auto z = z0.middleRows(s.row0, s.rows);
    z.noalias() = act.x0.middleRows(s.row0, s.rows) * Win.transpose();
    z.rowwise() += bin.transpose();
    z0.middleRows(s.row0 + s.rows, int64_t(T) * s.nb - s.rows).setZero();
  };
  if (pr) {  // tap x0 between the two halves, so that a planted fault reaches z0
    parallel_for(NS + mask_task, nthreads, [&](int64_t task, int) {
      if (task < mask_task) return dropout_mask(act.drop0, slices, T, W, dropout, *rng);
      fill_x0(slices[task - mask_task]);
    });
    pr->tap_mat("input", Pass::forward, "features", act.x0);
    parallel_for(NS, nthreads, [&](int64_t si, int) { input_proj(slices[si]); });
  } else {
    parallel_for(NS + mask_task, nthreads, [&](int64_t task, int) {
      if (task < mask_task) return dropout_mask(act.drop0, slices, T, W, dropout, *rng);
      fill_x0(slices[task - mask_task]);
      input_proj(slices[task - mask_task]);
    });
  }

  for (int k = 0; k < L; ++k) {
    const int in_k = k == 0 ? W : 2 * H;
    // layer input: z0 * drop0 (in place) or out[k-1] * drop[k-1]
    if (k > 0) act.layer_in[k].resize(TB, 2 * H);
    if (k > 0 || train)
      parallel_for(NS, nthreads, [&](int64_t si, int) {
        const Slice& s = slices[si];
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
    if (pr && k == 0) pr->tap_mat("input_proj", Pass::forward, "input_proj_out", act.layer_in[0]);
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
    parallel_for(mt + 2 * NS, nthreads, [&](int64_t task, int) {
      if (task < mt) return dropout_mask(act.drop[k], slices, T, 2 * H, dropout, *rng);
      const int dir = static_cast<int>((task - mt) / NS), si = static_cast<int>((task - mt) % NS);
      const Slice& s = slices[si];
      const int nb = s.nb, Ts = s.Tmax;
      const std::string l = lstm_suffix(k, dir);
      Eigen::Map<const Mat> Wih(P("encoder.lstm.weight_ih" + l), 4 * H, in_k);
      Eigen::Map<const Mat> Whh(P("encoder.lstm.weight_hh" + l), 4 * H, H);
      Eigen::Map<const Vec> bih(P("encoder.lstm.bias_ih" + l), 4 * H);
      Eigen::Map<const Vec> bhh(P("encoder.lstm.bias_hh" + l), 4 * H);
      Mat& G = act.gates[dir][k];
      Mat& cell = act.cell[dir][k];
      Mat& tcell = act.tcell[dir][k];
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
      Mat g(nb, 4 * H), h(nb, H), c(nb, H);
      h.setZero();
      c.setZero();
      for (int st = 0; st < Ts; ++st) {
        const int t = dir == 0 ? st : Ts - 1 - st;  // reverse: from the slice's last frame
        const int64_t r = s.row0 + int64_t(t) * nb;
        auto Gt = G.middleRows(r, nb);
        g = Gt;
        // One [1][H] x [H][4H] product per row: at slice sizes Eigen's GEMV
        // beats its GEMM, which repacks Whh on every call.
        for (int j = 0; j < nb; ++j)
          if (t < in.lengths[s.b0 + j]) g.row(j).noalias() += h.row(j) * Whh.transpose();
        // activations in place: i, f, o sigmoid; g tanh
        auto a = g.array();
        a.leftCols(2 * H) = S(1) / (S(1) + (-a.leftCols(2 * H)).exp());
        a.middleCols(2 * H, H) = a.middleCols(2 * H, H).tanh();
        a.rightCols(H) = S(1) / (S(1) + (-a.rightCols(H)).exp());
        c = (a.middleCols(H, H) * c.array() + a.leftCols(H) * a.middleCols(2 * H, H)).matrix();
        auto tc = tcell.middleRows(r, nb);
        tc = c.array().tanh().matrix();
        h = (a.rightCols(H) * tc.array()).matrix();
        for (int j = 0; j < nb; ++j)
          if (t >= in.lengths[s.b0 + j]) {  // padding: state stays zero, so the reverse
            g.row(j).setZero();            // direction starts at each utterance's own
            h.row(j).setZero();            // last frame
            c.row(j).setZero();
            tc.row(j).setZero();
          }
        Gt = g;
        cell.middleRows(r, nb) = c;
        out.block(r, dir * H, nb, H) = h;
      }
    });
    if (pr)
      for (int dir = 0; dir < 2; ++dir)
        pr->tap_mat("lstm." + std::to_string(k) + (dir ? ".bwd" : ".fwd"), Pass::forward, "lstm_out",
                    out.middleCols(dir * H, H));
  }

  // ---- projection (time-major scores) and the zero-centered cumsum, per slice
  Eigen::Map<const Mat> Wp(P("crf.projection.weight"), C, 2 * H);
  Eigen::Map<const Vec> bp(P("crf.projection.bias"), C);
  act.scores.resize(TB, C);
  parallel_for(NS, nthreads, [&](int64_t si, int) {
    const Slice& s = slices[si];
    Mat sc = act.layer_out[L - 1].middleRows(s.row0, s.rows) * Wp.transpose();  // [Ts*nb][C]
    sc.rowwise() += bp.transpose();
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j, len = in.lengths[b];
      for (int t = 0; t < T; ++t) {
        auto dst = act.scores.row(int64_t(t) * B + b);
        if (t >= len)
          dst.setZero();
        else
          dst = sc.row(int64_t(t) * s.nb + j);
      }
    }
  });
  if (pr) pr->tap_mat("projection", Pass::forward, "scores", act.scores);
  onset_forward(layout_, nthreads, params, in.lengths, slices, act, pr);
  act.cum.resize(static_cast<size_t>(B) * (T + 1) * C);
  parallel_for(NS, nthreads, [&](int64_t si, int) {
    const Slice& s = slices[si];
    std::vector<S> x(static_cast<size_t>(T) * C);  // one utterance, [T][C] (padding frames unread)
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j, len = in.lengths[b];
      for (int t = 0; t < len; ++t)
        for (int c = 0; c < C; ++c) x[static_cast<size_t>(t) * C + c] = act.scores(int64_t(t) * B + b, c);
      crf::centered_cumsum_forward<S>(1, T, C, x.data(), &in.lengths[b], act.cum.data() + size_t(b) * (T + 1) * C);
    }
  });
  if (pr) {  // one fused operation: both taps see cum_scores, the center tap first
    pr->tap("center", Pass::forward, "cum_scores", act.cum.data(), act.cum.size());
    pr->tap("cumsum", Pass::forward, "cum_scores", act.cum.data(), act.cum.size());
  }
}

template <class S>
void Network<S>::backward(const std::vector<S>& params, const Activations<S>& act, const std::vector<S>& dcum,
                          std::vector<S>& grad, std::vector<S>* dfeatures, Probe* probe,
                          const std::vector<S>* dscores, const std::vector<S>* donset) const {
  const ModelDims& d = layout_.dims();
  const int B = act.B, T = act.T, D = d.input_dim, W = d.hidden_dim, H = d.per_direction(), L = d.num_layers,
            C = d.num_classes;
  const int64_t TB = int64_t(T) * B;
  if (dcum.size() != static_cast<size_t>(B) * (T + 1) * C)
    throw std::invalid_argument("model: d cum_scores does not match [B][T+1][C]");
  if (dscores && dscores->size() != static_cast<size_t>(TB) * C)
    throw std::invalid_argument("model: d scores does not match [B][T][C]");
  auto P = [&](const std::string& name) { return params.data() + layout_.get(name).offset; };
  auto G_ = [&](const std::string& name) { return grad.data() + layout_.get(name).offset; };
  grad.assign(layout_.total(), S(0));
  const bool train = act.drop0.size() != 0;
  const std::vector<int32_t>& len = act.lengths;
  const int nthreads = threads();
  const std::vector<Slice> slices = make_slices(len, T, kSliceRows);
  const int NS = static_cast<int>(slices.size());
  Probe* const pr = probe && probe->enabled() ? probe : nullptr;  // null: taps cost nothing
  if (pr) pr->set_threads(threads());
  // zero the rows of slice s past its longest utterance (never written below)
  auto zero_tail = [&](Mat& m, const Slice& s) { m.middleRows(s.row0 + s.rows, int64_t(T) * s.nb - s.rows).setZero(); };
  auto grad_name = [](const std::string& p) { return "d_" + p; };
  auto tap_grad = [&](const std::string& layer, const std::string& name) {
    const ParamInfo& p = layout_.get(name);
    pr->tap(layer, Pass::backward, grad_name(name), grad.data() + p.offset, p.size);
  };

  // ---- cumsum backward -> dS [T*B][C] (slice-blocked)
  Eigen::Map<const Mat> Wp(P("crf.projection.weight"), C, 2 * H);
  Mat dS(TB, C);
  parallel_for(NS, nthreads, [&](int64_t si, int) {
    const Slice& s = slices[si];
    std::vector<S> dx(static_cast<size_t>(T) * C);
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j;
      crf::centered_cumsum_backward<S>(1, T, C, dcum.data() + size_t(b) * (T + 1) * C, &len[b], dx.data());
      if (dscores) add_dscores(dx.data(), dscores->data() + size_t(b) * T * C, size_t(len[b]) * C);
      for (int t = 0; t < s.Tmax; ++t)
        for (int c = 0; c < C; ++c) dS(int64_t(t) * s.nb + j + s.row0, c) = dx[static_cast<size_t>(t) * C + c];
    }
    zero_tail(dS, s);
  });
  if (pr) {  // the fused centered cumsum: both taps see d scores, the cumsum tap first
    pr->tap_mat("cumsum", Pass::backward, "d_scores", dS);
    pr->tap_mat("center", Pass::backward, "d_scores", dS);
  }

  // ---- projection backward: partial d Wp / d bp per slice, dOut = d loss / d layer_out[L-1] [T*B][2H]
  std::vector<Mat> pWp(NS);  // [NS] partial d Wp [C][2H]
  std::vector<Vec> pbp(NS);  // [NS] partial d bp [C]
  Mat dOut(TB, 2 * H);
  parallel_for(NS, nthreads, [&](int64_t si, int) {
    const Slice& s = slices[si];
    auto dSs = dS.middleRows(s.row0, s.rows);
    pWp[si].noalias() = dSs.transpose() * act.layer_out[L - 1].middleRows(s.row0, s.rows);
    pbp[si] = dSs.colwise().sum().transpose();
    dOut.middleRows(s.row0, s.rows).noalias() = dSs * Wp;
    zero_tail(dOut, s);
  });
  {
    Eigen::Map<Mat> gWp(G_("crf.projection.weight"), C, 2 * H);
    Eigen::Map<Vec> gbp(G_("crf.projection.bias"), C);
    gWp = pWp[0];
    gbp = pbp[0];
    for (int si = 1; si < NS; ++si) gWp += pWp[si], gbp += pbp[si];  // slice order
  }
  if (pr) {
    tap_grad("projection", "crf.projection.weight");
    tap_grad("projection", "crf.projection.bias");
    pr->tap_mat("projection", Pass::backward, "d_lstm_out", dOut);
  }
  onset_backward(layout_, nthreads, params, act, donset, slices, grad, dOut, pr);

  // ---- BiLSTM layers, top to bottom. dIn[dir] [T*B][In_k]: d loss / d layer_in[k]
  // through direction dir; the layer below reads the sum dIn[0] + dIn[1].
  Mat dIn[2], dInAbove[2];
  std::vector<Mat> pWih(2 * NS), pWhh(2 * NS);  // [dir*NS + slice] partials [4H][In_k], [4H][H]
  std::vector<Vec> pb(2 * NS);                  // [dir*NS + slice] partial [4H]
  for (int k = L - 1; k >= 0; --k) {
    const int in_k = k == 0 ? W : 2 * H;
    std::swap(dIn[0], dInAbove[0]);
    std::swap(dIn[1], dInAbove[1]);
    dIn[0].resize(TB, in_k);
    dIn[1].resize(TB, in_k);
    parallel_for(2 * NS, nthreads, [&](int64_t task, int) {
      const int dir = static_cast<int>(task / NS), si = static_cast<int>(task % NS);
      const Slice& s = slices[si];
      const int nb = s.nb, Ts = s.Tmax;
      const std::string l = lstm_suffix(k, dir);
      Eigen::Map<const Mat> Wih(P("encoder.lstm.weight_ih" + l), 4 * H, in_k);
      Eigen::Map<const Mat> Whh(P("encoder.lstm.weight_hh" + l), 4 * H, H);
      const Mat& gates = act.gates[dir][k];
      const Mat& cell = act.cell[dir][k];
      const Mat& tcell = act.tcell[dir][k];
      const Mat& out = act.layer_out[k];
      // d loss / d h of this direction, [Ts*nb][H]
      Mat dY;
      if (k == L - 1) {
        dY = dOut.block(s.row0, dir * H, s.rows, H);
      } else {
        dY = dInAbove[0].block(s.row0, dir * H, s.rows, H) + dInAbove[1].block(s.row0, dir * H, s.rows, H);  // fixed order
        if (train) dY.array() *= act.drop[k].block(s.row0, dir * H, s.rows, H).array();
      }
      Mat dG(s.rows, 4 * H), Hprev(s.rows, H), dgt(nb, 4 * H), dh(nb, H), dc(nb, H), dct(nb, H), cprev(nb, H);
      dh.setZero();
      dc.setZero();
      for (int st = 0; st < Ts; ++st) {
        const int t = dir == 0 ? Ts - 1 - st : st;  // reverse of the forward order
        const int tp = dir == 0 ? t - 1 : t + 1;    // the step whose state fed step t
        const int64_t r = s.row0 + int64_t(t) * nb, rl = int64_t(t) * nb;  // global / slice-local row
        if (tp >= 0 && tp < Ts) {
          const int64_t rp = s.row0 + int64_t(tp) * nb;
          cprev = cell.middleRows(rp, nb);
          Hprev.middleRows(rl, nb) = out.block(rp, dir * H, nb, H);
        } else {
          cprev.setZero();
          Hprev.middleRows(rl, nb).setZero();
        }
        auto a = gates.middleRows(r, nb).array();
        auto i = a.leftCols(H);
        auto f = a.middleCols(H, H);
        auto gg = a.middleCols(2 * H, H);
        auto o = a.rightCols(H);
        auto tc = tcell.middleRows(r, nb).array();
        const Eigen::Array<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> dht =
            dY.middleRows(rl, nb).array() + dh.array();
        dct = (dht * o * (S(1) - tc * tc) + dc.array()).matrix();
        auto dga = dgt.array();
        dga.leftCols(H) = dct.array() * gg * i * (S(1) - i);
        dga.middleCols(H, H) = dct.array() * cprev.array() * f * (S(1) - f);
        dga.middleCols(2 * H, H) = dct.array() * i * (S(1) - gg * gg);
        dga.rightCols(H) = dht * tc * o * (S(1) - o);
        dc = (dct.array() * f).matrix();
        for (int j = 0; j < nb; ++j)
          if (t >= len[s.b0 + j]) {  // padding step: its state is the constant 0
            dgt.row(j).setZero();
            dc.row(j).setZero();
          }
        for (int j = 0; j < nb; ++j) dh.row(j).noalias() = dgt.row(j) * Whh;  // per row, as in the forward
        dG.middleRows(rl, nb) = dgt;
      }
      const int p = dir * NS + si;
      pWih[p].noalias() = dG.transpose() * act.layer_in[k].middleRows(s.row0, s.rows);
      pWhh[p].noalias() = dG.transpose() * Hprev;
      pb[p] = dG.colwise().sum().transpose();
      dIn[dir].middleRows(s.row0, s.rows).noalias() = dG * Wih;
      zero_tail(dIn[dir], s);
    });
    // Sum the partials in slice order; tasks = (dir, block of kRowBlock gate rows).
    constexpr int kRowBlock = 64;
    const int nblk = (4 * H + kRowBlock - 1) / kRowBlock;
    parallel_for(2 * nblk, nthreads, [&](int64_t task, int) {
      const int dir = static_cast<int>(task / nblk), r0 = static_cast<int>(task % nblk) * kRowBlock;
      const int nr = std::min(kRowBlock, 4 * H - r0);
      const std::string l = lstm_suffix(k, dir);
      auto gWih = Eigen::Map<Mat>(G_("encoder.lstm.weight_ih" + l), 4 * H, in_k).middleRows(r0, nr);
      auto gWhh = Eigen::Map<Mat>(G_("encoder.lstm.weight_hh" + l), 4 * H, H).middleRows(r0, nr);
      auto gbih = Eigen::Map<Vec>(G_("encoder.lstm.bias_ih" + l), 4 * H).segment(r0, nr);
      auto gbhh = Eigen::Map<Vec>(G_("encoder.lstm.bias_hh" + l), 4 * H).segment(r0, nr);
      gWih = pWih[dir * NS].middleRows(r0, nr);
      gWhh = pWhh[dir * NS].middleRows(r0, nr);
      gbih = pb[dir * NS].segment(r0, nr);
      for (int si = 1; si < NS; ++si) {
        gWih += pWih[dir * NS + si].middleRows(r0, nr);
        gWhh += pWhh[dir * NS + si].middleRows(r0, nr);
        gbih += pb[dir * NS + si].segment(r0, nr);
      }
      gbhh = gbih;
    });
    if (pr)
      for (int dir = 1; dir >= 0; --dir) {  // the reverse direction's backward ran last in the forward's mirror
        const std::string layer = "lstm." + std::to_string(k) + (dir ? ".bwd" : ".fwd"), l = lstm_suffix(k, dir);
        for (const char* w : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"})
          tap_grad(layer, std::string("encoder.lstm.") + w + l);
        pr->tap_mat(layer, Pass::backward, "d_input", dIn[dir]);
      }
  }

  // ---- input projection: dZ = (dIn[0] + dIn[1]) * drop0 = d loss / d (input_proj output)
  Eigen::Map<const Mat> Win(P("encoder.input_proj.weight"), W, D);
  std::vector<Mat> pWin(NS);  // [NS] partial [W][D]
  std::vector<Vec> pbin(NS);  // [NS] partial [W]
  if (dfeatures) dfeatures->assign(static_cast<size_t>(TB) * D, S(0));
  // The d (input_proj output) tap, checked per slice (no [T*B][W] copy):
  // the stats of each slice's rows, merged in slice order below.
  std::vector<TensorStats> dZstats(pr && pr->check() ? NS : 0);
  parallel_for(NS, nthreads, [&](int64_t si, int) {
    const Slice& s = slices[si];
    Mat dZ = dIn[0].middleRows(s.row0, s.rows) + dIn[1].middleRows(s.row0, s.rows);  // fixed order
    if (train) dZ.array() *= act.drop0.middleRows(s.row0, s.rows).array();
    if (!dZstats.empty() && dZ.size() > 0 && dZ.allFinite()) {
      dZstats[si].finite = dZ.size();
      dZstats[si].min = static_cast<double>(dZ.minCoeff());
      dZstats[si].max = static_cast<double>(dZ.maxCoeff());
    } else if (!dZstats.empty()) {
      TensorStats& st = dZstats[si];
      for (int64_t r = 0; r < dZ.rows(); ++r) {
        const TensorStats t = tensor_stats(dZ.data() + r * dZ.outerStride(), static_cast<size_t>(W));
        st.nan += t.nan, st.inf += t.inf, st.finite += t.finite;
        st.min = std::min(st.min, t.min), st.max = std::max(st.max, t.max);
      }
    }
    pWin[si].noalias() = dZ.transpose() * act.x0.middleRows(s.row0, s.rows);
    pbin[si] = dZ.colwise().sum().transpose();
    if (dfeatures) {
      const Mat dX = dZ * Win;  // [Ts*nb][D]
      for (int j = 0; j < s.nb; ++j) {
        const int b = s.b0 + j;
        for (int t = 0; t < len[b]; ++t)
          for (int q = 0; q < D; ++q)
            (*dfeatures)[(static_cast<size_t>(b) * T + t) * D + q] = dX(int64_t(t) * s.nb + j, q);
      }
    }
  });
  Eigen::Map<Mat> gWin(G_("encoder.input_proj.weight"), W, D);
  Eigen::Map<Vec> gbin(G_("encoder.input_proj.bias"), W);
  gWin = pWin[0];
  gbin = pbin[0];
  for (int si = 1; si < NS; ++si) gWin += pWin[si], gbin += pbin[si];  // slice order
  if (pr) {
    tap_grad("input_proj", "encoder.input_proj.weight");
    tap_grad("input_proj", "encoder.input_proj.bias");
    TensorStats st;
    for (const TensorStats& t : dZstats) {
      st.nan += t.nan, st.inf += t.inf, st.finite += t.finite;
      st.min = std::min(st.min, t.min), st.max = std::max(st.max, t.max);
    }
    pr->report("input_proj", Pass::backward, "d_input_proj_out", st);
    if (dfeatures) pr->tap("input", Pass::backward, "d_features", dfeatures->data(), dfeatures->size());
  }
}

template class Network<float>;
template class Network<double>;

}  // namespace timitseg::model
