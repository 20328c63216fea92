// One training step, written once: run_step runs the stages of the recipe
// (model/step_recipe.h) in order over a StepDevice, the small interface that
// the CPU executor (model/cpu/cpu_executor.cpp, host arrays, each stage done
// when it returns) and the GPU executor (model/cuda/cuda_executor_step.cpp,
// each stage queued on the executor's stream) implement. The loss
// normalization, the checks of the CRF outputs, the frame CE, the loss and the
// gradient, the loss itself, the AdamW ranges and the steps of several
// processes (share_options, agree_on_step, reduce_step_scalars of
// model/dist_step.h) are here, once; a device does only its own arithmetic.
//
// The order of one step (one process):
//   begin, forward, crf, frame_ce, backward, penalty, grad_norm, end_share,
//   read_back (the one synchronization of the GPU), check_taps, then the
//   checks (check_crf_outputs, check_crf_gradients, check_frame_ce, the
//   loss, the gradient norm), then clip and update (train_step only).
// Several processes (StepDevice::world()): the same on this rank's share
// (share_options: crf.reg on rank 0 only; an empty share is empty_share), a
// failure kept instead of thrown, then allreduce (every rank joins it) before
// read_back, the share's checks, agree_on_step, reduce_step_scalars, the
// checks of the sums, clip and update.
#pragma once

#include <vector>

#include "common/dist.h"
#include "model/batch.h"
#include "model/executor.h"
#include "model/optim.h"
#include "model/params.h"

namespace timitseg::model {

// The scalars of a step's one read-back.
struct StepReadBack {
  double penalty = 0;       // the L2 penalty's value (the tapped one while taps are on)
  double norm = 0;          // the global norm of this process's gradient
  double reduced_norm = 0;  // several processes: the norm of the gradient summed over the ranks
};

// log Z and the gold score [B] of the CRF stage, on the host (valid until the next stage call).
struct CrfSums {
  const double* log_z = nullptr;
  const double* gold = nullptr;
};

// The stages of a step on one device, in the order run_step calls them. A
// stage may queue its work (the GPU) as long as the values it returns are
// final; read_back is where everything queued is done.
class StepDevice {
 public:
  virtual ~StepDevice() = default;
  // The processes of the all-reduce stage; null: one process (no all-reduce).
  virtual dist::Communicator* world() const = 0;
  // The flat parameter layout (the ranges of the update).
  virtual const ParamLayout& layout() const = 0;
  // Whether timing the parts costs nothing (the CPU: times always filled);
  // else only with StepOptions::time_parts, wait() at each part's end.
  virtual bool times_for_free() const = 0;
  // Returns when the work queued so far is done (part times only).
  virtual void wait() = 0;

  // 0 the batch staged, the step's numeric taps begun, StepOptions::poison planted.
  virtual void begin(const Batch& batch, const StepOptions& o) = 0;
  // An empty share of several processes (no utterance left for this rank):
  // the step's (empty) taps, a zero gradient, the dropout draws of the global batch.
  virtual void empty_share(const Batch& batch, const StepOptions& o) = 0;
  // 1 the encoder's forward with dropout (its forward taps).
  virtual void forward(const Batch& batch, const StepOptions& o) = 0;
  // 2 the CRF: log Z and gold on the host, d cum, d onset and the CRF
  // parameters' gradient times scale; the crf forward taps, the penalty's
  // value and its forward tap, the crf backward taps.
  virtual CrfSums crf(const Batch& batch, const StepOptions& o, double scale) = 0;
  // crf.frame_ce_weight: the frame CE of the scores, its gradient times scale
  // kept for backward; its sum: frame_ce_sum.
  virtual void frame_ce(const Batch& batch, double scale) = 0;
  // 4 the encoder's backward of d cum (+ d frame CE, + d onset) and the CRF
  // parameters' gradients into the gradient.
  virtual void backward(const Batch& batch, const StepOptions& o) = 0;
  // 5 the penalty's gradient share, the penalty backward taps, then the
  // lognormal duration chain.
  virtual void penalty(const StepOptions& o) = 0;
  // 6 the global norm of this process's gradient (and the read-back queued).
  virtual void grad_norm() = 0;
  // The share's work is queued: StepOptions::poison's entries restored. Also
  // after a stage threw.
  virtual void end_share() noexcept = 0;
  // Several processes: the gradient summed over world() and the norm of the
  // sum (StepReadBack::reduced_norm). Every rank calls it, one whose share failed too.
  virtual void allreduce() = 0;
  // The step's one synchronization: the scalars.
  virtual StepReadBack read_back() = 0;

  // Throws the first hit of taps read back at the synchronization
  // (NumericsError); nothing where a tap throws where it is.
  virtual void check_taps() = 0;
  // Throws NonFiniteError at a non-finite CRF gradient checked on the host;
  // nothing where the gradient's norm checks them.
  virtual void check_crf_gradients() = 0;
  // The sum of the frame CE over the batch's valid frames (after frame_ce).
  virtual double frame_ce_sum(int B) = 0;
  // The gradient's norm is not finite: throws NonFiniteError naming the first
  // non-finite entry in layout order (reduced: of the sum over the ranks), or
  // the norm's overflow.
  [[noreturn]] virtual void throw_nonfinite_gradient(bool reduced) = 0;

  // 7 the gradient scaled to a norm of at most max_norm (> 0); norm: its
  // norm as read back.
  virtual void clip(double max_norm, double norm) = 0;
  // 8 AdamW over ranges (step_update_ranges), the lognormal duration table
  // re-derived, the optimizer taps (after the update: a hit restores nothing).
  virtual void update(const std::vector<UpdateRange>& ranges) = 0;
};

// One step on dev: the loss and the gradient of batch, reduced over the
// processes of dev.world(); with update, clipped and applied (AdamW). Throws
// NonFiniteError / NumericsError (several processes: the failing rank's
// error, dist::PeerFailure on the others) before anything is updated.
StepResult run_step(StepDevice& dev, const Batch& batch, const StepOptions& o, bool update);

}  // namespace timitseg::model
