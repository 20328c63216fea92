// The forward and backward passes of the cuDNN encoder (model/cuda/cudnn_encoder.h)
// and their kernels (bias, dropout, padding rows, column sums; the centered
// cumsum is crf/device_layers.h); construction and buffers: cudnn_encoder.cu.
// Numerics: no TF32 (CUDNN_FMA_MATH, CUBLAS_DEFAULT_MATH), no fast-math, no
// float atomics: every sum runs in a fixed order, so two runs on the same
// inputs give bitwise identical results.
#include "model/cuda/cudnn_encoder.h"
#include "crf/device_layers.h"
#include "model/cuda/frame_ce.h"
#include "model/cuda/heads_fold.h"
#include "model/cuda/lstm_fused.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/cuda/dropout_hash.h"
#include "model/cuda/numerics_taps.h"

namespace timitseg::model {

namespace {
using gpu::dropout_key;
using gpu::dropout_uniform_keyed;

constexpr int kThreads = 256;
constexpr int64_t kColsumChunk = 64;  // rows per partial sum of column_sums

unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, 65535 * 8)));
}

// ---- kernels ------------------------------------------------------------------

// Weight space <- flat parameters: blockIdx.y = segment.
__global__ void gather_weights_kernel(const float* params, float* ws, const WeightSegment* seg) {
  const WeightSegment s = seg[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < s.length; i += int64_t(gridDim.x) * blockDim.x)
    ws[s.ws_offset + i] = params[s.flat_offset + i];
}

// Flat gradient <- weight-gradient space: blockIdx.y = segment.
__global__ void scatter_grads_kernel(const float* dws, float* grad, const WeightSegment* seg) {
  const WeightSegment s = seg[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < s.length; i += int64_t(gridDim.x) * blockDim.x)
    grad[s.flat_offset + i] = dws[s.ws_offset + i];
}

// dst[b][t][:] = t < len[b] ? src[b][t][:] : 0   ([B][T][cols]; src may equal dst)
__global__ void valid_rows_kernel(const float* src, float* dst, int T, int cols, int64_t n, const int32_t* len) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / cols;
    const int b = static_cast<int>(row / T), t = static_cast<int>(row % T);
    dst[i] = t < len[b] ? src[i] : 0.f;
  }
}

// z[r][c] = (z[r][c] + bias[c]) * scale(index(r*cols + c)), scale = dropout mask or 1.
__global__ void bias_dropout_kernel(float* z, const float* bias, int cols, int64_t n, bool drop, uint64_t key,
                                    double p, float keep, MaskIndex index) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = z[i] + bias[i % cols];
    if (drop) v *= dropout_uniform_keyed(key, index(i)) < p ? 0.f : keep;
    z[i] = v;
  }
}

// dst[i] = src[i] * scale(index(i)) (forward between layers and every dropout backward).
__global__ void dropout_kernel(const float* src, float* dst, int64_t n, uint64_t key, double p, float keep,
                               MaskIndex index) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i] * (dropout_uniform_keyed(key, index(i)) < p ? 0.f : keep);
}

// s[b][t][c] = t < len[b] ? s[b][t][c] + bias[c] : 0
__global__ void bias_valid_rows_kernel(float* s, const float* bias, int T, int cols, int64_t n, const int32_t* len) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / cols;
    const int b = static_cast<int>(row / T), t = static_cast<int>(row % T);
    const int c = static_cast<int>(i % cols);
    s[i] = t < len[b] ? s[i] + bias[c] : 0.f;
  }
}

// The Gaussian head (model/gaussian_head.h): s[b][t][c] += bias[c] + sum_d (w[c][d] x^2 + w[c][D + d] x) with
// x = x0[b][t][d], on valid rows (padding rows stay 0). One thread per (row, class), d in increasing order;
// host twin model::add_gaussian_scores.
__global__ void gaussian_head_kernel(float* s, const float* x0, const float* w, const float* bias, int T, int C, int D,
                                     int64_t n, const int32_t* len) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / C;
    const int b = static_cast<int>(row / T), t = static_cast<int>(row % T);
    if (t >= len[b]) continue;
    const int c = static_cast<int>(i % C);
    const float* x = x0 + row * D;
    const float* wc = w + static_cast<int64_t>(c) * 2 * D;
    float acc = bias[c];
    for (int d = 0; d < D; ++d) acc += wc[d] * x[d] * x[d] + wc[D + d] * x[d];
    s[i] += acc;
  }
}

