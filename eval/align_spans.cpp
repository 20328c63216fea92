// `timitseg score --spans`: the alignment figures of `evaluate --align`
// (AlignMetrics, align_metrics.cpp) for phone spans written by any program.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/files.h"
#include "data/dataset.h"
#include "data/features.h"
#include "eval/align_metrics.h"
#include "eval/infer.h"
#include "eval/pipeline.h"
#include "model/labels.h"

namespace timitseg::eval {

namespace {

// One utterance's spans: the phones' scoring labels and start samples (at the
// WORKDIR's rate), and the file line they came from.
struct SpanLine {
  std::vector<int> labels;
  std::vector<int64_t> starts;
  std::vector<int> phn_labels;  // "phn_phones" (the .PHN's phone sequence) when given, else the same
  std::vector<int64_t> phn_starts;
  int64_t line = 0;
};

// The frame runs of an utterance in the scoring set: (scoring class, frames) each.
std::vector<std::pair<int, int32_t>> scoring_runs(const data::Utterance& u, const model::LabelSet& ls) {
  std::vector<std::pair<int, int32_t>> out;
  for (int32_t l : u.labels) {
    const int c = ls.class_of_label(l);
    if (c < 0) continue;  // a merged label (q): never a frame label
    const int s = ls.scoring_index.at(c);
    if (!out.empty() && out.back().first == s)
      ++out.back().second;
    else
      out.push_back({s, 1});
  }
  return out;
}

// One array of [start_seconds, end_seconds, label] into labels and start samples.
void parse_phones(const nlohmann::json& arr, const std::string& key, const std::string& where, const std::string& id,
                  const std::map<std::string, int>& index, int rate, std::vector<int>* labels,
                  std::vector<int64_t>* starts) {
  if (!arr.is_array() || arr.empty())
    throw std::runtime_error(where + "\"" + key + "\" is not an array of [start_seconds, end_seconds, label] (utterance '" + id + "')");
  double prev_start = -INFINITY;
  for (size_t i = 0; i < arr.size(); ++i) {
    const nlohmann::json& p = arr[i];
    const std::string at = where + "utterance '" + id + "', " + key + " " + std::to_string(i) + ": ";
    if (!p.is_array() || p.size() != 3 || !p[0].is_number() || !p[1].is_number() || !p[2].is_string())
      throw std::runtime_error(at + p.dump() + " is not [start_seconds, end_seconds, label]");
    const double start = p[0].get<double>(), end = p[1].get<double>();
    if (!std::isfinite(start) || !std::isfinite(end) || start < 0 || end < start)
      throw std::runtime_error(at + "bad times " + p.dump() + " (0 <= start <= end needed)");
    if (start < prev_start) throw std::runtime_error(at + "starts before the phone before it");
    prev_start = start;
    const auto it = index.find(p[2].get<std::string>());
    if (it == index.end()) throw std::runtime_error(at + "'" + p[2].get<std::string>() + "' is not a phone of the WORKDIR's scoring set");
    labels->push_back(it->second);
    starts->push_back(static_cast<int64_t>(std::llround(start * rate)));
  }
}

// Reads one JSONL line {"utterance_id": ID, "phones": [[start_s, end_s, label], ...], "phn_phones": [...] (optional)}.
SpanLine parse_line(const std::string& text, const std::string& where, const std::map<std::string, int>& index,
                    int rate, std::string* id) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(where + "not a JSON object");
  }
  if (!j.is_object() || !j.contains("utterance_id") || !j["utterance_id"].is_string())
    throw std::runtime_error(where + "no \"utterance_id\" string (expected {\"utterance_id\", \"phones\"})");
  *id = j["utterance_id"].get<std::string>();
  if (!j.contains("phones"))
    throw std::runtime_error(where + "no \"phones\" array of [start_seconds, end_seconds, label] (utterance '" + *id + "')");
  SpanLine out;
  parse_phones(j["phones"], "phone", where, *id, index, rate, &out.labels, &out.starts);
  if (j.contains("phn_phones")) {
    parse_phones(j["phn_phones"], "phn_phone", where, *id, index, rate, &out.phn_labels, &out.phn_starts);
  } else {
    out.phn_labels = out.labels;
    out.phn_starts = out.starts;
  }
  return out;
}

// The frame f (0..T) whose boundary sample (boundary_sample) is nearest to `sample`.
int32_t nearest_frame(int64_t sample, int32_t T, const data::FeatureOptions& f) {
  const double shift = f.frame_shift_samples();
  const double first = static_cast<double>(boundary_sample(1, f));  // boundary f at first + (f - 1) shift
  const int64_t k = std::llround((static_cast<double>(sample) - first) / shift) + 1;
  return static_cast<int32_t>(std::clamp<int64_t>(k, 0, T));
}

