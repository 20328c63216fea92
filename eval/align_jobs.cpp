// The inputs of `timitseg align` (eval/align_jobs.h): jobs from a list file
// or from the files beside the audio, and their parallel reading.
#include "eval/align_jobs.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <stdexcept>

#include "common/files.h"
#include "common/parallel.h"
#include "data/corpus.h"
#include "data/phones.h"
#include "model/long_input.h"

namespace fs = std::filesystem;

namespace timitseg::eval {

namespace {

// FILE beside AUDIO with extension EXT (upper or lower case), or "".
std::string sibling(const std::string& audio, const std::string& ext_upper) {
  for (const std::string& ext : {ext_upper, data::to_lower(ext_upper)}) {
    const fs::path p = fs::path(audio).replace_extension(ext);
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// One job read (its transcript, then its audio through the pipeline).
AlignInput read_job(const AlignJob& job, const model::ModelState& s, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  AlignInput r = align_input(job.audio, job.stem.string(), job.script(), s, threads);
  if (r.in.utt.num_frames > model::kWindowFrames)  // a long recording: where the time goes
    spdlog::info("{}: audio and transcript read in {:.2f} s, {} frames of features in {:.2f} s", job.audio,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - r.in.features_s,
                 r.in.utt.num_frames, r.in.features_s);
  return r;
}

// The reader of one list line's transcript (source: "LIST:LINE"): its phones
// (--phones), its words through the dictionary (--words), or the error of an
// empty line (one failed input, docs/align.md, not the whole list).
std::function<data::Transcript()> list_script(const data::ListEntry& e, const std::string& source, bool phones,
                                              const std::string& list_path,
                                              const std::shared_ptr<data::Dictionary>& dict, const data::WordOptions& wo) {
  if (e.tokens.empty())
    return [source, audio = e.audio]() -> data::Transcript {
      throw data::TranscriptError(source + ": empty transcript for '" + audio + "' (expected 'AUDIO tok tok ...')");
    };
  if (phones)
    return [e, source] {
      data::Transcript t;
      t.source = source;
      t.phones = e.tokens;
      return t;
    };
  return [e, list_path, dict, wo] {
    std::vector<data::Word> words;
    for (const std::string& w : e.tokens) words.push_back(data::Word{data::to_lower(w), e.line});
    return data::words_to_phones(words, *dict, list_path, wo);
  };
}

// The jobs of --phones FILE or --words FILE, one per line (with --wav-scp:
// the line starts with an utterance id, its audio is in wav.scp).
std::vector<AlignJob> list_jobs(const AlignOptions& o, const std::shared_ptr<data::Dictionary>& dict,
                                InputSet& protect) {
  std::vector<AlignJob> jobs;
  const bool phones = !o.phones_file.empty();
  const std::string list_path = phones ? o.phones_file : o.words_file;
  const std::vector<data::ListEntry> list = data::parse_list(list_path, read_file(list_path));
  protect.add(list_path);
  std::map<std::string, std::string> scp;
  if (!o.wav_scp.empty()) {
    scp = data::read_wav_scp(o.wav_scp);
    protect.add(o.wav_scp);
  }
  for (const data::ListEntry& e : list) {
    const std::string source = list_path + ":" + std::to_string(e.line);
    AlignJob j{e.audio, fs::path(e.audio).filename().replace_extension(), nullptr};
    if (!o.wav_scp.empty()) {  // Kaldi: the line starts with an utterance id, its audio is in wav.scp
      const auto it = scp.find(e.audio);
      j.stem = e.audio;
      if (it == scp.end()) {
        j.script = [source, id = e.audio, scp_path = o.wav_scp]() -> data::Transcript {
          throw data::TranscriptError(source + ": utterance '" + id + "' is not in --wav-scp " + scp_path);
        };
        jobs.push_back(std::move(j));
        continue;
      }
      j.audio = it->second;
    }
    try {  // the audio and the files beside it (its .PHN, ...); a missing one is reported when it is read
      audio_inputs({j.audio}, "", &protect);
    } catch (const std::exception&) {
    }
    j.script = list_script(e, source, phones, list_path, dict, o.words);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// The file beside each audio (--transcript: config/config_enums.h's words, read by app/).
using Beside = config::TranscriptSource;

// The reader of the transcript beside `audio`: its .PHN, or with a
// dictionary its .WRD (then .TXT) words; m: --transcript, auto resolved.
std::function<data::Transcript()> beside_script(const std::string& audio, Beside m,
                                                const std::shared_ptr<data::Dictionary>& dict,
                                                const data::WordOptions& wo) {
  return [audio, m, dict, wo]() -> data::Transcript {
    if (m == Beside::phn) {
      const std::string phn = sibling(audio, ".PHN");
      if (phn.empty()) throw data::TranscriptError(audio + ": no .PHN beside it (or use --phones/--words/--dict)");
      data::Transcript t;
      t.source = phn;
      t.phones = data::parse_phn_phones(phn, read_file(phn));
      return t;
    }
    std::string path = m == Beside::txt ? "" : sibling(audio, ".WRD");
    bool wrd = !path.empty();
    if (path.empty() && m != Beside::wrd) path = sibling(audio, ".TXT");
    if (path.empty())
      throw data::TranscriptError(audio + ": no " +
                                  (m == Beside::wrd ? ".WRD" : m == Beside::txt ? ".TXT" : ".WRD or .TXT") +
                                  " beside it");
    const std::string text = read_file(path);
    return data::words_to_phones(wrd ? data::parse_wrd(path, text) : data::parse_txt(path, text), *dict, path, wo);
  };
}

}  // namespace

std::vector<AlignJob> collect_jobs(const AlignOptions& o, const std::shared_ptr<data::Dictionary>& dict,
                                   InputSet& protect, std::vector<std::pair<std::string, std::string>>& bad) {
  if (!o.phones_file.empty() || !o.words_file.empty()) return list_jobs(o, dict, protect);
  const Beside mode = o.transcript;
  const Beside m = mode == Beside::automatic ? (dict ? Beside::automatic : Beside::phn) : mode;  // auto: words
  std::vector<AlignJob> jobs;
  for (const auto& [audio, stem] : audio_inputs(o.inputs, o.out_dir, &protect, &bad))
    jobs.push_back({audio, stem, beside_script(audio, m, dict, o.words)});
  return jobs;
}

std::vector<std::function<data::Transcript()>> job_scripts(const std::vector<AlignJob>& jobs) {
  std::vector<std::function<data::Transcript()>> scripts;
  for (const AlignJob& j : jobs) scripts.push_back(j.script);
  return scripts;
}

std::vector<fs::path> distinct_stems(const std::vector<AlignJob>& jobs) {
  std::map<std::string, std::string> seen;
  std::vector<fs::path> stems;
  for (const AlignJob& j : jobs) {
    auto [it, fresh] = seen.emplace(j.stem.string(), j.audio);
    if (!fresh)
      throw std::invalid_argument("align: " + j.audio + " and " + it->second + " would both write " + j.stem.string() +
                                  ".PHN; align them into different --out folders");
    stems.push_back(j.stem);
  }
  return stems;
}

void read_jobs(const std::vector<AlignJob>& jobs, size_t at, const model::ModelState& s, int threads,
               std::vector<AlignInput>& ready, std::vector<std::string>& error, std::vector<char>& names_file) {
  parallel_for(static_cast<int64_t>(ready.size()), threads, [&](int64_t i, int) {
    try {
      ready[i] = read_job(jobs[at + i], s, threads);
    } catch (const data::TranscriptError& e) {
      error[i] = e.what();
      names_file[i] = 1;
    } catch (const std::exception& e) {
      error[i] = e.what();
      if (error[i].empty()) error[i] = "unknown error";
    }
  });
}

}  // namespace timitseg::eval