// partial[j][c] = sum of x[r][c] for r in chunk j, in increasing r (float64).
__global__ void colsum_partial_kernel(const float* x, int64_t rows, int cols, double* partial) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = int64_t(blockIdx.y) * kColsumChunk;
  const int64_t r1 = rows < r0 + kColsumChunk ? rows : r0 + kColsumChunk;
  double s = 0.0;
  for (int64_t r = r0; r < r1; ++r) s += static_cast<double>(x[r * cols + c]);
  partial[int64_t(blockIdx.y) * cols + c] = s;
}

// out[c] = float(sum over chunks j, in increasing j, of partial[j][c])
__global__ void colsum_final_kernel(const double* partial, int64_t chunks, int cols, float* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double s = 0.0;
  for (int64_t j = 0; j < chunks; ++j) s += partial[j * cols + c];
  out[c] = static_cast<float>(s);
}

// The forward's inputs: pointers, dims, lengths in [1, T], dropout in [0, 1);
// one error naming the first that is not.
void check_forward_inputs(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, const float* cum) {
  if (!params || !cum || !batch.features || !batch.lengths || !batch.lengths_dev)
    throw std::invalid_argument("cuda encoder: forward needs params, features, lengths, lengths_dev and cum");
  if (batch.B < 1 || batch.T < 1)
    throw std::invalid_argument("cuda encoder: batch dims must be >= 1, got B=" + std::to_string(batch.B) +
                                " T=" + std::to_string(batch.T));
  for (int b = 0; b < batch.B; ++b)
    if (batch.lengths[b] < 1 || batch.lengths[b] > batch.T)
      throw std::invalid_argument("cuda encoder: lengths[" + std::to_string(b) + "] = " +
                                  std::to_string(batch.lengths[b]) + " is outside [1, T=" + std::to_string(batch.T) +
                                  "]");
  if (!(opt.dropout >= 0.0 && opt.dropout < 1.0))
    throw std::invalid_argument("cuda encoder: dropout must be in [0, 1), got " + std::to_string(opt.dropout));
}

}  // namespace

void CudnnEncoder::gemm_rm(bool tA, bool tB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                           float* C, int ldc, float beta) {
  // Row-major C[M][N] is column-major C^T[N][M]: C^T = op(B)^T op(A)^T, and a
  // row-major matrix read column-major is its transpose, so the flags carry over.
  const float alpha = 1.f;
  TS_CUBLAS(cublasSgemm(cublas_, tB ? CUBLAS_OP_T : CUBLAS_OP_N, tA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                        ldb, A, lda, &beta, C, ldc));
}

void CudnnEncoder::column_sums(const float* x, int64_t rows, int cols, float* out) {
  const int64_t chunks = std::max<int64_t>(1, (rows + kColsumChunk - 1) / kColsumChunk);
  if (chunks > 65535) throw std::invalid_argument("cuda encoder: too many rows (" + std::to_string(rows) + ")");
  colsum_scratch_.reserve(static_cast<size_t>(chunks) * cols * sizeof(double));
  double* partial = colsum_scratch_.as<double>();
  const dim3 grid((cols + 127) / 128, static_cast<unsigned>(chunks));
  colsum_partial_kernel<<<grid, 128, 0, stream_>>>(x, rows, cols, partial);
  TS_LAUNCHED("colsum_partial_kernel");
  colsum_final_kernel<<<(cols + 127) / 128, 128, 0, stream_>>>(partial, chunks, cols, out);
  TS_LAUNCHED("colsum_final_kernel");
}

// A rank's share (EncoderBatch::share_rows): global_T >= T and every row in [0, global_B), distinct.
void CudnnEncoder::check_share(const EncoderBatch& batch) const {
  if (!batch.share_rows) return;
  if (batch.global_B < batch.B || batch.global_T < batch.T)
    throw std::invalid_argument("cuda encoder: a share of " + std::to_string(batch.B) + " rows padded to T=" +
                                std::to_string(batch.T) + " cannot come from a global batch of " +
                                std::to_string(batch.global_B) + " rows padded to " + std::to_string(batch.global_T));
  std::vector<char> seen(static_cast<size_t>(batch.global_B), 0);
  for (int b = 0; b < batch.B; ++b) {
    const int32_t g = batch.share_rows[b];
    if (g < 0 || g >= batch.global_B || seen[static_cast<size_t>(g)]++)
      throw std::invalid_argument("cuda encoder: share_rows[" + std::to_string(b) + "] = " + std::to_string(g) +
                                  " is outside [0, global_B=" + std::to_string(batch.global_B) + ") or repeated");
  }
}

