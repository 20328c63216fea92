// One training step over a StepDevice (model/step.h): the stages of
// model/step_recipe.h in order, the checks and the loss once.
#include "model/step.h"

#include <chrono>
#include <cmath>
#include <exception>

#include "model/dist_step.h"
#include "model/step_recipe.h"

namespace timitseg::model {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The part times (StepResult::times): measured where it is free or with
// StepOptions::time_parts, each part's queued work waited for.
class PartClock {
 public:
  PartClock(StepDevice& dev, const StepOptions& o) : dev_(dev), on_(o.time_parts || dev.times_for_free()) {}
  // slot += the time since the last mark (wait: after the part's work is done).
  void mark(double& slot, bool wait = true) {
    if (!on_) return;
    if (wait) dev_.wait();
    const Clock::time_point now = Clock::now();
    slot += std::chrono::duration<double>(now - t0_).count();
    t0_ = now;
  }
  void restart() { t0_ = Clock::now(); }

 private:
  StepDevice& dev_;
  bool on_;
  Clock::time_point t0_ = Clock::now();
};

// The frame CE needs frame labels: off on a transcript batch (its frame_ce_sum stays 0).
bool with_frame_ce(const StepOptions& step_opts, const Batch& batch) { return step_opts.frame_ce_weight > 0.0 && !batch.transcript(); }

// end_share when the share's stages are queued, or one of them threw.
struct EndShare {
  StepDevice& dev;
  ~EndShare() { dev.end_share(); }
};

// Stages 0-6 on this process's share, queued: begin, forward, the CRF scaled
// by 1 / norm (with its frame CE), backward, penalty, the gradient's norm.
CrfSums queue_share(StepDevice& dev, const Batch& batch, const StepOptions& step_opts, double norm, PartClock& clock,
                    StepResult& res) {
  EndShare end{dev};
  dev.begin(batch, step_opts);
  dev.forward(batch, step_opts);  // 1
  clock.mark(res.times.encoder_forward);
  const CrfSums crf = dev.crf(batch, step_opts, 1.0 / norm);  // 2, 3
  if (with_frame_ce(step_opts, batch)) dev.frame_ce(batch, step_opts.frame_ce_weight / norm);
  clock.mark(res.times.crf);
  dev.backward(batch, step_opts);  // 4
  dev.penalty(step_opts);          // 5
  dev.grad_norm();          // 6
  return crf;
}

// The share's checks after the read-back, in this order: a tap's first hit,
// log Z and gold, the CRF gradients, the frame CE, the loss, the gradient.
void check_share(StepDevice& dev, const Batch& batch, const StepOptions& step_opts, double norm, const CrfSums& crf,
                 const StepReadBack& sc, StepResult& res) {
  const int B = batch.input.B;
  dev.check_taps();
  res.nll_sum = check_crf_outputs(crf.log_z, crf.gold, B);
  dev.check_crf_gradients();
  res.penalty = sc.penalty;
  if (with_frame_ce(step_opts, batch)) res.frame_ce_sum = check_frame_ce(dev.frame_ce_sum(B));
  res.loss = step_loss(res, step_opts, norm);
  res.grad_norm = sc.norm;
  if (!std::isfinite(res.loss)) throw NonFiniteError("loss", "non-finite loss");
  if (!std::isfinite(sc.norm)) dev.throw_nonfinite_gradient(false);
}

}  // namespace

StepResult run_step(StepDevice& dev, const Batch& batch, const StepOptions& o, bool update) {
  dist::Communicator* const world = dev.world();  // null: one process
  const double norm = step_norm(o, batch);        // 3: the global batch's with several processes
  const StepOptions step_opts = share_options(o, world);  // crf.reg on rank 0 only
  const bool empty = world && batch.input.B == 0;  // a last global batch with fewer utterances than ranks
  PartClock clock(dev, o);
  StepResult res;
  CrfSums crf;
  std::exception_ptr err;  // several processes: this rank's failure, agreed on below
  try {
    if (empty)
      dev.empty_share(batch, o);
    else
      crf = queue_share(dev, batch, step_opts, norm, clock, res);
  } catch (const std::exception&) {
    if (!world) throw;
    err = std::current_exception();
  }
  const Clock::time_point t_reduce = Clock::now();
  if (world) dev.allreduce();
  const StepReadBack sc = dev.read_back();
  clock.mark(res.times.encoder_backward, /*wait=*/false);
  if (!err && !empty) try {
      check_share(dev, batch, step_opts, norm, crf, sc, res);
    } catch (const std::exception&) {
      if (!world) throw;
      err = std::current_exception();
    }
  if (world) {
    agree_on_step(*world, err, o.step);
    reduce_step_scalars(*world, res, o, norm);
    res.grad_norm = sc.reduced_norm;
    res.times.optimizer += seconds_since(t_reduce);  // the reduction, counted with the update
    if (!std::isfinite(res.loss)) throw NonFiniteError("loss", "non-finite loss (summed over the ranks)");
    if (!std::isfinite(res.grad_norm)) dev.throw_nonfinite_gradient(true);
  }
  if (!update) return res;
  clock.restart();
  if (o.clip_norm > 0) dev.clip(o.clip_norm, res.grad_norm);  // 7
  dev.update(step_update_ranges(dev.layout(), o));            // 8
  clock.mark(res.times.optimizer);
  return res;
}

}  // namespace timitseg::model
