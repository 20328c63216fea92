// The GPU executor's class (model/cuda/cuda_executor.h has the interface;
// the design of a step: model/cuda/cuda_executor.cpp). Internal to
// model/cuda/. Declarations only; the bodies: the state in cuda_executor.cpp,
// the stages of a step (model/step.h's StepDevice, one process or several) in
// cuda_executor_step.cpp, the CRF stage (host or device backend, taps, frame
// CE) in cuda_executor_crf.cpp, decoding and forced alignment in
// cuda_executor_decode.cpp.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "crf/session.h"
#include "model/collectives.h"
#include "model/cuda/cuda_encoder.h"
#include "model/cuda/device_reducer.h"
#include "model/cuda/numerics_taps.h"
#include "model/executor.h"
#include "model/numerics.h"

namespace timitseg::model::cuda_detail {

using Clock = std::chrono::steady_clock;
// Seconds from t0 to now.
double since(Clock::time_point t0);

// Page-locked host memory (cudaMallocHost), grown on demand; async copies
// from it overlap with host work.
class Pinned {
 public:
  Pinned() = default;
  ~Pinned();
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  void* reserve(size_t bytes);
  template <class T>
  T* as() {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t cap_ = 0;
};

// Scalars read back once per step.
struct StepScalars {
  double norm = 0, penalty = 0;
  double penalty_again = 0;  // with taps: the value of the second (gradient) penalty call, unused
  double reduced_norm = 0;   // several processes: the norm of the gradient summed over the ranks
};

class CudaExecutor final : public Executor {
 public:
  // collectives: unset chooses the gradient all-reduce from the environment
  // (model/cuda/device_reducer.h) for a world of several processes and none
  // otherwise; nccl or mpi forces that one even for a world of one (tests).
  CudaExecutor(const ModelDims& dims, const ExecutorOptions& options,
               std::optional<Collectives> collectives = std::nullopt);
  ~CudaExecutor() override;

  Device device() const override { return Device::cuda; }
  std::string description() const override;
  const ModelDims& dims() const override { return dims_; }
  Encoder& encoder() override { return *encoder_; }

  void set_state(const std::vector<float>& params, const AdamW& opt) override;
  void get_state(std::vector<float>& params, AdamW& opt) override;

  // One step (model/step.h run_step over this executor's Stages; several
  // processes with reducer_: the all-reduce stage too).
  StepResult train_step(const Batch& batch, const StepOptions& o) override;

  StepResult gradients(const Batch& batch, const StepOptions& o, std::vector<float>& grad) override;

  // Viterbi (or crf.decode = posterior) segments of a batch (model/cuda/cuda_executor_decode.cpp).
  std::vector<std::vector<crf::Segment>> decode(const Batch& batch, std::vector<float>* scores,
                                                std::vector<double>* nll) override;
  // Forced alignment of the phone sequences (cuda_executor_decode.cpp).
  crf::AlignResult align(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                         const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                         crf::AlignConfidence* confidence, crf::AlignBoundaries boundaries) override;

  // Span marginals of queries after one forward (cuda_executor_decode.cpp), through host copies.
  std::vector<double> span_marginals(const Batch& batch, int64_t Q, const std::vector<int32_t>& queries,
                                     const std::vector<int32_t>& num_queries) override;

  // crf.decode = posterior for the cum_ of the last forward (crf/posterior.h).
  // cuda backend: d log Z / d cum on the device (one backward without labels,
  // scale 1, parameter gradients not wanted), copied to the host for the
  // marginals and the per-frame argmax; the dev loss from log_partition and
  // gold_score on the device. Host backends: posterior_decode_on_host on host copies.
  std::vector<crf::Segment> posterior_decode(const Batch& batch, std::vector<double>* nll);

  int numerics_slots() const { return numerics_->slots(); }
  std::vector<NumericsHit> numerics_report() const;

  std::vector<float> last_cum() override;

  void restore_param(size_t index, float value);

 private:
  // The StepDevice of this executor (cuda_executor_step.cpp): each stage of
  // run_step queued on stream_, read back at the step's one synchronization.
  class Stages;

  size_t cum_bytes(int B, int T) const;

  // Batch -> pinned staging -> device (features, lengths, labels), async.
  void stage(const Batch& batch, bool with_labels);

  EncoderBatch encoder_batch(const Batch& batch) const;

  crf::Params device_crf_params();

  // crf.onset_features: the onset scores [B][T][C] of the last forward on the host; empty without.
  std::vector<float> last_onset();

  // A long recording (one utterance over kWindowFrames, model/long_input.h;
  // cuda_executor_long.cpp): long_scores_device runs the encoder in windows and
  // gathers its scores [1][T][C] (and the heads' [1][T][A][C]) into long_x_
  // (long_heads_) on the device, lengths_ set to the recording's; long_scores
  // copies them to the host, where model::fold_heads makes the onset input. align_long centres the cumsum over the whole recording and runs
  // the constrained Viterbi (in a band) on the cpu backend; decode_long runs
  // the cumsum and the Viterbi on the device with the cuda backend (host
  // copies otherwise).
  void long_scores_device(const Batch& batch);
  void long_scores(const Batch& batch, std::vector<float>& x, std::vector<float>& heads);
  void inference_forward(const Batch& batch);  // a batch that fits (cuda_executor_decode.cpp)
  struct LongHost {
    std::vector<float> cum, onset, hp;
    crf::Dims dims{};
    crf::Params p{};
  };
  void long_host_inputs(const Batch& batch, LongHost& h);
  std::vector<double> span_marginals_long(const Batch& batch, int64_t Q, const std::vector<int32_t>& queries,
                                          const std::vector<int32_t>& num_queries);
  crf::AlignResult align_long(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                              const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                              crf::AlignConfidence* confidence, crf::AlignBoundaries boundaries);
  std::vector<std::vector<crf::Segment>> decode_long(const Batch& batch, std::vector<float>* scores,
                                                     std::vector<double>* nll);
  // The cuda backend's Viterbi of device inputs p (cuda_executor_decode.cpp);
  // with nll, log Z - gold score of labels_ [B][T] too.
  std::vector<crf::Segment> viterbi_on_device(const crf::Dims& dims, const crf::Params& p, std::vector<double>* nll);