MaskIndex CudnnEncoder::mask_index() {
  MaskIndex mi;
  if (global_T_ > 0) mi.share = share_rows_dev_.as<int32_t>();
  mi.T = T_;
  mi.gT = global_T_;
  mi.cols = W_;
  return mi;
}

// ---- forward ------------------------------------------------------------------------

// The forward taps of LSTM layer k: each direction's half of out(k) [B][T][2H], columns [0, H) / [H, 2H).
void CudnnEncoder::tap_lstm_forward(int k) {
  using gpu::TapTensor;
  const int64_t BT = int64_t(B_) * T_;
  const std::string lk = "lstm." + std::to_string(k);
  num_->tap(lk + ".fwd", config::Pass::forward, {TapTensor::f32_strided("lstm_out", out(k), BT, H_, 2 * H_)});
  num_->tap(lk + ".bwd", config::Pass::forward, {TapTensor::f32_strided("lstm_out", out(k) + H_, BT, H_, 2 * H_)});
}

// The backward taps of LSTM layer k: the weight and bias gradients of each
// direction (flat grad), and d input of layer k, dx [B][T][W].
void CudnnEncoder::tap_lstm_backward(int k, float* grad, float* dx) {
  using gpu::TapTensor;
  constexpr config::Pass kB = config::Pass::backward;
  const int64_t BT = int64_t(B_) * T_;
  const std::string lk = "lstm." + std::to_string(k);
  auto lstm_grad = [&](const char* what, bool reverse) {
    const std::string name = std::string("encoder.lstm.") + what + "_l" + std::to_string(k) +
                             (reverse ? "_reverse" : "");
    const ParamInfo& info = layout_.get(name);
    return TapTensor::f32("d_" + name, grad + info.offset, info.size);
  };
  num_->tap(lk + ".bwd", kB,
            {lstm_grad("weight_ih", true), lstm_grad("weight_hh", true), lstm_grad("bias_ih", true),
             lstm_grad("bias_hh", true), TapTensor::f32("d_input", dx, BT * W_)});
  num_->tap(lk + ".fwd", kB,
            {lstm_grad("weight_ih", false), lstm_grad("weight_hh", false), lstm_grad("bias_ih", false),
             lstm_grad("bias_hh", false)});
}

