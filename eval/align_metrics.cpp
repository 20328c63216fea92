// The scores of `evaluate --align` (see align_metrics.h, docs/align.md): the
// frame-quantized figure against the prepared frame labels and the
// sample-accurate one against the .PHN times, per broad class too.
#include "eval/align_metrics.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "common/files.h"
#include "common/text.h"
#include "data/corpus.h"
#include "data/features.h"
#include "data/phones.h"
#include "eval/pipeline.h"
#include "model/batch.h"

namespace fs = std::filesystem;

namespace timitseg::eval {

std::vector<std::pair<int32_t, int32_t>> reference_runs(const data::Utterance& u, const model::LabelSet& ls) {
  std::vector<std::pair<int32_t, int32_t>> runs;
  for (int32_t t = 0; t < u.num_frames; ++t) {
    const int32_t c = ls.class_of_label(u.labels[t]);
    if (!runs.empty() && runs.back().first == c)
      ++runs.back().second;
    else
      runs.emplace_back(c, 1);
  }
  return runs;
}

namespace {

const int kTolerancesMs[] = {10, 20, 25, 50};

// signed_ms: the same boundaries' aligned - reference (its mean is the bias), or empty.
nlohmann::json summarize(const std::vector<double>& abs_ms, const std::vector<double>& signed_ms) {
  nlohmann::json j;
  j["boundaries"] = abs_ms.size();
  if (abs_ms.empty()) return j;  // no boundary: the fractions and errors do not exist (never NaN)
  nlohmann::json within;
  for (int tol : kTolerancesMs) {
    int64_t k = 0;
    for (double e : abs_ms) k += e <= tol + 1e-9;
    within[std::to_string(tol)] = static_cast<double>(k) / static_cast<double>(abs_ms.size());
  }
  j["within_ms"] = within;
  double sum = 0;
  for (double e : abs_ms) sum += e;
  j["mean_abs_ms"] = sum / static_cast<double>(abs_ms.size());
  std::vector<double> v = abs_ms;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  j["median_abs_ms"] = v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  if (signed_ms.size() == abs_ms.size())
    j["mean_signed_ms"] = std::accumulate(signed_ms.begin(), signed_ms.end(), 0.0) / static_cast<double>(signed_ms.size());
  return j;
}

// One table row: "  NAME  B  w10 w20 w25 w50  mean  median  bias".
std::string row(const std::string& name, const nlohmann::json& j) {
  char buf[256];
  if (!j.contains("within_ms")) {
    std::snprintf(buf, sizeof buf, " %7d   (no boundaries)\n", 0);
    return "  " + pad_right(name, 16) + buf;  // by display width (IPA, CJK labels)
  }
  const nlohmann::json& w = j["within_ms"];
  std::snprintf(buf, sizeof buf, " %7lld %7.2f %7.2f %7.2f %7.2f %8.2f %8.2f %+8.2f\n",
                static_cast<long long>(j["boundaries"].get<int64_t>()), 100 * w["10"].get<double>(),
                100 * w["20"].get<double>(), 100 * w["25"].get<double>(), 100 * w["50"].get<double>(),
                j["mean_abs_ms"].get<double>(), j["median_abs_ms"].get<double>(),
                j.value("mean_signed_ms", 0.0));
  return "  " + pad_right(name, 16) + buf;
}

// The rows of the phones whose boundaries are furthest off on average: the largest
// |bias| among those with >= kPhoneRowMinBoundaries boundaries into them, with their
// mean length error; "" when none has that many.
std::string phone_rows(const nlohmann::json& by_phone) {
  std::vector<std::pair<double, std::string>> off;
  for (const auto& [label, p] : by_phone.items())
    if (p["boundaries"].get<int64_t>() >= AlignMetrics::kPhoneRowMinBoundaries)
      off.emplace_back(-std::fabs(p["mean_signed_ms"].get<double>()), label);
  if (off.empty()) return "";
  std::sort(off.begin(), off.end());
  std::string out = "  the phones furthest off (bias of the boundaries into each, >= " +
                    std::to_string(AlignMetrics::kPhoneRowMinBoundaries) + " of them; length: aligned minus reference):\n";
  for (size_t k = 0; k < off.size() && k < static_cast<size_t>(AlignMetrics::kPhoneRows); ++k) {
    const nlohmann::json& p = by_phone[off[k].second];
    char buf[64];
    std::snprintf(buf, sizeof buf, "  length %+.2f ms\n", p["mean_length_error_ms"].get<double>());
    std::string r = row("  into " + off[k].second, p);
    r.pop_back();  // its newline
    out += r + buf;
  }
  return out;
}

// The .PHN beside AUDIO (upper or lower case extension), or "".
std::string phn_beside(const std::string& audio) {
  if (audio.empty()) return "";
  for (const char* ext : {".PHN", ".phn"}) {
    const fs::path p = fs::path(audio).replace_extension(ext);
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// Utterance::reference as reference phones of the label set: WORKDIR labels to
// classes, consecutive phones of one class merged, a gap given to the phone
// before it (as phn_reference does with a .PHN).
std::vector<RefPhone> recorded_reference(const data::Utterance& u, const model::LabelSet& ls) {
  std::vector<RefPhone> out;
  for (const data::Utterance::RefInterval& r : u.reference) {
    const int32_t c = ls.class_of_label(r.label);
    if (c < 0) continue;  // a merged label: never recorded, as never a frame label
    if (!out.empty() && out.back().cls == c) {
      out.back().end = r.end;
      continue;
    }
    if (!out.empty()) out.back().end = r.start;
    out.push_back({c, r.start, r.end});
  }
  return out;
}

}  // namespace

std::vector<RefPhone> phn_reference(const std::vector<data::PhnEntry>& phn, const model::LabelSet& ls) {
  std::vector<RefPhone> out;
  int64_t q_start = -1;  // a leading q (a merged label): its time goes to the next phone
  for (const data::PhnEntry& e : phn) {
    const data::LabelResolution r = ls.spec.resolve(e.phone);
    if (r.kind == data::LabelKind::merge) {
      if (out.empty() && q_start < 0) q_start = e.start;
      if (!out.empty()) out.back().end = e.end;
      continue;
    }
    if (r.kind != data::LabelKind::phone)
      throw std::runtime_error("unknown phone '" + e.phone + "' (line " + std::to_string(e.line) + ")");
    const int32_t c = r.index;
    if (!out.empty() && out.back().cls == c) {
      out.back().end = e.end;
      continue;
    }
    if (!out.empty()) out.back().end = e.start;  // a gap goes to the phone before it
    out.push_back({c, q_start >= 0 ? q_start : e.start, e.end});
    q_start = -1;
  }
  return out;
}

std::string sample_reference(const data::Utterance& u, const model::LabelSet& labels,
                             const data::FeatureOptions& features, std::vector<RefPhone>* ref, int* rate) {
  if (!u.reference.empty()) {  // recorded by prepare --corpus
    *ref = recorded_reference(u, labels);
    *rate = u.reference_rate;
    return ref->empty() ? u.id + ": no phones in its recorded reference" : "";
  }
  const std::string phn = phn_beside(u.audio_path);
  if (phn.empty()) return u.id + ": no .PHN beside " + (u.audio_path.empty() ? "(no audio path)" : u.audio_path);
  try {
    std::vector<data::Problem> problems;
    const std::vector<data::PhnEntry> entries = data::parse_phn(phn, read_file(phn), -1, &problems);
    for (const data::Problem& p : problems)
      if (p.error) return p.str();
    *ref = phn_reference(entries, labels);
    // without --allow-resample, prepare accepted only files at the model's rate
    *rate = features.allow_resample ? data::read_audio(u.audio_path).sample_rate : features.sample_rate;
  } catch (const std::exception& e) {
    return phn + ": " + e.what();
  }
  if (ref->empty()) return phn + ": no phones";
  return "";
}

void AlignMetrics::add(const std::vector<int32_t>& ref_ends, const std::vector<int32_t>& hyp_ends, double frame_ms) {
  for (size_t i = 0; i < ref_ends.size(); ++i) {
    const double e = (static_cast<double>(hyp_ends.at(i)) - static_cast<double>(ref_ends[i])) * frame_ms;
    abs_ms.push_back(std::fabs(e));
    signed_ms.push_back(e);
  }
}

void AlignMetrics::add_samples(const std::vector<int64_t>& ref, int ref_rate, const std::vector<int64_t>& hyp,
                               int hyp_rate, const std::vector<int>& cls, const std::vector<std::string>& phones) {
  if (!phones.empty() && phones.size() != ref.size() + 1)
    throw std::invalid_argument("add_samples: " + std::to_string(phones.size()) + " phone labels for " +
                                std::to_string(ref.size()) + " boundaries (expected one more)");
  double before = 0.0;  // the error of the boundary before phone i (the utterance's start: exact)
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = static_cast<double>(ref[i]) / ref_rate, h = static_cast<double>(hyp.at(i)) / hyp_rate;
    const double e = (h - r) * 1000.0;
    samples.abs_ms.push_back(std::fabs(e));
    samples.signed_ms.push_back(e);
    samples.cls.push_back(cls.at(i));
    samples.into.push_back(phones.empty() ? std::string() : phones[i + 1]);  // "": not named
    samples.from.push_back(phones.empty() ? std::string() : phones[i]);
    if (phones.empty()) continue;
    samples.length_error_ms.emplace_back(phones[i], e - before);  // its end moved by e, its start by `before`
    before = e;
  }
  if (!phones.empty()) samples.length_error_ms.emplace_back(phones.back(), -before);  // the end: exact
}

nlohmann::json BoundaryErrors::summary() const { return summarize(abs_ms, signed_ms); }

nlohmann::json BoundaryErrors::by_class() const {
  nlohmann::json j = nlohmann::json::object();
  const std::vector<std::string>& names = class_names;
  for (size_t k = 0; k < names.size(); ++k) {
    std::vector<double> v, sv;
    for (size_t i = 0; i < abs_ms.size(); ++i)
      if (cls[i] == static_cast<int>(k)) {
        v.push_back(abs_ms[i]);
        if (i < signed_ms.size()) sv.push_back(signed_ms[i]);
      }
    if (!v.empty()) j[names[k]] = summarize(v, sv);
  }
  return j;
}

nlohmann::json BoundaryErrors::by_phone() const {
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> into_errors;  // label -> (abs, signed)
  for (size_t i = 0; i < into.size() && i < abs_ms.size(); ++i) {
    if (into[i].empty()) continue;  // added without names
    into_errors[into[i]].first.push_back(abs_ms[i]);
    into_errors[into[i]].second.push_back(signed_ms.at(i));
  }
  std::map<std::string, std::pair<int64_t, double>> lengths;  // label -> (phones, sum of length errors)
  for (const auto& [label, e] : length_error_ms) {
    ++lengths[label].first;
    lengths[label].second += e;
  }
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [label, n] : lengths) {
    const auto it = into_errors.find(label);
    nlohmann::json p = it == into_errors.end() ? summarize({}, {}) : summarize(it->second.first, it->second.second);
    p["phones"] = n.first;
    p["mean_length_error_ms"] = n.second / static_cast<double>(n.first);
    j[label] = p;
  }
  return j;
}

nlohmann::json AlignMetrics::to_json() const {
  nlohmann::json j = summarize(abs_ms, signed_ms);
  j["utterances"] = utterances;
  j["infeasible"] = infeasible;
  j["seconds"] = seconds;
  j["boundary_decoding"] = common::to_string(boundary_decoding);
  if (boundary_decoding != crf::AlignBoundaries::viterbi) j["posterior_boundaries"] = posterior_boundaries_json(posterior);
  nlohmann::json sj = samples.summary();
  sj["by_class"] = samples.by_class();
  if (!samples.length_error_ms.empty()) sj["by_phone"] = samples.by_phone();
  if (samples.class_names.empty())
    sj["by_class_note"] = "phone set '" + phone_set + "' names no broad classes: per-class scores omitted";
  sj["without_phn"] = without_phn;
  if (!shifts_file.empty()) {
    nlohmann::json sh = shifted.to_json();
    sh["file"] = shifts_file;
    sj["shifts"] = sh;
  }
  if (silence_edges) {
    nlohmann::json se = edge_count.to_json();
    se["margin_db"] = silence_edges->margin_db;
    se["max_move_ms"] = silence_edges->max_move_ms;
    se["min_quiet_pct"] = silence_edges->min_quiet_pct;
    sj["silence_edges"] = se;
  }
  j["samples"] = sj;
  j["confidence"] = confidence.to_json();
  return j;
}

std::string AlignMetrics::table() const {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "forced alignment (%lld utterances%s, %.2f s)\n", static_cast<long long>(utterances),
                infeasible ? (", " + std::to_string(infeasible) + " infeasible").c_str() : "", seconds);
  out += buf;
  if (boundary_decoding != crf::AlignBoundaries::viterbi)
    out += "  (both rows: boundaries from the posteriors under the transcript, " + posterior_boundaries_line(posterior) +
           ")\n";
  out += "  reference         bounds  <=10ms  <=20ms  <=25ms  <=50ms  mean ms  median  bias ms\n";
  out += row("frame-quantized", summarize(abs_ms, signed_ms));
  if (without_phn < utterances) {
    if (silence_edges) {
      std::snprintf(buf, sizeof buf,
                    "  (sample-accurate rows: silence edges at the energy change, floor + %g dB within %g ms, silences "
                    ">= %g %% quiet: %lld of %lld moved, %lld left by a loud silence, %lld without a crossing)\n",
                    silence_edges->margin_db, silence_edges->max_move_ms, silence_edges->min_quiet_pct,
                    static_cast<long long>(edge_count.moved),
                    static_cast<long long>(edge_count.edges), static_cast<long long>(edge_count.loud),
                    static_cast<long long>(edge_count.no_crossing));
      out += buf;
    }
    if (!shifts_file.empty())
      out += "  (sample-accurate rows: the aligned boundaries moved by the per-phone shifts of " + shifts_file + ": " +
             std::to_string(shifted.moved) + " of " + std::to_string(shifted.boundaries) + " boundaries, " +
             std::to_string(shifted.clamped) + " held back to keep every phone >= 1 sample)\n";
    out += row("sample-accurate", samples.summary());
    const nlohmann::json bc = samples.by_class();
    for (const std::string& name : samples.class_names)
      if (bc.contains(name)) out += row("  " + name, bc[name]);
    if (samples.class_names.empty())
      out += "  (phone set '" + phone_set + "' names no broad classes: per-class rows omitted)\n";
    out += phone_rows(samples.by_phone());
  }
  if (without_phn > 0) {
    std::snprintf(buf, sizeof buf, "  (%lld utterance(s) without a sample-accurate reference (a readable .PHN beside the audio, or one recorded by prepare --corpus): not in the sample-accurate rows)\n",
                  static_cast<long long>(without_phn));
    out += buf;
  }
  return out + confidence.table();
}

