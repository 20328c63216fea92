#include "eval/silence_edges.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace timitseg::eval {

namespace {

int64_t step_1ms(int rate) { return std::max<int64_t>(1, rate / 1000); }

// The nearest-rank percentile (0-100) of v (not empty); v is reordered.
double percentile_of(std::vector<float>& v, double percentile) {
  const double rank = std::ceil(percentile / 100.0 * static_cast<double>(v.size()));
  const size_t k = static_cast<size_t>(std::clamp<double>(rank, 1.0, static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

nlohmann::json SilenceEdgeCount::to_json() const {
  return {{"edges", edges},
          {"moved", moved},
          {"loud", loud},
          {"no_crossing", no_crossing},
          {"utterances_without_audio", utterances_without_audio},
          {"mean_move_ms", moved > 0 ? moved_ms_sum / static_cast<double>(moved) : 0.0}};
}

void check_silence_edge_options(const SilenceEdgeOptions& o) {
  if (!(std::isfinite(o.margin_db) && o.margin_db > 0))
    throw std::invalid_argument("--silence-margin-db must be a number > 0 (dB above the utterance's floor), not " +
                                std::to_string(o.margin_db));
  if (!(std::isfinite(o.max_move_ms) && o.max_move_ms >= 0))
    throw std::invalid_argument("--silence-max-move-ms must be a number >= 0, not " + std::to_string(o.max_move_ms));
  if (!(o.min_quiet_pct > 0 && o.min_quiet_pct <= 100))
    throw std::invalid_argument("--silence-min-quiet must be a percentage in (0, 100], not " +
                                std::to_string(o.min_quiet_pct));
}

bool silence_edges_on(SilenceEdgesSetting setting, bool transcript_trained) {
  switch (setting) {
    case SilenceEdgesSetting::on: return true;
    case SilenceEdgesSetting::off: return false;
    case SilenceEdgesSetting::automatic: break;
  }
  return transcript_trained;
}

std::optional<SilenceEdgeOptions> resolve_silence_edges(SilenceEdgesSetting setting, const SilenceEdgeOptions& o,
                                                        bool transcript_trained, const std::string& who) {
  if (!silence_edges_on(setting, transcript_trained)) return std::nullopt;
  spdlog::info("{}: silence edges at the energy change (floor + {} dB, at most {} ms, silences >= {} % quiet; "
               "--silence-edges {}{})",
               who, o.margin_db, o.max_move_ms, o.min_quiet_pct, common::to_string(setting),
               setting == SilenceEdgesSetting::automatic ? ": the checkpoint trained on transcripts" : "");
  return o;
}

std::vector<float> energy_envelope_db(const float* x, int64_t n, int rate, double window_ms) {
  if (n < 0 || rate < 1 || !(window_ms > 0)) throw std::invalid_argument("energy_envelope_db: bad arguments");
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);  // prefix[i] = sum of x^2 over [0, i)
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + static_cast<double>(x[i]) * x[i];
  const int64_t half = std::max<int64_t>(0, std::llround(window_ms * rate / 2000.0));
  std::vector<float> env(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = std::max<int64_t>(0, i - half), b = std::min<int64_t>(n, i + half + 1);
    const double power = (prefix[b] - prefix[a]) / static_cast<double>(b - a);
    env[i] = static_cast<float>(10.0 * std::log10(power + 1e-10));
  }
  return env;
}

double envelope_floor_db(const std::vector<float>& env, int rate, double percentile) {
  if (env.empty()) throw std::invalid_argument("envelope_floor_db: empty envelope");
  std::vector<float> v;
  for (size_t i = 0; i < env.size(); i += static_cast<size_t>(step_1ms(rate))) v.push_back(env[i]);
  return percentile_of(v, percentile);
}

void refine_silence_edges(const float* x, int64_t n_samples, int rate, const std::vector<char>& silence, int64_t end,
                          const SilenceEdgeOptions& o, std::vector<int64_t>* starts, SilenceEdgeCount* count) {
  std::vector<int64_t>& s = *starts;
  const size_t m = s.size();
  if (silence.size() != m) throw std::invalid_argument("refine_silence_edges: silence flags and starts differ in size");
  if (end > n_samples || rate < 1) throw std::invalid_argument("refine_silence_edges: the phones end past the audio");
  for (size_t i = 0; i < m; ++i)
    if (s[i] < 0 || (i > 0 && s[i] <= s[i - 1]) || s[i] >= end)
      throw std::invalid_argument("refine_silence_edges: phone starts not increasing inside the audio");
  if (m < 2) return;
  const std::vector<float> env = energy_envelope_db(x, n_samples, rate, o.window_ms);
  const double threshold = envelope_floor_db(env, rate, o.floor_percentile) + o.margin_db;
  const int64_t bound = std::llround(o.max_move_ms * rate / 1000.0);
  auto loud = [&](int64_t t) { return env[static_cast<size_t>(t)] >= threshold; };
  SilenceEdgeCount local;
  for (size_t i = 1; i < m; ++i) {
    if (static_cast<bool>(silence[i - 1]) == static_cast<bool>(silence[i])) continue;
    ++local.edges;
    const bool onset = silence[i - 1];  // silence, then the phone
    const size_t q = onset ? i - 1 : i;  // the silence
    const int64_t q_begin = s[q], q_end = q + 1 < m ? s[q + 1] : end;
    int64_t values = 0, quiet = 0;
    for (int64_t t = q_begin; t < q_end; t += step_1ms(rate)) ++values, quiet += env[static_cast<size_t>(t)] < threshold;
    if (quiet < static_cast<int64_t>(std::ceil(o.min_quiet_pct / 100.0 * static_cast<double>(values) - 1e-9))) {
      ++local.loud;
      continue;
    }
    const int64_t b = s[i];
    const int64_t lo = std::max(s[i - 1] + 1, b - bound);                      // the phone before keeps a sample
    const int64_t hi = std::min((i + 1 < m ? s[i + 1] : end) - 1, b + bound);  // and the phone after
    int64_t t = b;
    bool found = false;
    if (onset == loud(b)) {  // onset in sound, offset in quiet: back to the start of this run
      while (t - 1 >= lo && loud(t - 1) == loud(b)) --t;
      found = t > lo || (lo >= 1 && loud(lo - 1) != loud(b));  // stopped at a change, not at the bound
    } else {  // onset in quiet, offset in sound: on to the first sample of the other kind
      while (t <= hi && loud(t) == loud(b)) ++t;
      found = t <= hi;
    }
    if (!found) {
      ++local.no_crossing;
      continue;
    }
    if (t != b) {
      ++local.moved;
      local.moved_ms_sum += static_cast<double>(t - b) * 1000.0 / rate;
      s[i] = t;
    }
  }
  if (count) {
    count->edges += local.edges;
    count->moved += local.moved;
    count->loud += local.loud;
    count->no_crossing += local.no_crossing;
    count->moved_ms_sum += local.moved_ms_sum;
  }
}

}  // namespace timitseg::eval