void CudnnEncoder::forward(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum) {
  check_forward_inputs(params, batch, opt, cum);
  check_share(batch);
  have_activations_ = false;
  B_ = batch.B;
  T_ = batch.T;
  lengths_.assign(batch.lengths, batch.lengths + B_);
  head_features_ = batch.head_features;  // the Gaussian head's own features (nullptr: x0)
  fwd_ = opt;
  dropout_on_ = opt.dropout > 0.0;
  fwd_training_ = dropout_on_ || training_;
  const int64_t BT = int64_t(B_) * T_;
  const double p = opt.dropout;
  const float keep = static_cast<float>(1.0 / (1.0 - p));

  if (!fused_) set_data_descriptors();
  reserve_buffers();
  // (cudaMemcpyAsync / cudaMemsetAsync directly: common/cuda.h's helpers
  // synchronize the default stream when no stream is given)
  TS_CUDA(cudaMemcpyAsync(lengths_dev_.data(), batch.lengths_dev, B_ * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                          stream_));
  if (batch.share_rows) {  // a rank's share: its rows' indices in the global batch, for the dropout masks
    share_rows_.assign(batch.share_rows, batch.share_rows + B_);
    share_rows_dev_.reserve(static_cast<size_t>(B_) * sizeof(int32_t));
    TS_CUDA(cudaMemcpyAsync(share_rows_dev_.data(), share_rows_.data(), B_ * sizeof(int32_t), cudaMemcpyHostToDevice,
                            stream_));
  }
  global_T_ = batch.share_rows ? batch.global_T : 0;
  const MaskIndex mi = mask_index();
  const int32_t* len = lengths_dev_.as<int32_t>();
  auto P = [&](const char* name) { return params + layout_.get(name).offset; };

  // params -> weight space (one kernel over every segment of every layer)
  if (!fused_) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((max_seg_len_ + kThreads - 1) / kThreads, 64)),
                    static_cast<unsigned>(nseg_));
    gather_weights_kernel<<<grid, kThreads, 0, stream_>>>(params, wspace_.as<float>(),
                                                          segments_.as<WeightSegment>());
    TS_LAUNCHED("gather_weights_kernel");
  }
  // x0 = features with padding rows zeroed; z = x0 Win^T; (z + bin) * dropout(site 0)
  float* x0 = x0_.as<float>();
  valid_rows_kernel<<<grid_for(BT * D_), kThreads, 0, stream_>>>(batch.features, x0, T_, D_, BT * D_, len);
  TS_LAUNCHED("valid_rows_kernel (features)");
  const bool taps = tapping();
  using gpu::TapTensor;
  constexpr config::Pass kF = config::Pass::forward;
  if (taps) num_->tap("input", kF, {TapTensor::f32("features", x0, BT * D_)});
  float* z = in(0);
  gemm_rm(false, true, static_cast<int>(BT), W_, D_, x0, D_, P("encoder.input_proj.weight"), D_, z, W_);
  bias_dropout_kernel<<<grid_for(BT * W_), kThreads, 0, stream_>>>(z, P("encoder.input_proj.bias"), W_, BT * W_,
                                                                   dropout_on_, dropout_key(opt.seed, opt.step, 0),
                                                                   p, keep, mi);
  TS_LAUNCHED("bias_dropout_kernel (input_proj)");
  if (taps) num_->tap("input_proj", kF, {TapTensor::f32("input_proj_out", z, BT * W_)});

  const cudnnForwardMode_t mode = fwd_training_ ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  for (int k = 0; k < L_; ++k) {
    if (fused_) {
      fused_layer_forward(k, params, len);
    } else {
    const size_t rs = fwd_training_ ? (k + 1 < L_ ? reserve_offset_[k + 1] : reserve_bytes_) - reserve_offset_[k] : 0;
    TS_CUDNN_RNN(cudnnRNNForward(cudnn_, rnn_[k], mode, len, x_desc_, in(k), y_desc_, out(k), h_desc_, nullptr,
                                 nullptr, c_desc_, nullptr, nullptr, ws_bytes_[k], wspace(k), work_bytes_,
                                 work_bytes_ ? work_.data() : nullptr, rs, rs ? reserve(k) : nullptr));
    }
    // cuDNN fills padding rows with 0 (PADDED_IO); zeroed again so that the
    // output is defined whatever the algo does there.
    valid_rows_kernel<<<grid_for(BT * 2 * H_), kThreads, 0, stream_>>>(out(k), out(k), T_, 2 * H_, BT * 2 * H_, len);
    TS_LAUNCHED("valid_rows_kernel (lstm output)");
    if (taps) tap_lstm_forward(k);
    if (k + 1 < L_ && dropout_on_) {
      dropout_kernel<<<grid_for(BT * W_), kThreads, 0, stream_>>>(
          out(k), in(k + 1), BT * W_, dropout_key(opt.seed, opt.step, k + 1), p, keep, mi);
      TS_LAUNCHED("dropout_kernel (between layers)");
    }
  }
  project_and_center(params, len, cum);
  have_activations_ = true;
}

