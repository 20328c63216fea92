// `timitseg prepare`: TIMIT tree -> prepared WORKDIR (docs/data.md):
//   train|dev|core-test|test.safetensors, cmvn.safetensors, phones.json,
//   durations.json, manifest.json (written last; SHA-256 of every other file).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/files.h"
#include "common/parallel.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "common/walk.h"
#include "data/corpus.h"
#include "data/corpus_formats.h"
#include "data/dataset.h"
#include "data/phone_set.h"
#include "data/phones.h"
#include "data/prepare_internal.h"
#include "data/prepare_stage.h"
#include "data/timit_lists.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace timitseg::data {

namespace {

using Result = ProcessedUtterance;

// Fingerprint of the corpus: SHA-256 over "relative path, size, mtime" of
// every .WAV/.PHN used. Any added, removed, resized or touched file changes it.
std::string corpus_fingerprint(const std::string& root, const std::vector<CorpusUtterance>& utts) {
  Sha256 h;
  for (const auto& u : utts) {
    for (const std::string& p : {u.wav_path, u.phn_path}) {
      if (p.empty()) continue;
      std::error_code ec;
      const auto size = fs::file_size(p, ec);
      const auto mtime = fs::last_write_time(p, ec).time_since_epoch().count();
      const std::string line = fs::path(p).lexically_relative(root).string() + "\t" + std::to_string(size) + "\t" +
                               std::to_string(static_cast<long long>(mtime)) + "\n";
      h.update(line.data(), line.size());
    }
  }
  return h.hex();
}

Result process(const CorpusUtterance& u, const FeatureOptions& feature_opts) {
  Result r;
  auto err = [&](const std::string& file, const std::string& msg) { r.problems.push_back({file, 0, msg, true}); };
  if (u.wav_path.empty()) {
    err(u.phn_path, "no matching .WAV file");
    return r;
  }
  if (u.phn_path.empty()) {
    err(u.wav_path, "no matching .PHN file");
    return r;
  }
  Audio a;
  try {
    a = read_audio(u.wav_path);
  } catch (const std::exception& e) {
    std::string msg = e.what();  // "PATH: problem"
    if (msg.rfind(u.wav_path + ": ", 0) == 0) msg = msg.substr(u.wav_path.size() + 2);
    err(u.wav_path, msg);
    return r;
  }
  r.num_samples = static_cast<int64_t>(a.samples.size());
  r.seconds = a.sample_rate > 0 ? static_cast<double>(a.samples.size()) / a.sample_rate : 0.0;
  if (!feature_opts.allow_resample) {
    if (a.channels != 1) {
      err(u.wav_path, std::to_string(a.channels) + " channels, expected mono (pass --allow-resample to down-mix it: "
                                                   "the mean of the channels)");
      return r;
    }
    if (a.sample_rate != feature_opts.sample_rate) {
      err(u.wav_path, "sample rate " + std::to_string(a.sample_rate) + " Hz, expected " +
                          std::to_string(feature_opts.sample_rate) + " Hz (pass --allow-resample to resample it)");
      return r;
    }
    if (a.bits != 16) {
      err(u.wav_path, (a.bits ? std::to_string(a.bits) + "-bit" : std::string("non-integer")) +
                          " samples, expected 16-bit PCM (pass --allow-resample to accept it)");
      return r;
    }
  }
  std::string text;
  try {
    text = read_file(u.phn_path);
  } catch (const std::exception&) {
    err(u.phn_path, "cannot read");
    return r;
  }
  auto phones = parse_phn(u.phn_path, text, r.num_samples, &r.problems);
  for (const auto& p : r.problems)
    if (p.error) return r;
  int32_t T = 0;
  try {
    r.features = compute_features(a, feature_opts, &T);
  } catch (const std::exception& e) {
    err(u.wav_path, e.what());
    return r;
  }
  if (T < 1) {
    err(u.wav_path, "too short for one feature frame (" + std::to_string(r.num_samples) + " samples)");
    return r;
  }
  const double scale = static_cast<double>(feature_opts.sample_rate) / a.sample_rate;
  r.labels = frame_labels(phones, T, feature_opts, scale);
  r.ok = true;
  return r;
}

}  // namespace

