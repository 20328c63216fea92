// The output formats of `timitseg decode --format` and `timitseg align --format` (eval/formats.h, docs/align.md).
#include "eval/formats.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/parallel.h"
#include "common/walk.h"

namespace timitseg::eval {

namespace {

using Interval = Segmentation::Interval;

std::string seconds(int64_t sample, int rate) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(sample) / rate);
  return buf;
}

std::string fixed6(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

std::string phn(const Segmentation& a) {
  std::string text;
  for (const auto& [b, e, label] : a.phones) text += std::to_string(b) + " " + std::to_string(e) + " " + label + "\n";
  return text;
}

std::string fixed3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// The phones tier's intervals with a confidence as text (which: 0 boundary, 1 label).
std::vector<Interval> confidence_tier(const Segmentation& a, int which) {
  std::vector<Interval> iv;
  for (size_t i = 0; i < a.phones.size(); ++i) {
    const auto& [b, e, label] = a.phones[i];
    const auto& c = a.phone_confidence[i];
    iv.emplace_back(b, e, fixed3(which == 0 ? c.first : c.second));
  }
  return iv;
}

std::string textgrid(const Segmentation& a) {
  std::vector<std::pair<std::string, std::vector<Interval>>> tiers{{"phones", a.phones}};
  if (a.has_words) tiers.emplace_back("words", a.words);
  if (!a.phone_confidence.empty()) {
    tiers.emplace_back("boundary_confidence", confidence_tier(a, 0));
    tiers.emplace_back("label_confidence", confidence_tier(a, 1));
  }
  return textgrid_tiers(tiers, a.num_samples, a.sample_rate);
}

// RFC 4180: a field with a comma, a quote or a line break is quoted, quotes doubled.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv(const Segmentation& a) {
  const bool conf = !a.phone_confidence.empty();
  const bool post = !a.phone_posterior.empty();
  std::string text = std::string("tier,start,end,start_sample,end_sample,label") +
                     (conf ? ",boundary_confidence,label_confidence" : "") + (post ? ",posterior" : "") + "\n";
  auto rows = [&](const char* tier, const std::vector<Interval>& iv, const std::vector<std::pair<double, double>>& c) {
    for (size_t i = 0; i < iv.size(); ++i) {
      const auto& [b, e, label] = iv[i];
      if (label.empty()) continue;  // a words-tier gap
      text += std::string(tier) + "," + seconds(b, a.sample_rate) + "," + seconds(e, a.sample_rate) + "," +
              std::to_string(b) + "," + std::to_string(e) + "," + csv_field(label);
      if (conf) text += "," + fixed6(c[i].first) + "," + fixed6(c[i].second);
      if (post) text += "," + (&iv == &a.phones ? fixed6(a.phone_posterior[i]) : std::string());
      text += "\n";
    }
  };
  rows("phone", a.phones, a.phone_confidence);
  if (a.has_words) rows("word", a.words, a.word_confidence);
  return text;
}

std::string json(const Segmentation& a) {
  auto list = [&](const std::vector<Interval>& iv, const std::vector<std::pair<double, double>>& c) {
    nlohmann::json l = nlohmann::json::array();
    for (size_t i = 0; i < iv.size(); ++i) {
      const auto& [b, e, label] = iv[i];
      if (label.empty()) continue;
      nlohmann::json row = {{"label", label},
                            {"start", static_cast<double>(b) / a.sample_rate},
                            {"end", static_cast<double>(e) / a.sample_rate},
                            {"start_sample", b},
                            {"end_sample", e}};
      if (!c.empty()) row["boundary_confidence"] = c[i].first, row["label_confidence"] = c[i].second;
      if (&iv == &a.phones && !a.phone_posterior.empty()) row["posterior"] = a.phone_posterior[i];
      l.push_back(row);
    }
    return l;
  };
  nlohmann::json j = {{"utterance", a.utterance},
                      {"audio", a.audio},
                      {"sample_rate", a.sample_rate},
                      {"num_samples", a.num_samples},
                      {"phones", list(a.phones, a.phone_confidence)}};
  if (a.has_words) j["words"] = list(a.words, a.word_confidence);
  return j.dump(2) + "\n";
}

// Kaldi CTM: "utterance channel start duration token" per line, seconds, channel 1.
std::string ctm(const Segmentation& a, const std::vector<Interval>& iv) {
  std::string text;
  for (const auto& [b, e, label] : iv)
    if (!label.empty())
      text += a.utterance + " 1 " + seconds(b, a.sample_rate) + " " + seconds(e - b, a.sample_rate) + " " + label + "\n";
  return text;
}

struct Format {
  OutputFormat format;
  std::function<void(const Segmentation&, std::vector<std::pair<std::string, std::string>>&)> write;
};

const std::vector<Format>& formats() {
  static const std::vector<Format> f = {
      {OutputFormat::phn, [](const Segmentation& a, auto& out) { out.emplace_back(".PHN", phn(a)); }},
      {OutputFormat::textgrid, [](const Segmentation& a, auto& out) { out.emplace_back(".TextGrid", textgrid(a)); }},
      {OutputFormat::csv, [](const Segmentation& a, auto& out) { out.emplace_back(".csv", csv(a)); }},
      {OutputFormat::json, [](const Segmentation& a, auto& out) { out.emplace_back(".json", json(a)); }},
      {OutputFormat::ctm,
       [](const Segmentation& a, auto& out) {
         out.emplace_back(".ctm", ctm(a, a.phones));
         if (a.has_words) out.emplace_back(".words.ctm", ctm(a, a.words));
       }},
  };
  return f;
}

}  // namespace

