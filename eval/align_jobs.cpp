// The inputs of `timitseg align` (eval/align_jobs.h): jobs from a list file
// or from the files beside the audio, and their parallel reading.
#include "eval/align_jobs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include "common/files.h"
#include "common/parallel.h"
#include "data/corpus.h"
#include "data/corpus_formats.h"
#include "data/phones.h"
#include "eval/io.h"
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
AlignInput read_job(const AlignJob& job, const model::ModelState& s, int threads, bool keep_samples) {
  const auto t0 = std::chrono::steady_clock::now();
  AlignInput r = align_input(job.audio, job.stem.string(), job.script(), s, threads, keep_samples);
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
                                              const std::shared_ptr<data::Dictionary>& dict, const data::WordOptions& word_opts) {
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
  return [e, source, dict, word_opts] {  // every message names the list's file and line (the words' line left 0)
    const std::vector<data::Word> words = data::words_of_tokens(e.tokens, 0);
    if (words.empty()) throw data::TranscriptError(source + ": no words for '" + e.audio + "' (only punctuation)");
    return data::words_to_phones(words, *dict, source, word_opts);
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
    j.script = list_script(e, source, phones, dict, o.words);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// The file beside each audio (--transcript: config/config_enums.h's words, read by app/).
using Beside = TranscriptSource;

// The labels of intervals read by a corpus parser (data/corpus_formats.h), or its first error.
std::vector<std::string> interval_labels(const std::vector<data::LabelInterval>& iv,
                                         const std::vector<data::Problem>& problems) {
  for (const data::Problem& p : problems)
    if (p.error) throw data::TranscriptError(p.str());
  std::vector<std::string> out;
  for (const data::LabelInterval& i : iv) out.push_back(i.label);
  return out;
}

// The phones beside `audio`: its .PHN; with `others` (--transcript auto) else
// its .TextGrid's tier "phones", Buckeye's .phones or a .lab of "START END
// LABEL" lines (seconds), as prepare --corpus reads them; an empty label is
// the silence (`silence`, "" = TIMIT's h#).
data::Transcript beside_phones(const std::string& audio, bool others, const std::string& silence) {
  data::Transcript t;
  std::vector<data::Problem> problems;
  std::vector<std::string> labels;
  if (const std::string phn = sibling(audio, ".PHN"); !phn.empty()) {
    t.source = phn;
    t.phones = data::parse_phn_phones(phn, read_file(phn));
    return t;
  } else if (!others) {
    throw data::TranscriptError(audio + ": no .PHN beside it (or use --phones/--words/--dict)");
  } else if (const std::string tg = sibling(audio, ".TextGrid"); !tg.empty()) {
    t.source = tg;
    labels = interval_labels(data::parse_textgrid(tg, read_file(tg), "phones", &problems), problems);
  } else if (const std::string bp = sibling(audio, ".phones"); !bp.empty()) {
    t.source = bp;
    labels = interval_labels(data::parse_buckeye_phones(bp, read_file(bp), &problems), problems);
  } else if (const std::string lab = sibling(audio, ".lab"); !lab.empty()) {
    t.source = lab;
    labels = interval_labels(data::parse_seconds_labels(lab, read_file(lab), &problems), problems);
  } else {
    throw data::TranscriptError(audio + ": no .PHN, .TextGrid, .phones or .lab beside it (or use --phones/--words)");
  }
  for (const std::string& l : labels) t.phones.push_back(l.empty() ? (silence.empty() ? "h#" : silence) : l);
  if (t.phones.empty()) throw data::TranscriptError(t.source + ": empty transcript (no phones)");
  return t;
}

// The words of interval labels: empty ones (silence) and Buckeye's non-words
// ({B_TRANS}, <SIL>, <IVER> ...) left out, punctuation stripped.
std::vector<data::Word> interval_words(const std::vector<std::string>& labels) {
  std::vector<std::string> tokens;
  for (const std::string& l : labels)
    if (!l.empty() && l[0] != '{' && l[0] != '<') tokens.push_back(l);
  return data::words_of_tokens(tokens, 0);
}

// The words beside `audio` (--transcript wrd, txt or auto): its .WRD, else its
// .TXT; with auto else its .TextGrid's tier "words", Buckeye's .words or a
// .lab (MFA's transcript: the text's words, or the labels of "START END
// LABEL" lines).
std::pair<std::vector<data::Word>, std::string> beside_words(const std::string& audio, TranscriptSource m) {
  if (m != Beside::txt)
    if (const std::string wrd = sibling(audio, ".WRD"); !wrd.empty()) return {data::parse_wrd(wrd, read_file(wrd)), wrd};
  if (m != Beside::wrd)
    if (const std::string txt = sibling(audio, ".TXT"); !txt.empty()) return {data::parse_txt(txt, read_file(txt)), txt};
  if (m != Beside::automatic)
    throw data::TranscriptError(audio + ": no " + (m == Beside::wrd ? ".WRD" : ".TXT") + " beside it");
  std::vector<data::Problem> problems;
  std::pair<std::vector<data::Word>, std::string> out;
  if (const std::string tg = sibling(audio, ".TextGrid"); !tg.empty()) {
    out = {interval_words(interval_labels(data::parse_textgrid(tg, read_file(tg), "words", &problems), problems)), tg};
  } else if (const std::string bw = sibling(audio, ".words"); !bw.empty()) {
    out = {interval_words(interval_labels(data::parse_buckeye_phones(bw, read_file(bw), &problems), problems)), bw};
  } else if (const std::string lab = sibling(audio, ".lab"); !lab.empty()) {
    const std::string text = read_file(lab);
    const std::vector<data::LabelInterval> iv = data::parse_seconds_labels(lab, text, &problems);
    const bool timed = !iv.empty() && std::none_of(problems.begin(), problems.end(), [](const data::Problem& p) {
      return p.error;
    });
    out = {timed ? interval_words(interval_labels(iv, {})) : data::parse_txt(lab, text), lab};
  } else {
    throw data::TranscriptError(audio + ": no .WRD, .TXT, .TextGrid, .words or .lab beside it");
  }
  if (out.first.empty()) throw data::TranscriptError(out.second + ": empty transcript (no words)");
  return out;
}

// The reader of the transcript beside `audio`: its phones (no dictionary, or
// --transcript phn), else its words through the dictionary.
std::function<data::Transcript()> beside_script(const std::string& audio, TranscriptSource m,
                                                const std::shared_ptr<data::Dictionary>& dict,
                                                const data::WordOptions& word_opts) {
  return [audio, m, dict, word_opts]() -> data::Transcript {
    if (m == TranscriptSource::phn || !dict)
      return beside_phones(audio, m == TranscriptSource::automatic, word_opts.silence);
    const auto [words, path] = beside_words(audio, m);
    return data::words_to_phones(words, *dict, path, word_opts);
  };
}

}  // namespace

std::vector<AlignJob> collect_jobs(const AlignOptions& o, const std::shared_ptr<data::Dictionary>& dict,
                                   InputSet& protect, std::vector<std::pair<std::string, std::string>>& bad) {
  if (!o.phones_file.empty() || !o.words_file.empty()) return list_jobs(o, dict, protect);
  std::vector<AlignJob> jobs;  // --transcript auto: words with a dictionary, else phones
  for (const auto& [audio, stem] : audio_inputs(o.inputs, o.out_dir, &protect, &bad))
    jobs.push_back({audio, stem, beside_script(audio, o.transcript, dict, o.words)});
  return jobs;
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
               std::vector<AlignInput>& ready, std::vector<std::string>& error, std::vector<char>& names_file,
               std::vector<std::vector<std::string>>& missing, bool keep_samples) {
  parallel_for(static_cast<int64_t>(ready.size()), threads, [&](int64_t i, int) {
    try {
      ready[i] = read_job(jobs[at + i], s, threads, keep_samples);
    } catch (const data::MissingWordsError& e) {
      error[i] = e.what();
      names_file[i] = 1;
      missing[i] = e.words();
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