// A WORKDIR prepare may write into: missing, empty, or one it wrote before
// (manifest.json of format "timitseg prepared TIMIT", or, after an interrupted
// run that removed its manifest, nothing but the files prepare writes and
// their atomic-write temporaries). Anything else is refused, naming the folder,
// so prepare never overwrites files it did not write.
void check_output_folder(const std::string& workdir) {
  const fs::path wd(workdir);
  std::error_code ec;
  if (!fs::exists(wd, ec)) return;
  if (!fs::is_directory(wd, ec))
    throw std::invalid_argument("--out " + workdir + ": exists and is not a folder");
  const fs::path manifest = wd / "manifest.json";
  if (fs::is_regular_file(manifest, ec)) {
    bool ours = false;
    try {
      const nlohmann::json m = nlohmann::json::parse(read_file(manifest.string()));
      ours = m.is_object() && m.value("format", "") == "timitseg prepared TIMIT";
    } catch (const std::exception&) {
    }
    if (ours) return;
    throw std::invalid_argument("--out " + workdir + ": holds a manifest.json that timitseg prepare did not write; "
                                "refusing to overwrite the folder's files (choose a new or empty folder)");
  }
  std::set<std::string> ours = {"cmvn.safetensors", "phones.json", "phone_set.yaml", "durations.json", "manifest.json"};
  for (const auto& s : split_names()) ours.insert(s + ".safetensors");
  for (const auto& e : fs::directory_iterator(wd, ec)) {
    const std::string name = e.path().filename().string();
    // the staging folder of an interrupted prepare (removed by this run)
    if (name.rfind(".staging.tmp.", 0) == 0) continue;
    const size_t tmp = name.find(".tmp.");
    const std::string base = tmp == std::string::npos ? name : name.substr(0, tmp);
    if (!ours.count(base) || !e.is_regular_file(ec))
      throw std::invalid_argument("--out " + workdir + ": folder is not empty and is not a WORKDIR timitseg prepare "
                                  "wrote (no manifest.json; it holds '" + name + "'); refusing to overwrite its files "
                                  "(choose a new or empty folder)");
  }
  if (ec) throw std::runtime_error("--out " + workdir + ": cannot list the folder (" + ec.message() + ")");
}

namespace {

// WORKDIR is never the corpus nor one of its folders, through links too: the
// prepared files would land among the inputs (docs/reliability.md).
void refuse_corpus_folder(const std::string& timit_dir, const std::string& workdir) {
  std::error_code ec;
  if (!fs::is_directory(timit_dir, ec)) return;  // scan_timit names it
  InputSet corpus;  // the folders that hold audio or transcripts (a WORKDIR inside the tree holds neither)
  corpus.add(timit_dir);
  for (const fs::path& rel : walk_files(timit_dir, nullptr)) {
    const std::string ext = to_lower(rel.extension().string());
    if (ext != ".wav" && ext != ".phn") continue;
    for (fs::path d = rel.parent_path(); !d.empty(); d = d.parent_path()) corpus.add(fs::path(timit_dir) / d);
  }
  refuse_output("--out", workdir, corpus, "a folder of the corpus --timit " + timit_dir +
                                              "; the prepared data go into a folder of their own");
}

}  // namespace

bool manifest_matches(const std::string& workdir, const std::string& source, const std::string& fingerprint,
                      const json& opts_json, const json& split_opts) {
  const std::string path = (fs::path(workdir) / "manifest.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_file(path));
    if (m.at("format_version") != kPreparedFormatVersion || m.at("source") != source ||
        m.at("corpus_fingerprint") != fingerprint || m.at("feature_options") != nlohmann::json::parse(opts_json.dump()) ||
        m.at("split_options") != nlohmann::json::parse(split_opts.dump()))
      return false;
    for (auto it = m.at("files").begin(); it != m.at("files").end(); ++it) verified_file(workdir, it.key());
  } catch (const std::exception& e) {
    spdlog::info("{}: cache not reusable ({}), rebuilding", workdir, e.what());
    return false;
  }
  return true;
}

