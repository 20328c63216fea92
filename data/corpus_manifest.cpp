// A manifest: a CSV file (RFC 4180, a header row naming the columns) or JSON
// lines (one object per line) with, per utterance,
//   audio    the audio file (relative paths: to the manifest's folder)  required
//   speaker  the speaker id                                             required
//   split    train | dev | test                                         optional
//   id       the utterance id (default: the audio path, relative)       optional
//   start, end  the utterance as a part of the audio, seconds           optional
//   labels   a label file: .TextGrid (tier --tier), Buckeye .phones,
//            or lines "START END LABEL" in seconds (any other name)
//   segments inline labels instead of a file: CSV "START END LABEL; ..."
//            (';' between intervals), JSON [[START, END, "LABEL"], ...]
//   phones   labels without times: the phone sequence, space separated
//            (JSON: a string or a list of strings)
//   text     labels without times: the words (pronounced by --dict / --g2p)
// A row needs labels, segments, phones or text; phones beside times must be
// the times' sequence (checked at prepare), text beside times is not used.
// --corpus is the manifest, or a folder holding manifest.csv or manifest.jsonl.
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "data/corpus_formats.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

// One row's fields by column name (CSV cells or JSON values as text; JSON
// segments kept apart as parsed intervals).
struct Row {
  int line = 0;
  std::map<std::string, std::string> f;
  bool json_segments = false;
  std::vector<LabelInterval> segments;
};

std::vector<LabelInterval> inline_segments(const std::string& path, int line, const std::string& text,
                                           std::vector<Problem>* problems) {
  std::vector<LabelInterval> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ';');) {
    std::istringstream f(item);
    LabelInterval iv;
    iv.line = line;
    std::string extra;
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    if (!(f >> iv.start >> iv.end >> iv.label) || (f >> extra)) {
      problems->push_back({path, line, "segments: expected 'START END LABEL; ...', got '" + item + "'", true});
      return {};
    }
    out.push_back(iv);
  }
  return out;
}

// A CSV row by the header's column names.
Row csv_row(const CsvRow& row, const std::vector<std::string>& head) {
  Row r;
  r.line = row.line;
  if (row.fields.size() != head.size()) {
    r.f["__error"] = std::to_string(row.fields.size()) + " fields, the header has " + std::to_string(head.size()) +
                     " (a comma inside a field needs quotes: \"a,b\")";
  }
  for (size_t k = 0; k < head.size() && k < row.fields.size(); ++k) r.f[head[k]] = row.fields[k];
  return r;
}

// One line n of a JSON-lines manifest (not blank).
Row jsonl_row(const std::string& line, int n) {
  Row r;
  r.line = n;
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "segments") {
        r.json_segments = true;
        for (const auto& s : it.value()) {
          LabelInterval iv;
          iv.line = n;
          if (s.is_array()) iv.start = s.at(0).get<double>(), iv.end = s.at(1).get<double>(),
                            iv.label = s.at(2).get<std::string>();
          else iv.start = s.at("start").get<double>(), iv.end = s.at("end").get<double>(),
               iv.label = s.at("label").get<std::string>();
          r.segments.push_back(iv);
        }
      } else {
        std::string v;
        if (it.value().is_array() && (it.key() == "phones" || it.key() == "text"))
          for (const auto& t : it.value()) v += (v.empty() ? "" : " ") + t.get<std::string>();
        else v = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
        r.f[it.key()] = v;
      }
    }
  } catch (const std::exception& e) {
    r.f["__error"] = std::string("not a JSON object with the manifest's keys (") + e.what() + ")";
  }
  return r;
}

double seconds_field(const Row& r, const std::string& key, double dflt, bool* ok) {
  auto it = r.f.find(key);
  if (it == r.f.end() || it->second.empty()) return dflt;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end != it->second.c_str() + it->second.size()) *ok = false;
  return v;
}

