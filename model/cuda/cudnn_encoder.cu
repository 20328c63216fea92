// The encoder on cuDNN (BiLSTM), cuBLAS (the two Linear layers) and own
// kernels (bias, dropout, padding rows, column sums, centered cumsum). See
// cudnn_encoder.h for the data flow and cuda_encoder.h for the contract.
// Numerics: no TF32 (CUDNN_FMA_MATH, CUBLAS_DEFAULT_MATH), no fast-math, no
// float atomics: every sum runs in a fixed order, so two runs on the same
// inputs give bitwise identical results.
#include "model/cuda/cudnn_encoder.h"
#include "model/cuda/frame_ce.h"
#include "model/cuda/lstm_fused.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/cuda/dropout_hash.h"
#include "model/cuda/numerics_taps.h"

namespace timitseg::model {

namespace cudnn_detail {
void cudnn_fail(cudnnStatus_t status, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(what) + " failed: " + cudnnGetErrorString(status) + " (" + file + ":" +
                           std::to_string(line) + ")");
}
void cublas_fail(cublasStatus_t status, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(what) + " failed: " + cublasGetStatusName(status) + " (" +
                           cublasGetStatusString(status) + ") (" + file + ":" + std::to_string(line) + ")");
}
}  // namespace cudnn_detail

namespace {
using gpu::dropout_key;
using gpu::dropout_uniform_keyed;

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;        // bytes: alignment of each layer's weight / reserve space
constexpr int64_t kColsumChunk = 64;  // rows per partial sum of column_sums

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

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

// z[r][c] = (z[r][c] + bias[c]) * scale(r*cols + c), scale = dropout mask or 1.
__global__ void bias_dropout_kernel(float* z, const float* bias, int cols, int64_t n, bool drop, uint64_t key,
                                    double p, float keep) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = z[i] + bias[i % cols];
    if (drop) v *= dropout_uniform_keyed(key, static_cast<uint64_t>(i)) < p ? 0.f : keep;
    z[i] = v;
  }
}

// dst[i] = src[i] * scale(i) (forward between layers and every dropout backward).
__global__ void dropout_kernel(const float* src, float* dst, int64_t n, uint64_t key, double p, float keep) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i] * (dropout_uniform_keyed(key, static_cast<uint64_t>(i)) < p ? 0.f : keep);
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

// crf::centered_cumsum_forward, one thread per (b, c), same float64 order:
//   mean = (sum_{t<L} x[t]) / L;  run += x[t] - mean;  cum[t+1] = float(run);  rows > L: 0
__global__ void cumsum_forward_kernel(int B, int T, int C, const float* x, const int32_t* len, float* cum) {
  const int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (id >= int64_t(B) * C) return;
  const int b = static_cast<int>(id / C), c = static_cast<int>(id % C);
  const int L = len[b];
  const float* xb = x + int64_t(b) * T * C;
  float* cb = cum + int64_t(b) * (T + 1) * C;
  double mean = 0.0;
  for (int t = 0; t < L; ++t) mean += static_cast<double>(xb[int64_t(t) * C + c]);
  mean /= static_cast<double>(L);
  double run = 0.0;
  cb[c] = 0.f;
  for (int t = 0; t < L; ++t) {
    run += static_cast<double>(xb[int64_t(t) * C + c]) - mean;
    cb[int64_t(t + 1) * C + c] = static_cast<float>(run);
  }
  for (int t = L + 1; t <= T; ++t) cb[int64_t(t) * C + c] = 0.f;
}

// crf::centered_cumsum_backward, one thread per (b, c), same float64 order:
//   g[t] = sum_{s=t+1..L} dcum[s] (t descending);  mean = (sum_{t<L} g[t]) / L (t ascending)
//   dx[t] = float(g[t] - mean) for t < L, 0 for padding.  g: scratch [B][T][C] double.
__global__ void cumsum_backward_kernel(int B, int T, int C, const float* dcum, const int32_t* len, double* g,
                                       float* dx) {
  const int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (id >= int64_t(B) * C) return;
  const int b = static_cast<int>(id / C), c = static_cast<int>(id % C);
  const int L = len[b];
  const float* gb = dcum + int64_t(b) * (T + 1) * C;
  double* g_b = g + int64_t(b) * T * C;
  float* xb = dx + int64_t(b) * T * C;
  double run = 0.0;
  for (int t = L - 1; t >= 0; --t) {
    run += static_cast<double>(gb[int64_t(t + 1) * C + c]);
    g_b[int64_t(t) * C + c] = run;
  }
  double mean = 0.0;
  for (int t = 0; t < L; ++t) mean += g_b[int64_t(t) * C + c];
  mean /= static_cast<double>(L);
  for (int t = 0; t < L; ++t) xb[int64_t(t) * C + c] = static_cast<float>(g_b[int64_t(t) * C + c] - mean);
  for (int t = L; t < T; ++t) xb[int64_t(t) * C + c] = 0.f;
}

