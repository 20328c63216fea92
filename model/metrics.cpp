// Evaluation metrics (see metrics.h for the definitions).
#include "model/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace timitseg::model {

std::vector<Run> runs_of(const std::vector<int>& frames) {
  std::vector<Run> runs;
  for (size_t t = 0; t < frames.size(); ++t) {
    if (runs.empty() || frames[t] != runs.back().label)
      runs.push_back({static_cast<int>(t), 1, frames[t]});
    else
      ++runs.back().length;
  }
  return runs;
}

int64_t match_boundaries(const std::vector<int>& ref, const std::vector<int>& pred, int tol) {
  // Greedy on sorted lists: match when within tol, else drop the smaller one.
  // For points on a line with a symmetric window this gives a maximum matching.
  size_t i = 0, j = 0;
  int64_t matched = 0;
  while (i < pred.size() && j < ref.size()) {
    if (std::abs(pred[i] - ref[j]) <= tol) {
      ++matched, ++i, ++j;
    } else if (pred[i] < ref[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return matched;
}

Metrics::Metrics(std::vector<std::string> names) : names_(std::move(names)), C_(static_cast<int>(names_.size())) {
  confusion_.assign(static_cast<size_t>(C_) * C_, 0);
  hist_ref_.assign(static_cast<size_t>(C_) * kHistBins, 0);
  hist_pred_.assign(static_cast<size_t>(C_) * kHistBins, 0);
  dur_sum_ref_.assign(C_, 0.0);
  dur_sum_pred_.assign(C_, 0.0);
  count_ref_.assign(C_, 0);
  count_pred_.assign(C_, 0);
}

void Metrics::add(const std::vector<int>& ref, const std::vector<int>& pred) {
  if (ref.size() != pred.size())
    throw std::invalid_argument("metrics: reference has " + std::to_string(ref.size()) + " frames, prediction " +
                                std::to_string(pred.size()));
  for (size_t t = 0; t < ref.size(); ++t)
    if (ref[t] < 0 || ref[t] >= C_ || pred[t] < 0 || pred[t] >= C_)
      throw std::invalid_argument("metrics: label out of range at frame " + std::to_string(t));
  ++utterances_;
  const std::vector<Run> rr = runs_of(ref), pr = runs_of(pred);
  std::vector<int> rp, pp, rb, pb;
  for (const Run& r : rr) rp.push_back(r.label);
  for (const Run& r : pr) pp.push_back(r.label);
  edits_ += levenshtein(rp, pp);
  ref_phones_ += static_cast<int64_t>(rp.size());
  for (size_t k = 1; k < rr.size(); ++k) rb.push_back(rr[k].start);
  for (size_t k = 1; k < pr.size(); ++k) pb.push_back(pr[k].start);
  for (int tol = 0; tol <= kMaxTol; ++tol) {
    const int64_t m = match_boundaries(rb, pb, tol);
    boundary_[tol].matched_pred += m;
    boundary_[tol].matched_ref += m;
    boundary_[tol].num_pred += static_cast<int64_t>(pb.size());
    boundary_[tol].num_ref += static_cast<int64_t>(rb.size());
  }
  std::set<std::tuple<int, int, int>> rs;
  for (const Run& r : rr) rs.insert({r.start, r.length, r.label});
  int64_t seg_match = 0;
  for (const Run& r : pr) seg_match += rs.count({r.start, r.length, r.label});
  segment_.matched_pred += seg_match;
  segment_.matched_ref += seg_match;
  segment_.num_pred += static_cast<int64_t>(pr.size());
  segment_.num_ref += static_cast<int64_t>(rr.size());
  for (size_t t = 0; t < ref.size(); ++t) {
    ++frames_;
    correct_frames_ += ref[t] == pred[t];
    ++confusion_[static_cast<size_t>(ref[t]) * C_ + pred[t]];
  }
  auto hist = [](std::vector<int64_t>& h, const Run& r) {
    ++h[static_cast<size_t>(r.label) * kHistBins + std::min(r.length, kHistBins) - 1];
  };
  for (const Run& r : rr) {
    hist(hist_ref_, r);
    dur_sum_ref_[r.label] += r.length;
    ++count_ref_[r.label];
  }
  for (const Run& r : pr) {
    hist(hist_pred_, r);
    dur_sum_pred_[r.label] += r.length;
    ++count_pred_[r.label];
  }
}

double kl_divergence_smoothed(const std::vector<int64_t>& p, const std::vector<int64_t>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) sp += p[i] + 0.5, sq += q[i] + 0.5;
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double a = (p[i] + 0.5) / sp, b = (q[i] + 0.5) / sq;
    kl += a * std::log(a / b);
  }
  return kl;
}

double js_divergence(const std::vector<int64_t>& p, const std::vector<int64_t>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) sp += p[i], sq += q[i];
  if (sp == 0 || sq == 0) return sp == sq ? 0.0 : std::log(2.0);
  double js = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double a = p[i] / sp, b = q[i] / sq, m = 0.5 * (a + b);
    if (a > 0) js += 0.5 * a * std::log(a / m);
    if (b > 0) js += 0.5 * b * std::log(b / m);
  }
  return js;
}