// The forward's head: scores = out[L-1] Wp^T + bp (padding rows 0), the
// anchored heads with crf.onset_features, then the centered cumsum into cum and
// the heads folded into the CRF's inputs (model/cuda/heads_fold.h); their taps.
void CudnnEncoder::project_and_center(const float* params, const int32_t* len, float* cum) {
  const int64_t BT = int64_t(B_) * T_;
  const CrfParamView& crf = layout_.crf();
  const bool taps = tapping();
  using gpu::TapTensor;
  constexpr config::Pass kF = config::Pass::forward;
  float* s = scores_.as<float>();
  gemm_rm(false, true, static_cast<int>(BT), C_, 2 * H_, out(L_ - 1), 2 * H_, crf.projection_weight.in(params), 2 * H_,
          s, C_);
  bias_valid_rows_kernel<<<grid_for(BT * C_), kThreads, 0, stream_>>>(s, crf.projection_bias.in(params), T_, C_,
                                                                      BT * C_, len);
  TS_LAUNCHED("bias_valid_rows_kernel (projection)");
  if (crf.gaussian_weight.present) {  // crf.gaussian_head: the Gaussian head of the features (head_features_ or x0)
    gaussian_head_kernel<<<grid_for(BT * C_), kThreads, 0, stream_>>>(
        s, head_features_ ? head_features_ : x0_.as<float>(), crf.gaussian_weight.in(params),
        crf.gaussian_bias.in(params), T_, C_, D_, BT * C_, len);
    TS_LAUNCHED("gaussian_head_kernel");
  }
  if (taps) num_->tap("projection", kF, {TapTensor::f32("scores", s, BT * C_)});
  const AnchoredHeads heads = crf.heads();
  const int AC = heads.count() * C_;
  if (AC > 0) {  // the heads: out[L-1] Wo^T + bo [B][T][A][C], padding rows 0 (no centering, no cumsum)
    float* o = heads_.as<float>();
    gemm_rm(false, true, static_cast<int>(BT), AC, 2 * H_, out(L_ - 1), 2 * H_, heads.weight->in(params), 2 * H_, o,
            AC);
    bias_valid_rows_kernel<<<grid_for(BT * AC), kThreads, 0, stream_>>>(o, heads.bias->in(params), T_, AC, BT * AC,
                                                                        len);
    TS_LAUNCHED("bias_valid_rows_kernel (onset_projection)");
    if (taps) num_->tap("onset_projection", kF, {TapTensor::f32("onset_scores", o, BT * AC)});
  }
  crf::device::centered_cumsum_forward(B_, T_, C_, s, len, cum, stream_);
  if (taps) {
    // the centered cumsum is one fused operation: both taps see cum (center first)
    const size_t ncum = static_cast<size_t>(B_) * (T_ + 1) * C_;
    num_->tap("center", kF, {TapTensor::f32("cum_scores", cum, ncum)});
    num_->tap("cumsum", kF, {TapTensor::f32("cum_scores", cum, ncum)});
  }
  // after the taps, as on the host: they see the cumsum's output
  onset_input_ = gpu::fold_heads(heads, B_, T_, C_, len, heads_.as<float>(), cum, onset_.as<float>(), stream_);
}

// ---- backward -----------------------------------------------------------------------

void CudnnEncoder::forward_with_onset(const float* params, const EncoderBatch& batch, const ForwardOptions& opt,
                                      float* cum, float* onset) {
  forward(params, batch, opt, cum);
  if (onset && onset_input_)
    TS_CUDA(cudaMemcpyAsync(onset, onset_input_, static_cast<size_t>(B_) * T_ * C_ * sizeof(float),
                            cudaMemcpyDeviceToDevice, stream_));
}

// The backward of the encoder's head into dy [B][T][2H] (d loss / d out[L-1]):
// the centered cumsum's (+ dscores, crf.frame_ce_weight's share), the
// projection's and, with crf.onset_features, the onset projection's; their
// parameter gradients into grad; their taps.
void CudnnEncoder::projection_backward(const float* params, const float* dcum, const float* donset,
                                       const float* dscores, float* grad, float* dy) {
  const int64_t BT = int64_t(B_) * T_;
  const int32_t* len = lengths_dev_.as<int32_t>();
  const CrfParamView& crf = layout_.crf();
  // dS [B][T][C] (padding rows exactly 0)
  float* dS = dscores_.as<float>();
  crf::device::centered_cumsum_backward(B_, T_, C_, dcum, len, cum_scratch_.data(), dS, stream_);
  if (dscores) gpu::add_inplace(dS, dscores, BT * C_, stream_);  // crf.frame_ce_weight's share
  const bool taps = tapping();
  using gpu::TapTensor;
  constexpr config::Pass kB = config::Pass::backward;
  if (taps) {
    num_->tap("cumsum", kB, {TapTensor::f32("d_scores", dS, BT * C_)});
    num_->tap("center", kB, {TapTensor::f32("d_scores", dS, BT * C_)});
  }
  // projection: dWp [C][2H] = dS^T Y, dbp = column sums of dS, dY [B][T][2H] = dS Wp
  gemm_rm(true, false, C_, 2 * H_, static_cast<int>(BT), dS, C_, out(L_ - 1), 2 * H_, crf.projection_weight.in(grad),
          2 * H_);
  column_sums(dS, BT, C_, crf.projection_bias.in(grad));
  gemm_rm(false, false, static_cast<int>(BT), 2 * H_, C_, dS, C_, crf.projection_weight.in(params), 2 * H_, dy, 2 * H_);
  if (taps)
    num_->tap("projection", kB,
              {TapTensor::grad_of(crf.projection_weight, grad), TapTensor::grad_of(crf.projection_bias, grad),
               TapTensor::f32("d_lstm_out", dy, BT * 2 * H_)});
  const AnchoredHeads heads = crf.heads();
  const int AC = heads.count() * C_;
  if (AC > 0) {
    // the heads: dWo [A*C][2H] = dO^T Y, dbo = column sums of dO, dY += dO Wo
    // (dO = d heads [B][T][A][C] from d onset and d cum, padding rows 0 as the CRF writes them)
    const float* dO = gpu::fold_heads_backward(heads, B_, T_, C_, len, dcum, donset, dheads_.as<float>(), stream_);
    gemm_rm(true, false, AC, 2 * H_, static_cast<int>(BT), dO, AC, out(L_ - 1), 2 * H_, heads.weight->in(grad),
            2 * H_);
    column_sums(dO, BT, AC, heads.bias->in(grad));
    gemm_rm(false, false, static_cast<int>(BT), 2 * H_, AC, dO, AC, heads.weight->in(params), 2 * H_, dy, 2 * H_,
            1.f);
    if (taps) {
      std::vector<TapTensor> t;
      for (const CrfTensor* w : heads.weights) t.push_back(TapTensor::grad_of(*w, grad));
      for (const CrfTensor* b : heads.biases) t.push_back(TapTensor::grad_of(*b, grad));
      t.push_back(TapTensor::f32("d_lstm_out", dy, BT * 2 * H_));
      num_->tap("onset_projection", kB, t);
    }
  }
}

