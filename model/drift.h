// The drift check after each epoch (debug.drift_threshold, train/train.cpp).
#pragma once

#include <utility>
#include <vector>

#include "model/params.h"

namespace timitseg::model {

// max |transition| and max |duration_bias| of flat parameters (with crf.duration_model = lognormal:
// max |crf.duration_lognormal|, the parameters behind the derived table).
std::pair<double, double> crf_param_maxima(const ParamLayout& layout, const std::vector<float>& params);

}  // namespace timitseg::model
