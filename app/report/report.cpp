// The HTML report (see report.h and docs/report.md).
#include "app/report/report.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "app/report/report_sections.h"
#include "app/report/svg.h"
#include "common/atomic_file.h"
#include "common/files.h"
#include "data/features.h"
#include "model/checkpoint.h"
#include "model/executor.h"
#include "model/make_executor.h"
#include "options/options.h"
#include "eval/metrics.h"
#include "model/feature_check.h"
#include "train/train.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace timitseg::app::report {

RunPredictions predictions_from_segments(
    const model::LabelSet& ls, const std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>>& dev,
    const std::string& source) {
  RunPredictions p;
  p.source = source;
  p.scoring_names = ls.scoring_names;
  for (const auto& [u, segs] : dev) {
    UtteranceLabels l;
    l.id = u->id;
    l.ref.resize(static_cast<size_t>(u->num_frames));
    l.pred.assign(static_cast<size_t>(u->num_frames), -1);
    for (int t = 0; t < u->num_frames; ++t) l.ref[t] = ls.scoring_index.at(ls.class_of_label(u->labels.at(t)));
    for (const crf::Segment& s : segs)
      for (int t = s.start; t < s.start + s.duration && t < u->num_frames; ++t) l.pred[t] = ls.scoring_index.at(s.label);
    for (int t = 0; t < u->num_frames; ++t)
      if (l.pred[t] < 0) throw std::logic_error("report: the segments of " + u->id + " do not cover frame " + std::to_string(t));
    p.utterances.push_back(std::move(l));
  }
  std::sort(p.utterances.begin(), p.utterances.end(),
            [](const UtteranceLabels& a, const UtteranceLabels& b) { return a.id < b.id; });
  return p;
}

std::vector<float> log_mel_spectrogram(const data::Utterance& u, const data::FeatureOptions& f, int* bins) {
  data::FeatureOptions o = data::FeatureOptions::defaults_for(data::FeatureType::fbank);
  o.sample_rate = f.sample_rate;
  o.frame_length_ms = f.frame_length_ms;
  o.frame_shift_ms = f.frame_shift_ms;
  o.snip_edges = f.snip_edges;
  o.num_mel_bins = kSpectrogramMelBins;
  o.use_energy = false;
  o.deltas = false;
  if (u.audio_path.empty()) throw std::runtime_error("no audio path in the WORKDIR manifest");
  const data::Audio a = data::to_rate(data::read_audio(u.audio_path), o.sample_rate);
  int32_t T = 0;
  std::vector<float> x = data::compute_features(a, o, &T);
  if (T != u.num_frames)
    throw std::runtime_error(u.audio_path + ": " + std::to_string(T) + " frames, the features have " +
                             std::to_string(u.num_frames) + " (the audio changed since prepare?)");
  *bins = o.dim();
  return x;
}