// The input projection's backward from dZ [B][T][W]: dWin [W][D] = dZ^T x0,
// dbin = column sums of dZ; its taps (and d features for the input tap).
void CudnnEncoder::input_proj_backward(const float* params, const float* dy, float* grad) {
  const int64_t BT = int64_t(B_) * T_;
  auto P = [&](const char* name) { return params + layout_.get(name).offset; };
  auto G = [&](const char* name) { return grad + layout_.get(name).offset; };
  const bool taps = tapping();
  using gpu::TapTensor;
  constexpr config::Pass kB = config::Pass::backward;
  const float* dZ = dy;
  gemm_rm(true, false, W_, D_, static_cast<int>(BT), dZ, W_, x0_.as<float>(), D_, G("encoder.input_proj.weight"), D_);
  column_sums(dZ, BT, W_, G("encoder.input_proj.bias"));
  if (taps)
    num_->tap("input_proj", kB,
              {TapTensor::f32("d_encoder.input_proj.weight", G("encoder.input_proj.weight"), size_t(W_) * D_),
               TapTensor::f32("d_encoder.input_proj.bias", G("encoder.input_proj.bias"), W_),
               TapTensor::f32("d_input_proj_out", const_cast<float*>(dZ), BT * W_)});
  if (taps && num_->wants("input", kB)) {
    // d features [B][T][D] = dZ Win: computed only for this tap (nothing consumes it)
    dfeatures_.reserve(static_cast<size_t>(BT) * D_ * sizeof(float));
    float* dX = dfeatures_.as<float>();
    gemm_rm(false, false, static_cast<int>(BT), D_, W_, dZ, W_, P("encoder.input_proj.weight"), D_, dX, D_);
    num_->tap("input", kB, {TapTensor::f32("d_features", dX, BT * D_)});
  }
}

void CudnnEncoder::backward(const float* params, const float* dcum, float* grad, const float* dscores) {
  backward_with_onset(params, dcum, nullptr, grad, dscores);
}

