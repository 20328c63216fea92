// Evaluation and decoding with a checkpoint (self-contained: feature options,
// CMVN and the label set come from the checkpoint).
#include "eval/infer.h"

#include "eval/formats.h"
#include "options/device_choice.h"
#include "options/options.h"
#include "settings/limits.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <unistd.h>

#include "common/atomic_file.h"
#include "common/interrupt.h"
#include "common/files.h"
#include "common/walk.h"
#include "data/features.h"
#include "common/safetensors.h"
#include "eval/align_metrics.h"
#include "eval/boundary_shifts.h"
#include "eval/io.h"
#include "eval/metrics.h"
#include "model/feature_check.h"
#include "model/long_input.h"
#include "model/make_executor.h"

namespace fs = std::filesystem;

namespace timitseg::eval {

namespace {

std::string safe_name(std::string id) {
  for (char& c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.')) c = '_';
  return id;
}

// The end of the one-line error of --device cuda without a GPU (evaluate, decode).
const char* const kNoGpuHint = "; run on the CPU with --device cpu, or --device auto (the GPU when one is present)";

}  // namespace

// The executor for evaluate/decode: device from --device ("" = auto: the GPU
// when one is present; an explicit cuda without one fails with one line); the
// CRF backend from --crf-backend, else cuda on the GPU and the checkpoint's
// crf.backend on the CPU (cpu when that was cuda).
// The phone bonus: --phone-bonus, else the checkpoint's crf.phone_bonus; the
// decoding: --decode, else the checkpoint's crf.decode.
std::unique_ptr<model::Executor> make_inference_executor(const model::ModelState& s, config::DeviceSetting device_opt,
                                                         const std::optional<crf::BackendKind>& backend_opt,
                                                         int threads,
                                                  const std::optional<double>& phone_bonus,
                                                  const std::optional<config::DecodeMode>& decode_opt,
                                                  int64_t centre_frames) {
  // train.rnn_algo / crf.backend `auto` of the checkpoint resolve for the device used here (options/device_choice.h)
  const options::DeviceChoice choice =
      options::resolve_choices(s.config, /*log=*/false, device_opt, kNoGpuHint);
  model::ExecutorOptions executor_opts = options::inference_executor_options(s.config, choice, threads);  // options/options.h
  if (phone_bonus) executor_opts.phone_bonus = *phone_bonus;
  if (decode_opt) executor_opts.decode = *decode_opt;
  if (backend_opt) executor_opts.crf_backend = *backend_opt;
  executor_opts.centre_frames = centre_frames;
  std::unique_ptr<model::Executor> exec = model::make_executor(choice.device, s.dims, executor_opts);
  exec->set_state(s.params, s.optimizer);
  return exec;
}

namespace {

void check_phone_bonus(const std::optional<double>& bonus) {
  if (bonus && !limits::kPhoneBonus.contains(*bonus))
    throw std::invalid_argument("--phone-bonus must be in " + limits::to_string(limits::kPhoneBonus) +
                                " (log-score per label change), got " +
                                config::format_double(*bonus));
}

void check_threads(int threads) {
  if (!limits::kThreads.contains(threads))
    throw std::invalid_argument("--threads must be in " + limits::to_string(limits::kThreads) + " (0 = all cores), got " +
                                std::to_string(threads));
}

// --dump-scores DIR: each utterance's features, scores and decoded segments
// in DIR/ID.safetensors.
UtteranceHook dump_scores_hook(const std::string& dir, const model::ModelState& state) {
  const model::ModelState* model = &state;  // outlives the hook (the caller's evaluation)
  return [dir, model](const data::Utterance& u, const model::Batch& batch, int row, const std::vector<float>* all_scores,
                      const std::vector<crf::Segment>& segs) {
    const model::ModelState& s = *model;
    const int64_t L = batch.input.lengths[row], T = batch.input.T, D = s.dims.input_dim, C = s.dims.num_classes;
    std::vector<float> feats(batch.input.features.begin() + row * T * D,
                             batch.input.features.begin() + (row * T + L) * D);
    std::vector<float> scores(static_cast<size_t>(L * C));
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) scores[t * C + c] = (*all_scores)[(row * T + t) * C + c];
    std::vector<int32_t> seg;
    for (const crf::Segment& x : segs) seg.insert(seg.end(), {x.start, x.duration, x.label});
    st::File f;
    f.tensors["features"] = st::Tensor::from<float>({L, D}, feats);
    f.tensors["scores"] = st::Tensor::from<float>({L, C}, scores);
    f.tensors["segments"] = st::Tensor::from<int32_t>({static_cast<int64_t>(segs.size()), 3}, seg);
    f.metadata["utterance_id"] = u.id;
    f.metadata["segments_columns"] = "start_frame,duration_frames,label";
    f.metadata["label_names"] = nlohmann::json(s.labels.names).dump();
    st::save((fs::path(dir) / (safe_name(u.id) + ".safetensors")).string(), f);
  };
}

// No output of evaluate is one of its inputs (the checkpoint, --shifts, the WORKDIR and its
// files), nor another of its outputs, whatever links lie between the names: one line before
// any decoding (common/walk.h refuse_output).
void refuse_inputs_as_outputs(const EvaluateOptions& o, const std::string& workdir) {
  InputSet inputs;
  inputs.add(o.checkpoint);
  if (!o.shifts.empty()) inputs.add(o.shifts);
  inputs.add(workdir);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(workdir, ec)) inputs.add(e.path());
  std::vector<std::pair<std::string, std::string>> outputs = {
      {"--json", o.json_out}, {"--dump-predictions", o.dump_predictions}, {"--fit-shifts", o.fit_shifts},
      {"--dump-scores", o.dump_scores_dir}};
  outputs.insert(outputs.end(), o.more_outputs.begin(), o.more_outputs.end());
  std::map<std::string, std::string> earlier;  // the outputs checked so far, by canonical path: flag
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    refuse_output(flag, path, inputs);
    const std::string c = fs::weakly_canonical(fs::absolute(path), ec).string();
    const auto [it, fresh] = earlier.emplace(c, flag);
    if (!fresh)
      throw std::invalid_argument(flag + " " + path + ": is also the path of " + it->second + "; give another path");
  }
}

