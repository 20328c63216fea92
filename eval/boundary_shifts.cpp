// Per-phone boundary shifts (see boundary_shifts.h, docs/align.md).
#include "eval/boundary_shifts.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/files.h"

namespace timitseg::eval {

namespace {

constexpr const char* kFormat = "timitseg-boundary-shifts";
constexpr int kVersion = 1;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

double BoundaryShifts::shift(const std::string& before, const std::string& label) const {
  if (!pair_shift_ms.empty()) {
    const auto p = pair_shift_ms.find({before, label});
    if (p != pair_shift_ms.end()) return p->second;
  }
  const auto it = shift_ms.find(label);
  return it == shift_ms.end() ? 0.0 : it->second;
}

namespace {

// {"before": {"after": value}} of a pair-keyed map.
template <typename V>
nlohmann::json nested(const std::map<std::pair<std::string, std::string>, V>& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : m) j[k.first][k.second] = v;
  return j;
}

}  // namespace

nlohmann::json BoundaryShifts::to_json() const {
  nlohmann::json j = {{"format", kFormat},
                      {"version", kVersion},
                      {"phone_set", phone_set},
                      {"min_boundaries", min_boundaries},
                      {"context", common::to_string(context)},
                      {"shift_ms", shift_ms},
                      {"boundaries", boundaries},
                      {"fitted_on", fitted_on}};
  if (context == ShiftContext::pair) {
    j["pair_shift_ms"] = nested(pair_shift_ms);
    j["pair_boundaries"] = nested(pair_boundaries);
  }
  return j;
}

nlohmann::json ShiftCount::to_json() const {
  return {{"boundaries", boundaries}, {"moved", moved}, {"clamped", clamped}};
}

BoundaryShifts fit_boundary_shifts(const std::vector<std::string>& from, const std::vector<std::string>& into,
                                   const std::vector<double>& signed_ms, const std::string& phone_set,
                                   int min_boundaries, ShiftContext context) {
  if (min_boundaries < 1)
    throw std::invalid_argument("--shift-min-boundaries must be >= 1, got " + std::to_string(min_boundaries));
  const bool pairs = context == ShiftContext::pair;
  if (pairs && from.size() != into.size())
    throw std::invalid_argument("fit_boundary_shifts: " + std::to_string(from.size()) + " phones before for " +
                                std::to_string(into.size()) + " boundaries");
  std::map<std::string, std::vector<double>> by_label;
  std::map<std::pair<std::string, std::string>, std::vector<double>> by_pair;
  for (size_t i = 0; i < into.size() && i < signed_ms.size(); ++i) {
    if (into[i].empty()) continue;
    by_label[into[i]].push_back(signed_ms[i]);
    if (pairs && !from[i].empty()) by_pair[{from[i], into[i]}].push_back(signed_ms[i]);
  }
  BoundaryShifts s;
  s.phone_set = phone_set;
  s.min_boundaries = min_boundaries;
  s.context = context;
  auto rounded = [](const std::vector<double>& e) {  // to the microsecond: no float noise in the file
    return std::round(median(e) * 1000.0) / 1000.0;
  };
  for (const auto& [label, e] : by_label) {
    if (static_cast<int64_t>(e.size()) < min_boundaries) continue;
    s.shift_ms[label] = rounded(e);
    s.boundaries[label] = static_cast<int64_t>(e.size());
  }
  for (const auto& [pair, e] : by_pair) {
    if (static_cast<int64_t>(e.size()) < min_boundaries) continue;
    s.pair_shift_ms[pair] = rounded(e);
    s.pair_boundaries[pair] = static_cast<int64_t>(e.size());
  }
  return s;
}

void save_boundary_shifts(const BoundaryShifts& shifts, const std::string& path) {
  write_file_atomic(path, shifts.to_json().dump(2) + "\n");
}

BoundaryShifts load_boundary_shifts(const std::string& path, const model::LabelSet& labels) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
  auto bad = [&](const std::string& why) { return std::runtime_error(path + ": " + why); };
  if (!j.is_object() || j.value("format", std::string()) != kFormat)
    throw bad(std::string("not a boundary-shifts file (\"format\": \"") + kFormat +
              "\" expected; evaluate --align --fit-shifts writes one)");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != kVersion)
    throw bad("version " + (j.contains("version") ? j["version"].dump() : std::string("missing")) +
              ", this timitseg reads version " + std::to_string(kVersion));
  BoundaryShifts s;
  s.phone_set = j.value("phone_set", std::string());
  if (s.phone_set != labels.spec.name)
    throw bad("fitted for phone set '" + s.phone_set + "', the checkpoint's is '" + labels.spec.name +
              "' (fit the shifts with this checkpoint's phone set)");
  s.min_boundaries = j.value("min_boundaries", kShiftMinBoundaries);
  const std::string context = j.value("context", std::string("phone"));
  if (!common::parse_enum(context, &s.context))
    throw bad("\"context\": \"" + context + "\" (phone or pair expected)");
  auto known = [&](const std::string& label) {
    if (std::find(labels.names.begin(), labels.names.end(), label) == labels.names.end())
      throw bad("phone '" + label + "' is not in the checkpoint's phone set '" + labels.spec.name + "'");
  };
  auto ms = [&](const nlohmann::json& v, const std::string& what) {
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw bad("the shift of " + what + " is " + v.dump() + ", not a finite number of ms");
    return v.get<double>();
  };
  if (!j.contains("shift_ms") || !j["shift_ms"].is_object()) throw bad("no \"shift_ms\" object");
  for (const auto& [label, v] : j["shift_ms"].items()) {
    known(label);
    s.shift_ms[label] = ms(v, "phone '" + label + "'");
  }
  if (j.contains("boundaries") && j["boundaries"].is_object())
    for (const auto& [label, v] : j["boundaries"].items())
      if (v.is_number_integer()) s.boundaries[label] = v.get<int64_t>();
  if (s.context == ShiftContext::pair) {
    if (!j.contains("pair_shift_ms") || !j["pair_shift_ms"].is_object())
      throw bad("\"context\": \"pair\" without a \"pair_shift_ms\" object");
    for (const auto& [before, row] : j["pair_shift_ms"].items()) {
      known(before);
      if (!row.is_object()) throw bad("\"pair_shift_ms\".\"" + before + "\" is not an object");
      for (const auto& [after, v] : row.items()) {
        known(after);
        s.pair_shift_ms[{before, after}] = ms(v, "the pair '" + before + "' -> '" + after + "'");
      }
    }
    if (j.contains("pair_boundaries") && j["pair_boundaries"].is_object())
      for (const auto& [before, row] : j["pair_boundaries"].items())
        if (row.is_object())
          for (const auto& [after, v] : row.items())
            if (v.is_number_integer()) s.pair_boundaries[{before, after}] = v.get<int64_t>();
  }
  if (j.contains("fitted_on")) s.fitted_on = j["fitted_on"];
  return s;
}