// The summary of an up-to-date WORKDIR, read back from its manifest.json.
void summary_from_manifest(const std::string& workdir, PrepareSummary& sum) {
  remove_stale_temporaries(workdir);  // left by a prepare killed after its last rename
  const nlohmann::json m = nlohmann::json::parse(read_file((fs::path(workdir) / "manifest.json").string()));
  for (const auto& name : split_names()) {
    const auto& s = m.at("splits").at(name);
    sum.splits.push_back({name, s.at("utterances").get<int64_t>(), s.at("frames").get<int64_t>(),
                          s.at("speakers").get<int64_t>(), s.at("seconds").get<double>()});
    if (s.contains("transcript_only")) sum.transcript_only += s.at("transcript_only").get<int64_t>();
  }
  sum.skipped = m.at("skipped").get<int64_t>();
  sum.warnings = m.at("warnings").get<int64_t>();
  if (m.contains("skipped_by_kind")) sum.skipped_by_kind = m.at("skipped_by_kind").get<std::map<std::string, int64_t>>();
  if (m.contains("warnings_by_kind"))
    sum.warnings_by_kind = m.at("warnings_by_kind").get<std::map<std::string, int64_t>>();
  const auto& rule = m.at("split_rule");
  sum.dev_rule = rule.at("dev").at("rule").get<std::string>();
  sum.core_test_rule = rule.at("core-test").at("rule").get<std::string>();
  if (rule.at("dev").contains("speakers"))
    sum.dev_speaker_ids = rule.at("dev").at("speakers").get<std::vector<std::string>>();
}