CorpusEntry entry_of(const Row& r, const fs::path& base, const std::string& path) {
  CorpusEntry e;
  auto get = [&](const char* k) {
    auto it = r.f.find(k);
    return it == r.f.end() ? std::string() : it->second;
  };
  auto err = [&](const std::string& m) { e.problems.push_back({path, r.line, m, true}); };
  const std::string audio = get("audio");
  e.id = get("id").empty() ? fs::path(audio).replace_extension().generic_string() : get("id");
  if (e.id.empty()) e.id = "line " + std::to_string(r.line);
  e.speaker = get("speaker");
  const std::string split = get("split");
  e.label_path = path;
  if (!get("__error").empty()) return err(get("__error")), e;
  if (audio.empty()) return err("no audio (column 'audio')"), e;
  e.audio_path = fs::path(audio).is_absolute() ? audio : (base / audio).string();
  std::error_code ec;
  if (!fs::is_regular_file(e.audio_path, ec)) err("audio " + e.audio_path + " is missing");
  if (e.speaker.empty()) err("no speaker (column 'speaker')");
  if (!split.empty() && !is_corpus_split(split)) err("split '" + split + "' is not train, dev or test");
  else if (!split.empty()) e.split = common::enum_value<SplitName>(split, path);
  bool ok = true;
  e.seg_start = seconds_field(r, "start", 0.0, &ok);
  e.seg_end = seconds_field(r, "end", -1.0, &ok);
  if (!ok) err("start/end: not a number of seconds");
  const std::string labels = get("labels");
  if (!labels.empty()) {
    e.label_path = fs::path(labels).is_absolute() ? labels : (base / labels).string();
    const std::string ext = to_lower(fs::path(labels).extension().string());
    e.label_kind = ext == ".textgrid" ? LabelFileKind::textgrid : ext == ".phones" ? LabelFileKind::buckeye : LabelFileKind::seconds;
  } else if (r.json_segments) {
    e.intervals = r.segments;
  } else if (!get("segments").empty()) {
    e.intervals = inline_segments(path, r.line, get("segments"), &e.problems);
  }
  // a transcript: the non-empty one of phones and text (an empty cell: an empty transcript)
  const auto pc = r.f.find("phones"), tc = r.f.find("text");
  const std::string pv = pc == r.f.end() ? "" : pc->second, tv = tc == r.f.end() ? "" : tc->second;
  if (!pv.empty() && !tv.empty()) return err("both 'phones' and 'text' given (one transcript per row)"), e;
  if (!pv.empty() || (tv.empty() && pc != r.f.end())) e.transcript_kind = TranscriptKind::phones;
  else if (tc != r.f.end()) e.transcript_kind = TranscriptKind::words;
  std::istringstream in(pv.empty() ? tv : pv);
  for (std::string t; in >> t;) e.tokens.push_back(t);
  e.transcript_path = path;
  e.transcript_line = r.line;
  const bool times = e.label_kind != LabelFileKind::none || r.json_segments || !get("segments").empty();
  if (times && (e.tokens.empty() || e.transcript_kind == TranscriptKind::words)) {  // times rule; text beside them is not used
    e.transcript_kind = TranscriptKind::none;
    e.tokens.clear();
  }
  if (!times && e.transcript_kind == TranscriptKind::none)
    err("no labels (column 'labels': a label file, 'segments': inline intervals, or without times 'phones': the "
        "phone sequence or 'text': the words)");
  return e;
}

}  // namespace

std::vector<CorpusEntry> scan_manifest(const std::string& path, std::vector<Problem>* problems) {
  fs::path file(path);
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    if (fs::exists(file / "manifest.csv", ec)) file /= "manifest.csv";
    else if (fs::exists(file / "manifest.jsonl", ec)) file /= "manifest.jsonl";
    else throw std::runtime_error(path + ": no manifest.csv or manifest.jsonl in the folder");
  }
  const std::string ext = to_lower(file.extension().string());
  // rows streamed from the file one at a time, each entry's inline segments to disk as it comes
  std::vector<CorpusEntry> out;
  std::shared_ptr<IntervalSpill> spill;
  auto add = [&](const Row& r) {
    out.push_back(entry_of(r, file.parent_path(), file.string()));
    CorpusEntry& e = out.back();
    if (e.label_kind != LabelFileKind::none || e.intervals.empty()) return;
    if (!spill) spill = std::make_shared<IntervalSpill>();
    for (const LabelInterval& iv : e.intervals) spill->append(iv, &e.spans);
    e.spill = spill;
    e.label_kind = LabelFileKind::spill;
    std::vector<LabelInterval>().swap(e.intervals);
  };
  const std::unique_ptr<std::istream> in = open_text(file.string());
  if (ext == ".csv") {
    std::vector<std::string> head;
    bool have_head = false;
    for_each_csv_row(file.string(), *in, problems, [&](CsvRow&& row) {
      if (have_head) add(csv_row(row, head));
      else head = std::move(row.fields), have_head = true;
    });
    if (!have_head) throw std::runtime_error(file.string() + ": empty manifest (no header row)");
  } else {
    std::string line;
    for (int n = 1; std::getline(*in, line); ++n)
      if (line.find_first_not_of(" \t\r") != std::string::npos) add(jsonl_row(line, n));
  }
  return out;
}

}  // namespace timitseg::data