cudnnRNNAlgo_t parse_algo(const std::string& s) {
  if (s == "standard" || s == "fused") return CUDNN_RNN_ALGO_STANDARD;  // fused: cuDNN descriptors unused
  if (s == "persist_static") return CUDNN_RNN_ALGO_PERSIST_STATIC;
  if (s == "persist_dynamic") return CUDNN_RNN_ALGO_PERSIST_DYNAMIC;
  throw std::invalid_argument("cuda encoder: unknown rnn_algo '" + s +
                              "' (expected standard, persist_static, persist_dynamic or fused)");
}

}  // namespace

// A cuDNN RNN call that may be refused for the chosen algo and sizes: the one
// error names the algo, the sizes and cuDNN's status string.
#define TS_CUDNN_RNN(call)                                                                                   \
  do {                                                                                                       \
    cudnnStatus_t ts_st_ = (call);                                                                           \
    if (ts_st_ != CUDNN_STATUS_SUCCESS)                                                                      \
      throw std::runtime_error("cuda encoder: cuDNN refused rnn_algo '" + opt_.rnn_algo + "' (B=" +          \
                               std::to_string(B_) + ", T=" + std::to_string(T_) + ", input " +               \
                               std::to_string(W_) + ", hidden " + std::to_string(H_) + "): " #call ": " +   \
                               cudnnGetErrorString(ts_st_));                                                 \
  } while (0)

// ---- construction -----------------------------------------------------------------

CudnnEncoder::CudnnEncoder(const ModelDims& dims, const CudaEncoderOptions& opt)
    : dims_(dims), layout_(dims), opt_(opt) {
  algo_ = parse_algo(opt.rnn_algo);  // before touching the device: a clear error for a typo
  fused_ = opt.rnn_algo == "fused";
  if (fused_) {
    std::string why;
    if (!fused::supported(dims.per_direction(), &why))
      throw std::runtime_error("cuda encoder: rnn_algo 'fused' cannot run here (" + why +
                               "); use train.rnn_algo=standard (cuDNN)");
  }
  stream_ = static_cast<cudaStream_t>(opt.stream);
  D_ = dims.input_dim;
  W_ = dims.hidden_dim;
  H_ = dims.per_direction();
  L_ = dims.num_layers;
  C_ = dims.num_classes;
  try {
    init();
  } catch (...) {
    release();
    throw;
  }
}

CudnnEncoder::~CudnnEncoder() { release(); }

void CudnnEncoder::release() noexcept {
  // Destroy errors are ignored: nothing can be done about them here.
  for (cudnnRNNDescriptor_t d : rnn_)
    if (d) cudnnDestroyRNNDescriptor(d);
  rnn_.clear();
  if (x_desc_) cudnnDestroyRNNDataDescriptor(x_desc_);
  if (y_desc_) cudnnDestroyRNNDataDescriptor(y_desc_);
  if (h_desc_) cudnnDestroyTensorDescriptor(h_desc_);
  if (c_desc_) cudnnDestroyTensorDescriptor(c_desc_);
  if (dropout_desc_) cudnnDestroyDropoutDescriptor(dropout_desc_);
  if (cublas_) cublasDestroy(cublas_);
  if (cudnn_) cudnnDestroy(cudnn_);
  x_desc_ = y_desc_ = nullptr;
  h_desc_ = c_desc_ = nullptr;
  dropout_desc_ = nullptr;
  cublas_ = nullptr;
  cudnn_ = nullptr;
}