// A metric of an empty split does not exist: n/a on stdout, left out of the JSON (never NaN).
nlohmann::json empty_split(const EvaluateOptions& o, const model::ModelState& s, const std::string& workdir) {
  nlohmann::json j = {{"checkpoint", o.checkpoint}, {"split", common::to_string(o.split)}, {"epoch", s.epoch}, {"utterances", 0}};
  std::printf("evaluate %s on %s (epoch %d)\n%s: split '%s' has no utterances: PER, boundaries, segments, "
              "durations and frame accuracy are n/a\n",
              o.checkpoint.c_str(), common::to_string(o.split), s.epoch, workdir.c_str(), common::to_string(o.split));
  std::fflush(stdout);
  if (!o.fit_shifts.empty())
    spdlog::warn("evaluate --fit-shifts: split '{}' has no utterances: {} not written", common::to_string(o.split),
                 o.fit_shifts);
  if (!o.json_out.empty()) write_file_atomic(o.json_out, j.dump(2) + "\n");
  return j;
}

// The metrics' JSON (with --align's) and their table on stdout (not yet flushed).
nlohmann::json metrics_report(const EvaluateOptions& o, const model::ModelState& s, model::Executor& exec,
                              const std::vector<const data::Utterance*>& utts, const Metrics& metrics,
                              const std::string& workdir, const std::optional<BoundaryShifts>& shifts) {
  nlohmann::json j = metrics.to_json();
  j["checkpoint"] = o.checkpoint;
  j["split"] = common::to_string(o.split);
  j["epoch"] = s.epoch;
  const double bonus = o.phone_bonus.value_or(s.config.crf_phone_bonus);
  j["phone_bonus"] = bonus;
  const config::DecodeMode decoding = o.decode.value_or(s.config.crf_decode);
  j["decode"] = to_string(decoding);
  const bool posterior = decoding == config::DecodeMode::posterior;
  const std::string bonus_note = (posterior ? std::string(", posterior decoding") : std::string()) +
                                 (bonus == 0.0 || posterior ? "" : ", phone bonus " + config::format_double(bonus));
  std::string align_table;
  if (o.align) {  // forced alignment of the reference phone sequences (eval/align.h)
    const std::optional<SilenceEdgeOptions> edges =
        resolve_silence_edges(o.silence_edges, o.silence_edge_options, s.transcript_trained, "evaluate --align");
    const crf::AlignBoundaries boundaries = resolve_boundaries(o.boundaries, "evaluate --align");
    const AlignMetrics am = align_utterances(exec, utts, s, o.batch_size, shifts ? &*shifts : nullptr, o.shifts,
                                             edges ? &*edges : nullptr, boundaries);
    j["align"] = am.to_json();
    align_table = am.table();
    if (!o.fit_shifts.empty()) {
      BoundaryShifts fit = fit_boundary_shifts(am.samples.from, am.samples.into, am.samples.signed_ms,
                                               s.labels.spec.name, o.shift_min_boundaries, o.shift_context);
      std::set<std::string> speakers;
      for (const data::Utterance* u : utts) speakers.insert(u->speaker);
      fit.fitted_on = {{"checkpoint", o.checkpoint}, {"workdir", workdir}, {"split", common::to_string(o.split)},
                       {"epoch", s.epoch}, {"utterances", utts.size()}, {"speakers", speakers.size()},
                       {"boundaries", am.samples.abs_ms.size()}};
      if (speakers.size() < kShiftMinSpeakers)
        spdlog::warn("evaluate --fit-shifts: fitted from {} speaker(s); a shift may then be one speaker's habit "
                     "(measured: fits from 1-2 speakers lowered test accuracy, from 3 and more raised it; docs/align.md "
                     "\"Calibrating to a labelling convention\")",
                     speakers.size());
      save_boundary_shifts(fit, o.fit_shifts);
      align_table += "  per-phone shifts of " + std::to_string(fit.shift_ms.size()) + " phone(s)" +
                     (o.shift_context == ShiftContext::pair
                          ? " and " + std::to_string(fit.pair_shift_ms.size()) + " phone pair(s)"
                          : std::string()) +
                     " (each from >= " + std::to_string(o.shift_min_boundaries) + " boundaries of this split) written to " +
                     o.fit_shifts + "\n";
      if (fit.shift_ms.empty())
        spdlog::warn("evaluate --fit-shifts: no phone has {} or more boundaries on {}: {} holds no shift",
                     o.shift_min_boundaries, common::to_string(o.split), o.fit_shifts);
      j["align"]["fitted_shifts"] = {{"file", o.fit_shifts}, {"phones", fit.shift_ms.size()},
                                     {"pairs", fit.pair_shift_ms.size()}, {"context", common::to_string(o.shift_context)}};
    }
  }
  std::printf("evaluate %s on %s (epoch %d, %s%s)\n%s%s", o.checkpoint.c_str(), common::to_string(o.split), s.epoch,
              exec.description().c_str(), bonus_note.c_str(), metrics.table().c_str(), align_table.c_str());
  return j;
}

}  // namespace

