// Internal helpers of the crf layer (not part of the public interface).
#pragma once

#include "crf/phone_graph.h"
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "crf/backend.h"

namespace timitseg::crf::detail {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)) with max subtraction; -inf when both are -inf.
inline double log_add(double a, double b) {
  const double m = a > b ? a : b;
  if (m == kNegInf) return kNegInf;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

// logsumexp of n values (two passes, fixed order); -inf when all are -inf.
inline double logsumexp(const double* v, int64_t n) {
  double m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  if (m == kNegInf) return kNegInf;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(v[i] - m);
  return m + std::log(s);
}

// Calls fn(start, duration, label) for each gold segment of one utterance in
// time order (spec "Gold segmentation"; same rule as gold_segments()), without
// allocating.
template <class Fn>
void for_each_gold_segment(const int32_t* labels, int64_t length, int64_t K, Fn&& fn) {
  int64_t t = 0;
  while (t < length) {
    int64_t r = 1;
    while (t + r < length && labels[t + r] == labels[t]) ++r;
    for (int64_t pos = t; pos < t + r; pos += K) fn(pos, (t + r - pos) < K ? (t + r - pos) : K, labels[t]);
    t += r;
  }
}

// The errors every backend raises when -inf parameters leave an utterance
// without a path of finite score, or make its gold segmentation impossible
// (same wording as the cuda backend). `who` is e.g. "cpu backend".
[[noreturn]] inline void throw_no_path(const std::string& who, int64_t b) {
  throw std::runtime_error(who + ": utterance " + std::to_string(b) +
                           " has no segmentation of finite score (log Z = -inf): the -inf entries of "
                           "transition/duration_bias/start/end forbid every path of its length");
}
[[noreturn]] inline void throw_gold_forbidden(const std::string& who, int64_t b) {
  throw std::runtime_error(who + ": utterance " + std::to_string(b) +
                           ": the gold segmentation has score -inf (it uses a -inf entry of "
                           "transition/duration_bias/start/end), so its NLL would be +inf");
}

// The transcript loss's error for an utterance whose log Z_c is -inf: too
// few frames for its non-optional phones (transcript_feasible is false), or
// -inf entries forbidding every alignment.
// links (nullptr = the chain of optional): the phone graph (crf/phone_graph.h).
[[noreturn]] inline void throw_transcript_infeasible(const std::string& who, int64_t b, int64_t length,
                                                     const int32_t* optional, int64_t n,
                                                     const int32_t* links = nullptr) {
  int64_t needed = 0;
  for (int64_t i = 0; i < n; ++i) needed += !(optional && optional[i] == 1);
  if (links) needed = graph_min_phones(links, static_cast<int32_t>(n));
  if (needed < 0)
    throw std::runtime_error(who + ": utterance " + std::to_string(b) + ": its phone graph has no path from a first "
                             "to a last phone (log Z_c = -inf)");
  if (length < needed)
    throw std::runtime_error(who + ": utterance " + std::to_string(b) + ": its transcript of " + std::to_string(n) +
                             " phones needs at least " + std::to_string(needed) + " frames, it has " +
                             std::to_string(length) + " (log Z_c = -inf; filter with crf::transcript_feasible)");
  throw std::runtime_error(who + ": utterance " + std::to_string(b) +
                           ": no alignment of its transcript has finite score (log Z_c = -inf): the -inf entries of "
                           "transition/duration_bias/start/end forbid every alignment of its " +
                           std::to_string(length) + " frames");
}

inline std::string fmt_value(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

// Shared by validate_host (float32) and reference::validate_f64 (float64).
// onset [B][T][C] (optional) must be finite on the valid frames t < lengths[b].
// cum_scores must be finite on rows 0..lengths[b] (rows past the length are
// padding and never read). transition, duration_bias, start and end may hold
// -inf (a forbidden transition / duration / first label / last label, as in the
// cuda backend); NaN and +inf are rejected there.
template <class F>
void validate_inputs(const Dims& dims, const F* cum, const F* transition, const F* duration_bias,
                     const F* start, const F* end, const int32_t* lengths, const int32_t* labels,
                     const F* onset = nullptr) {
  auto bad = [](const std::string& msg) { throw std::invalid_argument(msg); };
  if (dims.B < 1) bad("crf: batch size B must be >= 1, got " + std::to_string(dims.B));
  if (dims.T < 1) bad("crf: number of frames T must be >= 1, got " + std::to_string(dims.T));
  if (dims.K < 1) bad("crf: max duration K must be >= 1, got " + std::to_string(dims.K));
  if (dims.C < 1) bad("crf: number of classes C must be >= 1, got " + std::to_string(dims.C));
  if (dims.T > std::numeric_limits<int32_t>::max() - 1)
    bad("crf: number of frames T=" + std::to_string(dims.T) + " is too large");
  if (!cum) bad("crf: cum_scores is null");
  if (!transition) bad("crf: transition is null");
  if (!duration_bias) bad("crf: duration_bias is null");
  if (!lengths) bad("crf: lengths is null");
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  for (int64_t b = 0; b < B; ++b)
    if (lengths[b] < 1 || lengths[b] > T)
      bad("crf: lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) + " is outside [1, T=" +
          std::to_string(T) + "]");
  // Parameters: finite or -inf ("forbidden"); NaN and +inf are errors.
  auto param = [&](const char* name, const F* v, int64_t n, bool matrix, const char* what) {
    if (!v) return;
    for (int64_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(v[i]);
      if (std::isnan(x) || x == std::numeric_limits<double>::infinity()) {
        const std::string idx = matrix ? std::to_string(i / C) + "][" + std::to_string(i % C) : std::to_string(i);
        bad(std::string("crf: ") + name + "[" + idx + "] = " + fmt_value(x) +
            " is NaN or +inf (entries must be finite, or -inf to forbid " + what + ")");
      }
    }
  };
  for (int64_t b = 0; b < B; ++b) {
    const F* row = cum + b * (T + 1) * C;
    for (int64_t t = 0; t <= lengths[b]; ++t)
      for (int64_t c = 0; c < C; ++c)
        if (!std::isfinite(static_cast<double>(row[t * C + c])))
          bad("crf: cum_scores[" + std::to_string(b) + "][" + std::to_string(t) + "][" + std::to_string(c) +
              "] = " + fmt_value(static_cast<double>(row[t * C + c])) + " is not finite");
  }
  param("transition", transition, C * C, true, "a transition");
  param("duration_bias", duration_bias, K * C, true, "a duration");
  param("start", start, C, false, "a first label");
  param("end", end, C, false, "a last label");
  // onset [B][T][C]: finite on the valid frames t < lengths[b] (padding never read).
  if (onset)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < lengths[b]; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const double v = static_cast<double>(onset[(b * T + t) * C + c]);
          if (!std::isfinite(v))
            bad("crf: onset[" + std::to_string(b) + "][" + std::to_string(t) + "][" + std::to_string(c) +
                "] = " + fmt_value(v) + " is not finite");
        }
  if (labels)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < lengths[b]; ++t) {
        const int32_t y = labels[b * T + t];
        if (y < 0 || y >= C)
          bad("crf: labels[" + std::to_string(b) + "][" + std::to_string(t) + "] = " + std::to_string(y) +
              " is outside [0, C=" + std::to_string(C) + ")");
      }
}

}  // namespace timitseg::crf::detail