namespace {

// Features and labels of every utterance: multithreaded, each appended to
// `spill` (a file of the staging folder) as it finishes and dropped, so memory
// holds the threads' utterances in flight and every utterance's metadata, not
// the corpus; the metadata by index (deterministic: the split files read the
// spill back by offset, in index order). An utterance after one whose
// processing threw, or (--strict) after a bad one, is not processed. Only
// utterances after the smallest such index are skipped, so every utterance
// before the first bad one is processed and the error reported does not depend
// on the thread count.
std::vector<SpilledUtterance> process_all(const std::vector<CorpusUtterance>& work, const PrepareOptions& prepare_opts,
                                          int threads, Spill& spill) {
  std::vector<SpilledUtterance> utts(work.size());
  std::mutex spill_mu;
  std::atomic<int64_t> first_stop{std::numeric_limits<int64_t>::max()};
  auto stop_at = [&](int64_t i) {
    int64_t cur = first_stop.load();
    while (i < cur && !first_stop.compare_exchange_weak(cur, i)) {
    }
  };
  if (!prepare_opts.progress) Progress::set_enabled(false);
  Progress bar("prepare", static_cast<int64_t>(work.size()), "utt");
  std::atomic<int64_t> processed{0};
  parallel_for(static_cast<int64_t>(work.size()), threads, [&](int64_t i, int) {
    if (i > first_stop.load()) return;
    try {
      // SIGINT/SIGTERM (common/interrupt.h): stop before the next utterance; nothing is written
      check_prepare_stop(processed.load(), static_cast<int64_t>(work.size()), prepare_opts.workdir);
      Result r = process(work[i], prepare_opts.features);
      SpilledUtterance& u = utts[i];
      u.ok = r.ok;
      u.problems = std::move(r.problems);
      u.num_samples = r.num_samples;
      u.seconds = r.seconds;
      if (r.ok) {
        u.frames = static_cast<int64_t>(r.labels.size());
        u.segments = static_cast<int64_t>(frame_segments(r.labels).size());
        std::lock_guard<std::mutex> lock(spill_mu);
        u.features_at = spill.bytes();
        spill.append(r.features);
        u.labels_at = spill.bytes();
        spill.append(r.labels);
      }
    } catch (...) {
      stop_at(i);
      throw;  // parallel_for rethrows the exception of the smallest failing index
    }
    if (prepare_opts.strict && !utts[i].ok) stop_at(i);
    ++processed;
    bar.advance();
  });
  bar.finish();
  return utts;
}

// The problems of the processed utterances into the summary (warnings,
// skipped utterances by kind); with --strict, throws the first error of the
// first bad utterance in id order (every utterance before it was processed, so
// this does not depend on the thread count).
void collect_problems(const std::vector<CorpusUtterance>& work, const std::vector<SpilledUtterance>& results,
                      const PrepareOptions& prepare_opts, PrepareSummary& sum) {
  // The log agrees with the summary: one [warning] line per counted warning,
  // and the errors of a skipped utterance as [error] lines naming it.
  std::vector<std::string> errors;
  for (size_t i = 0; i < work.size(); ++i) {
    const bool skipped = !results[i].ok && !results[i].problems.empty();
    for (const auto& p : results[i].problems) {
      const std::string line = p.str();
      sum.problems.push_back(line);
      if (p.error) errors.push_back(line);
      else ++sum.warnings, ++sum.warnings_by_kind[problem_kind(p.message)];
      if (prepare_opts.strict) continue;
      if (p.error) spdlog::error("{} ({} skipped)", line, work[i].id());
      else spdlog::warn("{}", line);
    }
    if (skipped) {
      ++sum.skipped;
      // counted by the kind of its first error
      for (const auto& p : results[i].problems)
        if (p.error) {
          ++sum.skipped_by_kind[problem_kind(p.message)];
          break;
        }
    }
  }
  if (prepare_opts.strict && !errors.empty()) throw std::runtime_error(errors.front() + " (--strict: nothing written)");
  for (size_t i = 0; i < work.size(); ++i) sum.audio_seconds += results[i].seconds;
}

// Which utterances form which split, and the rules that chose dev and core-test.
struct SplitPlan {
  std::map<std::string, std::vector<size_t>> members;  // split -> indices into work
  json dev_rule, core_rule;
};

// Own corpora (no TEST speaker on the standard lists): dev is a seeded choice
// of the usable TRAIN speakers, held out of train; core-test stays empty.
SplitPlan plan_splits(const PrepareOptions& prepare_opts, const std::vector<CorpusUtterance>& work,
                      const std::vector<SpilledUtterance>& results, bool std_dev_found, bool std_core_found,
                      PrepareSummary& sum) {
  auto note = [&](const std::string& line) {
    sum.problems.push_back(line);
    ++sum.warnings;
    ++sum.warnings_by_kind["own corpus split"];
    spdlog::warn("{}", line);
  };
  SplitPlan plan;
  plan.dev_rule = {{"rule", "standard list"}, {"list", "50 TIMIT dev speakers (Kaldi conf/dev_spk.list)"}};
  std::set<std::string> dev_from_train;
  if (!std_dev_found) {
    std::set<std::string> train_spk;
    for (size_t i = 0; i < work.size(); ++i)
      if (results[i].ok && work[i].part == SplitName::train) train_spk.insert(work[i].speaker);
    const int m = static_cast<int>(train_spk.size());
    const int n = prepare_opts.dev_speakers > 0 ? prepare_opts.dev_speakers
                                      : std::max(1, static_cast<int>(std::lround(PrepareOptions::kDefaultDevFraction * m)));
    std::vector<std::string> chosen;
    try {
      chosen = choose_dev_speakers({train_spk.begin(), train_spk.end()}, n, prepare_opts.dev_seed);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(prepare_opts.timit_dir + ": no TEST speaker is on the standard dev list, so dev is taken from the "
                               "usable TRAIN speakers, but " + e.what());
    }
    dev_from_train.insert(chosen.begin(), chosen.end());
    const std::string how = prepare_opts.dev_speakers > 0 ? "--dev-speakers " + std::to_string(n)
                                                : "default: 10% of them, at least one";
    note(prepare_opts.timit_dir + ": no speaker of the standard dev list (50 TIMIT speakers) in TEST: dev = " +
         std::to_string(n) + " of the " + std::to_string(m) + " TRAIN speakers (" + how + ", seed " +
         std::to_string(prepare_opts.dev_seed) + "), held out of train");
    sum.dev_rule = "from train";
    sum.dev_speaker_ids = chosen;
    plan.dev_rule = {{"rule", "from train"},
                     {"why", "no speaker of the standard dev list in TEST"},
                     {"speakers", chosen},
                     {"requested", prepare_opts.dev_speakers > 0 ? json(prepare_opts.dev_speakers) : json("default")},
                     {"default_fraction", PrepareOptions::kDefaultDevFraction},
                     {"train_speakers", m},
                     {"seed", prepare_opts.dev_seed},
                     {"method", "sorted usable TRAIN speakers, Fisher-Yates with mt19937_64(seed) "
                                "(j = engine() % (i + 1), last index down), first N, sorted"}};
  }
  plan.core_rule = {{"rule", "standard list"}, {"list", "24 TIMIT core-test speakers (Kaldi conf/test_spk.list)"}};
  if (!std_core_found) {
    note(prepare_opts.timit_dir + ": no speaker of the standard core-test list (24 TIMIT speakers) in TEST: core-test stays "
                        "empty");
    sum.core_test_rule = "empty";
    plan.core_rule = {{"rule", "empty"}, {"why", "no speaker of the standard core-test list in TEST"}};
  }
  for (const auto& s : split_names()) plan.members[s];  // every split exists, possibly empty
  for (size_t i = 0; i < work.size(); ++i)
    if (results[i].ok) {
      if (work[i].part == SplitName::train && dev_from_train.count(work[i].speaker)) plan.members["dev"].push_back(i);
      else
        for (const auto& s : splits_of(work[i])) plan.members[s].push_back(i);
    }
  if (plan.members["train"].empty())
    throw std::runtime_error(prepare_opts.timit_dir + ": no usable TRAIN utterance: CMVN statistics come from the train split");
  return plan;
}


// Every file of the WORKDIR into the staging folder, then renamed into place, manifest.json last.
void write_stage(StagedWorkdir& sw, const std::vector<CorpusUtterance>& work, const std::vector<SpilledUtterance>& utts,
                 Spill& spill, const SplitPlan& plan, const PrepareOptions& prepare_opts, ManifestInfo info, int threads,
                 PrepareSummary& sum, const std::function<double()>& since) {
  const fs::path& stage = sw.stage();
  json split_counts = json::object();
  json durations = json::object();
  spill.open_for_reading();
  // The splits are independent, so with several threads they are built
  // concurrently (each reading the spill); results are merged in split order
  // (identical output for any thread count).
  std::vector<SplitOut> outs(split_names().size());
  parallel_for(static_cast<int64_t>(outs.size()), threads, [&](int64_t i, int) {
    outs[i] = build_split(split_names()[i], plan.members.at(split_names()[i]), work, utts, spill, prepare_opts.features,
                          info.opts_json, stage);
  });
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& split = split_names()[i];
    sw.add(split + ".safetensors", outs[i].file);
    split_counts[split] = outs[i].counts;
    durations[split] = outs[i].durations;
    sum.splits.push_back(outs[i].count);
  }
  spdlog::debug("prepare: split files written and hashed at {:.2f} s", since());
  write_cmvn(plan.members.at("train"), utts, spill, prepare_opts.features.dim(), stage);
  sw.record("cmvn.safetensors");
  spill.remove();  // its space back before the files are renamed into place
  write_phone_maps(stage);
  sw.record("phones.json");
  info.phone_set = write_workdir_phone_set(stage.string(), timit_workdir_phone_set());
  sw.record("phone_set.yaml");
  write_file_atomic((stage / "durations.json").string(), durations.dump(2) + "\n");
  sw.record("durations.json");
  info.split_rule = {{"dev", plan.dev_rule}, {"core-test", plan.core_rule}};
  sw.commit([&](const fs::path& st, const json& files) { write_prepare_manifest(st, info, files, split_counts, sum); });
}

