// The cuDNN encoder class (implementation of model/cuda/cuda_encoder.h) and
// the cuDNN / cuBLAS status checks. Include only in CUDA code: host code uses
// cuda_encoder.h.
//
// Per forward (shapes batch-major, W = 2H, every layer's input is [B][T][W]):
//   x0 [B][T][D]      features with rows t >= lengths[b] zeroed (as the CPU)
//   in[0] [B][T][W]   x0 Win^T + bin, then dropout (site 0)
//   out[k] [B][T][2H] cuDNN BiLSTM layer k (its own 1-layer bidirectional
//                     descriptor), padding rows 0; in[k+1] = dropout(out[k])
//                     (site k + 1), or out[k] itself without dropout
//   scores [B][T][C]  out[L-1] Wp^T + bp, padding rows 0
//   cum [B][T+1][C]   zero-centered cumsum (crf/cumsum.h semantics)
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "model/cuda/cuda_encoder.h"

namespace timitseg::model::cudnn_detail {
[[noreturn]] void cudnn_fail(cudnnStatus_t status, const char* what, const char* file, int line);
[[noreturn]] void cublas_fail(cublasStatus_t status, const char* what, const char* file, int line);
}  // namespace timitseg::model::cudnn_detail

// Every cuDNN / cuBLAS call goes through these: a failure throws
// std::runtime_error("<call> failed: <status string> (file:line)").
#define TS_CUDNN(call)                                                                                   \
  do {                                                                                                   \
    cudnnStatus_t ts_st_ = (call);                                                                       \
    if (ts_st_ != CUDNN_STATUS_SUCCESS)                                                                  \
      ::timitseg::model::cudnn_detail::cudnn_fail(ts_st_, #call, __FILE__, __LINE__);                    \
  } while (0)
#define TS_CUBLAS(call)                                                                                  \
  do {                                                                                                   \
    cublasStatus_t ts_st_ = (call);                                                                      \
    if (ts_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::timitseg::model::cudnn_detail::cublas_fail(ts_st_, #call, __FILE__, __LINE__);                   \
  } while (0)
// Inside CudnnEncoder's members (cudnn_encoder.cu, cudnn_encoder_passes.cu):
// a cuDNN RNN call that may be refused for the chosen algo and sizes: the one
// error names the algo, the sizes and cuDNN's status string.
#define TS_CUDNN_RNN(call)                                                                                   \
  do {                                                                                                       \
    cudnnStatus_t ts_st_ = (call);                                                                           \
    if (ts_st_ != CUDNN_STATUS_SUCCESS)                                                                      \
      throw std::runtime_error(std::string("cuda encoder: cuDNN refused rnn_algo '") +                        \
                               to_string(opt_.rnn_algo) + "' (B=" + std::to_string(B_) + ", T=" +             \
                               std::to_string(T_) + ", input " +                                              \
                               std::to_string(W_) + ", hidden " + std::to_string(H_) + "): " #call ": " +   \
                               cudnnGetErrorString(ts_st_));                                                 \
  } while (0)

namespace timitseg::model {

// One copy between the flat parameter layout and the cuDNN weight space
// (offsets in floats; ws_offset into the concatenation of every layer's space).
struct WeightSegment {
  int64_t flat_offset = 0;
  int64_t ws_offset = 0;
  int64_t length = 0;
};

// The index of element i of a [B][T][cols] activation in the dropout hash:
// i itself for a whole batch (share == nullptr); for a rank's share of a
// global batch (EncoderBatch::share_rows, device [B]) the index that the same
// element has in the global batch [global_B][gT][cols], so a row gets the mask
// that a process holding the whole batch gives it.
struct MaskIndex {
  const int32_t* share = nullptr;  // [B] device, or nullptr
  int T = 0, gT = 0, cols = 0;
  __device__ uint64_t operator()(int64_t i) const {
    if (!share) return static_cast<uint64_t>(i);
    const int64_t row = i / cols, b = row / T, t = row % T, c = i % cols;
    return static_cast<uint64_t>((int64_t(share[b]) * gT + t) * cols + c);
  }
};

class CudnnEncoder final : public CudaEncoder {
 public:
  CudnnEncoder(const ModelDims& dims, const CudaEncoderOptions& opt);
  ~CudnnEncoder() override;
  CudnnEncoder(const CudnnEncoder&) = delete;
  CudnnEncoder& operator=(const CudnnEncoder&) = delete;

  Device device() const override { return Device::cuda; }
  const ModelDims& dims() const override { return dims_; }
  void forward(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum) override;
  void backward(const float* params, const float* dcum, float* grad, const float* dscores = nullptr) override;
  void forward_with_onset(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum,
                          float* onset) override;
  void backward_with_onset(const float* params, const float* dcum, const float* donset, float* grad,
                           const float* dscores = nullptr) override;
  const float* onset_scores() const override { return onset_input_; }
  const float* head_scores() const override { return onset_input_ ? heads_.as<float>() : nullptr; }

  void set_training(bool training) override { training_ = training; }
  bool training() const override { return training_; }
  std::string describe() const override;
  const float* layer_output(int k) const override;
  const float* scores() const override { return scores_.as<float>(); }
  void set_numerics(gpu::DeviceNumerics* numerics) override { num_ = numerics; }

 private:
  void init();
  void release() noexcept;
  void build_weight_segments();
  void set_data_descriptors();  // for B_, T_, lengths_
  void reserve_buffers();       // for B_, T_ and the forward mode
  float* in(int k);             // [B][T][W] input of layer k
  float* out(int k) { return layer_out_.as<float>() + static_cast<size_t>(k) * B_ * T_ * 2 * H_; }
  float* wspace(int k) { return reinterpret_cast<float*>(wspace_.as<char>() + ws_offset_[k]); }
  float* dwspace(int k) { return reinterpret_cast<float*>(dwspace_.as<char>() + ws_offset_[k]); }
  void* reserve(int k) { return reserve_.as<char>() + reserve_offset_[k]; }
  // Row-major C[M][N] = alpha * op(A) op(B) + beta * C with cuBLAS (column-major) on the stream.
  void gemm_rm(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               float* C, int ldc, float beta = 0.f);
  // out[c] = sum over rows of x[rows][cols] (fixed order, float64 partial sums).
  void column_sums(const float* x, int64_t rows, int cols, float* out);

  // EncoderBatch::share_rows: refused unless every row lies in the global batch, once;
  // mask_index(): the dropout index of the last forward's batch (share or whole).
  void check_share(const EncoderBatch& batch) const;
  MaskIndex mask_index();

  // numeric taps (model/cuda/numerics_taps.h); tapping(): anything to do this step
  gpu::DeviceNumerics* num_ = nullptr;
  bool tapping() const;
  // Copies layer k's weight gradients from dwspace into the flat grad (cuDNN path).
  void scatter_layer_grads(int k, float* grad);

  ModelDims dims_;
  ParamLayout layout_;
  CudaEncoderOptions opt_;
  cudnnRNNAlgo_t algo_ = CUDNN_RNN_ALGO_STANDARD;
  cudaStream_t stream_ = nullptr;
  int D_ = 0, W_ = 0, H_ = 0, L_ = 0, C_ = 0;

  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnDropoutDescriptor_t dropout_desc_ = nullptr;
  std::vector<cudnnRNNDescriptor_t> rnn_;  // [L] one bidirectional single-layer LSTM each
  cudnnRNNDataDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
  cudnnTensorDescriptor_t h_desc_ = nullptr, c_desc_ = nullptr;

  // weights: every layer's weight space in one buffer (layer k at ws_offset_[k] bytes)
  std::vector<size_t> ws_bytes_, ws_offset_;
  size_t ws_total_ = 0;
  Buffer wspace_{Memory::device, 0}, dwspace_{Memory::device, 0};
  Buffer segments_{Memory::device, 0};  // [nseg] WeightSegment
  int64_t nseg_ = 0, max_seg_len_ = 0;
  std::vector<int64_t> seg_begin_;  // [L + 1] layer k's segments are [seg_begin_[k], seg_begin_[k+1])
  Buffer cublas_work_{Memory::device, 0};  // deterministic: cuBLAS's own fixed workspace

  // the last forward
  int B_ = 0, T_ = 0;
  std::vector<int32_t> lengths_;  // [B] host
  ForwardOptions fwd_;
  bool dropout_on_ = false;
  bool training_ = true;
  bool fwd_training_ = false;     // the last forward ran in CUDNN_FWD_MODE_TRAINING
  bool have_activations_ = false; // a forward whose activations backward() may still use
  int dynamic_batch_ = -1;        // persist_dynamic: the batch size cudnnBuildRNNDynamic was run for
  size_t work_bytes_ = 0, reserve_bytes_ = 0;
  std::vector<size_t> reserve_offset_;

  Buffer lengths_dev_{Memory::device, 0};  // [B] int32 (copy of EncoderBatch::lengths_dev)
  // a rank's share (EncoderBatch::share_rows): its rows in the global batch, host and device [B];
  // global_T_ 0 for a whole batch (then the dropout index is today's flat index)
  std::vector<int32_t> share_rows_;
  Buffer share_rows_dev_{Memory::device, 0};
  int global_T_ = 0;
  Buffer x0_{Memory::device, 0};           // [B][T][D]
  const float* head_features_ = nullptr;   // [B][T][D] of the last forward's batch: the Gaussian head's (nullptr: x0_)
  Buffer layer_in_{Memory::device, 0};     // [L][B][T][W] (slots k >= 1 used only with dropout)
  Buffer layer_out_{Memory::device, 0};    // [L][B][T][2H]
  Buffer scores_{Memory::device, 0};       // [B][T][C]
  Buffer heads_{Memory::device, 0};        // [B][T][A][C] the anchored heads' scores (crf.onset_features only)
  Buffer onset_{Memory::device, 0};        // [B][T][C] the CRF's onset input, where the heads' fold is not the identity
  Buffer dheads_{Memory::device, 0};       // [B][T][A][C] d heads, likewise
  const float* onset_input_ = nullptr;     // the last forward's onset input: heads_ or onset_; nullptr without heads
  Buffer work_{Memory::device, 0};         // cuDNN workspace
  Buffer reserve_{Memory::device, 0};      // [L] cuDNN reserve spaces
  Buffer dscores_{Memory::device, 0};      // [B][T][C]
  Buffer dA_{Memory::device, 0}, dB_{Memory::device, 0};  // [B][T][W] ping-pong activation gradients
  Buffer cum_scratch_{Memory::device, 0};  // [B][T][C] double (cumsum backward)
  Buffer colsum_scratch_{Memory::device, 0};  // [chunks][cols] double
  Buffer dfeatures_{Memory::device, 0};    // [B][T][D] d features (only for the `input` backward tap)

  // rnn_algo "fused": the recurrence runs in model/cuda/lstm_fused (Hopper
  // clusters) instead of cuDNN; the input products and weight gradients are
  // cuBLAS GEMMs here. Per layer k: gates [2][B][T][4H], cell and hprev
  // [2][B][T][H] are kept for backward.
  bool fused_ = false;
  void fused_layer_forward(int k, const float* params, const int32_t* len);
  // The passes' head and tail (cudnn_encoder_passes.cu): projection, onset
  // projection and centered cumsum forward; their backward into dy; the input
  // projection's backward from dy.
  void project_and_center(const float* params, const int32_t* len, float* cum);
  // The numeric taps of LSTM layer k (cudnn_encoder_passes.cu): its output; its gradients and d input dx.
  void tap_lstm_forward(int k);
  void tap_lstm_backward(int k, float* grad, float* dx);
  void projection_backward(const float* params, const float* dcum, const float* donset, const float* dscores,
                           float* grad, float* dy);
  void input_proj_backward(const float* params, const float* dy, float* grad);
  void fused_layer_backward(int k, const float* params, const int32_t* len, const float* dy, float* dx, float* grad);
  float* fused_gates(int k) { return fused_gates_.as<float>() + size_t(k) * 2 * B_ * T_ * 4 * H_; }
  float* fused_cell(int k) { return fused_cell_.as<float>() + size_t(k) * 2 * B_ * T_ * H_; }
  float* fused_hprev(int k) { return fused_hprev_.as<float>() + size_t(k) * 2 * B_ * T_ * H_; }
  float* fused_whh(int k) { return fused_whh_.as<float>() + size_t(k) * 2 * 4 * H_ * H_; }
  Buffer fused_xg_{Memory::device, 0};     // [B][T][2][4H] pre-activations (forward) / their gradient (backward)
  Buffer fused_gates_{Memory::device, 0}, fused_cell_{Memory::device, 0}, fused_hprev_{Memory::device, 0};
  Buffer fused_whh_{Memory::device, 0};    // [L][2][4H][H] weight_hh of both directions, contiguous
  Buffer fused_bsum_{Memory::device, 0};   // [8H] b_ih + b_hh of both directions / bias gradients
};

}  // namespace timitseg::model