void CudnnEncoder::init() {
  cuda::require_device(" (the cuda encoder needs a GPU)");
  TS_CUDNN(cudnnCreate(&cudnn_));
  TS_CUDNN(cudnnSetStream(cudnn_, stream_));
  TS_CUBLAS(cublasCreate(&cublas_));
  TS_CUBLAS(cublasSetStream(cublas_, stream_));
  TS_CUBLAS(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));  // no TF32
  TS_CUBLAS(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
  if (opt_.deterministic) {
    // A workspace of the handle's own: cuBLAS then never draws from its shared
    // pool, whose size could change the chosen algorithm (and its reduction
    // order) from run to run. 32 MiB is NVIDIA's recommendation for Hopper.
    constexpr size_t kCublasWorkspace = size_t(32) << 20;
    cublas_work_.reserve(kCublasWorkspace);
    TS_CUBLAS(cublasSetWorkspace(cublas_, cublas_work_.data(), kCublasWorkspace));
  }

  // cuDNN's own dropout is off (p = 0, no states): ours runs between the layers.
  TS_CUDNN(cudnnCreateDropoutDescriptor(&dropout_desc_));
  TS_CUDNN(cudnnSetDropoutDescriptor(dropout_desc_, cudnn_, 0.f, nullptr, 0, 0));

  TS_CUDNN(cudnnCreateRNNDataDescriptor(&x_desc_));
  TS_CUDNN(cudnnCreateRNNDataDescriptor(&y_desc_));
  TS_CUDNN(cudnnCreateTensorDescriptor(&h_desc_));
  TS_CUDNN(cudnnCreateTensorDescriptor(&c_desc_));

  // One single-layer bidirectional LSTM per layer. Every layer's input size is
  // W (= 2H: layer 0 reads the input projection [W], the others the previous
  // layer's [2H]). FMA math: no tensor cores / TF32.
  rnn_.assign(L_, nullptr);
  ws_bytes_.assign(L_, 0);
  ws_offset_.assign(L_, 0);
  ws_total_ = 0;
  for (int k = 0; k < L_; ++k) {
    TS_CUDNN(cudnnCreateRNNDescriptor(&rnn_[k]));
    TS_CUDNN_RNN(cudnnSetRNNDescriptor_v8(rnn_[k], algo_, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS, CUDNN_BIDIRECTIONAL,
                                          CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH,
                                          W_, H_, H_, 1, dropout_desc_, CUDNN_RNN_PADDED_IO_ENABLED));
    TS_CUDNN_RNN(cudnnGetRNNWeightSpaceSize(cudnn_, rnn_[k], &ws_bytes_[k]));
    ws_offset_[k] = ws_total_;
    ws_total_ += align_up(ws_bytes_[k]);
  }
  wspace_.reserve(ws_total_);
  dwspace_.reserve(ws_total_);
  // bytes of the spaces that no parameter maps to stay 0
  wspace_.zero(ws_total_, stream_);
  dwspace_.zero(ws_total_, stream_);
  build_weight_segments();
}

