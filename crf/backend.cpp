// Backend's default backward_begin / backward_finish (crf/backend.h).
#include "crf/backend.h"

#include <stdexcept>
#include <string>

namespace timitseg::crf {

void Backend::backward_begin(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z,
                             double* gold, const Grads& wanted, void* workspace) {
  (void)wanted;
  if (begun_.pending) throw std::logic_error(name() + " backend: backward_begin: the last begun backward is not finished");
  begun_ = BegunBackward{true, dims, p, labels, scale, log_z, gold, workspace};
}

void Backend::backward_finish(const Grads& grads) {
  if (!begun_.pending) throw std::logic_error(name() + " backend: backward_finish without backward_begin");
  const BegunBackward b = begun_;
  begun_.pending = false;
  backward(b.dims, b.p, b.labels, b.scale, b.log_z, b.gold, grads, b.workspace);
}

}  // namespace timitseg::crf