nlohmann::json evaluate(const EvaluateOptions& o) {
  check_threads(o.threads);
  check_phone_bonus(o.phone_bonus);
  if (o.device == config::DeviceSetting::cuda) model::resolve_device(o.device, kNoGpuHint);  // no GPU: one line before any work
  if (!o.json_out.empty()) check_output_file("--json", o.json_out, "metrics.json");
  if (!o.dump_predictions.empty()) check_output_file("--dump-predictions", o.dump_predictions, "predictions.jsonl");
  if ((!o.fit_shifts.empty() || !o.shifts.empty()) && !o.align)
    throw std::invalid_argument(std::string("evaluate: ") + (o.shifts.empty() ? "--fit-shifts" : "--shifts") + " needs --align");
  if (!o.fit_shifts.empty() && !o.shifts.empty())
    throw std::invalid_argument("evaluate: give --fit-shifts (fit on this split) or --shifts (apply a fit), not both");
  if (!o.fit_shifts.empty()) check_output_file("--fit-shifts", o.fit_shifts, "shifts.json");
  if (o.shift_context != ShiftContext::phone && o.fit_shifts.empty())
    throw std::invalid_argument("evaluate: --shift-context needs --fit-shifts");
  if (o.max_utterances < 0)
    throw std::invalid_argument("--max-utterances must be >= 0 (0 = all), got " + std::to_string(o.max_utterances));
  check_silence_edge_options(o.silence_edge_options);
  if (o.shift_min_boundaries < 1)
    throw std::invalid_argument("--shift-min-boundaries must be >= 1, got " + std::to_string(o.shift_min_boundaries));
  model::set_threads(o.threads);
  model::ModelState s = model::load_checkpoint(o.checkpoint);
  std::optional<BoundaryShifts> shifts;  // --shifts: a bad file is one line before any decoding
  if (!o.shifts.empty()) shifts = load_boundary_shifts(o.shifts, s.labels);
  const std::string workdir = o.workdir.empty() ? s.config.data_workdir : o.workdir;
  if (workdir.empty()) throw std::invalid_argument(o.checkpoint + ": no data.workdir in the checkpoint; pass --workdir");
  data::require_workdir(workdir, "--workdir DIR");  // e.g. moved since the run recorded it
  refuse_inputs_as_outputs(o, workdir);
  model::bind_workdir(s.labels, workdir, o.checkpoint);  // one line when the WORKDIR holds another inventory
  if (o.batch_size < 1) throw std::invalid_argument("--batch-size must be >= 1");
  model::check_workdir_features(s, o.checkpoint, workdir);  // trained on other features: one line, no number
  const data::Split split = data::load_split(workdir, o.split);
  if (split.utterances.empty()) return empty_split(o, s, workdir);
  std::unique_ptr<model::Executor> exec = make_inference_executor(s, o.device, o.backend, o.threads, o.phone_bonus, o.decode);
  std::vector<const data::Utterance*> utts;
  for (const auto& u : split.utterances) utts.push_back(&u);
  s.cmvn = s.cmvn.with_speakers(utts);  // data.cmvn speaker: the statistics of this split's speakers (all of it)
  if (o.max_utterances > 0 && static_cast<size_t>(o.max_utterances) < utts.size()) {
    spdlog::info("evaluate: the first {} of the {} utterances of {} (--max-utterances)", o.max_utterances, utts.size(),
                 common::to_string(o.split));
    utts.resize(static_cast<size_t>(o.max_utterances));
  }
  CreatedFolders made;  // --dump-scores: no folder left behind by a failure before the first write
  if (!o.dump_scores_dir.empty()) made.create(o.dump_scores_dir, "--dump-scores");
  Metrics metrics(s.labels.scoring_names, s.features.frame_shift_ms);  // 20 ms tolerance in the model's frames
  UtteranceHook scores_hook;
  if (!o.dump_scores_dir.empty()) scores_hook = dump_scores_hook(o.dump_scores_dir, s);
  // --dump-predictions: each utterance's 39-phone frame labels, kept by its
  // index in the split (evaluate_utterances visits them sorted by length).
  std::vector<std::string> prediction_lines(o.dump_predictions.empty() ? 0 : utts.size());
  std::map<const data::Utterance*, size_t> index_of;
  for (size_t i = 0; i < utts.size(); ++i) index_of[utts[i]] = i;
  // SIGINT/SIGTERM: stops after the utterance being decoded, saying how far it got; nothing is written
  // (the metrics need the whole split), a --dump-scores folder it made and left empty is removed.
  install_stop_handlers();
  int64_t decoded = 0;
  const UtteranceHook hook = [&](const data::Utterance& u, const model::Batch& batch, int row,
                                 const std::vector<float>* all_scores, const std::vector<crf::Segment>& segs) {
      throw_if_stopped("evaluate", std::to_string(decoded) + " of " + std::to_string(utts.size()) + " utterances of " +
                                       common::to_string(o.split) + " decoded, no metrics printed or written (they need the whole split)");
      ++decoded;
      if (scores_hook) scores_hook(u, batch, row, all_scores, segs);
      if (prediction_lines.empty()) return;
      std::vector<int> pred(static_cast<size_t>(u.num_frames), -1);
      for (const crf::Segment& x : segs)
        for (int t = x.start; t < x.start + x.duration; ++t) pred.at(t) = s.labels.scoring_index.at(x.label);
      const size_t i = index_of.at(&u);
      prediction_lines[i] = prediction_line(static_cast<int64_t>(i), u.id, pred, s.labels.scoring_names);
    };
  std::unique_ptr<Progress> bar;  // on stderr: a bar on a terminal, else a line per 10 % (common/progress.h)
  if (o.progress) bar = std::make_unique<Progress>("evaluate " + std::string(common::to_string(o.split)), static_cast<int64_t>(utts.size()), "utt");
  evaluate_utterances(*exec, utts, s.has_cmvn ? &s.cmvn : nullptr, s.labels, o.batch_size, metrics, hook,
                      !o.dump_scores_dir.empty(), nullptr, bar.get());
  if (bar) bar->finish();
  if (!prediction_lines.empty()) {
    std::string text;
    for (const std::string& line : prediction_lines) text += line + "\n";
    write_file_atomic(o.dump_predictions, text);
  }
  nlohmann::json j = metrics_report(o, s, *exec, utts, metrics, workdir, shifts);
  std::fflush(stdout);
  if (!o.json_out.empty()) write_file_atomic(o.json_out, j.dump(2) + "\n");
  made.keep();
  return j;
}

