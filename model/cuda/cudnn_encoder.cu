// The encoder on cuDNN (BiLSTM), cuBLAS (the two Linear layers) and own
// kernels: construction, descriptors, weight segments and buffers here; the
// forward and backward passes and their kernels (bias, dropout, padding rows,
// column sums, centered cumsum) in cudnn_encoder_passes.cu. See
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

constexpr size_t kAlign = 256;  // bytes: alignment of each layer's weight / reserve space

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

cudnnRNNAlgo_t parse_algo(config::RnnAlgo a) {
  if (a == config::RnnAlgo::standard || a == config::RnnAlgo::fused) return CUDNN_RNN_ALGO_STANDARD;  // fused: cuDNN descriptors unused
  if (a == config::RnnAlgo::persist_static) return CUDNN_RNN_ALGO_PERSIST_STATIC;
  if (a == config::RnnAlgo::persist_dynamic) return CUDNN_RNN_ALGO_PERSIST_DYNAMIC;
  throw std::invalid_argument(std::string("cuda encoder: unknown rnn_algo '") + to_string(a) +  // auto, unresolved
                              "' (expected standard, persist_static, persist_dynamic or fused)");
}

// A cuDNN tensor descriptor in words: "dims {..} strides {..}".
std::string describe_desc(int nb, const int* dims, const int* strides) {
  std::string s = "dims {";
  for (int i = 0; i < nb; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  s += "} strides {";
  for (int i = 0; i < nb; ++i) s += (i ? ", " : "") + std::to_string(strides[i]);
  return s + "}";
}

// The error naming the first LSTM parameter entry no weight segment covers
// (covered [layout.total()]: 1 where one does), or "".
std::string uncovered_lstm_entry(const ParamLayout& layout, const std::vector<uint8_t>& covered) {
  for (const ParamInfo& p : layout.params()) {
    if (p.name.rfind("encoder.lstm.", 0) != 0) continue;
    for (size_t i = 0; i < p.size; ++i)
      if (!covered[p.offset + i])
        return "cuda encoder: " + p.name + " [" + std::to_string(i) + "] has no place in cuDNN's weight space";
  }
  return "";
}

}  // namespace

// ---- construction -----------------------------------------------------------------

CudnnEncoder::CudnnEncoder(const ModelDims& dims, const CudaEncoderOptions& opt)
    : dims_(dims), layout_(dims), opt_(opt) {
  algo_ = parse_algo(opt.rnn_algo);  // before touching the device: a clear error for an unresolved auto
  fused_ = opt.rnn_algo == config::RnnAlgo::fused;
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
  if (error.empty()) error = uncovered_lstm_entry(layout_, covered);
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
  const AnchoredHeads heads = layout_.crf().heads();
  if (heads.count() > 0) heads_.reserve(BT * heads.count() * C_ * sizeof(float));
  if (!heads.fold_is_identity()) {  // the CRF's onset input and the heads' gradient get buffers of their own
    onset_.reserve(BT * C_ * sizeof(float));
    dheads_.reserve(BT * heads.count() * C_ * sizeof(float));
  }
  if (fused_) {
    fused_xg_.reserve(BT * 8 * H_ * sizeof(float));
    fused_gates_.reserve(size_t(L_) * 2 * BT * 4 * H_ * sizeof(float));
    fused_cell_.reserve(size_t(L_) * 2 * BT * H_ * sizeof(float));
    fused_hprev_.reserve(size_t(L_) * 2 * BT * H_ * sizeof(float));
    fused_whh_.reserve(size_t(L_) * 2 * 4 * H_ * H_ * sizeof(float));
    fused_bsum_.reserve(size_t(8) * H_ * sizeof(float));
  }
}

std::string CudnnEncoder::describe() const {
  std::ostringstream o;
  size_t ws = 0;
  for (size_t b : ws_bytes_) ws += b;
  o << "cuDNN " << cudnnGetVersion() << " BiLSTM (" << L_ << " layers of 1, input " << W_ << ", hidden " << H_
    << " per direction), rnn_algo " << to_string(opt_.rnn_algo) << ", FMA math (no TF32); weight space " << ws
    << " bytes; last batch B=" << B_ << " T=" << T_ << " " << (fwd_training_ ? "training" : "inference")
    << ": workspace " << work_bytes_ << " bytes, reserve " << reserve_bytes_ << " bytes";
  return o.str();
}

std::unique_ptr<CudaEncoder> make_cuda_encoder(const ModelDims& dims, const CudaEncoderOptions& opt) {
  return std::make_unique<CudnnEncoder>(dims, opt);
}

}  // namespace timitseg::model
