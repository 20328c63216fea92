// The backward stages of the CPU network (model/cpu/network_stages.h):
// cumsum, projection, onset projection, BiLSTM layers from the top, input
// projection. Weight gradients are per-slice partial products summed in slice
// order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>

#include "common/parallel.h"
#include "crf/cumsum.h"
#include "model/cpu/network_stages.h"
#include "model/heads_fold.h"

namespace timitseg::model::cpu_detail {

namespace {

// dx[i] += ds[i], i < n: a loss term on the scores themselves (Network::backward's dscores).
template <class S>
void add_dscores(S* dx, const S* ds, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] += ds[i];
}

// The recurrence backward of one (direction, slice) of layer k: dG (d gates)
// and Hprev (the state that fed each step) over the slice's rows, then the
// partial weight gradients and dIn_dir = dG Wih.
template <class S>
void lstm_backward_task(const BackwardContext<S>& c, int k, int dir, int si, const typename Activations<S>::Mat& dOut,
                        const typename Activations<S>::Mat (&dInAbove)[2], typename Activations<S>::Mat (&dIn)[2],
                        std::vector<typename Activations<S>::Mat>& pWih, std::vector<typename Activations<S>::Mat>& pWhh,
                        std::vector<typename BackwardContext<S>::Vec>& pb) {
  using Mat = typename BackwardContext<S>::Mat;
  const Activations<S>& act = c.act;
  const int H = c.layout.dims().per_direction(), W = c.layout.dims().hidden_dim, L = c.layout.dims().num_layers;
  const int in_k = k == 0 ? W : 2 * H;
  const int NS = static_cast<int>(c.slices.size());
  const std::vector<int32_t>& len = act.lengths;
  const Slice& s = c.slices[si];
  const int nb = s.nb, Ts = s.Tmax;
  const std::string l = lstm_suffix(k, dir);
  Eigen::Map<const Mat> Wih(c.P("encoder.lstm.weight_ih" + l), 4 * H, in_k);
  Eigen::Map<const Mat> Whh(c.P("encoder.lstm.weight_hh" + l), 4 * H, H);
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
    if (c.train) dY.array() *= act.drop[k].block(s.row0, dir * H, s.rows, H).array();
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
  c.zero_tail(dIn[dir], s);
}

}  // namespace

template <class S>
typename Activations<S>::Mat backward_cumsum(const BackwardContext<S>& c, const std::vector<S>& dcum,
                                             const std::vector<S>* dscores) {
  using Mat = typename BackwardContext<S>::Mat;
  const int B = c.act.B, T = c.act.T, C = c.layout.dims().num_classes;
  const int64_t TB = int64_t(T) * B;
  const int NS = static_cast<int>(c.slices.size());
  const std::vector<int32_t>& len = c.act.lengths;
  Mat dS(TB, C);
  parallel_for(NS, c.nthreads, [&](int64_t si, int) {
    const Slice& s = c.slices[si];
    std::vector<S> dx(static_cast<size_t>(T) * C);
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j;
      crf::centered_cumsum_backward<S>(1, T, C, dcum.data() + size_t(b) * (T + 1) * C, &len[b], dx.data());
      if (dscores) add_dscores(dx.data(), dscores->data() + size_t(b) * T * C, size_t(len[b]) * C);
      for (int t = 0; t < s.Tmax; ++t)
        for (int q = 0; q < C; ++q) dS(int64_t(t) * s.nb + j + s.row0, q) = dx[static_cast<size_t>(t) * C + q];
    }
    c.zero_tail(dS, s);
  });
  if (c.pr) {  // the fused centered cumsum: both taps see d scores, the cumsum tap first
    c.pr->tap_mat("cumsum", config::Pass::backward, "d_scores", dS);
    c.pr->tap_mat("center", config::Pass::backward, "d_scores", dS);
  }
  return dS;
}

