// AUROC, calibration and the confidence section of evaluate --align
// (confidence_metrics.h, docs/align.md).
#include "eval/confidence_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

namespace timitseg::eval {

std::optional<double> auroc(const std::vector<double>& score, const std::vector<char>& positive) {
  const size_t n = score.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  double rank_sum = 0.0;  // ranks 1..n of the positives, ties at their group's mean rank
  int64_t pos = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && score[order[j]] == score[order[i]]) ++j;
    const double mean_rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of i+1..j
    for (size_t k = i; k < j; ++k)
      if (positive[order[k]]) rank_sum += mean_rank, ++pos;
    i = j;
  }
  const int64_t neg = static_cast<int64_t>(n) - pos;
  if (pos == 0 || neg == 0) return std::nullopt;
  const double u = rank_sum - 0.5 * static_cast<double>(pos) * static_cast<double>(pos + 1);
  return u / (static_cast<double>(pos) * static_cast<double>(neg));
}

Reliability reliability(const std::vector<double>& confidence, const std::vector<char>& outcome, int bins) {
  Reliability r;
  r.count.assign(bins, 0);
  r.confidence.assign(bins, 0.0);
  r.accuracy.assign(bins, 0.0);
  r.n = static_cast<int64_t>(confidence.size());
  for (size_t i = 0; i < confidence.size(); ++i) {
    const double c = std::min(1.0, std::max(0.0, confidence[i]));
    const int k = std::min(bins - 1, static_cast<int>(std::floor(c * bins)));
    ++r.count[k];
    r.confidence[k] += confidence[i];
    r.accuracy[k] += outcome[i] ? 1.0 : 0.0;
  }
  for (int k = 0; k < bins; ++k) {
    if (r.count[k] == 0) continue;
    r.confidence[k] /= static_cast<double>(r.count[k]);
    r.accuracy[k] /= static_cast<double>(r.count[k]);
    r.ece += static_cast<double>(r.count[k]) / static_cast<double>(r.n) * std::fabs(r.confidence[k] - r.accuracy[k]);
  }
  return r;
}

namespace {

nlohmann::json reliability_json(const Reliability& r) {
  nlohmann::json bins = nlohmann::json::array();
  for (size_t k = 0; k < r.count.size(); ++k)
    bins.push_back({{"from", static_cast<double>(k) / r.count.size()},
                    {"to", static_cast<double>(k + 1) / r.count.size()},
                    {"count", r.count[k]},
                    {"mean_confidence", r.confidence[k]},
                    {"accuracy", r.accuracy[k]}});
  return {{"ece", r.ece}, {"bins", bins}};
}

std::vector<double> one_minus(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = 1.0 - v[i];
  return out;
}

}  // namespace

nlohmann::json ConfidenceMetrics::to_json() const {
  nlohmann::json j;
  const auto b_auc = auroc(one_minus(boundary), off_20ms);
  const auto l_auc = auroc(one_minus(label), replaced);
  nlohmann::json bj = {{"phones", boundary.size()},
                       {"off_20ms", std::count(off_20ms.begin(), off_20ms.end(), 1)},
                       {"reliability", reliability_json(reliability(boundary, within_1))}};
  if (b_auc) bj["auroc_off_20ms"] = *b_auc;
  nlohmann::json lj = {{"phones", label.size()},
                       {"replaced", std::count(replaced.begin(), replaced.end(), 1)},
                       {"reliability", reliability_json(reliability(label, exact))}};
  if (l_auc) lj["auroc_replaced"] = *l_auc;
  j["boundary_confidence"] = bj;
  j["label_confidence"] = lj;
  j["not_computed"] = not_computed;
  j["left_out"] = left_out;  // {reason: utterances}
  return j;
}

std::string ConfidenceMetrics::table() const {
  char buf[512];
  const auto b_auc = auroc(one_minus(boundary), off_20ms);
  const auto l_auc = auroc(one_minus(label), replaced);
  auto fmt = [](const std::optional<double>& v) {
    char s[32];
    if (v)
      std::snprintf(s, sizeof s, "%.4f", *v);
    else
      std::snprintf(s, sizeof s, "n/a");
    return std::string(s);
  };
  std::snprintf(buf, sizeof buf,
                "confidence (%zu phones; %zu with a boundary > 20 ms off; %zu of %zu corrupted-transcript phones "
                "replaced)\n  boundary_confidence: AUROC(off > 20 ms) %s, ECE(10 bins) %.4f\n"
                "  label_confidence:    AUROC(replaced) %s, ECE(10 bins) %.4f\n",
                boundary.size(), static_cast<size_t>(std::count(off_20ms.begin(), off_20ms.end(), 1)),
                static_cast<size_t>(std::count(replaced.begin(), replaced.end(), 1)), label.size(),
                fmt(b_auc).c_str(), reliability(boundary, within_1).ece, fmt(l_auc).c_str(),
                reliability(label, exact).ece);
  std::string out = buf;
  int64_t n = 0;
  std::string why;
  for (const auto& [reason, count] : left_out) {
    n += count;
    why += (why.empty() ? "" : ", ") + std::to_string(count) + " " + reason;
  }
  if (n > 0) out += "  (" + std::to_string(n) + " utterance(s) left out of boundary_confidence: " + why + ")\n";
  return out;
}

}  // namespace timitseg::eval