// Everything is written into a staging folder inside WORKDIR first
// (StagedWorkdir, data/prepare_stage.h), the utterances' features and labels
// too (STAGE/.utterances.raw, read back into the split files and removed), so
// a failure (a full disk, kill -9) leaves the previous cache as it was, and no
// WORKDIR this run created. Processes every utterance, collects the problems,
// plans the splits and writes the WORKDIR.
void process_and_write(const std::vector<CorpusUtterance>& work, const PrepareOptions& prepare_opts, const ManifestInfo& info,
                       bool std_dev_found, bool std_core_found, PrepareSummary& sum,
                       const std::function<double()>& since) {
  const int threads = std::min<int>(resolve_threads(prepare_opts.threads), static_cast<int>(work.size()));
  StagedWorkdir sw(prepare_opts.workdir);
  Spill spill;
  spill.open(sw.stage() / ".utterances.raw");
  std::vector<SpilledUtterance> utts;
  sw.run([&] { utts = process_all(work, prepare_opts, threads, spill); });  // a spill error names WORKDIR, not the staging folder
  spdlog::debug("prepare: features of {} utterances done at {:.2f} s ({} threads)", work.size(), since(), threads);
  collect_problems(work, utts, prepare_opts, sum);
  const SplitPlan plan = plan_splits(prepare_opts, work, utts, std_dev_found, std_core_found, sum);
  sw.run([&] { write_stage(sw, work, utts, spill, plan, prepare_opts, info, threads, sum, since); });
}

}  // namespace

bool timit_layout_of_another_phone_set(const PrepareOptions& prepare_opts) {
  const std::string dir = prepare_opts.corpus_dir.empty() ? prepare_opts.timit_dir : prepare_opts.corpus_dir;
  std::string setting = prepare_opts.phone_set;
  std::error_code ec;
  if (setting.empty() && fs::is_regular_file(fs::path(dir) / "phone_set.yaml", ec))
    setting = (fs::path(dir) / "phone_set.yaml").string();
  return !setting.empty() && PhoneSetSpec::from_setting(setting).digest() != PhoneSetSpec::builtin("timit61").digest();
}