namespace {

// The aligned end frames of phones 0..n-2 of utterance b (the frame-quantized rows: no offsets).
std::vector<int32_t> aligned_ends(const crf::AlignResult& r, int64_t b, int64_t N, size_t n) {
  std::vector<int32_t> ends;
  for (size_t i = 0; i + 1 < n; ++i) ends.push_back(r.spans[(b * N + i) * 2] + r.spans[(b * N + i) * 2 + 1]);
  return ends;
}

// Aligns each utterance of `part` to its class sequence; the result and N.
crf::AlignResult align_part(model::Executor& exec, const std::vector<const data::Utterance*>& part,
                            const std::vector<std::vector<int32_t>>& seqs, const model::ModelState& s, int64_t* N_out,
                            crf::AlignBoundaries boundaries, crf::AlignConfidence* conf = nullptr) {
  const model::Batch batch = model::make_batch(part, s.has_cmvn ? &s.cmvn : nullptr, s.labels, 0);
  int64_t N = 1;
  for (const auto& q : seqs) N = std::max<int64_t>(N, static_cast<int64_t>(q.size()));
  const int64_t B = static_cast<int64_t>(part.size());
  std::vector<int32_t> phones(B * N, 0), nph(B);
  for (int64_t b = 0; b < B; ++b) {
    nph[b] = static_cast<int32_t>(seqs[b].size());
    std::copy(seqs[b].begin(), seqs[b].end(), phones.begin() + b * N);
  }
  *N_out = N;
  return exec.align(batch, N, phones, nph, {}, conf, boundaries);
}

// The boundary confidences of utterance b (aligned to its frame runs, which
// are also its .PHN's phones): off_20ms against the .PHN in samples, within_1
// against the frame runs (ConfidenceMetrics).
void add_boundary_confidence(const crf::AlignResult& r, const crf::AlignConfidence& conf, int64_t b, int64_t N,
                             const std::vector<std::pair<int32_t, int32_t>>& runs, const std::vector<RefPhone>& phn,
                             int rate, const model::ModelState& s, ConfidenceMetrics* cm) {
  if (!conf.computed[b]) {
    cm->not_computed += conf.reason[b].empty() ? 0 : 1;
    if (!conf.reason[b].empty()) ++cm->left_out[kLeftOutMemory];
    return;
  }
  const size_t n = runs.size();
  const std::vector<int64_t> ends = aligned_end_samples(r, b, N, n, s.features);  // [n - 1]
  int32_t ref_start = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t u = r.spans[(b * N + i) * 2], e = u + r.spans[(b * N + i) * 2 + 1];
    const int32_t ref_end = ref_start + runs[i].second;
    const double ms_per_sample = 1000.0 / rate, ms_model = 1000.0 / s.features.sample_rate;
    const double err_start = i == 0 ? 0.0 : std::fabs(phn[i].start * ms_per_sample - ends[i - 1] * ms_model);
    const double err_end = i + 1 == n ? 0.0 : std::fabs(phn[i].end * ms_per_sample - ends[i] * ms_model);
    cm->boundary.push_back(conf.boundary[b * N + i]);
    cm->off_20ms.push_back(err_start > 20.0 || err_end > 20.0);
    cm->within_1.push_back(std::abs(u - ref_start) <= 1 && std::abs(e - ref_end) <= 1);
    ref_start = ref_end;
  }
}

