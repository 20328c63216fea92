// The layouts of `timitseg synth --format`; see data/synth_layouts.h.
#include "data/synth_layouts.h"

#include <sndfile.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/espeak_tts.h"
#include "data/timit_lists.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

constexpr double kRate = 16000.0;

std::string secs(int64_t samples) {  // exact: k / 16000 has at most 7 decimals
  char b[40];
  std::snprintf(b, sizeof b, "%.7f", static_cast<double>(samples) / kRate);
  return b;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f.flush()) throw std::runtime_error(p.string() + ": cannot write");
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string tg_quote(const std::string& s) {  // TextGrid strings double their quotes
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// A tier's intervals tiling [0, N): the given spans, gaps as "".
struct Span { int64_t start, end; std::string text; };
std::vector<Span> tile(std::vector<Span> spans, int64_t N) {
  std::vector<Span> out;
  int64_t at = 0;
  for (auto& s : spans) {
    if (s.start > at) out.push_back({at, s.start, ""});
    out.push_back(s);
    at = s.end;
  }
  if (at < N) out.push_back({at, N, ""});
  return out;
}

std::vector<Span> phone_spans(const SynthUtterance& u) {
  std::vector<Span> v;
  for (const auto& p : u.phones) v.push_back({p.start, p.end, p.label == kEspeakSilence ? "" : p.label});
  return v;
}
std::vector<Span> word_spans(const SynthUtterance& u) {
  std::vector<Span> v;
  for (const auto& w : u.words) v.push_back({w.start, w.end, w.text});
  return v;
}

// MFA's TextGrid: long text format, UTF-8, tiers "words" and "phones", silence as "".
std::string textgrid(const SynthUtterance& u) {
  const int64_t N = static_cast<int64_t>(u.samples.size());
  std::string s = "File type = \"ooTextFile\"\nObject class = \"TextGrid\"\n\nxmin = 0\nxmax = " + secs(N) +
                  "\ntiers? <exists>\nsize = 2\nitem []:\n";
  int k = 0;
  for (const auto& [name, spans] : {std::make_pair(std::string("words"), tile(word_spans(u), N)),
                                    std::make_pair(std::string("phones"), tile(phone_spans(u), N))}) {
    s += "    item [" + std::to_string(++k) + "]:\n        class = \"IntervalTier\"\n        name = \"" + name +
         "\"\n        xmin = 0\n        xmax = " + secs(N) + "\n        intervals: size = " +
         std::to_string(spans.size()) + "\n";
    for (size_t i = 0; i < spans.size(); ++i)
      s += "        intervals [" + std::to_string(i + 1) + "]:\n            xmin = " + secs(spans[i].start) +
           "\n            xmax = " + secs(spans[i].end) + "\n            text = " + tg_quote(spans[i].text) + "\n";
  }
  return s;
}

// Buckeye's .phones / .words: header up to "#", then "END COLOR LABEL" lines;
// {B_TRANS} and {E_TRANS} marks (zero length), silence as SIL / <SIL>.
std::string buckeye_header(const std::string& name) {
  return "signal " + name + "\ntype 0\ncolor 121\ncomment written by timitseg synth\nfont "
         "-misc-*-bold-*-*-*-15-*-*-*-*-*-*-*\nseparator ;\nnfields 1\n#\n";
}
std::string buckeye_line(int64_t end, int color, const std::string& label) {
  char b[48];
  std::snprintf(b, sizeof b, "%12s %4d ", secs(end).c_str(), color);
  return b + label + "\n";
}
void write_buckeye(const fs::path& base, const std::string& name, const SynthUtterance& u) {
  const int64_t N = static_cast<int64_t>(u.samples.size());
  std::string ph = buckeye_header(name) + buckeye_line(0, 122, "{B_TRANS}");
  for (const auto& p : u.phones) ph += buckeye_line(p.end, 121, p.label == kEspeakSilence ? "SIL" : p.label);
  ph += buckeye_line(N, 122, "{E_TRANS}");
  std::string wd = buckeye_header(name) + buckeye_line(0, 122, "{B_TRANS}; {B_TRANS}; {B_TRANS}; null");
  for (const auto& w : tile(word_spans(u), N)) {
    if (w.text.empty()) { wd += buckeye_line(w.end, 121, "<SIL>; <SIL>; <SIL>; null"); continue; }
    std::string phones;
    for (const auto& p : u.phones)
      if (p.start >= w.start && p.end <= w.end) phones += (phones.empty() ? "" : " ") + p.label;
    wd += buckeye_line(w.end, 121, w.text + "; " + phones + "; " + phones + "; null");
  }
  wd += buckeye_line(N, 122, "{E_TRANS}; {E_TRANS}; {E_TRANS}; null");
  write_text(base.string() + ".phones", ph);
  write_text(base.string() + ".words", wd);
}

bool is_vowel(const std::string& label) {
  static const std::vector<std::string> v = {"a", "e", "i", "o", "u", "y", "ɑ", "ɐ", "ɒ", "æ", "ɛ", "ə", "ɜ", "ɪ",
                                             "ɔ", "ʊ", "ʌ", "œ", "ø", "ɨ", "ʉ", "ɯ", "ɤ", "ɞ", "ɘ", "ɵ", "ɶ", "ɚ"};
  for (const auto& s : v)
    if (label.compare(0, s.size(), s) == 0) return true;
  return false;
}

std::string yaml_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + nlohmann::json(v[i]).dump();
  return s + "]";
}

}  // namespace

