// GPU executor (model/cuda/cuda_executor.h): its state here, the stages of a
// training step in cuda_executor_step.cpp (model/step.h's run_step over
// them). Per training step the host stages the batch in pinned memory and
// queues on one stream:
//   H2D features [B][T][D], lengths [B], labels [B][T]
//   encoder forward -> cum [B][T+1][C]              (model/cuda/cudnn_encoder)
//   CRF backward -> log Z, gold, d cum, d CRF params (crf cuda backend; or a
//                                                     host backend through copies)
//   L2 penalty, encoder backward -> grad             (model/cuda/ops, encoder)
//   global gradient norm -> read back with log Z, gold, penalty (one sync)
//   [several processes, ExecutorOptions::world: the gradient all-reduce
//    (model/cuda/device_reducer.h) and the norm of the sum queued before the
//    sync, which then covers them; the agreed step status and the loss sums
//    after it: cuda_executor_step.cpp]
//   clip + AdamW on the device
// Numeric checks (StepOptions::check_numerics, model/numerics.h): the encoder
// and this executor tap every layer into a gpu::DeviceNumerics
// (model/cuda/numerics_taps.h); the slots are read back with the scalars at
// the one sync point above (and, for the `optimizer` taps, once more after
// the update). The first bad slot in tap order throws NumericsError before
// any parameter changes. With check off and no fault planned: no tap work.
//
// Determinism (ExecutorOptions::deterministic, docs/debugging.md): every
// reduction here, in the encoder's own kernels and in the cuda CRF backend
// runs in a fixed order; there are no float atomics (the only atomics are
// integer counts, exact in any order). cuDNN's standard LSTM algorithm
// (CUDNN_RNN_ALGO_STANDARD, FMA math, no TF32) runs a fixed sequence of GEMMs
// and pointwise kernels chosen from the sizes alone; the fused kernel
// (model/cuda/lstm_fused.cu) has no atomics and sums in a fixed order; the
// linear layers and the fused path's weight gradients are cuBLAS GEMMs,
// whose algorithm cannot vary once the handle has a workspace of its own
// (cublasSetWorkspace, set when deterministic). Dropout masks are a hash of
// (seed, step, site, index). Two runs with one seed give bitwise identical
// parameters and moments (tests/cuda/test_cuda_numerics.cpp checks it).
// The persistent cuDNN algorithms are refused under deterministic: their
// determinism has not been established (and cuDNN 9.14 refuses them at our
// sizes anyway).
// Parameters, gradients and the AdamW moments stay on the GPU from
// set_state() to get_state(). Nothing is allocated after the first batch of
// the largest size seen (every buffer is a Buffer grown with reserve()).
#include "model/cuda/cuda_executor.h"

#include "model/cuda/cuda_executor_impl.h"

#include <algorithm>
#include <cstring>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/cuda/ops.h"
#include "model/step_recipe.h"

