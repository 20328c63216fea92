// Evaluation metrics (see metrics.h for the definitions).
#include "eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "common/text.h"

namespace timitseg::eval {

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
  // Greedy on sorted lists: match the two heads when within tol, else drop the
  // smaller one. This gives a maximum matching (the count every one-to-one rule
  // that maximises hits agrees on), by induction on the heads p = pred[i], r = ref[j]:
  //  - |p - r| > tol and p < r: p is more than tol below r and every later
  //    reference boundary, so p is in no matching of what is left; dropping it
  //    loses nothing (likewise r when r < p).
  //  - |p - r| <= tol: some maximum matching M of what is left pairs p with r.
  //    If M pairs p with r' and r with p' (r' >= r, p' >= p), then swapping to
  //    (p, r), (p', r') keeps |p' - r'| <= tol: say p <= r (else symmetric);
  //    r' - p <= tol gives r' <= p + tol <= p' + tol, and p' - r <= tol gives
  //    p' <= r + tol <= r' + tol. If M pairs only one of them, re-pair it with
  //    the other; if neither, add (p, r) (M was not maximum). So matching the
  //    heads keeps a maximum matching reachable.
  // (Lists hold distinct sorted frame indices: run starts. Checked against an
  // exhaustive maximum bipartite matching in tests/eval/test_boundary_metrics.cpp.)
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

int64_t count_within(const std::vector<int>& points, const std::vector<int>& others, int tol) {
  // Two pointers over sorted lists: j is the first of `others` not more than
  // tol below the current point; the point is within tol of some other iff
  // others[j] exists and is at most tol above it.
  size_t j = 0;
  int64_t n = 0;
  for (const int p : points) {
    while (j < others.size() && others[j] < p - tol) ++j;
    n += j < others.size() && others[j] <= p + tol;
  }
  return n;
}

int tolerance_frames_for_ms(double tol_ms, double frame_shift_ms) {
  if (!(frame_shift_ms > 0.0) || !std::isfinite(frame_shift_ms))
    throw std::invalid_argument("metrics: the frame shift must be a positive number of ms, got " +
                                std::to_string(frame_shift_ms));
  if (!(tol_ms >= 0.0) || !std::isfinite(tol_ms))
    throw std::invalid_argument("metrics: the boundary tolerance must be >= 0 ms, got " + std::to_string(tol_ms));
  const double frames = std::floor(tol_ms / frame_shift_ms * (1.0 + 1e-9));
  if (frames > 1e6) throw std::invalid_argument("metrics: a tolerance of " + std::to_string(tol_ms) +
                                                " ms is more than 1e6 frames of " + std::to_string(frame_shift_ms) + " ms");
  return static_cast<int>(frames);
}

double r_value(int64_t matched, int64_t num_ref, int64_t num_pred) {
  if (num_ref <= 0) return 0.0;
  const double hr = double(matched) / double(num_ref);   // hit rate = recall
  const double os = double(num_pred) / double(num_ref) - 1.0;  // over-segmentation = R/P - 1 where P > 0
  const double r1 = std::sqrt((1.0 - hr) * (1.0 - hr) + os * os);
  const double r2 = (-os + hr - 1.0) / std::sqrt(2.0);
  return 1.0 - (std::abs(r1) + std::abs(r2)) / 2.0;
}

double r_value_pr(double precision, double recall) {
  const double os = precision > 0.0 ? recall / precision - 1.0 : -1.0;
  const double r1 = std::sqrt((1.0 - recall) * (1.0 - recall) + os * os);
  const double r2 = (-os + recall - 1.0) / std::sqrt(2.0);
  return 1.0 - (std::abs(r1) + std::abs(r2)) / 2.0;
}

Metrics::Metrics(std::vector<std::string> names, double frame_shift_ms)
    : names_(std::move(names)),
      C_(static_cast<int>(names_.size())),
      frame_shift_ms_(frame_shift_ms),
      tol_20ms_frames_(tolerance_frames_for_ms(kBoundaryToleranceMs, frame_shift_ms)) {
  confusion_.assign(static_cast<size_t>(C_) * C_, 0);
  hist_ref_.assign(static_cast<size_t>(C_) * kHistBins, 0);
  hist_pred_.assign(static_cast<size_t>(C_) * kHistBins, 0);
  dur_sum_ref_.assign(C_, 0.0);
  dur_sum_pred_.assign(C_, 0.0);
  count_ref_.assign(C_, 0);
  count_pred_.assign(C_, 0);
}

void Metrics::add_sequence(const std::vector<int>& ref_phones, const std::vector<int>& pred) {
  for (size_t i = 0; i < ref_phones.size(); ++i)
    if (ref_phones[i] < 0 || ref_phones[i] >= C_)
      throw std::invalid_argument("metrics: reference phone " + std::to_string(i) + " out of range");
  for (size_t t = 0; t < pred.size(); ++t)
    if (pred[t] < 0 || pred[t] >= C_) throw std::invalid_argument("metrics: label out of range at frame " + std::to_string(t));
  ++utterances_;
  ++sequence_only_;
  std::vector<int> pp;
  for (const Run& r : runs_of(pred)) pp.push_back(r.label);
  add_edits(levenshtein_counts(ref_phones, pp));
  ref_phones_ += static_cast<int64_t>(ref_phones.size());
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
  add_edits(levenshtein_counts(rp, pp));
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
  {
    const int64_t m = match_boundaries(rb, pb, tol_20ms_frames_);
    boundary_20ms_.matched_pred += m;
    boundary_20ms_.matched_ref += m;
    boundary_20ms_.num_pred += static_cast<int64_t>(pb.size());
    boundary_20ms_.num_ref += static_cast<int64_t>(rb.size());
    boundary_20ms_lenient_.matched_pred += count_within(pb, rb, tol_20ms_frames_);
    boundary_20ms_lenient_.matched_ref += count_within(rb, pb, tol_20ms_frames_);
    boundary_20ms_lenient_.num_pred += static_cast<int64_t>(pb.size());
    boundary_20ms_lenient_.num_ref += static_cast<int64_t>(rb.size());
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

namespace {

// One protocol of boundary scoring at 20 ms (docs/metrics.md), named.
nlohmann::json boundary_protocol_json(const char* rule, const char* as_in, const PRF& c, double r_value, int tol_ms,
                                      int tol_frames) {
  return {{"rule", rule},
          {"as_in", as_in},
          {"tolerance_ms", tol_ms},
          {"tolerance_frames", tol_frames},
          {"utterance_edges_counted", false},
          {"precision", c.precision()},
          {"recall", c.recall()},
          {"f1", c.f1()},
          {"r_value", r_value},
          {"hits_pred", c.matched_pred},
          {"hits_ref", c.matched_ref},
          {"num_ref", c.num_ref},
          {"num_pred", c.num_pred}};
}

}  // namespace

nlohmann::json Metrics::to_json() const {
  using nlohmann::json;
  json j;
  j["utterances"] = utterances_;
  if (sequence_only_ > 0) j["utterances_without_times"] = sequence_only_;  // scored in the PER only
  j["frames"] = frames_;
  j["per"] = per();
  j["phone_edits"] = edits_;
  // The error types of the edits (common/levenshtein.h levenshtein_counts: the minimal alignment with the
  // most substitutions); they sum to phone_edits.
  j["phone_substitutions"] = substitutions_;
  j["phone_deletions"] = deletions_;
  j["phone_insertions"] = insertions_;
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
  // The field's segmentation metrics (metrics.h): fractions in [0, 1] (R-value <= 1, below 0 only under
  // heavy over-segmentation); matched = one-to-one pairs, num_ref / num_pred = internal boundaries.
  j["boundary_20ms"] = {{"tolerance_ms", static_cast<int>(kBoundaryToleranceMs)},
                        {"tolerance_frames", tol_20ms_frames_},
                        {"precision", boundary_20ms_.precision()},
                        {"recall", boundary_20ms_.recall()},
                        {"f1", boundary_20ms_.f1()},
                        {"r_value", boundary_20ms_r_value()},
                        {"matched", boundary_20ms_.matched_ref},
                        {"num_ref", boundary_20ms_.num_ref},
                        {"num_pred", boundary_20ms_.num_pred}};
  // The same under each matching rule, named (docs/metrics.md): one-to-one as "boundary_20ms" above.
  const int tol_ms = static_cast<int>(kBoundaryToleranceMs);
  j["boundary_20ms_one_to_one"] = boundary_protocol_json(
      "one-to-one", "Strgar and Harwath 2022 (harsh); a maximum matching, each boundary in at most one pair",
      boundary_20ms_, boundary_20ms_r_value(), tol_ms, tol_20ms_frames_);
  j["boundary_20ms_lenient"] = boundary_protocol_json(
      "lenient", "SegFeat and UnsupSeg (Kreuk et al. 2020), Strgar and Harwath 2022 (lenient); a reference "
      "boundary may validate several predictions, R-value with OS = R/P - 1",
      boundary_20ms_lenient_, boundary_20ms_lenient_r_value(), tol_ms, tol_20ms_frames_);
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
  const double per_ref = ref_phones_ ? 100.0 / ref_phones_ : 0.0;
  std::snprintf(buf, sizeof buf, "%-24s %5.2f / %5.2f / %5.2f %%  (%lld / %lld / %lld)\n", "  subst / del / ins",
                per_ref * substitutions_, per_ref * deletions_, per_ref * insertions_, (long long)substitutions_,
                (long long)deletions_, (long long)insertions_);
  os << buf;
  std::snprintf(buf, sizeof buf, "%-24s %8.2f %%\n", "frame accuracy", 100 * frame_accuracy());
  os << buf;
  os << "                          precision   recall       F1\n";
  for (int tol = 0; tol <= kMaxTol; ++tol) {
    std::snprintf(buf, sizeof buf, "boundaries (tol %d)       %8.2f %% %8.2f %% %8.2f %%\n", tol,
                  100 * boundary_[tol].precision(), 100 * boundary_[tol].recall(), 100 * boundary_[tol].f1());
    os << buf;
  }
  const std::string label20 = "boundaries (20 ms, " + std::to_string(tol_20ms_frames_) + " fr)";
  std::snprintf(buf, sizeof buf, "%-24s %8.2f %% %8.2f %% %8.2f %%   R-value %.2f %%   one-to-one\n",
                label20.c_str(), 100 * boundary_20ms_.precision(), 100 * boundary_20ms_.recall(),
                100 * boundary_20ms_.f1(), 100 * boundary_20ms_r_value());
  os << buf;
  std::snprintf(buf, sizeof buf, "%-24s %8.2f %% %8.2f %% %8.2f %%   R-value %.2f %%   lenient (SegFeat/UnsupSeg)\n",
                label20.c_str(), 100 * boundary_20ms_lenient_.precision(), 100 * boundary_20ms_lenient_.recall(),
                100 * boundary_20ms_lenient_.f1(), 100 * boundary_20ms_lenient_r_value());
  os << buf;
  std::snprintf(buf, sizeof buf, "segments (exact)         %8.2f %% %8.2f %% %8.2f %%\n", 100 * segment_.precision(),
                100 * segment_.recall(), 100 * segment_.f1());
  os << buf;
  std::snprintf(buf, sizeof buf, "durations: mean |ref-pred| %.3f frames, KL %.4f, JS %.4f (all phones)\n",
                j["duration_mean_mae"].get<double>(), j["duration_kl"].get<double>(), j["duration_js"].get<double>());
  os << buf;
  os << "phone    ref n  ref mean  pred n pred mean      KL      JS\n";
  for (auto& [name, e] : j["durations"].items()) {
    os << pad_right(name, 6);  // by display width: IPA labels ("ɔ̃") take fewer columns than bytes
    std::snprintf(buf, sizeof buf, " %7lld %9.2f %7lld %9.2f %7.3f %7.3f\n",
                  (long long)e["reference_count"].get<int64_t>(), e["reference_mean"].get<double>(),
                  (long long)e["predicted_count"].get<int64_t>(), e["predicted_mean"].get<double>(),
                  e["kl"].get<double>(), e["js"].get<double>());
    os << buf;
  }
  return os.str();
}

}  // namespace timitseg::eval