struct SynthLayoutWriter::Rows {
  // per job: kaldi's lines (wav.scp, segments, utt2spk, text, ctm) or the manifest's line
  std::vector<std::string> scp, seg, spk, text, ctm, manifest;
};

std::string synth_split(const SynthSpeaker& spk) {
  if (spk.part == SplitName::train) return common::to_string(SplitName::train);
  return common::to_string(dev_speakers().count(spk.id) ? SplitName::dev : SplitName::test);
}

void write_synth_audio(const std::string& path, const std::vector<int16_t>& samples, bool sphere) {
  SF_INFO info{};
  info.samplerate = 16000;
  info.channels = 1;
  info.format = (sphere ? SF_FORMAT_NIST : SF_FORMAT_WAV) | SF_FORMAT_PCM_16;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!f) throw std::runtime_error(path + ": cannot write audio: " + sf_strerror(nullptr));
  const sf_count_t wrote = sf_write_short(f, samples.data(), static_cast<sf_count_t>(samples.size()));
  sf_close(f);
  if (wrote != static_cast<sf_count_t>(samples.size())) throw std::runtime_error(path + ": short write");
}

std::string espeak_phone_set_yaml(const std::string& language, const std::set<std::string>& labels) {
  std::vector<std::string> phones, vowels, consonants;
  for (const auto& l : labels)
    if (l != kEspeakSilence) {
      phones.push_back(l);
      (is_vowel(l) ? vowels : consonants).push_back(l);
    }
  phones.push_back(kEspeakSilence);
  std::string s = "# The phones of a `timitseg synth --voice espeak --language " + language +
                  "` corpus: espeak-ng's IPA phone names\n# as its phoneme events give them, through "
                  "data::espeak_label (the labels written), and the silence label (docs/synth.md).\n";
  s += "name: espeak-" + language + "\nphones: " + yaml_list(phones) + "\nsilence: [" + kEspeakSilence +
       "]\nmap:  # Buckeye's silence label (the buckeye layout writes SIL)\n  SIL: " + kEspeakSilence +
       "\nbroad_classes:  # vowels: labels starting with an IPA vowel letter\n";
  if (!vowels.empty()) s += "  vowels: " + yaml_list(vowels) + "\n";
  if (!consonants.empty()) s += "  consonants: " + yaml_list(consonants) + "\n";
  return s + "  silence: [" + kEspeakSilence + "]\n";
}

SynthLayoutWriter::SynthLayoutWriter(const SynthOptions& o, fs::path root, fs::path final_root,
                                     const std::vector<SynthSpeaker>& speakers, const std::vector<SynthJob>& jobs)
    : o_(o), root_(std::move(root)), final_root_(std::move(final_root)), speakers_(speakers), jobs_(jobs),
      rows_(new Rows) {
  const size_t n = jobs.size();
  for (auto* v : {&rows_->scp, &rows_->seg, &rows_->spk, &rows_->text, &rows_->ctm, &rows_->manifest}) v->resize(n);
}