// The (flat offset, weight-space offset, length) table. cuDNN describes each
// gate's matrix as dims {1, rows, cols} = {1, H, In} (input, linLayerID 0..3)
// or {1, H, H} (recurrent, 4..7), row-major (strides {.., cols, 1}): exactly
// one [H][In] block of PyTorch's weight_ih [4H][In] = gates i, f, g, o stacked
// (and [H][H] of weight_hh). Biases are {1, H, 1}: bias_ih (0..3), bias_hh
// (4..7). Gate order of linLayerID (i, f, g = c', o) is PyTorch's. These
// assumptions are checked here, and every LSTM parameter must be covered once.
void CudnnEncoder::build_weight_segments() {
  cudnnTensorDescriptor_t mdesc = nullptr, bdesc = nullptr;
  TS_CUDNN(cudnnCreateTensorDescriptor(&mdesc));
  TS_CUDNN(cudnnCreateTensorDescriptor(&bdesc));
  std::vector<WeightSegment> segs;
  std::vector<uint8_t> covered(layout_.total(), 0);
  std::vector<uint8_t> ws_used(ws_total_ / sizeof(float), 0);
  std::string error;
  auto describe_desc = [](int nb, const int* dims, const int* strides) {
    std::string s = "dims {";
    for (int i = 0; i < nb; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    s += "} strides {";
    for (int i = 0; i < nb; ++i) s += (i ? ", " : "") + std::to_string(strides[i]);
    return s + "}";
  };
  try {
    seg_begin_.assign(1, 0);
    for (int k = 0; k < L_ && error.empty(); ++k) {
      if (k > 0) seg_begin_.push_back(static_cast<int64_t>(segs.size()));
      const char* base = reinterpret_cast<const char*>(wspace(k));
      for (int dir = 0; dir < 2 && error.empty(); ++dir) {
        const std::string suffix = "_l" + std::to_string(k) + (dir ? "_reverse" : "");
        for (int lin = 0; lin < 8 && error.empty(); ++lin) {
          void* maddr = nullptr;
          void* baddr = nullptr;
          TS_CUDNN(cudnnGetRNNWeightParams(cudnn_, rnn_[k], dir, ws_bytes_[k], wspace(k), lin, mdesc, &maddr, bdesc,
                                           &baddr));
          const bool input = lin < 4;
          const int gate = lin % 4;
          const int cols = input ? W_ : H_;
          for (int which = 0; which < 2 && error.empty(); ++which) {  // 0: matrix, 1: bias
            cudnnDataType_t dt;
            int nb = 0, d[3] = {0, 0, 0}, s[3] = {0, 0, 0};
            TS_CUDNN(cudnnGetTensorNdDescriptor(which ? bdesc : mdesc, 3, &dt, &nb, d, s));
            const int want_cols = which ? 1 : cols;
            const std::string pname = "encoder.lstm." + std::string(which ? (input ? "bias_ih" : "bias_hh")
                                                                          : (input ? "weight_ih" : "weight_hh")) +
                                      suffix;
            if (dt != CUDNN_DATA_FLOAT || nb != 3 || d[0] != 1 || d[1] != H_ || d[2] != want_cols || s[2] != 1 ||
                (want_cols > 1 && s[1] != want_cols)) {
              error = "cuda encoder: cuDNN describes " + pname + " gate " + std::to_string(gate) + " as " +
                      describe_desc(nb, d, s) + ", expected dims {1, " + std::to_string(H_) + ", " +
                      std::to_string(want_cols) + "} row-major float";
              break;
            }
            const char* addr = static_cast<const char*>(which ? baddr : maddr);
            const ParamInfo& p = layout_.get(pname);
            WeightSegment seg;
            seg.length = int64_t(H_) * want_cols;
            seg.flat_offset = static_cast<int64_t>(p.offset) + gate * seg.length;
            const ptrdiff_t byte_off = addr - base;
            if (byte_off < 0 || byte_off % sizeof(float) ||
                static_cast<size_t>(byte_off) + seg.length * sizeof(float) > ws_bytes_[k]) {
              error = "cuda encoder: cuDNN places " + pname + " gate " + std::to_string(gate) +
                      " outside its weight space";
              break;
            }
            seg.ws_offset = static_cast<int64_t>((ws_offset_[k] + byte_off) / sizeof(float));
            for (int64_t i = 0; i < seg.length && error.empty(); ++i) {
              if (covered[seg.flat_offset + i]++ || ws_used[seg.ws_offset + i]++)
                error = "cuda encoder: weight-space mapping of " + pname + " overlaps another segment";
            }
            segs.push_back(seg);
          }
        }
      }
    }
  } catch (...) {
    cudnnDestroyTensorDescriptor(mdesc);
    cudnnDestroyTensorDescriptor(bdesc);
    throw;
  }
  cudnnDestroyTensorDescriptor(mdesc);
  cudnnDestroyTensorDescriptor(bdesc);
  if (error.empty())
    for (const ParamInfo& p : layout_.params()) {
      if (p.name.rfind("encoder.lstm.", 0) != 0) continue;
      for (size_t i = 0; i < p.size; ++i)
        if (!covered[p.offset + i]) {
          error = "cuda encoder: " + p.name + " [" + std::to_string(i) + "] has no place in cuDNN's weight space";
          break;
        }
      if (!error.empty()) break;
    }
  if (!error.empty()) throw std::runtime_error(error);
  nseg_ = static_cast<int64_t>(segs.size());
  seg_begin_.push_back(nseg_);  // segments are built layer by layer: [L + 1] boundaries
  max_seg_len_ = 0;
  for (const WeightSegment& s : segs) max_seg_len_ = std::max(max_seg_len_, s.length);
  segments_.upload(segs.data(), segs.size() * sizeof(WeightSegment));  // synchronous (pageable)
}

// ---- per batch --------------------------------------------------------------------

float* CudnnEncoder::in(int k) {
  if (k == 0 || dropout_on_) return layer_in_.as<float>() + static_cast<size_t>(k) * B_ * T_ * W_;
  return out(k - 1);  // no dropout: layer k reads layer k-1's output directly
}

const float* CudnnEncoder::layer_output(int k) const {
  if (k < 0 || k >= L_ || B_ == 0)
    throw std::out_of_range("cuda encoder: layer_output(" + std::to_string(k) + ") needs a forward() and k in [0, " +
                            std::to_string(L_) + ")");
  return layer_out_.as<float>() + static_cast<size_t>(k) * B_ * T_ * 2 * H_;
}

void CudnnEncoder::set_data_descriptors() {
  float fill = 0.f;
  TS_CUDNN_RNN(cudnnSetRNNDataDescriptor(x_desc_, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, T_,
                                         B_, W_, lengths_.data(), &fill));
  TS_CUDNN_RNN(cudnnSetRNNDataDescriptor(y_desc_, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, T_,
                                         B_, 2 * H_, lengths_.data(), &fill));
  // hx/cx/hy/cy [2 directions][B][H] (never passed: null = zero initial state)
  const int dims[3] = {2, B_, H_};
  const int strides[3] = {B_ * H_, H_, 1};
  TS_CUDNN(cudnnSetTensorNdDescriptor(h_desc_, CUDNN_DATA_FLOAT, 3, dims, strides));
  TS_CUDNN(cudnnSetTensorNdDescriptor(c_desc_, CUDNN_DATA_FLOAT, 3, dims, strides));
  if (algo_ == CUDNN_RNN_ALGO_PERSIST_DYNAMIC && dynamic_batch_ != B_) {
    for (int k = 0; k < L_; ++k) TS_CUDNN_RNN(cudnnBuildRNNDynamic(cudnn_, rnn_[k], B_));
    dynamic_batch_ = B_;
  }
}

void CudnnEncoder::reserve_buffers() {
  const size_t BT = static_cast<size_t>(B_) * T_;
  const cudnnForwardMode_t mode = fwd_training_ ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  work_bytes_ = 0;
  reserve_bytes_ = 0;
  reserve_offset_.assign(L_, 0);
  for (int k = 0; k < L_ && !fused_; ++k) {
    size_t ws = 0, rs = 0;
    TS_CUDNN_RNN(cudnnGetRNNTempSpaceSizes(cudnn_, rnn_[k], mode, x_desc_, &ws, &rs));
    work_bytes_ = std::max(work_bytes_, ws);
    reserve_offset_[k] = reserve_bytes_;
    reserve_bytes_ += align_up(rs);
  }
  work_.reserve(work_bytes_);
  reserve_.reserve(reserve_bytes_);
  lengths_dev_.reserve(static_cast<size_t>(B_) * sizeof(int32_t));
  x0_.reserve(BT * D_ * sizeof(float));
  layer_in_.reserve(static_cast<size_t>(dropout_on_ ? L_ : 1) * BT * W_ * sizeof(float));
  layer_out_.reserve(static_cast<size_t>(L_) * BT * 2 * H_ * sizeof(float));
  scores_.reserve(BT * C_ * sizeof(float));
  if (dims_.onset) onset_.reserve(BT * C_ * sizeof(float));
  if (fused_) {
    fused_xg_.reserve(BT * 8 * H_ * sizeof(float));
    fused_gates_.reserve(size_t(L_) * 2 * BT * 4 * H_ * sizeof(float));
    fused_cell_.reserve(size_t(L_) * 2 * BT * H_ * sizeof(float));
    fused_hprev_.reserve(size_t(L_) * 2 * BT * H_ * sizeof(float));
    fused_whh_.reserve(size_t(L_) * 2 * 4 * H_ * H_ * sizeof(float));
    fused_bsum_.reserve(size_t(8) * H_ * sizeof(float));
  }
}

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

// ---- forward ------------------------------------------------------------------------

void CudnnEncoder::forward(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum) {
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
  have_activations_ = false;
  B_ = batch.B;
  T_ = batch.T;
  lengths_.assign(batch.lengths, batch.lengths + B_);
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
  constexpr Pass kF = Pass::forward;
  if (taps) num_->tap("input", kF, {TapTensor::f32("features", x0, BT * D_)});
  float* z = in(0);
  gemm_rm(false, true, static_cast<int>(BT), W_, D_, x0, D_, P("encoder.input_proj.weight"), D_, z, W_);
  bias_dropout_kernel<<<grid_for(BT * W_), kThreads, 0, stream_>>>(z, P("encoder.input_proj.bias"), W_, BT * W_,
                                                                   dropout_on_, dropout_key(opt.seed, opt.step, 0),
                                                                   p, keep);
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
    if (taps) {
      // each direction's half of out(k) [B][T][2H]: columns [0, H) / [H, 2H)
      const std::string lk = "lstm." + std::to_string(k);
      num_->tap(lk + ".fwd", kF, {TapTensor::f32_strided("lstm_out", out(k), BT, H_, 2 * H_)});
      num_->tap(lk + ".bwd", kF, {TapTensor::f32_strided("lstm_out", out(k) + H_, BT, H_, 2 * H_)});
    }
    if (k + 1 < L_ && dropout_on_) {
      dropout_kernel<<<grid_for(BT * W_), kThreads, 0, stream_>>>(out(k), in(k + 1), BT * W_,
                                                                  dropout_key(opt.seed, opt.step, k + 1), p, keep);
      TS_LAUNCHED("dropout_kernel (between layers)");
    }
  }
  // scores = out[L-1] Wp^T + bp, padding rows 0; then the centered cumsum
  float* s = scores_.as<float>();
  gemm_rm(false, true, static_cast<int>(BT), C_, 2 * H_, out(L_ - 1), 2 * H_, P("crf.projection.weight"), 2 * H_, s,
          C_);
  bias_valid_rows_kernel<<<grid_for(BT * C_), kThreads, 0, stream_>>>(s, P("crf.projection.bias"), T_, C_, BT * C_,
                                                                      len);
  TS_LAUNCHED("bias_valid_rows_kernel (projection)");
  if (taps) num_->tap("projection", kF, {TapTensor::f32("scores", s, BT * C_)});
  if (dims_.onset) {  // crf.onset_features: onset = out[L-1] Wo^T + bo, padding rows 0 (no centering, no cumsum)
    float* o = onset_.as<float>();
    gemm_rm(false, true, static_cast<int>(BT), C_, 2 * H_, out(L_ - 1), 2 * H_, P("crf.onset_projection.weight"),
            2 * H_, o, C_);
    bias_valid_rows_kernel<<<grid_for(BT * C_), kThreads, 0, stream_>>>(o, P("crf.onset_projection.bias"), T_, C_,
                                                                        BT * C_, len);
    TS_LAUNCHED("bias_valid_rows_kernel (onset_projection)");
    if (taps) num_->tap("onset_projection", kF, {TapTensor::f32("onset_scores", o, BT * C_)});
  }
  cumsum_forward_kernel<<<grid_for(int64_t(B_) * C_), kThreads, 0, stream_>>>(B_, T_, C_, s, len, cum);
  TS_LAUNCHED("cumsum_forward_kernel");
  if (taps) {
    // the centered cumsum is one fused operation: both taps see cum (center first)
    const size_t ncum = static_cast<size_t>(B_) * (T_ + 1) * C_;
    num_->tap("center", kF, {TapTensor::f32("cum_scores", cum, ncum)});
    num_->tap("cumsum", kF, {TapTensor::f32("cum_scores", cum, ncum)});
  }
  have_activations_ = true;
}