  // The CRF parameters (transition..end, contiguous at the end of the layout) on the host.
  void host_crf_param_copy(std::vector<float>& hp);
  // onset: the host copy of the onset scores [B][T][C] (last_onset()), empty = none.
  crf::Params host_crf_params(const std::vector<float>& hp, const std::vector<float>& cum, const Batch& batch,
                              const std::vector<float>& onset);

  // The forward taps of crf (log Z, gold in lz_) and penalty (its value, computed here
  // with reg), then the backward taps of crf; only while taps are active.
  void crf_taps(int B, int T, double reg);

  // The CRF backend threw (it validates its inputs): a bad slot before the CRF
  // is the cause to report; else the backend's own error.
  [[noreturn]] void crf_failed(const std::invalid_argument& e);

  // log Z, gold (host) and d cum / d CRF parameters (device) for the staged batch;
  // with taps active, the crf and penalty taps (crf_taps), reg = crf.reg.
  void crf_backward(const Batch& batch, double scale, std::vector<double>& log_z, std::vector<double>& gold,
                    double reg);

  // crf.frame_ce_weight: the frame CE of the encoder's scores [B][T][C] against
  // the staged labels (model/cuda/frame_ce.h), queued on the stream: its
  // gradient times grad_scale into dce_ [B][T][C], the per-utterance sums into
  // ce_utt_ [B].
  void frame_ce(int B, int T, double grad_scale);
  // The sum over b = 0..B-1 (in order) of ce_utt_ (one read-back; after frame_ce()), unchecked.
  double frame_ce_sum(int B);

  // The gradient that clip and AdamW use: the sum over the ranks with several processes, else grad_.
  float* update_grad() { return reducer_ ? grad_sum_.as<float>() : grad_.as<float>(); }

  // The first non-finite entry of `grad` (grad_, or grad_sum_), in layout order, as one NonFiniteError.
  [[noreturn]] void throw_first_nonfinite_gradient(Buffer& grad);

  ModelDims dims_;
  ParamLayout layout_;
  std::string rnn_algo_, crf_name_, device_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaEncoder> encoder_;
  std::unique_ptr<crf::Backend> backend_;
  std::unique_ptr<crf::Session> session_;  // keeps the CRF workspace (and host-backend copies) across steps
  std::unique_ptr<gpu::DeviceNumerics> numerics_;  // the step's numeric taps (shared with encoder_)
  AdamW opt_;  // hyperparameters and step; the moments live in m_, v_
  Buffer params_{Memory::device, 0}, grad_{Memory::device, 0}, m_{Memory::device, 0}, v_{Memory::device, 0};
  Buffer grad_sum_{Memory::device, 0};  // several processes: grad_ summed over the ranks (clip and AdamW use it)
  Buffer features_{Memory::device, 0}, lengths_{Memory::device, 0}, labels_{Memory::device, 0};
  Buffer head_features_{Memory::device, 0};  // [B][T][D] the Gaussian head's features, when the batch has its own
  bool has_head_features_ = false;
  Buffer cum_{Memory::device, 0}, dcum_{Memory::device, 0}, lz_{Memory::device, 0};
  Buffer donset_{Memory::device, 0};  // [B][T][C] d loss / d onset (crf.onset_features only)
  Buffer scalars_{Memory::device, 0}, norm_scratch_{Memory::device, 0};
  Buffer vit_score_{Memory::device, 0}, vit_segs_{Memory::device, 0}, vit_nseg_{Memory::device, 0};
  Buffer align_phones_{Memory::device, 0}, align_nph_{Memory::device, 0};   // align: [B][N], [B]
  Buffer align_opt_{Memory::device, 0};                                     // align: optional [B][N]
  Buffer align_score_{Memory::device, 0}, align_spans_{Memory::device, 0};  // align: [B], [B][N][2]
  // a long recording: scores and onset [1][T][C], centred cumsum [1][T+1][C] (decode_long)
  Buffer long_x_{Memory::device, 0}, long_cum_{Memory::device, 0};
  Buffer long_heads_{Memory::device, 0};  // [1][T][A][C] the anchored heads' scores of the windows
  Buffer long_onset_{Memory::device, 0};  // [1][T][C] the CRF's onset input, where the heads' fold is not the identity
  // crf.frame_ce_weight: d CE / d scores [B][T][C], per-frame CE [B][T], per-utterance sums [B]
  Buffer dce_{Memory::device, 0}, ce_frames_{Memory::device, 0}, ce_utt_{Memory::device, 0};
  double phone_bonus_ = 0.0;                   // ExecutorOptions::phone_bonus
  bool posterior_ = false;                     // ExecutorOptions::decode == DecodeMode::posterior
  int64_t centre_frames_ = 0;                  // ExecutorOptions::centre_frames (long recordings)
  Pinned staging_, host_scalars_;
  std::vector<int32_t> lengths_host_;
  bool have_cum_ = false;
  int last_B_ = 0, last_T_ = 0;
  dist::Communicator* world_ = nullptr;          // ExecutorOptions::world
  std::unique_ptr<gpu::DeviceReducer> reducer_;  // several processes (or forced): the gradient all-reduce
};

}  // namespace timitseg::model::cuda_detail