SynthLayoutWriter::~SynthLayoutWriter() = default;

bool SynthLayoutWriter::wants(const SynthJob& j) const { return o_.layout == CorpusFormat::timit || j.index >= 0; }

std::string SynthLayoutWriter::stem(const SynthJob& job) const { return speakers_[job.speaker].id + "_" + job.utt; }

void SynthLayoutWriter::write_timit(const SynthJob& job, const SynthUtterance& u) {
  const SynthSpeaker& spk = speakers_[job.speaker];
  auto name = [&](const std::string& s) { return o_.lower_case ? s : upper(s); };
  const fs::path dir = root_ / name(common::to_string(spk.part)) / name("dr" + std::to_string(spk.dialect)) / name(spk.id);
  fs::create_directories(dir);
  const fs::path base = dir / name(job.utt);
  write_synth_audio(base.string() + name(".wav"), u.samples, o_.format == SynthAudio::sphere);
  std::string phn;
  for (const auto& p : u.phones) phn += std::to_string(p.start) + ' ' + std::to_string(p.end) + ' ' + p.label + '\n';
  write_text(base.string() + name(".phn"), phn);
  if (u.text.empty()) return;  // tones / flite: .WAV + .PHN only, as before
  std::string wrd;
  for (const auto& w : u.words) wrd += std::to_string(w.start) + ' ' + std::to_string(w.end) + ' ' + w.text + '\n';
  write_text(base.string() + name(".wrd"), wrd);
  write_text(base.string() + name(".txt"), "0 " + std::to_string(u.samples.size()) + " " + u.text + "\n");
}

// LibriSpeech's words: upper case (ASCII), punctuation around them dropped.
std::string librispeech_words(const std::string& text) {
  std::string out, w;
  std::istringstream in(text);
  while (in >> w) {
    const size_t a = w.find_first_not_of(".,;:!?\"()"), b = w.find_last_not_of(".,;:!?\"()");
    if (a == std::string::npos) continue;
    out += (out.empty() ? "" : " ") + upper(w.substr(a, b + 1 - a));
  }
  return out;
}

void SynthLayoutWriter::write_librispeech(size_t j, const SynthUtterance& u) {
  const SynthJob& job = jobs_[j];
  const SynthSpeaker& spk = speakers_[job.speaker];
  const std::string chapter = spk.id + "-1", utt = chapter + "-" + job.utt;
  const fs::path dir = root_ / (synth_split(spk) + "-clean") / spk.id / "1";
  fs::create_directories(dir);
  const std::string path = (dir / (utt + ".flac")).string();
  SF_INFO info{};
  info.samplerate = 16000;
  info.channels = 1;
  info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!f) throw std::runtime_error(path + ": cannot write audio: " + sf_strerror(nullptr));
  const sf_count_t wrote = sf_write_short(f, u.samples.data(), static_cast<sf_count_t>(u.samples.size()));
  sf_close(f);
  if (wrote != static_cast<sf_count_t>(u.samples.size())) throw std::runtime_error(path + ": short write");
  rows_->text[j] = utt + " " + librispeech_words(u.text) + "\n";
}

