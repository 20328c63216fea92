// crf_param_maxima (model/drift.h).
#include "model/drift.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace timitseg::model {

std::pair<double, double> crf_param_maxima(const ParamLayout& layout, const std::vector<float>& params) {
  auto maxabs = [&](const CrfTensor& t) {
    const float* p = t.in(params);
    double m = 0;
    for (size_t i = 0; i < t.size; ++i) m = std::max(m, std::abs(double(p[i])));
    return m;
  };
  const CrfParamView& crf = layout.crf();
  // crf.duration_model = lognormal: the table is derived (its tails are large by design); its 3 x C parameters drift
  return {maxabs(crf.transition), maxabs(layout.dims().duration_lognormal ? crf.duration_lognormal : crf.duration_bias)};
}

}  // namespace timitseg::model
