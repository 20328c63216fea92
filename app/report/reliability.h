// The reliability plot of `evaluate --align --reliability-plot FILE.svg`
// (docs/align.md "Confidence"): per bin of confidence, the observed frequency
// of the event each confidence predicts against the bin's mean confidence,
// for boundary_confidence and label_confidence, with the diagonal of perfect
// calibration. Drawn with the report's SVG line chart (svg.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace timitseg::app::report {

// `confidence` is evaluate's JSON "align"."confidence" (ConfidenceMetrics::to_json);
// empty bins are left out of the curves. A standalone SVG document.
std::string reliability_svg(const nlohmann::json& confidence);

}  // namespace timitseg::app::report