void SynthLayoutWriter::write(size_t j, const SynthUtterance& u) {
  const SynthJob& job = jobs_[j];
  if (o_.voice == SynthVoice::espeak) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& p : u.phones) labels_.insert(p.label);
  }
  if (o_.layout == CorpusFormat::timit) return write_timit(job, u);
  if (o_.layout == CorpusFormat::librispeech) return write_librispeech(j, u);
  const SynthSpeaker& spk = speakers_[job.speaker];
  const std::string id = stem(job);
  const std::string sub = o_.layout == CorpusFormat::kaldi ? "wav" : o_.layout == CorpusFormat::manifest ? "audio" : "";
  const fs::path rel = (sub.empty() ? fs::path(spk.id) : fs::path(sub) / spk.id) / (id + ".wav");
  fs::create_directories((root_ / rel).parent_path());
  write_synth_audio((root_ / rel).string(), u.samples, false);
  const fs::path base = (root_ / rel).replace_extension();
  const int64_t N = static_cast<int64_t>(u.samples.size());
  if (o_.layout == CorpusFormat::textgrid) {
    write_text(base.string() + ".TextGrid", textgrid(u));
  } else if (o_.layout == CorpusFormat::buckeye) {
    write_buckeye(base, id, u);
  } else if (o_.layout == CorpusFormat::kaldi) {
    rows_->scp[j] = id + " " + (final_root_ / rel).string() + "\n";
    rows_->seg[j] = id + " " + id + " " + secs(0) + " " + secs(N) + "\n";
    rows_->spk[j] = id + " " + spk.id + "\n";
    rows_->text[j] = id + " " + u.text + "\n";
    for (const auto& p : u.phones) rows_->ctm[j] += id + " 1 " + secs(p.start) + " " + secs(p.end - p.start) + " " + p.label + "\n";
  } else {
    nlohmann::json segs = nlohmann::json::array();
    for (const auto& p : u.phones)
      segs.push_back({static_cast<double>(p.start) / kRate, static_cast<double>(p.end) / kRate, p.label});
    nlohmann::json row = {{"id", id}, {"audio", rel.generic_string()}, {"speaker", spk.id}, {"split", synth_split(spk)}};
    if (!u.text.empty()) row["text"] = u.text;
    row["segments"] = segs;
    rows_->manifest[j] = row.dump() + "\n";
  }
}

void SynthLayoutWriter::finish() {
  if (o_.voice == SynthVoice::espeak) write_text(root_ / "phone_set.yaml", espeak_phone_set_yaml(o_.language, labels_));
  if (o_.layout == CorpusFormat::textgrid || o_.layout == CorpusFormat::buckeye) {
    std::string s = "# SPEAKER train|dev|test (prepare --split-file)\n";
    for (const auto& spk : speakers_) s += spk.id + " " + synth_split(spk) + "\n";
    write_text(root_ / "splits.txt", s);
  } else if (o_.layout == CorpusFormat::manifest) {
    std::string s;
    for (const auto& r : rows_->manifest) s += r;
    write_text(root_ / "manifest.jsonl", s);
  } else if (o_.layout == CorpusFormat::librispeech) {  // one SPEAKER-CHAPTER.trans.txt per chapter, lines in id order
    std::map<fs::path, std::map<std::string, std::string>> trans;
    for (size_t j = 0; j < jobs_.size(); ++j) {
      if (!wants(jobs_[j])) continue;
      const SynthSpeaker& spk = speakers_[jobs_[j].speaker];
      trans[root_ / (synth_split(spk) + "-clean") / spk.id / "1" / (spk.id + "-1.trans.txt")][rows_->text[j]];
    }
    for (const auto& [path, lines] : trans) {
      std::string s;
      for (const auto& [line, unused] : lines) s += line;
      write_text(path, s);
    }
  } else if (o_.layout == CorpusFormat::kaldi) {
    for (const std::string split : {"train", "dev", "test"}) {
      std::vector<size_t> js;
      for (size_t j = 0; j < jobs_.size(); ++j)
        if (wants(jobs_[j]) && synth_split(speakers_[jobs_[j].speaker]) == split) js.push_back(j);
      std::sort(js.begin(), js.end(), [&](size_t a, size_t b) { return stem(jobs_[a]) < stem(jobs_[b]); });
      const fs::path d = root_ / split;
      fs::create_directories(d);
      std::map<std::string, std::string> spk2utt;
      std::string scp, seg, u2s, text, ctm;
      for (size_t j : js) {
        scp += rows_->scp[j]; seg += rows_->seg[j]; u2s += rows_->spk[j]; text += rows_->text[j]; ctm += rows_->ctm[j];
        spk2utt[speakers_[jobs_[j].speaker].id] += " " + stem(jobs_[j]);
      }
      std::string s2u;
      for (const auto& [s, us] : spk2utt) s2u += s + us + "\n";
      write_text(d / "wav.scp", scp); write_text(d / "segments", seg); write_text(d / "utt2spk", u2s);
      write_text(d / "spk2utt", s2u); write_text(d / "text", text); write_text(d / "phones.ctm", ctm);
    }
  }
}

}  // namespace timitseg::data