void apply_boundary_shifts(const BoundaryShifts& shifts, const std::vector<std::string>& labels, int rate, int64_t end,
                           std::vector<int64_t>* starts, ShiftCount* count) {
  std::vector<int64_t>& b = *starts;
  const size_t n = b.size();
  if (labels.size() != n)
    throw std::invalid_argument("apply_boundary_shifts: " + std::to_string(labels.size()) + " labels for " +
                                std::to_string(n) + " phones");
  if (n < 2) return;
  std::vector<int64_t> want(b);
  ShiftCount c;
  for (size_t i = 1; i < n; ++i) {
    ++c.boundaries;
    const double ms = shifts.shift(labels[i - 1], labels[i]);
    if (ms == 0.0) continue;
    ++c.moved;
    want[i] = b[i] - std::llround(ms * rate / 1000.0);
  }
  std::vector<int64_t> got(want);
  for (size_t i = 1; i < n; ++i) got[i] = std::max(got[i], got[i - 1] + 1);  // after the phone before
  for (size_t i = n - 1; i >= 1; --i) {                                        // before the phone after
    got[i] = std::min(got[i], (i + 1 < n ? got[i + 1] : end) - 1);
  }
  for (size_t i = 1; i < n; ++i)
    if (got[i] != want[i]) ++c.clamped;
  b = got;
  if (count) {
    count->boundaries += c.boundaries;
    count->moved += c.moved;
    count->clamped += c.clamped;
  }
}

}  // namespace timitseg::eval
