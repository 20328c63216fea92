// `timitseg prepare`: TIMIT tree -> prepared WORKDIR (docs/data.md):
//   train|dev|core-test|test.safetensors, cmvn.safetensors, phones.json,
//   durations.json, manifest.json (written last; SHA-256 of every other file).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/files.h"
#include "common/parallel.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/phones.h"
#include "data/prepare_internal.h"
#include "data/timit_lists.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace timitseg::data {

namespace {

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

struct Result {
  bool ok = false;
  std::vector<Problem> problems;
  std::vector<float> features;  // [T][dim]
  std::vector<int32_t> labels;  // [T]
  int64_t num_samples = 0;
  double seconds = 0.0;
};

Result process(const CorpusUtterance& u, const FeatureOptions& fo) {
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
  if (!fo.allow_resample) {
    if (a.channels != 1) {
      err(u.wav_path, std::to_string(a.channels) + " channels, expected mono (pass --allow-resample to down-mix it: "
                                                   "the mean of the channels)");
      return r;
    }
    if (a.sample_rate != fo.sample_rate) {
      err(u.wav_path, "sample rate " + std::to_string(a.sample_rate) + " Hz, expected " +
                          std::to_string(fo.sample_rate) + " Hz (pass --allow-resample to resample it)");
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
    r.features = compute_features(a, fo, &T);
  } catch (const std::exception& e) {
    err(u.wav_path, e.what());
    return r;
  }
  if (T < 1) {
    err(u.wav_path, "too short for one feature frame (" + std::to_string(r.num_samples) + " samples)");
    return r;
  }
  const double scale = static_cast<double>(fo.sample_rate) / a.sample_rate;
  r.labels = frame_labels(phones, T, fo, scale);
  r.ok = true;
  return r;
}

struct Stats { int64_t count; double mean, median, p95, max; };
Stats stats_of(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  double sum = 0;
  for (auto x : v) sum += static_cast<double>(x);
  Stats s{static_cast<int64_t>(n), sum / n, 0, 0, static_cast<double>(v.back())};
  s.median = (n % 2) ? static_cast<double>(v[n / 2]) : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  const size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(n)));  // nearest rank
  s.p95 = static_cast<double>(v[std::max<size_t>(rank, 1) - 1]);
  return s;
}

// The kind of a problem line, for prepare's summary (counts per kind); the
// message without its numbers and names.
std::string problem_kind(const std::string& m) {
  static const std::vector<std::pair<const char*, const char*>> kinds = {
      {"truncated audio", "truncated audio"},
      {"no audio samples", "no audio samples"},
      {"invisible character", "invisible character"},
      {"channels, expected mono", "not mono"},
      {"sample rate", "wrong sample rate"},
      {"-bit samples", "not 16-bit PCM"},
      {"non-integer samples", "not 16-bit PCM"},
      {"no matching .PHN", "no .PHN"},
      {"no matching .WAV", "no .WAV"},
      {"past the end of the audio", "PHN past the end of the audio"},
      {"overlaps the previous phone", "overlapping phones"},
      {"is not before end", "reversed or empty segment"},
      {"is negative", "negative start"},
      {"unknown phone", "unknown phone"},
      {"expected 'start end phone'", "unreadable PHN line"},
      {"no phones", "no phones"},
      {"only q", "no phones"},
      {"after the last phone", "audio after the last phone"},
      {"gap of", "gap between phones"},
      {"duplicate of", "duplicate file"},
      {"too short for one feature frame", "too short"},
      {"no speaker of the standard", "own corpus split"},
      {"cannot read", "unreadable file"},
  };
  for (const auto& [needle, kind] : kinds)
    if (m.find(needle) != std::string::npos) return kind;
  if (m.find("NIST SPHERE") != std::string::npos || m.find("RIFF") != std::string::npos ||
      m.find("not a NIST") != std::string::npos || m.find("empty file") != std::string::npos)
    return "unreadable audio header";
  return "other";
}

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
  std::set<std::string> ours = {"cmvn.safetensors", "phones.json", "durations.json", "manifest.json"};
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

}  // namespace