namespace {

// Decodes one audio file into OUT/STEM.<suffix> of each format (eval/formats.h,
// the writers of align's outputs too). Audio at another rate or with several
// channels is resampled (libsoxr) and down-mixed to the model's rate, saying so
// in one line (eval/pipeline.h); the .PHN is in samples of the file as given
// (its own rate), the TextGrid in seconds.
void decode_one(const std::string& src, const fs::path& stem, const model::ModelState& s, model::Executor& exec,
                const DecodeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  data::Audio original = data::read_audio(src);
  const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool posterior = std::any_of(o.formats.begin(), o.formats.end(), writes_posterior);
  const int64_t model_samples = static_cast<int64_t>(original.samples.size()) * s.features.sample_rate /
                                std::max(1, original.sample_rate);
  const Segmentation out = decode_audio(std::move(original), src, stem.string(), s, exec, posterior, o.threads);
  const auto t1 = std::chrono::steady_clock::now();
  write_outputs(out, o.formats, o.out_dir, stem.string());
  spdlog::debug("decoded {} -> {}.PHN ({} segments)", src, (fs::path(o.out_dir) / stem).string(), out.phones.size());
  if (data::num_frames_for(model_samples, s.features) >= model::kWindowFrames)  // a long recording: where the time went
    spdlog::info("{}: audio read in {:.2f} s, outputs written in {:.2f} s", src, read_s,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
}

}  // namespace

std::string prediction_line(int64_t index, const std::string& utterance_id, const std::vector<int>& pred39,
                            const std::vector<std::string>& scoring_names) {
  nlohmann::json phones = nlohmann::json::array();
  for (int p : pred39) phones.push_back(scoring_names.at(static_cast<size_t>(p)));
  nlohmann::ordered_json j;
  j["index"] = index;
  j["utterance_id"] = utterance_id;
  j["phones"] = std::move(phones);
  return j.dump();
}

nlohmann::json score(const ScoreOptions& o) {
  if (!o.spans.empty()) return score_spans(o);
  if (!o.json_out.empty()) check_output_file("--json", o.json_out, "metrics.json");
  const data::Split split = data::load_split(o.workdir, o.split);
  // the WORKDIR's scoring set: TIMIT's 39, or its own inventory folded
  const data::WorkdirPhoneSet wps = data::load_workdir_phone_set(o.workdir);
  const model::LabelSet ls = wps.is_timit() ? model::LabelSet::make(39) : model::LabelSet::make(wps.spec, wps.labels);
  std::map<std::string, int> idx39;
  for (size_t i = 0; i < ls.scoring_names.size(); ++i) idx39[ls.scoring_names[i]] = static_cast<int>(i);
  std::ifstream in(o.predictions, std::ios::binary);
  if (!in) throw std::runtime_error(o.predictions + ": cannot open the predictions file");
  Metrics metrics(ls.scoring_names, data::load_feature_options(o.workdir).frame_shift_ms);  // 20 ms in WORKDIR's frames
  const size_t U = split.utterances.size();
  std::string line;
  size_t n = 0;  // lines read that hold an utterance
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = o.predictions + ":" + std::to_string(lineno) + ": ";
    if (n >= U)
      throw std::runtime_error(where + "an extra line: split '" + common::to_string(o.split) + "' of " + o.workdir + " has only " +
                               std::to_string(U) + " utterances");
    const data::Utterance& u = split.utterances[n];
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error(where + "not a JSON object");
    }
    if (!j.is_object() || !j.contains("phones") || !j["phones"].is_array())
      throw std::runtime_error(where + "no \"phones\" array (expected {\"index\", \"utterance_id\", \"phones\"})");
    if (!j.contains("index") || !(j["index"].is_number_integer() && j["index"].get<int64_t>() == static_cast<int64_t>(n)))
      throw std::runtime_error(where + "index " + (j.contains("index") ? j["index"].dump() : "missing") + ", expected " + std::to_string(n) +
                               " (one line per utterance, in split order)");
    if (!j.contains("utterance_id") || !j["utterance_id"].is_string())
      throw std::runtime_error(where + "no \"utterance_id\" string");
    if (j["utterance_id"].get<std::string>() != u.id)
      throw std::runtime_error(where + "utterance_id '" + j["utterance_id"].get<std::string>() + "', expected '" +
                               u.id + "' (utterance " + std::to_string(n) + " of split '" + common::to_string(o.split) + "')");
    const nlohmann::json& ph = j["phones"];
    if (ph.size() != static_cast<size_t>(u.num_frames))
      throw std::runtime_error(where + "utterance '" + u.id + "' has " + std::to_string(ph.size()) +
                               " predicted frames, the split has " + std::to_string(u.num_frames));
    std::vector<int> ref(static_cast<size_t>(u.num_frames)), pred(static_cast<size_t>(u.num_frames));
    for (int t = 0; t < u.num_frames; ++t) {
      const int c = ls.class_of_label(u.labels[t]);
      if (c < 0) throw std::runtime_error(o.workdir + ": split '" + common::to_string(o.split) + "', utterance '" + u.id + "': frame " +
                                          std::to_string(t) + " has no 39-phone label");
      ref[t] = ls.scoring_index[c];
      auto it = ph[t].is_string() ? idx39.find(ph[t].get<std::string>()) : idx39.end();
      if (it == idx39.end())
        throw std::runtime_error(where + "utterance '" + u.id + "', frame " + std::to_string(t) + ": " + ph[t].dump() +
                                 " is not one of the " + std::to_string(ls.scoring_names.size()) + " phones");
      pred[t] = it->second;
    }
    metrics.add(ref, pred);
    ++n;
  }
  if (in.bad()) throw std::runtime_error(o.predictions + ": read error");
  if (n < U)
    throw std::runtime_error(o.predictions + ": " + std::to_string(n) + " utterance lines, split '" + common::to_string(o.split) +
                             "' of " + o.workdir + " has " + std::to_string(U) + " (the next expected is '" +
                             split.utterances[n].id + "')");
  nlohmann::json j = metrics.to_json();
  j["predictions"] = o.predictions;
  j["split"] = common::to_string(o.split);
  std::printf("score %s on %s\n%s", o.predictions.c_str(), common::to_string(o.split), metrics.table().c_str());
  std::fflush(stdout);
  if (!o.json_out.empty()) write_file_atomic(o.json_out, j.dump(2) + "\n");
  return j;
}