// The .PHN reference in the scoring set: consecutive phones of one scoring class merged.
std::vector<RefPhone> to_scoring(const std::vector<RefPhone>& ref, const model::LabelSet& ls) {
  std::vector<RefPhone> out;
  for (RefPhone p : ref) {
    p.cls = ls.scoring_index.at(p.cls);
    if (!out.empty() && out.back().cls == p.cls) {
      out.back().end = p.end;
      continue;
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace

nlohmann::json score_spans(const ScoreOptions& o) {
  if (!o.json_out.empty()) check_output_file("--json", o.json_out, "metrics.json");
  const data::Split split = data::load_split(o.workdir, o.split);
  const data::WorkdirPhoneSet wps = data::load_workdir_phone_set(o.workdir);
  const model::LabelSet ls = wps.is_timit() ? model::LabelSet::make(39) : model::LabelSet::make(wps.spec, wps.labels);
  const data::FeatureOptions feature_opts = data::load_feature_options(o.workdir);
  std::map<std::string, int> index;  // scoring label name -> index
  for (size_t i = 0; i < ls.scoring_names.size(); ++i) index[ls.scoring_names[i]] = static_cast<int>(i);
  std::map<std::string, SpanLine> spans;
  {
    std::ifstream in(o.spans, std::ios::binary);
    if (!in) throw std::runtime_error(o.spans + ": cannot open the spans file");
    std::map<std::string, size_t> in_split;
    for (size_t i = 0; i < split.utterances.size(); ++i) in_split[split.utterances[i].id] = i;
    std::string text, id;
    for (int64_t lineno = 1; std::getline(in, text); ++lineno) {
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = o.spans + ":" + std::to_string(lineno) + ": ";
      SpanLine s = parse_line(text, where, index, feature_opts.sample_rate, &id);
      if (!in_split.count(id))
        throw std::runtime_error(where + "utterance '" + id + "' is not in split '" + common::to_string(o.split) + "' of " + o.workdir);
      s.line = lineno;
      if (!spans.emplace(id, std::move(s)).second)
        throw std::runtime_error(where + "utterance '" + id + "' again (one line per utterance)");
    }
    if (in.bad()) throw std::runtime_error(o.spans + ": read error");
  }
  AlignMetrics m;
  m.samples.class_names = ls.spec.broad_class_names();
  m.phone_set = ls.spec.name;
  int64_t differs = 0;  // utterances whose .PHN phones are not their frame runs' (no sample-accurate score)
  for (const data::Utterance& u : split.utterances) {
    const auto it = spans.find(u.id);
    if (it == spans.end())
      throw std::runtime_error(o.spans + ": no line for utterance '" + u.id + "' of split '" + common::to_string(o.split) + "' (" +
                               std::to_string(spans.size()) + " of " + std::to_string(split.utterances.size()) + " given)");
    const SpanLine& s = it->second;
    const std::string where = o.spans + ":" + std::to_string(s.line) + ": utterance '" + u.id + "': ";
    const std::vector<std::pair<int, int32_t>> runs = scoring_runs(u, ls);
    if (s.labels.size() != runs.size())
      throw std::runtime_error(where + std::to_string(s.labels.size()) + " phones, its reference (the runs of its frame labels) has " +
                               std::to_string(runs.size()));
    for (size_t i = 0; i < runs.size(); ++i)
      if (s.labels[i] != runs[i].first)
        throw std::runtime_error(where + "phone " + std::to_string(i) + " is '" + ls.scoring_names[s.labels[i]] +
                                 "', the reference's is '" + ls.scoring_names[runs[i].first] + "'");
    ++m.utterances;
    std::vector<int32_t> ref_ends, hyp_ends;
    int32_t t = 0;
    for (size_t i = 0; i + 1 < runs.size(); ++i) {
      ref_ends.push_back(t += runs[i].second);
      hyp_ends.push_back(nearest_frame(s.starts[i + 1], u.num_frames, feature_opts));
    }
    m.add(ref_ends, hyp_ends, feature_opts.frame_shift_ms);
    std::vector<RefPhone> phn;
    int rate = 0;
    const std::string why = sample_reference(u, ls, feature_opts, &phn, &rate);
    if (!why.empty()) {
      ++m.without_phn;
      continue;
    }
    phn = to_scoring(phn, ls);
    bool same = phn.size() == s.phn_labels.size();
    for (size_t i = 0; same && i < phn.size(); ++i) same = phn[i].cls == s.phn_labels[i];
    if (!same) {
      ++differs;
      continue;
    }
    std::vector<int64_t> ref, hyp;
    std::vector<int> cls;
    std::vector<std::string> names;
    for (size_t i = 0; i + 1 < phn.size(); ++i) {
      ref.push_back(phn[i + 1].start);
      hyp.push_back(s.phn_starts[i + 1]);
      cls.push_back(ls.spec.broad_class(ls.scoring_names[phn[i + 1].cls]));
    }
    for (const RefPhone& p : phn) names.push_back(ls.scoring_names[p.cls]);
    m.add_samples(ref, rate, hyp, feature_opts.sample_rate, cls, names);
  }
  nlohmann::json j = m.to_json();
  j.erase("confidence");  // spans carry no confidences
  j.erase("seconds");
  j["samples"]["sequence_differs"] = differs;
  j["spans"] = o.spans;
  j["split"] = common::to_string(o.split);
  std::string table = m.table();
  table = table.substr(0, table.find(m.confidence.table()));
  table = table.substr(table.find('\n') + 1);  // the header line says alignments and seconds: replaced below
  std::printf("score --spans %s on %s: forced alignment (%lld utterances)\n%s", o.spans.c_str(), common::to_string(o.split),
              static_cast<long long>(m.utterances), table.c_str());
  if (differs > 0)
    std::printf("  (%lld utterance(s) whose .PHN phones differ from their spans' (\"phn_phones\", else \"phones\"): not in the sample-accurate rows)\n",
                static_cast<long long>(differs));
  std::fflush(stdout);
  if (!o.json_out.empty()) write_file_atomic(o.json_out, j.dump(2) + "\n");
  return j;
}

}  // namespace timitseg::eval