PrepareSummary prepare(const PrepareOptions& po) {
  const auto t0 = std::chrono::steady_clock::now();
  const FeatureOptions& fo = po.features;
  validate(fo);
  PrepareSummary sum;
  std::vector<Problem> scan_problems;
  check_output_folder(po.workdir);
  const std::vector<CorpusUtterance> all = scan_timit(po.timit_dir, &scan_problems);
  std::vector<CorpusUtterance> work;
  for (const auto& u : all) {
    if (u.is_sa()) ++sum.sa_excluded;
    else work.push_back(u);
  }
  sum.utterances_found = static_cast<int64_t>(all.size());
  const std::string source = fs::absolute(po.timit_dir).lexically_normal().string();
  const std::string fingerprint = corpus_fingerprint(po.timit_dir, work);
  const json opts_json = feature_options_to_json(fo, /*with_info=*/true);
  if (po.dev_speakers < 0) throw std::invalid_argument("--dev-speakers must be >= 1 (0: the default)");
  const json split_opts = {{"dev_speakers", po.dev_speakers}, {"dev_seed", po.dev_seed}};

  // Own corpora: is any TEST speaker on the standard dev / core-test list?
  std::set<std::string> std_dev_found, std_core_found;
  for (const auto& u : work)
    if (u.part == "test") {
      if (dev_speakers().count(u.speaker)) std_dev_found.insert(u.speaker);
      if (core_test_speakers().count(u.speaker)) std_core_found.insert(u.speaker);
    }
  if (po.dev_speakers > 0 && !std_dev_found.empty())
    throw std::invalid_argument("--dev-speakers " + std::to_string(po.dev_speakers) + ": " + po.timit_dir + " has " +
                                std::to_string(std_dev_found.size()) +
                                " speakers of the standard dev list in TEST, which form dev; --dev-speakers applies "
                                "only to corpora without them");

  if (!po.force && manifest_matches(po.workdir, source, fingerprint, opts_json, split_opts)) {
    sum.up_to_date = true;
    remove_stale_temporaries(po.workdir);  // left by a prepare killed after its last rename
    nlohmann::json m = nlohmann::json::parse(read_file((fs::path(po.workdir) / "manifest.json").string()));
    for (const auto& name : split_names()) {
      const auto& s = m["splits"][name];
      sum.splits.push_back({name, s["utterances"].get<int64_t>(), s["frames"].get<int64_t>(),
                            s["speakers"].get<int64_t>(), s["seconds"].get<double>()});
    }
    sum.skipped = m["skipped"].get<int64_t>();
    sum.warnings = m["warnings"].get<int64_t>();
    if (m.contains("skipped_by_kind")) sum.skipped_by_kind = m["skipped_by_kind"].get<std::map<std::string, int64_t>>();
    if (m.contains("warnings_by_kind"))
      sum.warnings_by_kind = m["warnings_by_kind"].get<std::map<std::string, int64_t>>();
    const auto& rule = m["split_rule"];
    sum.dev_rule = rule["dev"]["rule"].get<std::string>();
    sum.core_test_rule = rule["core-test"]["rule"].get<std::string>();
    if (rule["dev"].contains("speakers")) sum.dev_speaker_ids = rule["dev"]["speakers"].get<std::vector<std::string>>();
    sum.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return sum;
  }

  for (const auto& p : scan_problems) {
    sum.problems.push_back(p.str());
    spdlog::warn("{}", p.str());
    ++sum.warnings;
    ++sum.warnings_by_kind[problem_kind(p.message)];
  }
  if (work.empty()) throw std::runtime_error(po.timit_dir + ": no utterances (other than SA) found");

  // ---- features, labels: multithreaded, results by index (deterministic) ----
  const int threads = std::min<int>(resolve_threads(po.threads), static_cast<int>(work.size()));
  std::vector<Result> results(work.size());
  // An utterance after one whose processing threw, or (--strict) after a bad
  // one, is not processed. Only utterances after the smallest such index are skipped,
  // so every utterance before the first bad one is processed and the error
  // reported does not depend on the thread count.
  std::atomic<int64_t> first_stop{std::numeric_limits<int64_t>::max()};
  auto stop_at = [&](int64_t i) {
    int64_t cur = first_stop.load();
    while (i < cur && !first_stop.compare_exchange_weak(cur, i)) {
    }
  };
  {
    if (!po.progress) Progress::set_enabled(false);
    Progress bar("prepare", static_cast<int64_t>(work.size()), "utt");
    parallel_for(static_cast<int64_t>(work.size()), threads, [&](int64_t i, int) {
      if (i > first_stop.load()) return;
      try {
        results[i] = process(work[i], fo);
      } catch (...) {
        stop_at(i);
        throw;  // parallel_for rethrows the exception of the smallest failing index
      }
      if (po.strict && !results[i].ok) stop_at(i);
      bar.advance();
    });
    bar.finish();
  }
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  spdlog::debug("prepare: features of {} utterances done at {:.2f} s ({} threads)", work.size(), since(), threads);

  std::vector<std::string> errors;
  for (size_t i = 0; i < work.size(); ++i) {
    for (const auto& p : results[i].problems) {
      const std::string line = p.str();
      sum.problems.push_back(line);
      if (p.error) errors.push_back(line);
      else ++sum.warnings, ++sum.warnings_by_kind[problem_kind(p.message)];
      if (!po.strict) spdlog::warn("{}", line);
    }
    if (!results[i].ok && !results[i].problems.empty()) {
      ++sum.skipped;
      // counted by the kind of its first error
      for (const auto& p : results[i].problems)
        if (p.error) {
          ++sum.skipped_by_kind[problem_kind(p.message)];
          break;
        }
      if (!po.strict) spdlog::warn("{}: skipped", work[i].id());
    }
  }
  // --strict: one line, the first error of the first bad utterance in id
  // order (every utterance before it was processed, so this does not depend on
  // the thread count)
  if (po.strict && !errors.empty()) throw std::runtime_error(errors.front() + " (--strict: nothing written)");
  for (size_t i = 0; i < work.size(); ++i) sum.audio_seconds += results[i].seconds;

  // ---- splits ----
  // Own corpora (no TEST speaker on the standard lists): dev is a seeded choice
  // of the usable TRAIN speakers, held out of train; core-test stays empty.
  auto note = [&](const std::string& line) {
    sum.problems.push_back(line);
    ++sum.warnings;
    ++sum.warnings_by_kind["own corpus split"];
    spdlog::warn("{}", line);
  };
  json dev_rule = {{"rule", "standard list"}, {"list", "50 TIMIT dev speakers (Kaldi conf/dev_spk.list)"}};
  std::set<std::string> dev_from_train;
  if (std_dev_found.empty()) {
    std::set<std::string> train_spk;
    for (size_t i = 0; i < work.size(); ++i)
      if (results[i].ok && work[i].part == "train") train_spk.insert(work[i].speaker);
    const int m = static_cast<int>(train_spk.size());
    const int n = po.dev_speakers > 0 ? po.dev_speakers
                                      : std::max(1, static_cast<int>(std::lround(PrepareOptions::kDefaultDevFraction * m)));
    std::vector<std::string> chosen;
    try {
      chosen = choose_dev_speakers({train_spk.begin(), train_spk.end()}, n, po.dev_seed);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(po.timit_dir + ": no TEST speaker is on the standard dev list, so dev is taken from the "
                               "usable TRAIN speakers, but " + e.what());
    }
    dev_from_train.insert(chosen.begin(), chosen.end());
    const std::string how = po.dev_speakers > 0 ? "--dev-speakers " + std::to_string(n)
                                                : "default: 10% of them, at least one";
    note(po.timit_dir + ": no speaker of the standard dev list (50 TIMIT speakers) in TEST: dev = " +
         std::to_string(n) + " of the " + std::to_string(m) + " TRAIN speakers (" + how + ", seed " +
         std::to_string(po.dev_seed) + "), held out of train");
    sum.dev_rule = "from train";
    sum.dev_speaker_ids = chosen;
    dev_rule = {{"rule", "from train"},
                {"why", "no speaker of the standard dev list in TEST"},
                {"speakers", chosen},
                {"requested", po.dev_speakers > 0 ? json(po.dev_speakers) : json("default")},
                {"default_fraction", PrepareOptions::kDefaultDevFraction},
                {"train_speakers", m},
                {"seed", po.dev_seed},
                {"method", "sorted usable TRAIN speakers, Fisher-Yates with mt19937_64(seed) "
                           "(j = engine() % (i + 1), last index down), first N, sorted"}};
  }
  json core_rule = {{"rule", "standard list"}, {"list", "24 TIMIT core-test speakers (Kaldi conf/test_spk.list)"}};
  if (std_core_found.empty()) {
    note(po.timit_dir + ": no speaker of the standard core-test list (24 TIMIT speakers) in TEST: core-test stays "
                        "empty");
    sum.core_test_rule = "empty";
    core_rule = {{"rule", "empty"}, {"why", "no speaker of the standard core-test list in TEST"}};
  }
  const int dim = fo.dim();
  std::map<std::string, std::vector<size_t>> members;
  for (const auto& s : split_names()) members[s];  // every split exists, possibly empty
  for (size_t i = 0; i < work.size(); ++i)
    if (results[i].ok) {
      if (work[i].part == "train" && dev_from_train.count(work[i].speaker)) members["dev"].push_back(i);
      else
        for (const auto& s : splits_of(work[i])) members[s].push_back(i);
    }
  if (members["train"].empty())
    throw std::runtime_error(po.timit_dir + ": no usable TRAIN utterance: CMVN statistics come from the train split");

  fs::create_directories(po.workdir);
  const fs::path wd(po.workdir);
  // Everything is written into a staging folder inside WORKDIR first, so a
  // failure (a full disk, kill -9) leaves the previous cache as it was; the
  // files are then renamed into place, manifest.json last. Staging folders and
  // temporaries of killed runs are removed here.
  remove_stale_temporaries(wd.string());
  const fs::path stage = wd / (".staging.tmp." + std::to_string(::getpid()) + ".0");
  std::error_code ec;
  fs::remove_all(stage, ec);
  fs::create_directory(stage);
  struct StageGuard {
    fs::path dir;
    ~StageGuard() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } stage_guard{stage};
  try {
    const PhoneSet& ps = PhoneSet::timit();
    json files = json::object();
    json split_counts = json::object();
    json durations = json::object();
    auto record = [&](const std::string& name) {
      uint64_t bytes = 0;
      const std::string sha = sha256_file((stage / name).string(), &bytes);
      files[name] = {{"bytes", bytes}, {"sha256", sha}};
    };

    // One split: concatenate, write, hash, count, duration statistics. The splits
    // are independent, so with several threads they are built concurrently;
    // results are merged in split order (identical output for any thread count).
    struct SplitOut {
      json file, counts, durations;
      PrepareSummary::SplitCount count;
    };
    auto build_split = [&](const std::string& split) {
      SplitOut out;
      const auto& idx = members.at(split);
      int64_t F = 0, S = 0;
      std::vector<std::vector<Segment>> segs(idx.size());
      for (size_t k = 0; k < idx.size(); ++k) {
        F += static_cast<int64_t>(results[idx[k]].labels.size());
        segs[k] = frame_segments(results[idx[k]].labels);
        S += static_cast<int64_t>(segs[k].size());
      }
      std::vector<float> feats;
      feats.reserve(static_cast<size_t>(F) * dim);
      std::vector<int32_t> labels, seg_flat;
      labels.reserve(F);
      seg_flat.reserve(S * 3);
      std::vector<int64_t> foff{0}, soff{0}, nsamp;
      json utts = json::array();
      std::set<std::string> speakers;
      double seconds = 0;
      std::map<int, std::map<std::string, std::vector<int64_t>>> durs;  // set -> phone -> durations (frames)
      for (size_t k = 0; k < idx.size(); ++k) {
        const Result& r = results[idx[k]];
        const CorpusUtterance& u = work[idx[k]];
        feats.insert(feats.end(), r.features.begin(), r.features.end());
        labels.insert(labels.end(), r.labels.begin(), r.labels.end());
        foff.push_back(foff.back() + static_cast<int64_t>(r.labels.size()));
        for (const auto& s : segs[k]) seg_flat.insert(seg_flat.end(), {s.start, s.length, s.label});
        soff.push_back(soff.back() + static_cast<int64_t>(segs[k].size()));
        nsamp.push_back(r.num_samples);
        // absolute, so that Utterance::audio_path works from any working directory
        utts.push_back({{"id", u.id()}, {"speaker", u.speaker},
                        {"audio", fs::absolute(u.wav_path).lexically_normal().string()}});
        speakers.insert(u.speaker);
        seconds += r.seconds;
        for (int set : {61, 39}) {
          std::vector<int32_t> mapped(r.labels.size());
          for (size_t t = 0; t < mapped.size(); ++t) mapped[t] = ps.map(r.labels[t], set);
          for (const auto& s : frame_segments(mapped)) durs[set][ps.names(set)[s.label]].push_back(s.length);
        }
      }
      st::File f;
      f.metadata["format_version"] = std::to_string(kPreparedFormatVersion);
      f.metadata["split"] = split;
      f.metadata["feature_options"] = opts_json.dump();
      f.metadata["utterances"] = utts.dump();
      f.metadata["labels"] = "index into phones61 of phones.json (q merged into the preceding phone)";
      f.tensors["features"] = st::Tensor::from<float>({F, dim}, feats);
      f.tensors["labels"] = st::Tensor::from<int32_t>({F}, labels);
      f.tensors["utt_frame_offsets"] = st::Tensor::from<int64_t>({static_cast<int64_t>(foff.size())}, foff);
      f.tensors["num_samples"] = st::Tensor::from<int64_t>({static_cast<int64_t>(nsamp.size())}, nsamp);
      f.tensors["segments"] = st::Tensor::from<int32_t>({S, 3}, seg_flat);
      f.tensors["utt_segment_offsets"] = st::Tensor::from<int64_t>({static_cast<int64_t>(soff.size())}, soff);
      const std::string name = split + ".safetensors";
      st::save((stage / name).string(), f);
      uint64_t bytes = 0;
      const std::string sha = sha256_file((stage / name).string(), &bytes);
      out.file = {{"bytes", bytes}, {"sha256", sha}};
      out.counts = {{"utterances", idx.size()}, {"frames", F}, {"speakers", speakers.size()}, {"seconds", seconds}};
      out.count = PrepareSummary::SplitCount{split, static_cast<int64_t>(idx.size()), F,
                                             static_cast<int64_t>(speakers.size()), seconds};
      std::ostringstream unit;
      unit << "frames of " << fo.frame_shift_ms << " ms (maximal runs of frame labels)";
      json dj = {{"unit", unit.str()}};
      for (int set : {61, 39}) {
        json per = json::object();
        for (const auto& [phone, v] : durs[set]) {
          Stats s = stats_of(v);
          per[phone] = {{"count", s.count}, {"mean", s.mean}, {"median", s.median}, {"p95", s.p95}, {"max", s.max}};
        }
        dj[std::to_string(set)] = per;
      }
      out.durations = dj;
      return out;
    };
    std::vector<SplitOut> outs(split_names().size());
    parallel_for(static_cast<int64_t>(outs.size()), threads,
                 [&](int64_t i, int) { outs[i] = build_split(split_names()[i]); });
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string& split = split_names()[i];
      files[split + ".safetensors"] = outs[i].file;
      split_counts[split] = outs[i].counts;
      durations[split] = outs[i].durations;
      sum.splits.push_back(outs[i].count);
    }

    spdlog::debug("prepare: split files written and hashed at {:.2f} s", since());
    // ---- CMVN from train, float64 accumulation in utterance order ----
    {
      std::vector<double> s1(dim, 0.0), s2(dim, 0.0);
      int64_t n = 0;
      for (size_t i : members["train"]) {
        const auto& x = results[i].features;
        const size_t T = results[i].labels.size();
        for (size_t t = 0; t < T; ++t)
          for (int d = 0; d < dim; ++d) s1[d] += x[t * dim + d];
        n += static_cast<int64_t>(T);
      }
      std::vector<double> mean(dim), var(dim, 0.0);
      for (int d = 0; d < dim; ++d) mean[d] = s1[d] / static_cast<double>(n);
      for (size_t i : members["train"]) {  // two-pass variance (no cancellation)
        const auto& x = results[i].features;
        const size_t T = results[i].labels.size();
        for (size_t t = 0; t < T; ++t)
          for (int d = 0; d < dim; ++d) {
            const double c = x[t * dim + d] - mean[d];
            s2[d] += c * c;
          }
      }
      for (int d = 0; d < dim; ++d) var[d] = s2[d] / static_cast<double>(n);
      st::File f;
      f.metadata["split"] = "train";
      f.metadata["frames"] = std::to_string(n);
      f.metadata["apply"] = "x = (x - mean) / sqrt(max(var, 1e-10))";
      f.tensors["mean"] = st::Tensor::from<double>({dim}, mean);
      f.tensors["var"] = st::Tensor::from<double>({dim}, var);
      f.tensors["frames"] = st::Tensor::from<int64_t>({1}, &n);
      st::save((stage / "cmvn.safetensors").string(), f);
      record("cmvn.safetensors");
    }

    // ---- phone maps, durations ----
    {
      json ph;
      ph["phones61"] = ps.names(61);
      ph["phones48"] = ps.names(48);
      ph["phones39"] = ps.names(39);
      std::vector<int> m48, m39;
      for (int i = 0; i < 61; ++i) { m48.push_back(ps.map(i, 48)); m39.push_back(ps.map(i, 39)); }
      ph["map61to48"] = m48;
      ph["map61to39"] = m39;
      ph["q"] = "q has no 48/39 target (-1 in the maps); its frames take the label of the preceding phone, or of the "
                "following phone when q starts the utterance, so labels never hold q";
      write_file_atomic((stage / "phones.json").string(), ph.dump(2) + "\n");
      record("phones.json");
      write_file_atomic((stage / "durations.json").string(), durations.dump(2) + "\n");
      record("durations.json");
    }

    // ---- manifest last ----
    json m;
    m["format"] = "timitseg prepared TIMIT";
    m["format_version"] = kPreparedFormatVersion;
    m["source"] = source;
    m["corpus_fingerprint"] = fingerprint;
    m["fingerprint_rule"] = "sha256 over 'relative path\\tsize\\tmtime' of every non-SA .WAV/.PHN";
    m["feature_options"] = opts_json;
    m["checksum_algorithm"] = "sha256";
    m["files"] = files;
    m["splits"] = split_counts;
    m["split_options"] = split_opts;
    m["split_rule"] = {{"dev", dev_rule}, {"core-test", core_rule}};
    m["utterances_found"] = sum.utterances_found;
    m["sa_excluded"] = sum.sa_excluded;
    m["skipped"] = sum.skipped;
    m["warnings"] = sum.warnings;
    m["skipped_by_kind"] = sum.skipped_by_kind;
    m["warnings_by_kind"] = sum.warnings_by_kind;
    m["problems"] = sum.problems;
    write_file_atomic((stage / "manifest.json").string(), m.dump(2) + "\n");

    // ---- into place: renames only (no space needed); a half-renamed WORKDIR has
    // no manifest.json, so it never looks valid and the next prepare rebuilds it
    fs::remove(wd / "manifest.json");
    for (auto it = files.begin(); it != files.end(); ++it) fs::rename(stage / it.key(), wd / it.key());
    fs::rename(stage / "manifest.json", wd / "manifest.json");
  } catch (const std::exception& e) {
    // name the destination, not the staging folder
    std::string msg = e.what();
    const std::string from = stage.string(), to = wd.string();
    for (size_t at = msg.find(from); at != std::string::npos; at = msg.find(from, at + to.size()))
      msg.replace(at, from.size(), to);
    throw std::runtime_error(msg);
  }
  sum.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace timitseg::data
