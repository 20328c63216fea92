// Encoder (input Linear, dropout, BiLSTM) + projection + zero-centered cumsum,
// forward and backward through time. See network.h for layouts.
#include "model/cpu/network.h"

#include <cmath>

#include "crf/cumsum.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace timitseg::model {

namespace {

// Directions run on two threads when more than one is available.
bool parallel_directions() {
#ifdef _OPENMP
  return omp_get_max_threads() > 1;
#else
  return false;
#endif
}

template <class Derived>
bool all_finite(const Eigen::MatrixBase<Derived>& m) {
  return m.allFinite();
}

// Inverted dropout scale: 0 with probability p, else 1/(1-p). Row-major order.
template <class Mat>
void dropout_mask(Mat& mask, int64_t rows, int64_t cols, double p, std::mt19937_64& rng) {
  using S = typename Mat::Scalar;
  mask.resize(rows, cols);
  const S keep = static_cast<S>(1.0 / (1.0 - p));
  S* m = mask.data();
  for (int64_t i = 0; i < rows * cols; ++i) m[i] = uniform01(rng) < p ? S(0) : keep;
}

}  // namespace

template <class S>
void Network<S>::forward(const std::vector<S>& params, const BatchInput<S>& in, double dropout,
                         std::mt19937_64* rng, Activations<S>& act, TensorCheck* check) const {
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
  auto fail = [&](const std::string& what) {
    if (check) check->first_nonfinite = what;
  };
  if (check) check->first_nonfinite.clear();

  act.B = B;
  act.T = T;
  act.cum.clear();  // filled only when the forward reaches the cumsum
  act.lengths = in.lengths;
  act.x0.resize(TB, D);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < D; ++k)
        act.x0(int64_t(t) * B + b, k) = in.features[(static_cast<size_t>(b) * T + t) * D + k];
  // Padding frames are zeroed: they never reach a valid output, but keep them finite.
  for (int b = 0; b < B; ++b)
    for (int t = in.lengths[b]; t < T; ++t) act.x0.row(int64_t(t) * B + b).setZero();
  if (check && !all_finite(act.x0)) return fail("features (encoder input)");

  Eigen::Map<const Mat> Win(P("encoder.input_proj.weight"), W, D);
  Eigen::Map<const Vec> bin(P("encoder.input_proj.bias"), W);
  act.layer_in.assign(L, Mat());
  act.layer_out.assign(L, Mat());
  act.drop.assign(L > 1 ? L - 1 : 0, Mat());
  Mat& z0 = act.layer_in[0];
  z0.noalias() = act.x0 * Win.transpose();
  z0.rowwise() += bin.transpose();
  if (check && !all_finite(z0)) return fail("encoder.input_proj output");
  if (train) {
    dropout_mask(act.drop0, TB, W, dropout, *rng);
    z0.array() *= act.drop0.array();
  } else {
    act.drop0.resize(0, 0);
  }

  for (int dir = 0; dir < 2; ++dir) {
    act.gates[dir].assign(L, Mat());
    act.cell[dir].assign(L, Mat());
    act.tcell[dir].assign(L, Mat());
  }
  for (int k = 0; k < L; ++k) {
    Mat& out = act.layer_out[k];
    out.setZero(TB, 2 * H);
    // The two directions are independent: one thread each (Eigen runs single-
    // threaded inside the parallel region). Results do not depend on threads.
#pragma omp parallel for num_threads(2) schedule(static, 1) if (parallel_directions())
    for (int dir = 0; dir < 2; ++dir) {
      Mat g(B, 4 * H), h(B, H), c(B, H);
      const std::string l = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
      const int in_k = k == 0 ? W : 2 * H;
      Eigen::Map<const Mat> Wih(P("encoder.lstm.weight_ih" + l), 4 * H, in_k);
      Eigen::Map<const Mat> Whh(P("encoder.lstm.weight_hh" + l), 4 * H, H);
      Eigen::Map<const Vec> bih(P("encoder.lstm.bias_ih" + l), 4 * H);
      Eigen::Map<const Vec> bhh(P("encoder.lstm.bias_hh" + l), 4 * H);
      Mat& G = act.gates[dir][k];
      G.noalias() = act.layer_in[k] * Wih.transpose();  // [T*B][4H] input part of every step
      const Vec bsum = bih + bhh;
      G.rowwise() += bsum.transpose();
      Mat& cell = act.cell[dir][k];
      Mat& tcell = act.tcell[dir][k];
      cell.resize(TB, H);
      tcell.resize(TB, H);
      h.setZero();
      c.setZero();
      for (int s = 0; s < T; ++s) {
        const int t = dir == 0 ? s : T - 1 - s;
        auto Gt = G.middleRows(int64_t(t) * B, B);
        g = Gt;
        g.noalias() += h * Whh.transpose();
        // activations in place: i, f, o sigmoid; g tanh
        auto a = g.array();
        a.leftCols(2 * H) = S(1) / (S(1) + (-a.leftCols(2 * H)).exp());
        a.middleCols(2 * H, H) = a.middleCols(2 * H, H).tanh();
        a.rightCols(H) = S(1) / (S(1) + (-a.rightCols(H)).exp());
        c = (a.middleCols(H, H) * c.array() + a.leftCols(H) * a.middleCols(2 * H, H)).matrix();
        auto tc = tcell.middleRows(int64_t(t) * B, B);
        tc = c.array().tanh().matrix();
        h = (a.rightCols(H) * tc.array()).matrix();
        for (int b = 0; b < B; ++b)
          if (t >= in.lengths[b]) {  // padding: state stays zero, so the reverse
            g.row(b).setZero();     // direction starts at each utterance's own
            h.row(b).setZero();     // last frame
            c.row(b).setZero();
            tc.row(b).setZero();
          }
        Gt = g;
        cell.middleRows(int64_t(t) * B, B) = c;
        out.block(int64_t(t) * B, dir * H, B, H) = h;
      }
    }
    if (check && !all_finite(out)) return fail("encoder.lstm layer " + std::to_string(k) + " output");
    if (k + 1 < L) {
      act.layer_in[k + 1] = out;
      if (train) {
        dropout_mask(act.drop[k], TB, 2 * H, dropout, *rng);
        act.layer_in[k + 1].array() *= act.drop[k].array();
      }
    }
  }
  Eigen::Map<const Mat> Wp(P("crf.projection.weight"), C, 2 * H);
  Eigen::Map<const Vec> bp(P("crf.projection.bias"), C);
  act.scores.noalias() = act.layer_out[L - 1] * Wp.transpose();
  act.scores.rowwise() += bp.transpose();
  for (int b = 0; b < B; ++b)
    for (int t = in.lengths[b]; t < T; ++t) act.scores.row(int64_t(t) * B + b).setZero();
  if (check && !all_finite(act.scores)) return fail("crf.projection output (scores)");
  {  // zero-centered cumsum over the valid frames (crf/cumsum.h), batch-major
    std::vector<S> x(static_cast<size_t>(TB) * C);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[(static_cast<size_t>(b) * T + t) * C + c] = act.scores(int64_t(t) * B + b, c);
    act.cum.assign(static_cast<size_t>(B) * (T + 1) * C, S(0));
    crf::centered_cumsum_forward<S>(B, T, C, x.data(), in.lengths.data(), act.cum.data());
  }
  if (check)
    for (S v : act.cum)
      if (!std::isfinite(v)) return fail("cum_scores (zero-centered cumsum)");
}