// 10 % of each transcript's phones (at least one) replaced by another label,
// drawn from a generator seeded by the utterance id (FNV-1a): reproducible
// whatever the batch or thread count.
std::vector<int32_t> corrupt(const std::vector<int32_t>& seq, const std::string& id, int C, std::vector<char>* replaced) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : id) h = (h ^ ch) * 1099511628211ULL;
  std::mt19937_64 rng(h ^ 34);
  const size_t n = seq.size();
  const size_t k = std::max<size_t>(1, static_cast<size_t>(std::llround(0.1 * static_cast<double>(n))));
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::shuffle(idx.begin(), idx.end(), rng);
  std::vector<int32_t> out = seq;
  replaced->assign(n, 0);
  for (size_t j = 0; j < k && j < n && C > 1; ++j) {
    const int32_t shift = 1 + static_cast<int32_t>(std::uniform_int_distribution<int>(0, C - 2)(rng));
    out[idx[j]] = (seq[idx[j]] + shift) % C;
    (*replaced)[idx[j]] = 1;
  }
  return out;
}

// Aligns the corrupted transcripts of `part` and adds each phone's
// label_confidence, whether it was replaced, and whether it is exact (not
// replaced, the reference run's span).
void score_label_confidence(model::Executor& exec, const std::vector<const data::Utterance*>& part,
                            const std::vector<std::vector<std::pair<int32_t, int32_t>>>& refs,
                            const std::vector<std::vector<int32_t>>& seqs, const model::ModelState& s,
                            crf::AlignBoundaries boundaries, ConfidenceMetrics* cm) {
  std::vector<std::vector<int32_t>> bad(part.size());
  std::vector<std::vector<char>> replaced(part.size());
  for (size_t b = 0; b < part.size(); ++b) bad[b] = corrupt(seqs[b], part[b]->id, s.labels.size(), &replaced[b]);
  int64_t N = 1;
  crf::AlignConfidence conf;
  const crf::AlignResult r = align_part(exec, part, bad, s, &N, boundaries, &conf);
  for (size_t b = 0; b < part.size(); ++b) {
    if (!conf.computed[b]) continue;
    int32_t ref_start = 0;
    for (size_t i = 0; i < bad[b].size(); ++i) {
      const int64_t at = static_cast<int64_t>(b) * N + static_cast<int64_t>(i);
      const bool same_span = r.spans[at * 2] == ref_start && r.spans[at * 2 + 1] == refs[b][i].second;
      cm->label.push_back(conf.label[at]);
      cm->replaced.push_back(replaced[b][i]);
      cm->exact.push_back(!replaced[b][i] && same_span);
      ref_start += refs[b][i].second;
    }
  }
}

