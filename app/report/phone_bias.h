// The per-phone bias plot of `evaluate --align --phone-plot FILE.svg`
// (docs/align.md "Per phone"): one horizontal bar per phone with boundaries
// into it, from 0 to the mean signed error of those boundaries (< 0: aligned
// early), sorted from the earliest to the latest, each row labelled with its
// number of boundaries and the share within 20 ms. Drawn with the report's
// SVG writer (svg.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace timitseg::app::report {

// `samples` is evaluate's JSON "align"."samples" (AlignMetrics::to_json); its
// "by_phone" gives the rows (phones without boundaries into them are left out;
// none at all, or no "by_phone": a plot saying so). A standalone SVG document;
// each bar is <rect class="bar" data-phone=P data-bias=B data-boundaries=N>.
std::string phone_bias_svg(const nlohmann::json& samples);

}  // namespace timitseg::app::report