template <class S>
typename Activations<S>::Mat backward_projection(const BackwardContext<S>& c, const typename Activations<S>::Mat& dS) {
  using Mat = typename BackwardContext<S>::Mat;
  using Vec = typename BackwardContext<S>::Vec;
  const int B = c.act.B, T = c.act.T, C = c.layout.dims().num_classes, H = c.layout.dims().per_direction(),
            L = c.layout.dims().num_layers;
  const int64_t TB = int64_t(T) * B;
  const int NS = static_cast<int>(c.slices.size());
  Eigen::Map<const Mat> Wp(c.P(c.layout.crf().projection_weight), C, 2 * H);
  std::vector<Mat> pWp(NS);  // [NS] partial d Wp [C][2H]
  std::vector<Vec> pbp(NS);  // [NS] partial d bp [C]
  Mat dOut(TB, 2 * H);
  parallel_for(NS, c.nthreads, [&](int64_t si, int) {
    const Slice& s = c.slices[si];
    auto dSs = dS.middleRows(s.row0, s.rows);
    pWp[si].noalias() = dSs.transpose() * c.act.layer_out[L - 1].middleRows(s.row0, s.rows);
    pbp[si] = dSs.colwise().sum().transpose();
    dOut.middleRows(s.row0, s.rows).noalias() = dSs * Wp;
    c.zero_tail(dOut, s);
  });
  {
    Eigen::Map<Mat> gWp(c.G(c.layout.crf().projection_weight), C, 2 * H);
    Eigen::Map<Vec> gbp(c.G(c.layout.crf().projection_bias), C);
    gWp = pWp[0];
    gbp = pbp[0];
    for (int si = 1; si < NS; ++si) gWp += pWp[si], gbp += pbp[si];  // slice order
  }
  if (c.pr) {
    c.tap_grad("projection", c.layout.crf().projection_weight);
    c.tap_grad("projection", c.layout.crf().projection_bias);
    c.pr->tap_mat("projection", config::Pass::backward, "d_lstm_out", dOut);
  }
  return dOut;
}

template <class S>
void backward_heads(const BackwardContext<S>& c, const std::vector<S>& dcum, const std::vector<S>* donset,
                    typename Activations<S>::Mat& dOut) {
  using Mat = typename BackwardContext<S>::Mat;
  using Vec = typename BackwardContext<S>::Vec;
  const ParamLayout& layout = c.layout;
  const Activations<S>& act = c.act;
  const AnchoredHeads heads = layout.crf().heads();
  if (heads.count() == 0) return;
  const int B = act.B, T = act.T, W = layout.dims().hidden_dim;
  if (!donset || donset->size() != static_cast<size_t>(B) * T * layout.dims().num_classes)
    throw std::invalid_argument("model: crf.onset_features needs d onset [B][T][C] in the backward pass");
  std::vector<S> dheads;  // [B][T][A][C]
  fold_heads_backward(heads, B, T, layout.dims().num_classes, act.lengths, dcum, *donset, dheads);
  const int C = heads.count() * layout.dims().num_classes;  // the heads' rows, A*C
  Eigen::Map<const Mat> Wo(c.P(*heads.weight), C, W);
  const int NS = static_cast<int>(c.slices.size());
  std::vector<Mat> pW(NS);
  std::vector<Vec> pb(NS);
  parallel_for(NS, c.nthreads, [&](int64_t si, int) {
    const Slice& s = c.slices[si];
    Mat dO = Mat::Zero(s.rows, C);  // slice-blocked rows t*nb + j
    for (int j = 0; j < s.nb; ++j) {
      const int b = s.b0 + j;
      for (int t = 0; t < act.lengths[b]; ++t)
        for (int q = 0; q < C; ++q) dO(int64_t(t) * s.nb + j, q) = dheads[(static_cast<size_t>(b) * T + t) * C + q];
    }
    pW[si].noalias() = dO.transpose() * act.layer_out.back().middleRows(s.row0, s.rows);
    pb[si] = dO.colwise().sum().transpose();
    dOut.middleRows(s.row0, s.rows).noalias() += dO * Wo;
  });
  Eigen::Map<Mat> gW(c.G(*heads.weight), C, W);
  Eigen::Map<Vec> gb(c.G(*heads.bias), C);
  gW = pW[0];
  gb = pb[0];
  for (int si = 1; si < NS; ++si) gW += pW[si], gb += pb[si];  // slice order
  if (c.pr) {
    for (const CrfTensor* w : heads.weights) c.tap_grad("onset_projection", *w);
    for (const CrfTensor* b : heads.biases) c.tap_grad("onset_projection", *b);
    c.pr->tap_mat("onset_projection", config::Pass::backward, "d_lstm_out", dOut);
  }
}