// The utterances of a batch whose .PHN phone sequence differs from their
// frame runs: aligned again on that sequence for the sample-accurate scores.
struct Realign {
  std::vector<const data::Utterance*> utts;
  std::vector<std::vector<int32_t>> seqs;
  std::vector<size_t> index;  // into the batch, increasing
};

// An utterance's aligned boundaries hyp [n-1] (samples at the model's rate) with their silence edges
// at the energy change of its audio (eval/silence_edges.h), phones phn [n]. The audio is read again
// and brought to the model's rate; when it is not the utterance's length (a Kaldi segment of a longer
// recording) the boundaries stay as aligned and the utterance is counted.
void refine_edges_of(const data::Utterance& u, const std::vector<RefPhone>& phn, const model::ModelState& s,
                     const SilenceEdgeOptions& edges, std::vector<int64_t>* hyp, SilenceEdgeCount* count) {
  data::Audio audio = data::to_rate(data::read_audio(u.audio_path), s.features.sample_rate);
  const int64_t n = static_cast<int64_t>(audio.samples.size());
  std::vector<int64_t> starts{0};
  starts.insert(starts.end(), hyp->begin(), hyp->end());
  bool fits = n == u.num_samples;
  for (size_t i = 1; i < starts.size() && fits; ++i) fits = starts[i] > starts[i - 1] && starts[i] < n;
  if (!fits) {
    if (count->utterances_without_audio++ == 0)
      spdlog::warn("evaluate --align: {}: its audio ({} samples at {} Hz) does not hold its aligned phones as "
                   "prepared ({} samples): silence edges left as aligned (counted in the JSON)",
                   u.id, n, s.features.sample_rate, u.num_samples);
    return;
  }
  std::vector<char> silence;
  for (const RefPhone& p : phn) silence.push_back(s.labels.spec.is_silence(p.cls) ? 1 : 0);
  refine_silence_edges(audio.samples.data(), n, s.features.sample_rate, silence, n, edges, &starts, count);
  hyp->assign(starts.begin() + 1, starts.end());
}