namespace timitseg::model::cuda_detail {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Pinned::~Pinned() { cuda::pinned_free(ptr_); }

void* Pinned::reserve(size_t bytes) {
  if (bytes > cap_) {
    cuda::pinned_free(ptr_);
    ptr_ = nullptr;
    cap_ = 0;
    ptr_ = cuda::pinned_alloc(bytes);
    cap_ = bytes;
  }
  return ptr_;
}

namespace {

// Slots of one step at most: forward 8 + 2L, backward 21 + 9L (model/numerics.h).
int max_numeric_slots(const ModelDims& d) { return 32 + 12 * d.num_layers + (d.onset_input() ? 5 : 0); }

ExecutorOptions checked(const ExecutorOptions& o) {
  if (o.deterministic && (o.rnn_algo == config::RnnAlgo::persist_static || o.rnn_algo == config::RnnAlgo::persist_dynamic))
    throw std::invalid_argument(std::string("cuda executor: --deterministic refuses rnn_algo '") +
                                to_string(o.rnn_algo) +
                                "' (the determinism of cuDNN's persistent algorithms is not established); use "
                                "train.rnn_algo=standard or fused");
  return o;
}

}  // namespace

CudaExecutor::CudaExecutor(const ModelDims& dims, const ExecutorOptions& options,
                           std::optional<Collectives> collectives)
    : dims_(dims),
      layout_(dims),
      rnn_algo_(to_string(options.rnn_algo)),
      crf_name_(crf::to_string(options.crf_backend)),
      phone_bonus_(options.phone_bonus),
      posterior_(options.decode == config::DecodeMode::posterior),
      centre_frames_(options.centre_frames) {
  const ExecutorOptions o = checked(options);
  cuda::require_device("; train on the CPU with train.device=cpu");
  TS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CudaEncoderOptions encoder_opts;
  encoder_opts.rnn_algo = o.rnn_algo;
  encoder_opts.stream = stream_;
  encoder_opts.deterministic = o.deterministic;
  encoder_ = make_cuda_encoder(dims, encoder_opts);
  numerics_ = std::make_unique<gpu::DeviceNumerics>(max_numeric_slots(dims));
  encoder_->set_numerics(numerics_.get());
  crf::BackendOptions backend_opts;
  backend_opts.threads = o.threads;
  backend_opts.stream = stream_;
  backend_ = crf::make_backend(o.crf_backend, backend_opts);
  session_ = std::make_unique<crf::Session>(*backend_, stream_);
  device_name_ = cuda::device_name();
  const size_t n = layout_.total();
  params_.reserve(n * sizeof(float));
  grad_.reserve(n * sizeof(float));
  m_.reserve(n * sizeof(float));
  v_.reserve(n * sizeof(float));
  scalars_.reserve(sizeof(StepScalars));
  norm_scratch_.reserve(std::max<size_t>(1, gpu::global_norm_scratch_bytes(n)));
  host_scalars_.reserve(sizeof(StepScalars));
  world_ = o.world;
  if (world_ && (world_->size() > 1 || collectives)) {
    reducer_ = gpu::make_device_reducer(*world_, collectives ? *collectives : gpu::collectives_from_environment());
    grad_sum_.reserve(n * sizeof(float));
  }
}

CudaExecutor::~CudaExecutor() {
  reducer_.reset();
  encoder_.reset();
  numerics_.reset();
  session_.reset();
  backend_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaExecutor::description() const {
  return "cuda: " + device_name_ + ", cuDNN LSTM (" + rnn_algo_ + "), crf " + backend_->name() +
         (reducer_ ? ", allreduce " + reducer_->name() : "");
}

void CudaExecutor::set_state(const std::vector<float>& params, const AdamW& opt) {
  const size_t n = layout_.total();
  if (params.size() != n) throw std::invalid_argument("cuda executor: parameter buffer has the wrong size");
  opt_ = opt;
  if (opt_.m.size() != n) opt_.reset(n);
  std::vector<float> derived = params;  // crf.duration_model = lognormal: the table follows its parameters
  derive_duration_table(layout_, derived.data());
  params_.upload(derived.data(), n * sizeof(float), nullptr);
  m_.upload(opt_.m.data(), n * sizeof(float), nullptr);
  v_.upload(opt_.v.data(), n * sizeof(float), nullptr);
  opt_.m.clear();
  opt_.v.clear();  // the device copies are the state from here on
}

void CudaExecutor::get_state(std::vector<float>& params, AdamW& opt) {
  const size_t n = layout_.total();
  TS_CUDA(cudaStreamSynchronize(stream_));
  params.resize(n);
  opt = opt_;
  opt.m.resize(n);
  opt.v.resize(n);
  params_.download(params.data(), n * sizeof(float), nullptr);
  m_.download(opt.m.data(), n * sizeof(float), nullptr);
  v_.download(opt.v.data(), n * sizeof(float), nullptr);
}

std::vector<NumericsHit> CudaExecutor::numerics_report() const {
  std::vector<NumericsHit> out;
  for (int i = 0; i < numerics_->slots(); ++i) {
    NumericsHit h = numerics_->slot_name(i);
    h.stats = numerics_->stats(i);
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<float> CudaExecutor::last_cum() {
  std::vector<float> out;
  if (!have_cum_) return out;
  out.resize(static_cast<size_t>(last_B_) * (last_T_ + 1) * dims_.num_classes);
  cum_.download(out.data(), out.size() * sizeof(float), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  return out;
}

void CudaExecutor::restore_param(size_t index, float value) {
  cuda::copy_to_device(params_.as<float>() + index, &value, sizeof(float), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
}

size_t CudaExecutor::cum_bytes(int B, int T) const {
  return static_cast<size_t>(B) * (T + 1) * dims_.num_classes * sizeof(float);
}

void CudaExecutor::stage(const Batch& batch, bool with_labels) {
  const int B = batch.input.B, T = batch.input.T, D = dims_.input_dim;
  const size_t fbytes = static_cast<size_t>(B) * T * D * sizeof(float);
  const size_t lbytes = static_cast<size_t>(B) * sizeof(int32_t);
  const size_t labbytes = static_cast<size_t>(B) * T * sizeof(int32_t);
  // The previous step's copies out of the staging buffer must be done.
  TS_CUDA(cudaStreamSynchronize(stream_));
  char* h = static_cast<char*>(staging_.reserve(fbytes + lbytes + labbytes));
  std::memcpy(h, batch.input.features.data(), fbytes);
  std::memcpy(h + fbytes, batch.input.lengths.data(), lbytes);
  if (with_labels) std::memcpy(h + fbytes + lbytes, batch.labels.data(), labbytes);
  features_.upload(h, fbytes, stream_);
  lengths_.upload(h + fbytes, lbytes, stream_);
  if (with_labels) labels_.upload(h + fbytes + lbytes, labbytes, stream_);
  lengths_host_ = batch.input.lengths;
  has_head_features_ = !batch.input.head_features.empty();  // the Gaussian head's unmasked features
  if (has_head_features_) {
    if (batch.input.head_features.size() != static_cast<size_t>(B) * T * D)
      throw std::invalid_argument("cuda executor: head_features does not match [B][T][D]");
    head_features_.upload(batch.input.head_features.data(), fbytes, stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));  // from pageable memory: done before the batch may go
  }
}

EncoderBatch CudaExecutor::encoder_batch(const Batch& batch) const {
  EncoderBatch eb;
  eb.B = batch.input.B;
  eb.T = batch.input.T;
  eb.features = features_.as<float>();
  if (has_head_features_) eb.head_features = head_features_.as<float>();
  eb.lengths = lengths_host_.data();
  eb.lengths_dev = lengths_.as<int32_t>();
  if (!batch.input.share_rows.empty()) {  // a rank's share: the global batch's dropout masks
    eb.share_rows = batch.input.share_rows.data();
    eb.global_B = batch.input.global_B;
    eb.global_T = batch.input.global_T;
  }
  return eb;
}

void CudaExecutor::throw_first_nonfinite_gradient(Buffer& grad) {
  std::vector<float> g(layout_.total());
  grad.download(g.data(), g.size() * sizeof(float), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  check_gradient_finite(layout_, g.data());
  throw NonFiniteError("gradient norm", "non-finite global gradient norm (every gradient entry is finite: overflow)");
}

}  // namespace timitseg::model::cuda_detail

namespace timitseg::model {

std::unique_ptr<Executor> make_cuda_executor(const ModelDims& dims, const ExecutorOptions& options) {
  return std::make_unique<cuda_detail::CudaExecutor>(dims, options);
}

std::unique_ptr<Executor> make_cuda_executor_with_collectives(const ModelDims& dims, const ExecutorOptions& options,
                                                              Collectives collectives) {
  if (!options.world) throw std::invalid_argument("make_cuda_executor_with_collectives: options.world must be set");
  return std::make_unique<cuda_detail::CudaExecutor>(dims, options, collectives);
}

int cuda_numerics_slots(Executor& executor) {
  auto* e = dynamic_cast<cuda_detail::CudaExecutor*>(&executor);
  if (!e) throw std::invalid_argument("cuda_numerics_slots: not a cuda executor");
  return e->numerics_slots();
}

}  // namespace timitseg::model

namespace timitseg::model {
std::vector<NumericsHit> cuda_numerics_report(Executor& executor) {
  auto* e = dynamic_cast<cuda_detail::CudaExecutor*>(&executor);
  if (!e) throw std::invalid_argument("cuda_numerics_report: not a cuda executor");
  return e->numerics_report();
}
}  // namespace timitseg::model