template <class S>
void Network<S>::backward(const std::vector<S>& params, const Activations<S>& act, const std::vector<S>& dcum,
                          std::vector<S>& grad, std::vector<S>* dfeatures) const {
  const ModelDims& d = layout_.dims();
  const int B = act.B, T = act.T, D = d.input_dim, W = d.hidden_dim, H = d.per_direction(), L = d.num_layers,
            C = d.num_classes;
  const int64_t TB = int64_t(T) * B;
  if (dcum.size() != static_cast<size_t>(B) * (T + 1) * C)
    throw std::invalid_argument("model: d cum_scores does not match [B][T+1][C]");
  auto P = [&](const std::string& name) { return params.data() + layout_.get(name).offset; };
  auto G_ = [&](const std::string& name) { return grad.data() + layout_.get(name).offset; };
  grad.assign(layout_.total(), S(0));
  const bool train = act.drop0.size() != 0;
  const std::vector<int32_t>& len = act.lengths;

  Mat dS(TB, C);
  {
    std::vector<S> dx(static_cast<size_t>(TB) * C);
    crf::centered_cumsum_backward<S>(B, T, C, dcum.data(), len.data(), dx.data());
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) dS(int64_t(t) * B + b, c) = dx[(static_cast<size_t>(b) * T + t) * C + c];
  }
  Eigen::Map<const Mat> Wp(P("crf.projection.weight"), C, 2 * H);
  Eigen::Map<Mat>(G_("crf.projection.weight"), C, 2 * H).noalias() = dS.transpose() * act.layer_out[L - 1];
  Eigen::Map<Vec>(G_("crf.projection.bias"), C) = dS.colwise().sum().transpose();
  Mat dY = dS * Wp;  // [T*B][2H]

  Mat dIn, dInDir[2];
  for (int k = L - 1; k >= 0; --k) {
    const int in_k = k == 0 ? W : 2 * H;
#pragma omp parallel for num_threads(2) schedule(static, 1) if (parallel_directions())
    for (int dir = 0; dir < 2; ++dir) {
      Mat dG, Hprev, dgt(B, 4 * H), dh(B, H), dc(B, H), dct(B, H), cprev(B, H);
      const std::string l = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
      Eigen::Map<const Mat> Wih(P("encoder.lstm.weight_ih" + l), 4 * H, in_k);
      Eigen::Map<const Mat> Whh(P("encoder.lstm.weight_hh" + l), 4 * H, H);
      const Mat& gates = act.gates[dir][k];
      const Mat& cell = act.cell[dir][k];
      const Mat& tcell = act.tcell[dir][k];
      const Mat& out = act.layer_out[k];
      dG.resize(TB, 4 * H);
      Hprev.setZero(TB, H);
      dh.setZero();
      dc.setZero();
      for (int s = 0; s < T; ++s) {
        const int t = dir == 0 ? T - 1 - s : s;  // reverse of the forward order
        const int tp = dir == 0 ? t - 1 : t + 1;  // the step whose state fed step t
        const bool has_prev = tp >= 0 && tp < T;
        if (has_prev) {
          cprev = cell.middleRows(int64_t(tp) * B, B);
          Hprev.middleRows(int64_t(t) * B, B) = out.block(int64_t(tp) * B, dir * H, B, H);
        } else {
          cprev.setZero();
        }
        auto a = gates.middleRows(int64_t(t) * B, B).array();
        auto i = a.leftCols(H);
        auto f = a.middleCols(H, H);
        auto gg = a.middleCols(2 * H, H);
        auto o = a.rightCols(H);
        auto tc = tcell.middleRows(int64_t(t) * B, B).array();
        const Eigen::Array<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> dht =
            dY.block(int64_t(t) * B, dir * H, B, H).array() + dh.array();
        dct = (dht * o * (S(1) - tc * tc) + dc.array()).matrix();
        auto dga = dgt.array();
        dga.leftCols(H) = dct.array() * gg * i * (S(1) - i);
        dga.middleCols(H, H) = dct.array() * cprev.array() * f * (S(1) - f);
        dga.middleCols(2 * H, H) = dct.array() * i * (S(1) - gg * gg);
        dga.rightCols(H) = dht * tc * o * (S(1) - o);
        dc = (dct.array() * f).matrix();
        for (int b = 0; b < B; ++b)
          if (t >= len[b]) {  // padding step: its state is the constant 0
            dgt.row(b).setZero();
            dc.row(b).setZero();
          }
        dh.noalias() = dgt * Whh;
        dG.middleRows(int64_t(t) * B, B) = dgt;
      }
      Eigen::Map<Mat>(G_("encoder.lstm.weight_ih" + l), 4 * H, in_k).noalias() = dG.transpose() * act.layer_in[k];
      Eigen::Map<Mat>(G_("encoder.lstm.weight_hh" + l), 4 * H, H).noalias() = dG.transpose() * Hprev;
      const Vec db = dG.colwise().sum().transpose();
      Eigen::Map<Vec>(G_("encoder.lstm.bias_ih" + l), 4 * H) = db;
      Eigen::Map<Vec>(G_("encoder.lstm.bias_hh" + l), 4 * H) = db;
      dInDir[dir].noalias() = dG * Wih;
    }
    dIn = dInDir[0] + dInDir[1];  // fixed order
    if (k > 0) {
      dY = dIn;
      if (train) dY.array() *= act.drop[k - 1].array();
    }
  }
  // dIn is now d loss / d (dropped input_proj output)
  if (train) dIn.array() *= act.drop0.array();
  Eigen::Map<Mat>(G_("encoder.input_proj.weight"), W, D).noalias() = dIn.transpose() * act.x0;
  Eigen::Map<Vec>(G_("encoder.input_proj.bias"), W) = dIn.colwise().sum().transpose();
  if (dfeatures) {
    Eigen::Map<const Mat> Win(P("encoder.input_proj.weight"), W, D);
    const Mat dX = dIn * Win;
    dfeatures->assign(static_cast<size_t>(TB) * D, S(0));
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < len[b]; ++t)
        for (int k = 0; k < D; ++k) (*dfeatures)[(static_cast<size_t>(b) * T + t) * D + k] = dX(int64_t(t) * B + b, k);
  }
}

template class Network<float>;
template class Network<double>;

}  // namespace timitseg::model