// The sample-accurate scores of a batch against each .PHN (phn[b] empty: none
// to score): from the frame runs' alignment r (N phones a row), or from the
// realignment of `again`; the boundary confidences of the former.
void add_sample_scores(model::Executor& exec, const std::vector<const data::Utterance*>& part, const crf::AlignResult& r,
                       int64_t N, const crf::AlignConfidence& conf,
                       const std::vector<std::vector<std::pair<int32_t, int32_t>>>& refs,
                       const std::vector<std::vector<RefPhone>>& phn, const std::vector<int>& rates, const Realign& again,
                       const model::ModelState& s, const BoundaryShifts* shifts, const SilenceEdgeOptions* edges,
                       AlignMetrics* m) {
  int64_t N2 = 1;
  crf::AlignResult r2;
  if (!again.utts.empty()) r2 = align_part(exec, again.utts, again.seqs, s, &N2, m->boundary_decoding);
  for (size_t b = 0, k = 0; b < part.size(); ++b) {
    if (phn[b].empty()) continue;
    const bool other = k < again.index.size() && again.index[k] == b;
    const crf::AlignResult& res = other ? r2 : r;
    const int64_t row_b = other ? static_cast<int64_t>(k) : static_cast<int64_t>(b);
    if (other) ++k;
    if (!(res.score[row_b] > -INFINITY)) {  // counted (and named) above when the frame runs are infeasible
      if (other && r.score[b] > -INFINITY)
        spdlog::warn("evaluate --align: {}: its .PHN phone sequence has no alignment of finite score", part[b]->id);
      ++m->confidence.left_out[kLeftOutInfeasible];
      continue;
    }
    if (other)
      ++m->confidence.left_out[kLeftOutRealigned];
    else
      add_boundary_confidence(r, conf, static_cast<int64_t>(b), N, refs[b], phn[b], rates[b], s, &m->confidence);
    std::vector<int64_t> ref, hyp = aligned_end_samples(res, row_b, other ? N2 : N, phn[b].size(), s.features);
    std::vector<int> cls;
    std::vector<std::string> names;
    for (size_t i = 0; i < hyp.size(); ++i) {
      ref.push_back(phn[b][i + 1].start);
      cls.push_back(s.labels.spec.broad_class(s.labels.names[phn[b][i + 1].cls]));
    }
    for (const RefPhone& p : phn[b]) names.push_back(s.labels.names[p.cls]);
    if (edges) refine_edges_of(*part[b], phn[b], s, *edges, &hyp, &m->edge_count);
    if (shifts) {  // the phones' starts: 0, then the boundaries; the end: the audio's (as `align` writes it)
      std::vector<int64_t> starts{0};
      starts.insert(starts.end(), hyp.begin(), hyp.end());
      const int64_t end = std::max(part[b]->num_samples, boundary_sample(part[b]->num_frames, s.features));
      apply_boundary_shifts(*shifts, names, s.features.sample_rate, std::max(end, starts.back() + 1), &starts,
                            &m->shifted);
      hyp.assign(starts.begin() + 1, starts.end());
    }
    m->add_samples(ref, rates[b], hyp, s.features.sample_rate, cls, names);
  }
}

}  // namespace