int decode(const DecodeOptions& o) {
  check_threads(o.threads);
  check_phone_bonus(o.phone_bonus);
  if (o.device == config::DeviceSetting::cuda) model::resolve_device(o.device, kNoGpuHint);  // no GPU: one line before any work
  model::set_threads(o.threads);
  model::ModelState s = model::load_checkpoint(o.checkpoint);
  model::check_checkpoint_features(s, o.checkpoint);  // its own options give its input (model/feature_check.h)
  if (o.inputs.empty()) throw std::invalid_argument("decode: no input files or folders");
  use_file_cmvn(s, "decode");
  check_formats(o.formats);  // no format stops the command before any work
  std::unique_ptr<model::Executor> exec =
      make_inference_executor(s, o.device, o.backend, o.threads, o.phone_bonus, o.decode, o.centre_frames);
  // (audio path, output stem relative to out_dir)
  InputSet protect;  // never written: the inputs, their transcripts, the checkpoint
  protect.add(o.checkpoint);
  std::vector<std::pair<std::string, std::string>> bad;  // inputs that give no audio: failed, the others go on
  const std::vector<std::pair<std::string, fs::path>> jobs = audio_inputs(o.inputs, o.out_dir, &protect, &bad);
  std::map<std::string, std::string> seen;
  for (const auto& [src, stem] : jobs) {
    auto [it, fresh] = seen.emplace(stem.string(), src);
    if (!fresh)
      throw std::invalid_argument("decode: " + src + " and " + it->second + " would both write " + stem.string() +
                                  ".PHN; decode them into different --out folders");
  }
  // an output folder that is an input, would replace one, or cannot be created or written fails before any work
  std::vector<fs::path> stems;
  for (const auto& job : jobs) stems.push_back(job.second);
  CreatedFolders made;
  prepare_out_dir(o.out_dir, stems, protect, &made);
  // Each input on its own: a bad file is reported (one error line naming it)
  // and the others are still decoded; the command fails at the end with a
  // count. Nothing is written for a bad file (all its outputs are written,
  // then renamed, after the whole input was read and decoded). SIGINT/SIGTERM
  // stops between inputs, saying what was decoded and what was not.
  install_stop_handlers();
  int done = 0;
  std::vector<std::string> failed;
  for (const auto& [in, problem] : bad) {
    report_failed_input(in, problem);
    failed.push_back(in);
  }
  const size_t total = jobs.size() + bad.size();
  // before each input, and at the end (a stop during the last one)
  auto check_stop = [&] { throw_if_stopped("decode", stop_text(static_cast<size_t>(done), total, failed.size(), "decoded", o.out_dir)); };
  for (const auto& [src, stem] : jobs) {
    check_stop();
    try {
      decode_one(src, stem, s, *exec, o);
      ++done;
    } catch (const std::exception& e) {
      report_failed_input(src, e.what());
      failed.push_back(src);
    }
  }
  check_stop();
  if (done > 0) made.keep();  // the outputs written stay; a failure of every input leaves no --out folder of ours
  if (!failed.empty())
    throw std::runtime_error("decode: " + std::to_string(failed.size()) + " of " + std::to_string(total) +
                             " input file(s) failed (each named above: " + failed_names(failed) + "); " +
                             std::to_string(done) + " decoded into " + o.out_dir);
  spdlog::info("decoded {} utterance(s) into {}", done, o.out_dir);
  return done;
}

}  // namespace timitseg::eval