// ---- backward -----------------------------------------------------------------------

void CudnnEncoder::forward_with_onset(const float* params, const EncoderBatch& batch, const ForwardOptions& opt,
                                      float* cum, float* onset) {
  forward(params, batch, opt, cum);
  if (onset && dims_.onset)
    TS_CUDA(cudaMemcpyAsync(onset, onset_.data(), static_cast<size_t>(B_) * T_ * C_ * sizeof(float),
                            cudaMemcpyDeviceToDevice, stream_));
}

void CudnnEncoder::backward(const float* params, const float* dcum, float* grad, const float* dscores) {
  backward_with_onset(params, dcum, nullptr, grad, dscores);
}

void CudnnEncoder::backward_with_onset(const float* params, const float* dcum, const float* donset, float* grad,
                                       const float* dscores) {
  if (!params || !dcum || !grad) throw std::invalid_argument("cuda encoder: backward needs params, dcum and grad");
  if (dims_.onset && !donset)
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
  auto P = [&](const char* name) { return params + layout_.get(name).offset; };
  auto G = [&](const char* name) { return grad + layout_.get(name).offset; };
  dscores_.reserve(static_cast<size_t>(BT) * C_ * sizeof(float));
  cum_scratch_.reserve(static_cast<size_t>(BT) * C_ * sizeof(double));
  dA_.reserve(static_cast<size_t>(BT) * W_ * sizeof(float));
  dB_.reserve(static_cast<size_t>(BT) * W_ * sizeof(float));

  // dS [B][T][C] (padding rows exactly 0)
  float* dS = dscores_.as<float>();
  cumsum_backward_kernel<<<grid_for(int64_t(B_) * C_), kThreads, 0, stream_>>>(B_, T_, C_, dcum, len,
                                                                               cum_scratch_.as<double>(), dS);
  TS_LAUNCHED("cumsum_backward_kernel");
  if (dscores) gpu::add_inplace(dS, dscores, BT * C_, stream_);  // crf.frame_ce_weight's share
  const bool taps = tapping();
  using gpu::TapTensor;
  constexpr Pass kB = Pass::backward;
  if (taps) {
    num_->tap("cumsum", kB, {TapTensor::f32("d_scores", dS, BT * C_)});
    num_->tap("center", kB, {TapTensor::f32("d_scores", dS, BT * C_)});
  }
  // projection: dWp [C][2H] = dS^T Y, dbp = column sums of dS, dY [B][T][2H] = dS Wp
  gemm_rm(true, false, C_, 2 * H_, static_cast<int>(BT), dS, C_, out(L_ - 1), 2 * H_, G("crf.projection.weight"),
          2 * H_);
  column_sums(dS, BT, C_, G("crf.projection.bias"));
  float* dy = dA_.as<float>();
  float* dx = dB_.as<float>();
  gemm_rm(false, false, static_cast<int>(BT), 2 * H_, C_, dS, C_, P("crf.projection.weight"), 2 * H_, dy, 2 * H_);
  if (taps)
    num_->tap("projection", kB,
              {TapTensor::f32("d_crf.projection.weight", G("crf.projection.weight"), size_t(C_) * 2 * H_),
               TapTensor::f32("d_crf.projection.bias", G("crf.projection.bias"), C_),
               TapTensor::f32("d_lstm_out", dy, BT * 2 * H_)});
  if (dims_.onset) {
    // onset_projection: dWo [C][2H] = dO^T Y, dbo = column sums of dO, dY += dO Wo
    // (dO = donset [B][T][C], padding rows 0 as the CRF writes them)
    gemm_rm(true, false, C_, 2 * H_, static_cast<int>(BT), donset, C_, out(L_ - 1), 2 * H_,
            G("crf.onset_projection.weight"), 2 * H_);
    column_sums(donset, BT, C_, G("crf.onset_projection.bias"));
    gemm_rm(false, false, static_cast<int>(BT), 2 * H_, C_, donset, C_, P("crf.onset_projection.weight"), 2 * H_, dy,
            2 * H_, 1.f);
    if (taps)
      num_->tap("onset_projection", kB,
                {TapTensor::f32("d_crf.onset_projection.weight", G("crf.onset_projection.weight"),
                                size_t(C_) * 2 * H_),
                 TapTensor::f32("d_crf.onset_projection.bias", G("crf.onset_projection.bias"), C_),
                 TapTensor::f32("d_lstm_out", dy, BT * 2 * H_)});
  }

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
    if (taps) {
      // weight and bias gradients of each direction (flat grad), and d input of layer k [B][T][W]
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
    // gradient of the dropped input: through dropout site k (input projection for k = 0)
    if (dropout_on_) {
      dropout_kernel<<<grid_for(BT * W_), kThreads, 0, stream_>>>(dx, dy, BT * W_,
                                                                  dropout_key(fwd_.seed, fwd_.step, k), p, keep);
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
  // input projection: dWin [W][D] = dZ^T x0, dbin = column sums of dZ
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

std::string CudnnEncoder::describe() const {
  std::ostringstream o;
  size_t ws = 0;
  for (size_t b : ws_bytes_) ws += b;
  o << "cuDNN " << cudnnGetVersion() << " BiLSTM (" << L_ << " layers of 1, input " << W_ << ", hidden " << H_
    << " per direction), rnn_algo " << opt_.rnn_algo << ", FMA math (no TF32); weight space " << ws
    << " bytes; last batch B=" << B_ << " T=" << T_ << " " << (fwd_training_ ? "training" : "inference")
    << ": workspace " << work_bytes_ << " bytes, reserve " << reserve_bytes_ << " bytes";
  return o.str();
}

std::unique_ptr<CudaEncoder> make_cuda_encoder(const ModelDims& dims, const CudaEncoderOptions& opt) {
  return std::make_unique<CudnnEncoder>(dims, opt);
}

}  // namespace timitseg::model
