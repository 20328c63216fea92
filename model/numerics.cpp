#include "model/numerics.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace timitseg::model {

template <class T>
static TensorStats stats_of(const T* x, size_t n) {
  TensorStats s;
  for (size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      ++s.inf;
    } else {
      ++s.finite;
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
    }
  }
  return s;
}
TensorStats tensor_stats(const float* x, size_t n) { return stats_of(x, n); }
TensorStats tensor_stats(const double* x, size_t n) { return stats_of(x, n); }

std::string NumericsHit::describe() const {
  std::ostringstream o;
  o.precision(6);
  o << "layer " << layer << ", " << config::pass_name(pass) << " pass, tensor " << tensor << ": " << stats.nan << " NaN, "
    << stats.inf << " Inf";
  if (stats.finite > 0)
    o << ", finite values in [" << stats.min << ", " << stats.max << "] (" << stats.finite << " of them)";
  else
    o << ", no finite value";
  return o.str();
}

}  // namespace timitseg::model