AlignMetrics align_utterances(model::Executor& exec, const std::vector<const data::Utterance*>& utts_in, const model::ModelState& s,
                              int batch_size, const BoundaryShifts* shifts, const std::string& shifts_file,
                              const SilenceEdgeOptions* edges, crf::AlignBoundaries boundaries) {
  if (batch_size < 1) throw std::invalid_argument("--batch-size must be >= 1");
  std::vector<const data::Utterance*> utts = utts_in;
  std::stable_sort(utts.begin(), utts.end(),
                   [](const data::Utterance* a, const data::Utterance* b) { return a->num_frames < b->num_frames; });
  AlignMetrics m;
  m.samples.class_names = s.labels.spec.broad_class_names();
  m.phone_set = s.labels.spec.name;
  if (shifts) m.shifts_file = shifts_file;
  if (edges) m.silence_edges = *edges;
  m.boundary_decoding = boundaries;
  for (size_t at = 0; at < utts.size(); at += batch_size) {
    const std::vector<const data::Utterance*> part(utts.begin() + at,
                                                   utts.begin() + std::min(utts.size(), at + batch_size));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<std::pair<int32_t, int32_t>>> refs;
    std::vector<std::vector<int32_t>> seqs;
    for (const data::Utterance* u : part) {
      refs.push_back(reference_runs(*u, s.labels));
      seqs.emplace_back();
      for (const auto& run : refs.back()) seqs.back().push_back(run.first);
    }
    int64_t N = 1;
    crf::AlignConfidence conf;
    crf::AlignResult r = align_part(exec, part, seqs, s, &N, boundaries, &conf);
    m.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    count_offsets_in_samples(&r, s.features);
    m.posterior.add(r.posterior);
    if (r.posterior.over_limit > 0)
      spdlog::warn("evaluate --align: {}: boundaries left at the constrained Viterbi's (even a window of its "
                   "transcript is over the posteriors' {:.0f} MiB limit)",
                   part[r.posterior.first_over_limit]->id, crf::kPosteriorBoundaryBytes / (1024.0 * 1024.0));
    score_label_confidence(exec, part, refs, seqs, s, boundaries, &m.confidence);
    // sample-accurate: the .PHN's own phone sequence; realigned when it differs from the frame runs
    std::vector<std::vector<RefPhone>> phn(part.size());
    std::vector<int> rates(part.size(), 0);
    Realign again;
    for (size_t b = 0; b < part.size(); ++b) {
      ++m.utterances;
      const bool feasible = r.score[b] > -INFINITY;
      if (!feasible) {
        ++m.infeasible;
        spdlog::warn("evaluate --align: {}: no alignment of finite score", part[b]->id);
      } else {
        std::vector<int32_t> ref_ends;
        int32_t t = 0;
        for (size_t i = 0; i + 1 < refs[b].size(); ++i) ref_ends.push_back(t += refs[b][i].second);
        m.add(ref_ends, aligned_ends(r, static_cast<int64_t>(b), N, refs[b].size()), s.features.frame_shift_ms);
      }
      const std::string why = sample_reference(*part[b], s.labels, s.features, &phn[b], &rates[b]);
      if (!why.empty()) {
        if (m.without_phn++ == 0) spdlog::warn("evaluate --align: no sample-accurate reference: {}", why);
        ++m.confidence.left_out[kLeftOutNoPhn];
        phn[b].clear();
        continue;
      }
      std::vector<int32_t> q;
      for (const RefPhone& p : phn[b]) q.push_back(p.cls);
      if (q != seqs[b]) {
        again.utts.push_back(part[b]);
        again.seqs.push_back(q);
        again.index.push_back(b);
      } else if (!feasible) {
        phn[b].clear();  // the same sequence: no alignment to score
        ++m.confidence.left_out[kLeftOutInfeasible];
      }
    }
    add_sample_scores(exec, part, r, N, conf, refs, phn, rates, again, s, shifts, edges, &m);
  }
  return m;
}

}  // namespace timitseg::eval
