// The training/inference engine of one device. An Executor owns the
// parameters and the AdamW state (host memory on the CPU, GPU memory on the
// GPU) from set_state() on, and runs whole steps: encoder forward (through the
// Encoder interface), CRF loss and gradients, L2 penalty, encoder backward,
// global-norm clipping and the AdamW update; or Viterbi decoding.
//
// train, evaluate and decode (train/train.cpp, eval/infer.cpp) call this
// interface only; the implementations live in model/cpu/ and model/cuda/.
// The model definition they share is model/params.h (layout, names,
// initialisation), model/batch.h, model/checkpoint.h and model/optim.h (the
// update rule, which the GPU kernels reproduce). This header declares the
// executor and its options only; beside it: the replay file of a failed step
// (model/replay_file.h), the drift check's parameter maxima (model/drift.h),
// the all-reduce timing of bench train (model/allreduce_timing.h); posterior
// decoding on host arrays and the confidences of align() are the CRF's
// (crf/posterior.h, crf/align_confidence.h).
#pragma once

#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/dist.h"
#include "crf/align_confidence.h"
#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/posterior_boundaries.h"
#include "crf/session.h"
#include "model/batch.h"
#include "config/config_enums.h"
#include "model/encoder.h"
#include "model/numerics.h"
#include "model/optim.h"
#include "model/params.h"

namespace timitseg::model {

// A non-finite value found during a training step; `tensor` names the first one.
class NonFiniteError : public std::runtime_error {
 public:
  NonFiniteError(const std::string& tensor, const std::string& detail)
      : std::runtime_error(detail), tensor_(tensor) {}
  const std::string& tensor() const { return tensor_; }

 private:
  std::string tensor_;
};

// Seconds per part of a step (host wall clock; the GPU executor synchronizes
// between parts only when timing is asked for).
struct StepTimes {
  double encoder_forward = 0, encoder_backward = 0, crf = 0, optimizer = 0;
};

struct StepOptions {
  double lr = 1e-3;                  // this update's learning rate
  double crf_lr_scale = 1.0;         // crf.lr_scale: crf.transition, duration_bias, start, end use lr * this
  double dropout = 0.0;              // model.dropout
  double clip_norm = 0.0;            // train.clip_norm (0 = off)
  double crf_reg = 0.0;              // crf.reg
  bool frame_normalization = false;  // crf.loss_normalization == frame (else per utterance)
  double frame_ce_weight = 0.0;      // crf.frame_ce_weight: + w * frame CE of the scores / the same norm (model/frame_ce.h)
  bool check_numerics = true;        // debug.check_numerics: per-layer checks, model/numerics.h
  // > 0: the loss normalization of the global batch (its utterances, or its
  // frames with frame_normalization) that every rank divides its share's sums
  // by, so that the ranks' gradients sum to the global batch's; 0: this batch's own.
  double loss_norm = 0.0;
  int64_t step = 0;                  // the global optimizer step this update becomes (from 1)
  config::FaultSpec fault;                   // --inject-fault (planted when fault.step == step)
  bool time_parts = false;           // fill StepResult::times (synchronizes the GPU between parts)
  std::mt19937_64* rng = nullptr;    // CPU dropout masks: the run's engine (resume is bit-exact)
  uint64_t seed = 0;                 // GPU dropout masks: a function of (seed, step, layer, index)
  // debug.inject_nonfinite: (flat parameter index, value) pairs in effect for
  // this step only (the stored parameters are not changed).
  std::vector<std::pair<size_t, float>> poison;
};

struct StepResult {
  double loss = 0;       // mean NLL (per utterance or frame) + penalty (+ w * frame CE / the same norm)
  double frame_ce_sum = 0;  // sum over valid frames of the frame CE (computed only when frame_ce_weight > 0)
  double nll_sum = 0;    // sum over utterances
  double penalty = 0;
  double grad_norm = 0;  // global gradient norm before clipping
  StepTimes times;
};

struct ExecutorOptions {
  int threads = 0;                    // CPU threads (0 = all cores): the cpu executor and host CRF backends
  crf::BackendKind crf_backend = crf::BackendKind::cpu;  // reference | cpu | cuda
  config::RnnAlgo rnn_algo = config::RnnAlgo::standard;  // cuda executor: standard | persist_static | persist_dynamic (cuDNN) | fused
                                         // (never automatic: resolved before, options/device_choice.h)
  bool deterministic = false;         // debug.deterministic / --deterministic: refuse anything whose result
                                      // may vary between runs (docs/debugging.md)
  double phone_bonus = 0.0;           // crf.phone_bonus: decode() adds it at each label change (crf::add_phone_bonus)
  // Several training processes (docs/multigpu.md): train_step and gradients
  // reduce the data gradient, the loss sums and the step status over them
  // (the L2 penalty is added once, by rank 0); null or size 1: one process.
  dist::Communicator* world = nullptr;
  config::DecodeMode decode = config::DecodeMode::viterbi;  // crf.decode: viterbi | posterior (decode(): per-frame argmax of the
                                      // marginals, crf/posterior.h; phone_bonus does not apply)
  int64_t centre_frames = 0;          // a long recording (model/long_input.h): 0 centres its cumsum over the whole
                                      // recording, M > 0 by the mean of M frames either side (model::long_cumsum)
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual Device device() const = 0;
  // One line for logs and run.json: "cpu (2 threads), crf cpu" / "cuda: NVIDIA H100 ..., crf cuda".
  virtual std::string description() const = 0;
  virtual const ModelDims& dims() const = 0;
  virtual Encoder& encoder() = 0;