// The stages: scan the corpus, reuse an up-to-date WORKDIR, process every
// utterance, collect the problems, plan the splits, write the WORKDIR.
PrepareSummary prepare(const PrepareOptions& requested_opts) {
  if (!requested_opts.corpus_dir.empty()) {
    const bool timit = requested_opts.corpus_format == CorpusFormat::timit ||
                       (!requested_opts.corpus_format && detect_corpus_format(requested_opts.corpus_dir) == CorpusFormat::timit);
    if (!timit) return prepare_corpus(requested_opts);
  }
  if (timit_layout_of_another_phone_set(requested_opts)) {  // as other corpora, through that phone set
    PrepareOptions prepare_opts = requested_opts;
    if (prepare_opts.corpus_dir.empty()) prepare_opts.corpus_dir = prepare_opts.timit_dir;
    prepare_opts.corpus_format = CorpusFormat::timit;
    return prepare_corpus(prepare_opts);
  }
  PrepareOptions prepare_opts = requested_opts;
  if (!prepare_opts.corpus_dir.empty()) prepare_opts.timit_dir = prepare_opts.corpus_dir;
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const FeatureOptions& feature_opts = prepare_opts.features;
  validate(feature_opts);
  PrepareSummary sum;
  std::vector<Problem> scan_problems;
  refuse_corpus_folder(prepare_opts.timit_dir, prepare_opts.workdir);
  check_output_folder(prepare_opts.workdir);
  const std::vector<CorpusUtterance> all = scan_timit(prepare_opts.timit_dir, &scan_problems);
  std::vector<CorpusUtterance> work;
  for (const auto& u : all) {
    if (u.is_sa()) ++sum.sa_excluded;
    else work.push_back(u);
  }
  sum.utterances_found = static_cast<int64_t>(all.size());
  ManifestInfo info;
  info.source = fs::absolute(prepare_opts.timit_dir).lexically_normal().string();
  info.fingerprint = corpus_fingerprint(prepare_opts.timit_dir, work);
  info.fingerprint_rule = "sha256 over 'relative path\\tsize\\tmtime' of every non-SA .WAV/.PHN";
  info.opts_json = feature_options_to_json(feature_opts, /*with_info=*/true);
  if (prepare_opts.dev_speakers < 0) throw std::invalid_argument("--dev-speakers must be >= 1 (0: the default)");
  info.split_opts = {{"dev_speakers", prepare_opts.dev_speakers}, {"dev_seed", prepare_opts.dev_seed}};

  // Own corpora: is any TEST speaker on the standard dev / core-test list?
  std::set<std::string> std_dev_found, std_core_found;
  for (const auto& u : work)
    if (u.part == SplitName::test) {
      if (dev_speakers().count(u.speaker)) std_dev_found.insert(u.speaker);
      if (core_test_speakers().count(u.speaker)) std_core_found.insert(u.speaker);
    }
  if (prepare_opts.dev_speakers > 0 && !std_dev_found.empty())
    throw std::invalid_argument("--dev-speakers " + std::to_string(prepare_opts.dev_speakers) + ": " + prepare_opts.timit_dir + " has " +
                                std::to_string(std_dev_found.size()) +
                                " speakers of the standard dev list in TEST, which form dev; --dev-speakers applies "
                                "only to corpora without them");

  if (!prepare_opts.force && manifest_matches(prepare_opts.workdir, info.source, info.fingerprint, info.opts_json, info.split_opts)) {
    PrepareSummary cached = sum;
    try {  // a summary that does not read (a hand-edited manifest): rebuilt, as a cache that does not match
      summary_from_manifest(prepare_opts.workdir, cached);
      cached.up_to_date = true;
      cached.wall_seconds = since();
      return cached;
    } catch (const std::exception& e) {
      spdlog::info("{}: cache not reusable (the summary of manifest.json: {}), rebuilding", prepare_opts.workdir, e.what());
    }
  }

  for (const auto& p : scan_problems) {
    sum.problems.push_back(p.str());
    spdlog::warn("{}", p.str());
    ++sum.warnings;
    ++sum.warnings_by_kind[problem_kind(p.message)];
  }
  if (work.empty()) throw std::runtime_error(prepare_opts.timit_dir + ": no utterances (other than SA) found");

  process_and_write(work, prepare_opts, info, !std_dev_found.empty(), !std_core_found.empty(), sum, since);
  sum.wall_seconds = since();
  return sum;
}

}  // namespace timitseg::data