UtteranceConfidence utterance_confidence(const std::vector<int32_t>& durations, const std::vector<int>& word_first,
                                         const std::vector<int>& word_last, int num_words, const double* boundary,
                                         const double* start, const double* end, const double* label) {
  UtteranceConfidence u;
  const size_t n = durations.size();
  for (size_t i = 0; i < n; ++i) {
    if (durations[i] == 0) continue;  // a skipped phone is not written
    u.phones.emplace_back(boundary[i], label[i]);
    u.mean_boundary += boundary[i];
    u.mean_label += label[i];
  }
  if (!u.phones.empty()) {
    u.mean_boundary /= static_cast<double>(u.phones.size());
    u.mean_label /= static_cast<double>(u.phones.size());
  }
  for (int w = 0; w < num_words; ++w) {
    double first_start = -1.0, last_end = -1.0, lab = 1.0;
    for (size_t i = 0; i < n; ++i) {
      if (durations[i] == 0 || word_first[i] < 0 || w < word_first[i] || w > word_last[i]) continue;
      if (first_start < 0.0) first_start = start[i];
      last_end = end[i];
      lab = std::min(lab, label[i]);
    }
    if (first_start < 0.0) continue;  // cannot happen: every word has a phone
    u.words.emplace_back(std::min(first_start, last_end), lab);
  }
  return u;
}

const std::vector<std::string>& output_format_names() {
  static const std::vector<std::string> n = [] {
    std::vector<std::string> v;
    for (const Format& f : formats()) v.push_back(common::to_string(f.format));
    return v;
  }();
  return n;
}

std::vector<OutputFormat> parse_formats(const std::vector<std::string>& names) {
  const std::string list = common::enum_choices<OutputFormat>();  // "phn, textgrid, csv, json, ctm"
  std::vector<OutputFormat> given;
  for (const std::string& n : names) {
    OutputFormat f{};
    if (!common::parse_enum(n, &f))
      throw std::invalid_argument("--format: unknown format '" + n + "' (one or more of " + list + ")");
    given.push_back(f);
  }
  check_formats(given);
  std::vector<OutputFormat> out;
  for (const Format& f : formats())
    if (std::find(given.begin(), given.end(), f.format) != given.end()) out.push_back(f.format);
  return out;
}

void check_formats(const std::vector<OutputFormat>& formats) {
  if (formats.empty()) throw std::invalid_argument("--format: give at least one of " + common::enum_choices<OutputFormat>());
}

bool writes_posterior(OutputFormat f) { return f == OutputFormat::csv || f == OutputFormat::json; }

std::vector<std::pair<std::string, std::string>> render_segmentation(const Segmentation& a,
                                                                     const std::vector<OutputFormat>& names) {
  // Each format rendered on a worker of its own (an hour's JSON and TextGrid take tenths of a second each),
  // collected in the table's order: the result does not depend on the thread count.
  std::vector<const Format*> wanted;
  for (const Format& f : formats())
    if (std::find(names.begin(), names.end(), f.format) != names.end()) wanted.push_back(&f);
  std::vector<std::vector<std::pair<std::string, std::string>>> parts(wanted.size());
  parallel_for(static_cast<int64_t>(wanted.size()), static_cast<int>(wanted.size()),
               [&](int64_t i, int) { wanted[i]->write(a, parts[i]); });
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& part : parts)
    for (auto& file : part) out.push_back(std::move(file));
  return out;
}

std::string textgrid_tiers(const std::vector<std::pair<std::string, std::vector<Segmentation::Interval>>>& tiers,
                           int64_t num_samples, int sample_rate) {
  std::ostringstream os;
  os.precision(9);
  const double xmax = static_cast<double>(num_samples) / sample_rate;
  os << "File type = \"ooTextFile\"\nObject class = \"TextGrid\"\n\n";
  os << "xmin = 0\nxmax = " << xmax << "\ntiers? <exists>\nsize = " << tiers.size() << "\nitem []:\n";
  for (size_t k = 0; k < tiers.size(); ++k) {
    const auto& [name, iv] = tiers[k];
    os << "    item [" << k + 1 << "]:\n        class = \"IntervalTier\"\n        name = \"" << name << "\"\n";
    os << "        xmin = 0\n        xmax = " << xmax << "\n        intervals: size = " << iv.size() << "\n";
    for (size_t i = 0; i < iv.size(); ++i) {
      const auto& [b, e, text] = iv[i];
      os << "        intervals [" << i + 1 << "]:\n";
      os << "            xmin = " << static_cast<double>(b) / sample_rate << "\n";
      os << "            xmax = " << static_cast<double>(e) / sample_rate << "\n";
      std::string quoted;
      for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);  // Praat doubles quotes
      os << "            text = \"" << quoted << "\"\n";
    }
  }
  return os.str();
}

void write_outputs(const Segmentation& a, const std::vector<OutputFormat>& names, const std::string& out_dir,
                   const std::string& stem) {
  const std::filesystem::path base = std::filesystem::path(out_dir) / stem;
  CreatedFolders sub;  // a failed input leaves no folder of its own either
  sub.create(base.parent_path(), "--out");
  std::vector<std::pair<std::string, std::string>> files = render_segmentation(a, names);
  for (auto& f : files) f.first = base.string() + f.first;
  write_files_atomic(files, static_cast<int>(files.size()));
  sub.keep();
}

}  // namespace timitseg::eval