std::vector<Spectrogram> pick_drawn(const std::vector<const data::Utterance*>& utts, const data::FeatureOptions& f,
                                    int n) {
  std::vector<const data::Utterance*> sorted = utts;
  std::sort(sorted.begin(), sorted.end(), [](const data::Utterance* a, const data::Utterance* b) { return a->id < b->id; });
  std::vector<Spectrogram> out;
  for (int i = 0; i < n && i < static_cast<int>(sorted.size()); ++i) {
    Spectrogram s;
    s.id = sorted[i]->id;
    s.T = sorted[i]->num_frames;
    s.D = sorted[i]->dim;
    s.frame_shift_ms = f.frame_shift_ms;
    s.feature_type = common::to_string(f.type);
    s.audio_path = sorted[i]->audio_path;
    try {
      int bins = 0;
      s.features = log_mel_spectrogram(*sorted[i], f, &bins);
      s.D = bins;
      s.log_mel = true;
    } catch (const std::exception& e) {  // the audio moved or is gone: the model's features instead, saying so
      s.features = sorted[i]->features;
      s.note = e.what();
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool predict_best(const std::string& run_dir, int threads, RunPredictions* out, std::vector<Spectrogram>* drawn,
                  std::string* note, const std::string& workdir_override) {
  const fs::path best = fs::path(run_dir) / "checkpoints" / "best.safetensors";
  std::error_code ec;
  if (!fs::exists(best, ec)) {
    *note = "no checkpoints/best.safetensors (no dev split, or no epoch finished yet)";
    return false;
  }
  model::ModelState s = model::load_checkpoint(best.string());
  const std::string workdir = workdir_override.empty() ? s.config.data_workdir : workdir_override;
  if (workdir.empty()) {
    *note = best.string() + " names no data.workdir (give one with --workdir DIR)";
    return false;
  }
  data::require_workdir(workdir, "--workdir DIR");  // e.g. moved since the run recorded it
  model::check_workdir_features(s, best.string(), workdir);  // trained on other features: one line
  model::bind_workdir(s.labels, workdir, best.string());  // the checkpoint's phone set over the WORKDIR's labels
  data::Split dev = data::load_split(workdir, "dev");
  if (s.config.data_max_dev_utterances > 0 &&
      static_cast<int64_t>(dev.utterances.size()) > s.config.data_max_dev_utterances)
    dev.utterances.resize(static_cast<size_t>(s.config.data_max_dev_utterances));
  if (dev.utterances.empty()) {
    *note = workdir + ": the dev split is empty";
    return false;
  }
  if (dev.utterances[0].dim != s.dims.input_dim)
    throw std::runtime_error(workdir + ": dev features have " + std::to_string(dev.utterances[0].dim) +
                             " dims, " + best.string() + " expects " + std::to_string(s.dims.input_dim));
  options::DeviceChoice cpu;  // the report decodes on the CPU, with the run's host backend (options/options.h)
  cpu.device = model::Device::cpu;
  cpu.rnn_algo = config::RnnAlgo::standard;
  cpu.crf_backend = options::choose_crf_backend(s.config.crf_backend, model::Device::cpu);
  const model::ExecutorOptions executor_opts = options::inference_executor_options(s.config, cpu, model::set_threads(threads));
  std::unique_ptr<model::Executor> exec = model::make_executor(cpu.device, s.dims, executor_opts);
  exec->set_state(s.params, s.optimizer);
  std::vector<const data::Utterance*> utts;
  for (const auto& u : dev.utterances) utts.push_back(&u);
  s.cmvn = s.cmvn.with_speakers(utts);  // data.cmvn speaker: the statistics of the dev speakers
  std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>> segs;
  eval::Metrics unused(s.labels.scoring_names);
  eval::evaluate_utterances(*exec, utts, s.has_cmvn ? &s.cmvn : nullptr, s.labels, 32, unused,
                             [&](const data::Utterance& u, const model::Batch&, int, const std::vector<float>*,
                                 const std::vector<crf::Segment>& sg) { segs.emplace_back(&u, sg); });
  *out = predictions_from_segments(s.labels, segs,
                                   "checkpoints/best.safetensors (epoch " + std::to_string(s.epoch) + "), dev split, " +
                                       std::to_string(utts.size()) + " utterances");
  out->frame_shift_ms = s.features.frame_shift_ms;
  if (drawn && drawn->empty()) *drawn = pick_drawn(utts, s.features);
  return true;
}

namespace {

using namespace sections;

// ---- run folder contents ------------------------------------------------------

std::string run_label(const std::string& run_dir) {
  fs::path p(run_dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string().empty() ? run_dir : p.filename().string();
}

RunFiles read_run(const std::string& run_dir) {
  RunFiles r;
  r.label = run_label(run_dir);
  const fs::path dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::runtime_error(run_dir + ": not a run folder (no such directory)");
  const fs::path metrics = dir / "metrics.jsonl";
  if (fs::exists(metrics, ec)) {
    std::istringstream in(read_file(metrics.string()));
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        throw std::runtime_error(metrics.string() + ":" + std::to_string(n) + ": not a JSON object");
      r.epochs.push_back(std::move(j));
    }
  }
  const fs::path cfg = dir / "config.yaml";
  if (fs::exists(cfg, ec)) {
    r.config_text = read_file(cfg.string());
    try {
      r.config = YAML::Load(r.config_text);
    } catch (const YAML::Exception& e) {
      throw std::runtime_error(cfg.string() + ": not valid YAML: " + e.what());
    }
  }
  const fs::path rj = dir / "run.json";
  if (fs::exists(rj, ec)) {
    r.run_json_text = read_file(rj.string());
    r.run_json = json::parse(r.run_json_text, nullptr, false);
    if (r.run_json.is_discarded()) throw std::runtime_error(rj.string() + ": not valid JSON");
  }
  if (r.epochs.empty() && r.config_text.empty())
    throw std::runtime_error(run_dir + ": not a run folder (neither metrics.jsonl nor config.yaml)");
  return r;
}

const char* kCss =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:16px auto;"
    "max-width:1200px;color:#222;background:#fff;padding:0 12px}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:3px;margin-top:28px}"
    "h3{font-size:15px;margin:4px 0}p{font-size:13px;line-height:1.4}"
    ".grid{display:flex;flex-wrap:wrap;gap:8px}.cell{flex:0 0 auto}"
    "table{border-collapse:collapse;font-size:12px;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 6px;"
    "text-align:left;vertical-align:top}th{background:#f3f3f3}"
    ".swatch{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:middle;border-radius:2px}"
    ".legend-row{font-size:13px;margin:4px 0 8px}svg{background:#fff}svg text{fill:#222}"
    "svg .title{font-weight:600}.na{color:#888}pre{font-size:11px;background:#f7f7f7;padding:6px;"
    "max-width:560px;overflow:auto}details{margin:4px 0;font-size:12px}.env{width:580px}.note{color:#555}";

}  // namespace

std::vector<std::string> differing_parts(const std::vector<std::string>& dirs) {
  std::vector<std::vector<std::string>> parts;
  for (const std::string& d : dirs) {
    std::vector<std::string> p;
    for (const fs::path& c : fs::path(d).lexically_normal())
      if (!c.empty() && c != ".") p.push_back(c.string());
    parts.push_back(p);
  }
  size_t common = 0;  // leading components every path shares (never all of a path's)
  for (;; ++common) {
    bool same = !parts.empty();
    for (const auto& p : parts) same = same && common + 1 < p.size() && p[common] == parts[0][common];
    if (!same) break;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string label;
    for (size_t k = common; k < parts[i].size(); ++k) label += (label.empty() || label == "/" ? "" : "/") + parts[i][k];
    out.push_back(label.empty() ? dirs[i] : label);
  }
  return out;
}

std::string build_html(const ReportInput& in) {
  if (in.runs.empty()) throw std::invalid_argument("report: no run folder given");
  std::vector<RunFiles> runs;
  for (const RunReport& r : in.runs) runs.push_back(read_run(r.run_dir));
  // Duplicate folder names in the legend (compare's seed-S/linear, seed-S/semicrf):
  // name each run by the part of its path that differs from the others'.
  std::set<std::string> labels;
  bool dup = false;
  for (const RunFiles& r : runs) dup |= !labels.insert(r.label).second;
  if (dup) {
    std::vector<std::string> dirs;
    for (const RunReport& r : in.runs) dirs.push_back(r.run_dir);
    const std::vector<std::string> differ = differing_parts(dirs);
    for (size_t i = 0; i < runs.size(); ++i) runs[i].label = differ[i];
  }
  std::vector<Stats> st(runs.size());
  for (size_t i = 0; i < runs.size(); ++i)
    if (in.runs[i].has_predictions) st[i] = stats_of(in.runs[i].predictions, in.scoring_names);
  std::string title = "timitseg report: ";
  for (size_t i = 0; i < runs.size(); ++i) title += (i ? ", " : "") + runs[i].label;
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape(title) +
                  "</title><style>" + kCss + "</style></head><body><h1>" + escape(title) + "</h1>" +
                  "<p>Sections: <a href=\"#runs\">runs</a> · <a href=\"#curves\">training curves</a> · "
                  "<a href=\"#tolerance\">boundary F1 against tolerance</a> · <a href=\"#durations\">durations</a> · "
                  "<a href=\"#confusion\">confusion matrix</a> · <a href=\"#utterances\">decoded utterances</a> · "
                  "<a href=\"#environment\">configuration and environment</a>. How to read it: docs/report.md.</p>";
  h += summary_section(in, runs);
  h += tables_section(in);
  h += curves_section(runs);
  h += tolerance_section(in, runs, st);
  h += durations_section(in, runs, st);
  h += confusion_section(in, runs, st);
  h += utterances_section(in, runs);
  h += environment_section(in, runs);
  h += "</body></html>\n";
  return h;
}

void write_report(const ReportInput& in, const std::string& path) { write_file_atomic(path, build_html(in)); }

}  // namespace timitseg::app::report
