// Around the gradient all-reduce of a step on several processes (model/dist_step.h).
#include "model/dist_step.h"

#include <string>

namespace timitseg::model {

StepOptions share_options(const StepOptions& o, const dist::Communicator* world) {
  StepOptions s = o;
  if (world && world->rank() != 0) s.crf_reg = 0.0;
  return s;
}

void agree_on_step(dist::Communicator& world, std::exception_ptr err, int64_t step) {
  const std::string what = "the status of step " + std::to_string(step);
  dist::agree(world, what.c_str(), [&] {
    if (err) std::rethrow_exception(err);
  });
}

void reduce_step_scalars(dist::Communicator& world, StepResult& r, const StepOptions& o, double norm) {
  double s[3] = {r.nll_sum, r.frame_ce_sum, r.penalty};
  world.allreduce_sum(s, 3, "the step's loss sums");
  r.nll_sum = s[0];
  r.frame_ce_sum = s[1];
  r.penalty = s[2];
  r.loss = step_loss(r, o, norm);  // model/step_recipe.h
}

}  // namespace timitseg::model