  // Parameters (flat layout of model/params.h, host) and optimizer state in;
  // from here on they live in the executor.
  virtual void set_state(const std::vector<float>& params, const AdamW& optimizer) = 0;
  // The current parameters and optimizer state, copied out to the host.
  virtual void get_state(std::vector<float>& params, AdamW& optimizer) = 0;

  // One optimizer step on a batch: loss and gradients, global-norm clipping,
  // AdamW update (optimizer.step + 1). Throws NonFiniteError naming the first
  // non-finite tensor; then nothing is updated.
  virtual StepResult train_step(const Batch& batch, const StepOptions& options) = 0;

  // The loss and the gradient of a batch without any update (tests, replay):
  // grad receives d loss / d params (flat layout, host), before clipping.
  virtual StepResult gradients(const Batch& batch, const StepOptions& options, std::vector<float>& grad) = 0;

  // Viterbi segments per utterance (label-set indices), no dropout, with
  // ExecutorOptions::phone_bonus at each label change. scores
  // (optional): the projection output [B][T][C] on the host (--dump-scores).
  // nll (optional): per utterance [B], log Z - gold score of batch.labels from
  // the same forward (the dev loss; no penalty, no dropout, no phone bonus); batch.labels must
  // then be valid labels.
  virtual std::vector<std::vector<crf::Segment>> decode(const Batch& batch, std::vector<float>* scores,
                                                        std::vector<double>* nll = nullptr) = 0;

  // Forced alignment (crf::Backend::align, docs/crf.md "Forced alignment"):
  // one forward without dropout, then the constrained Viterbi of each
  // utterance's phone sequence phones [B][N] (num_phones [B]; label-set
  // indices; optional [B][N] 1 = may be skipped, empty = none). Returns score
  // [B] (-inf: infeasible) and spans [B][N][2] (start frame, frames; 0 frames
  // for a skipped phone) on the host; the model's own transition (no phone bonus).
  // confidence (nullptr = not wanted): the scores of docs/crf.md "Confidence"
  // for the aligned spans, from the same forward (fill_align_confidence).
  // boundaries: posterior moves the boundaries to the posteriors' programme
  // (crf/posterior_boundaries.h; r.posterior counts it) before the confidences.
  virtual crf::AlignResult align(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                                 const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                                 crf::AlignConfidence* confidence = nullptr,
                                 crf::AlignBoundaries boundaries = crf::AlignBoundaries::viterbi) = 0;
  // Span marginals (crf::Backend::span_marginals, docs/crf.md "Confidence")
  // of queries [B][Q][3] (start, duration, label; num_queries [B]) after one
  // forward without dropout, with the model's own transition (no phone
  // bonus): [B][Q] on the host. decode's segment posteriors.
  virtual std::vector<double> span_marginals(const Batch& batch, int64_t Q, const std::vector<int32_t>& queries,
                                             const std::vector<int32_t>& num_queries) = 0;
  // cum_scores [B][T+1][C] of the last forward, on the host; empty when the
  // forward stopped before the cumsum. Used for the replay file of a failure.
  virtual std::vector<float> last_cum() = 0;
};

// The device of a setting: cpu, cuda, or auto (cuda when a CUDA device is
// present, else cpu). Throws one line ("no CUDA device was found (...)") for
// cuda without a device, ending with `hint` (what to do instead; "" = train's:
// train.device=cpu or --device cpu). The other `auto` keys: options/device_choice.h.
Device resolve_device(config::DeviceSetting device, const std::string& hint = "");

// Sets the default thread count of the CPU encoder (0 = all cores;
// common/parallel.h) and keeps Eigen single-threaded; returns the number used.
// train, evaluate, decode, compare and the report call it before make_executor
// (model/make_executor.h).
int set_threads(int threads);

// The end of every executor's align() on host copies of its forward: the
// posteriors' boundaries when asked (crf::posterior_boundaries, on the thread
// count set_threads set), then the confidences of the final spans when
// confidence is not nullptr (crf::fill_align_confidence with the default
// limits, the windows of a host backend on the same threads).
void finish_alignment(crf::Session& session, const crf::Dims& dims, const crf::Params& host_params, int64_t N,
                      const std::vector<int32_t>& phones, const std::vector<int32_t>& num_phones,
                      const std::vector<int32_t>& optional, crf::AlignBoundaries boundaries, crf::AlignResult* r,
                      crf::AlignConfidence* confidence);

}  // namespace timitseg::model