template <class S>
void backward_lstm_layer(const BackwardContext<S>& c, int k, const typename Activations<S>::Mat& dOut,
                         const typename Activations<S>::Mat (&dInAbove)[2], typename Activations<S>::Mat (&dIn)[2]) {
  using Mat = typename BackwardContext<S>::Mat;
  using Vec = typename BackwardContext<S>::Vec;
  const int B = c.act.B, T = c.act.T, H = c.layout.dims().per_direction(), W = c.layout.dims().hidden_dim;
  const int64_t TB = int64_t(T) * B;
  const int NS = static_cast<int>(c.slices.size());
  const int in_k = k == 0 ? W : 2 * H;
  std::vector<Mat> pWih(2 * NS), pWhh(2 * NS);  // [dir*NS + slice] partials [4H][In_k], [4H][H]
  std::vector<Vec> pb(2 * NS);                  // [dir*NS + slice] partial [4H]
  dIn[0].resize(TB, in_k);
  dIn[1].resize(TB, in_k);
  parallel_for(2 * NS, c.nthreads, [&](int64_t task, int) {
    const int dir = static_cast<int>(task / NS), si = static_cast<int>(task % NS);
    lstm_backward_task(c, k, dir, si, dOut, dInAbove, dIn, pWih, pWhh, pb);
  });
  // Sum the partials in slice order; tasks = (dir, block of kRowBlock gate rows).
  constexpr int kRowBlock = 64;
  const int nblk = (4 * H + kRowBlock - 1) / kRowBlock;
  parallel_for(2 * nblk, c.nthreads, [&](int64_t task, int) {
    const int dir = static_cast<int>(task / nblk), r0 = static_cast<int>(task % nblk) * kRowBlock;
    const int nr = std::min(kRowBlock, 4 * H - r0);
    const std::string l = lstm_suffix(k, dir);
    auto gWih = Eigen::Map<Mat>(c.G("encoder.lstm.weight_ih" + l), 4 * H, in_k).middleRows(r0, nr);
    auto gWhh = Eigen::Map<Mat>(c.G("encoder.lstm.weight_hh" + l), 4 * H, H).middleRows(r0, nr);
    auto gbih = Eigen::Map<Vec>(c.G("encoder.lstm.bias_ih" + l), 4 * H).segment(r0, nr);
    auto gbhh = Eigen::Map<Vec>(c.G("encoder.lstm.bias_hh" + l), 4 * H).segment(r0, nr);
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
  if (c.pr)
    for (int dir = 1; dir >= 0; --dir) {  // the reverse direction's backward ran last in the forward's mirror
      const std::string layer = "lstm." + std::to_string(k) + (dir ? ".bwd" : ".fwd"), l = lstm_suffix(k, dir);
      for (const char* w : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"})
        c.tap_grad(layer, std::string("encoder.lstm.") + w + l);
      c.pr->tap_mat(layer, config::Pass::backward, "d_input", dIn[dir]);
    }
}

template <class S>
void backward_input(const BackwardContext<S>& c, const typename Activations<S>::Mat (&dIn)[2],
                    std::vector<S>* dfeatures, const typename Activations<S>::Mat& dS) {
  using Mat = typename BackwardContext<S>::Mat;
  using Vec = typename BackwardContext<S>::Vec;
  const Activations<S>& act = c.act;
  const int B = act.B, T = act.T, D = c.layout.dims().input_dim, W = c.layout.dims().hidden_dim;
  const int64_t TB = int64_t(T) * B;
  const int NS = static_cast<int>(c.slices.size());
  const std::vector<int32_t>& len = act.lengths;
  const CrfTensor& gw = c.layout.crf().gaussian_weight;  // crf.gaussian_weight: its term of d features
  // dZ = (dIn[0] + dIn[1]) * drop0 = d loss / d (input_proj output)
  Eigen::Map<const Mat> Win(c.P("encoder.input_proj.weight"), W, D);
  std::vector<Mat> pWin(NS);  // [NS] partial [W][D]
  std::vector<Vec> pbin(NS);  // [NS] partial [W]
  if (dfeatures) dfeatures->assign(static_cast<size_t>(TB) * D, S(0));
  // The d (input_proj output) tap, checked per slice (no [T*B][W] copy):
  // the stats of each slice's rows, merged in slice order below.
  std::vector<TensorStats> dZstats(c.pr && c.pr->check() ? NS : 0);
  parallel_for(NS, c.nthreads, [&](int64_t si, int) {
    const Slice& s = c.slices[si];
    Mat dZ = dIn[0].middleRows(s.row0, s.rows) + dIn[1].middleRows(s.row0, s.rows);  // fixed order
    if (c.train) dZ.array() *= act.drop0.middleRows(s.row0, s.rows).array();
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
      if (gw.present && act.head_reads_features) {  // the Gaussian head's own path: d [x^2; x] W^T / d x = 2 x W[:, :D] + W[:, D:]
        const int C = c.layout.dims().num_classes;
        const S* Wg = gw.in(c.params);
        for (int j = 0; j < s.nb; ++j) {
          const int b = s.b0 + j;
          for (int t = 0; t < len[b]; ++t) {
            const int64_t row = s.row0 + int64_t(t) * s.nb + j;
            for (int q = 0; q < D; ++q) {
              const S x = act.x0(row, q);
              S acc = 0;
              for (int k = 0; k < C; ++k) acc += dS(row, k) * (2 * Wg[size_t(k) * 2 * D + q] * x + Wg[size_t(k) * 2 * D + D + q]);
              (*dfeatures)[(static_cast<size_t>(b) * T + t) * D + q] += acc;
            }
          }
        }
      }
    }
  });
  Eigen::Map<Mat> gWin(c.G("encoder.input_proj.weight"), W, D);
  Eigen::Map<Vec> gbin(c.G("encoder.input_proj.bias"), W);
  gWin = pWin[0];
  gbin = pbin[0];
  for (int si = 1; si < NS; ++si) gWin += pWin[si], gbin += pbin[si];  // slice order
  if (c.pr) {
    c.tap_grad("input_proj", "encoder.input_proj.weight");
    c.tap_grad("input_proj", "encoder.input_proj.bias");
    TensorStats st;
    for (const TensorStats& t : dZstats) {
      st.nan += t.nan, st.inf += t.inf, st.finite += t.finite;
      st.min = std::min(st.min, t.min), st.max = std::max(st.max, t.max);
    }
    c.pr->report("input_proj", config::Pass::backward, "d_input_proj_out", st);
    if (dfeatures) c.pr->tap("input", config::Pass::backward, "d_features", dfeatures->data(), dfeatures->size());
  }
}

#define TIMITSEG_BACKWARD_STAGES(S)                                                                                 \
  template Activations<S>::Mat backward_cumsum<S>(const BackwardContext<S>&, const std::vector<S>&,                 \
                                                  const std::vector<S>*);                                           \
  template Activations<S>::Mat backward_projection<S>(const BackwardContext<S>&, const Activations<S>::Mat&);       \
  template void backward_heads<S>(const BackwardContext<S>&, const std::vector<S>&, const std::vector<S>*,             \
                                  Activations<S>::Mat&);                                                             \
  template void backward_lstm_layer<S>(const BackwardContext<S>&, int, const Activations<S>::Mat&,                  \
                                       const Activations<S>::Mat(&)[2], Activations<S>::Mat(&)[2]);                 \
  template void backward_input<S>(const BackwardContext<S>&, const Activations<S>::Mat(&)[2], std::vector<S>*, \
                                 const Activations<S>::Mat&);
TIMITSEG_BACKWARD_STAGES(float)
TIMITSEG_BACKWARD_STAGES(double)
#undef TIMITSEG_BACKWARD_STAGES

}  // namespace timitseg::model::cpu_detail