nlohmann::json Metrics::to_json() const {
  using nlohmann::json;
  json j;
  j["utterances"] = utterances_;
  j["frames"] = frames_;
  j["per"] = per();
  j["phone_edits"] = edits_;
  j["reference_phones"] = ref_phones_;
  j["frame_accuracy"] = frame_accuracy();
  json bp = json::object(), br = json::object(), bf = json::object();
  for (int tol = 0; tol <= kMaxTol; ++tol) {
    bp[std::to_string(tol)] = boundary_[tol].precision();
    br[std::to_string(tol)] = boundary_[tol].recall();
    bf[std::to_string(tol)] = boundary_[tol].f1();
  }
  j["boundary_precision"] = bp;
  j["boundary_recall"] = br;
  j["boundary_f1"] = bf;
  j["segment_precision"] = segment_.precision();
  j["segment_recall"] = segment_.recall();
  j["segment_f1"] = segment_.f1();
  json dur = json::object();
  double mae_num = 0;
  int64_t mae_den = 0;
  std::vector<int64_t> all_ref(kHistBins, 0), all_pred(kHistBins, 0);
  for (int c = 0; c < C_; ++c) {
    std::vector<int64_t> hr(hist_ref_.begin() + c * kHistBins, hist_ref_.begin() + (c + 1) * kHistBins);
    std::vector<int64_t> hp(hist_pred_.begin() + c * kHistBins, hist_pred_.begin() + (c + 1) * kHistBins);
    for (int k = 0; k < kHistBins; ++k) all_ref[k] += hr[k], all_pred[k] += hp[k];
    if (count_ref_[c] == 0 && count_pred_[c] == 0) continue;
    json e;
    e["reference_count"] = count_ref_[c];
    e["predicted_count"] = count_pred_[c];
    const double mr = count_ref_[c] ? dur_sum_ref_[c] / count_ref_[c] : 0.0;
    const double mp = count_pred_[c] ? dur_sum_pred_[c] / count_pred_[c] : 0.0;
    e["reference_mean"] = mr;
    e["predicted_mean"] = mp;
    e["abs_mean_difference"] = std::abs(mr - mp);
    e["kl"] = kl_divergence_smoothed(hr, hp);
    e["js"] = js_divergence(hr, hp);
    if (count_ref_[c] && count_pred_[c]) {
      mae_num += std::abs(mr - mp) * count_ref_[c];
      mae_den += count_ref_[c];
    }
    dur[names_[c]] = e;
  }
  j["durations"] = dur;
  j["duration_mean_mae"] = mae_den ? mae_num / mae_den : 0.0;  // reference-count weighted |mean diff|
  j["duration_kl"] = kl_divergence_smoothed(all_ref, all_pred);
  j["duration_js"] = js_divergence(all_ref, all_pred);
  j["labels"] = names_;
  json conf = json::array();
  for (int r = 0; r < C_; ++r)
    conf.push_back(std::vector<int64_t>(confusion_.begin() + r * C_, confusion_.begin() + (r + 1) * C_));
  j["confusion"] = conf;  // [reference][predicted] frame counts
  return j;
}

std::string Metrics::table() const {
  const nlohmann::json j = to_json();
  char buf[256];
  std::ostringstream os;
  std::snprintf(buf, sizeof buf, "utterances %lld, frames %lld\n", (long long)utterances_, (long long)frames_);
  os << buf;
  std::snprintf(buf, sizeof buf, "%-24s %8.2f %%  (%lld edits / %lld reference phones)\n", "PER", 100 * per(),
                (long long)edits_, (long long)ref_phones_);
  os << buf;
  std::snprintf(buf, sizeof buf, "%-24s %8.2f %%\n", "frame accuracy", 100 * frame_accuracy());
  os << buf;
  os << "                          precision   recall       F1\n";
  for (int tol = 0; tol <= kMaxTol; ++tol) {
    std::snprintf(buf, sizeof buf, "boundaries (tol %d)       %8.2f %% %8.2f %% %8.2f %%\n", tol,
                  100 * boundary_[tol].precision(), 100 * boundary_[tol].recall(), 100 * boundary_[tol].f1());
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "segments (exact)         %8.2f %% %8.2f %% %8.2f %%\n", 100 * segment_.precision(),
                100 * segment_.recall(), 100 * segment_.f1());
  os << buf;
  std::snprintf(buf, sizeof buf, "durations: mean |ref-pred| %.3f frames, KL %.4f, JS %.4f (all phones)\n",
                j["duration_mean_mae"].get<double>(), j["duration_kl"].get<double>(), j["duration_js"].get<double>());
  os << buf;
  os << "phone    ref n  ref mean  pred n pred mean      KL      JS\n";
  for (auto& [name, e] : j["durations"].items()) {
    std::snprintf(buf, sizeof buf, "%-6s %7lld %9.2f %7lld %9.2f %7.3f %7.3f\n", name.c_str(),
                  (long long)e["reference_count"].get<int64_t>(), e["reference_mean"].get<double>(),
                  (long long)e["predicted_count"].get<int64_t>(), e["predicted_mean"].get<double>(),
                  e["kl"].get<double>(), e["js"].get<double>());
    os << buf;
  }
  return os.str();
}

}  // namespace timitseg::model