void CudnnEncoder::backward_with_onset(const float* params, const float* dcum, const float* donset, float* grad,
                                       const float* dscores) {
  if (!params || !dcum || !grad) throw std::invalid_argument("cuda encoder: backward needs params, dcum and grad");
  if (dims_.onset_input() && !donset)
    throw std::invalid_argument("cuda encoder: crf.onset_features needs d onset [B][T][C] in the backward pass");
  if (!have_activations_)
    throw std::logic_error("cuda encoder: backward() needs a forward() first (and one backward per forward: "
                           "cuDNN's reserve space is consumed)");
  if (!fwd_training_)
    throw std::logic_error("cuda encoder: backward() after an inference-mode forward (set_training(false) and "
                           "dropout 0): call set_training(true) before the forward");
  have_activations_ = false;
  const int64_t BT = int64_t(B_) * T_;
  const int32_t* len = lengths_dev_.as<int32_t>();
  const double p = fwd_.dropout;
  const float keep = static_cast<float>(1.0 / (1.0 - p));
  const MaskIndex mi = mask_index();  // the forward's share (its rows stay in share_rows_dev_)
  dscores_.reserve(static_cast<size_t>(BT) * C_ * sizeof(float));
  cum_scratch_.reserve(static_cast<size_t>(BT) * C_ * sizeof(double));
  dA_.reserve(static_cast<size_t>(BT) * W_ * sizeof(float));
  dB_.reserve(static_cast<size_t>(BT) * W_ * sizeof(float));

  float* dy = dA_.as<float>();
  float* dx = dB_.as<float>();
  projection_backward(params, dcum, donset, dscores, grad, dy);
  const bool taps = tapping();
  const CrfParamView& crf = layout_.crf();
  if (crf.gaussian_weight.present)  // the Gaussian head takes no gradient step (model/gaussian_head.h): its entries 0
    TS_CUDA(cudaMemsetAsync(crf.gaussian_weight.in(grad), 0,
                            (crf.gaussian_weight.size + crf.gaussian_bias.size) * sizeof(float), stream_));

  // cudnnRNNBackwardWeights_v8 ADDS into the gradient space
  if (!fused_) TS_CUDA(cudaMemsetAsync(dwspace_.data(), 0, ws_total_, stream_));
  for (int k = L_ - 1; k >= 0; --k) {
    if (fused_) {
      fused_layer_backward(k, params, len, dy, dx, grad);
    } else {
    const size_t rs = (k + 1 < L_ ? reserve_offset_[k + 1] : reserve_bytes_) - reserve_offset_[k];
    TS_CUDNN_RNN(cudnnRNNBackwardData_v8(cudnn_, rnn_[k], len, y_desc_, out(k), dy, x_desc_, dx, h_desc_, nullptr,
                                         nullptr, nullptr, c_desc_, nullptr, nullptr, nullptr, ws_bytes_[k],
                                         wspace(k), work_bytes_, work_bytes_ ? work_.data() : nullptr, rs,
                                         reserve(k)));
    // padding rows of dx: not defined by cuDNN's contract; they must not reach a weight gradient
    valid_rows_kernel<<<grid_for(BT * W_), kThreads, 0, stream_>>>(dx, dx, T_, W_, BT * W_, len);
    TS_LAUNCHED("valid_rows_kernel (lstm input gradient)");
    TS_CUDNN_RNN(cudnnRNNBackwardWeights_v8(cudnn_, rnn_[k], CUDNN_WGRAD_MODE_ADD, len, x_desc_, in(k), h_desc_,
                                            nullptr, y_desc_, out(k), ws_bytes_[k], dwspace(k), work_bytes_,
                                            work_bytes_ ? work_.data() : nullptr, rs, reserve(k)));
    // with taps, each layer's gradients reach the flat grad right away (else once, after the loop)
    if (taps) scatter_layer_grads(k, grad);
    }
    if (taps) tap_lstm_backward(k, grad, dx);
    // gradient of the dropped input: through dropout site k (input projection for k = 0)
    if (dropout_on_) {
      dropout_kernel<<<grid_for(BT * W_), kThreads, 0, stream_>>>(dx, dy, BT * W_,
                                                                  dropout_key(fwd_.seed, fwd_.step, k), p, keep, mi);
      TS_LAUNCHED("dropout_kernel (backward)");
    } else {
      std::swap(dx, dy);
    }
    // dy now holds d loss / d (output of layer k-1), or of the input projection for k = 0
  }
  // weight-gradient space -> flat grad (one kernel over every segment)
  if (!fused_ && !taps) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((max_seg_len_ + kThreads - 1) / kThreads, 64)),
                    static_cast<unsigned>(nseg_));
    scatter_grads_kernel<<<grid, kThreads, 0, stream_>>>(dwspace_.as<float>(), grad, segments_.as<WeightSegment>());
    TS_LAUNCHED("scatter_grads_kernel");
  }
  input_proj_backward(params, dy, grad);  // dy: d loss / d the input projection's output
}

bool CudnnEncoder::tapping() const { return num_ && num_->active(); }

void CudnnEncoder::scatter_layer_grads(int k, float* grad) {
  const int64_t first = seg_begin_.at(k), count = seg_begin_.at(k + 1) - first;
  if (count <= 0) return;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((max_seg_len_ + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(count));
  scatter_grads_kernel<<<grid, kThreads, 0, stream_>>>(dwspace_.as<float>(), grad,
                                                        segments_.as<WeightSegment>() + first);
  TS_LAUNCHED("scatter_grads_kernel (one layer)");
}

// ---- rnn_algo "fused" ---------------------------------------------------------------

namespace {
// xg[r][dir*4H + j] += bsum[dir*4H + j] for every row r of [rows][8H].
__global__ void add_gate_bias_kernel(float* xg, const float* bsum, int64_t n, int cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    xg[i] += bsum[i % cols];
}
// bsum[i] = b_ih[i] + b_hh[i] for one direction's 4H entries.
__global__ void bias_pair_sum_kernel(const float* bih, const float* bhh, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = bih[i] + bhh[i];
}
}  // namespace

void CudnnEncoder::fused_layer_forward(int k, const float* params, const int32_t* len) {
  const int64_t BT = int64_t(B_) * T_;
  const int G4 = 4 * H_;
  const std::string l = "_l" + std::to_string(k);
  float* xg = fused_xg_.as<float>();
  float* bsum = fused_bsum_.as<float>();
  for (int dir = 0; dir < 2; ++dir) {
    const std::string sfx = l + (dir ? "_reverse" : "");
    const float* wih = params + layout_.get("encoder.lstm.weight_ih" + sfx).offset;
    // xg[:, dir*4H : dir*4H+4H] = in(k) W_ih_dir^T   ([BT][W] x [W][4H], ldc = 8H)
    gemm_rm(false, true, static_cast<int>(BT), G4, W_, in(k), W_, wih, W_, xg + dir * G4, 2 * G4);
    bias_pair_sum_kernel<<<(G4 + 255) / 256, 256, 0, stream_>>>(
        params + layout_.get("encoder.lstm.bias_ih" + sfx).offset,
        params + layout_.get("encoder.lstm.bias_hh" + sfx).offset, bsum + dir * G4, G4);
    TS_LAUNCHED("bias_pair_sum_kernel");
    TS_CUDA(cudaMemcpyAsync(fused_whh(k) + size_t(dir) * G4 * H_,
                            params + layout_.get("encoder.lstm.weight_hh" + sfx).offset,
                            size_t(G4) * H_ * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  add_gate_bias_kernel<<<grid_for(BT * 2 * G4), kThreads, 0, stream_>>>(xg, bsum, BT * 2 * G4, 2 * G4);
  TS_LAUNCHED("add_gate_bias_kernel");
  fused::forward(B_, T_, H_, xg, fused_whh(k), len, out(k), fused_gates(k), fused_cell(k), fused_hprev(k), stream_);
}

void CudnnEncoder::fused_layer_backward(int k, const float* params, const int32_t* len, const float* dy, float* dx,
                                        float* grad) {
  const int64_t BT = int64_t(B_) * T_;
  const int G4 = 4 * H_;
  const std::string l = "_l" + std::to_string(k);
  float* dxg = fused_xg_.as<float>();  // the forward's xg is no longer needed
  fused::backward(B_, T_, H_, fused_whh(k), len, dy, fused_gates(k), fused_cell(k), dxg, stream_);
  float* bgrad = fused_bsum_.as<float>();
  column_sums(dxg, BT, 2 * G4, bgrad);  // [8H]: d b of both directions (bias_ih and bias_hh alike)
  for (int dir = 0; dir < 2; ++dir) {
    const std::string sfx = l + (dir ? "_reverse" : "");
    float* gih = grad + layout_.get("encoder.lstm.weight_ih" + sfx).offset;
    float* ghh = grad + layout_.get("encoder.lstm.weight_hh" + sfx).offset;
    // dW_ih [4H][W] = dxg_dir^T in(k);  dW_hh [4H][H] = dxg_dir^T hprev_dir
    gemm_rm(true, false, G4, W_, static_cast<int>(BT), dxg + dir * G4, 2 * G4, in(k), W_, gih, W_);
    gemm_rm(true, false, G4, H_, static_cast<int>(BT), dxg + dir * G4, 2 * G4, fused_hprev(k) + size_t(dir) * BT * H_,
            H_, ghh, H_);
    for (const char* b : {"encoder.lstm.bias_ih", "encoder.lstm.bias_hh"})
      TS_CUDA(cudaMemcpyAsync(grad + layout_.get(b + sfx).offset, bgrad + dir * G4, size_t(G4) * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream_));
    // dx [BT][W] = sum_dir dxg_dir W_ih_dir  (padding rows of dxg are 0, so are dx's)
    const float* wih = params + layout_.get("encoder.lstm.weight_ih" + sfx).offset;
    gemm_rm(false, false, static_cast<int>(BT), W_, G4, dxg + dir * G4, 2 * G4, wih, W_, dx, W_, dir ? 1.f : 0.f);
  }
}

}  // namespace timitseg::model
