// UTF-8 labels (IPA phones, accented and CJK words) through every output format
// of `align --format` / `decode --format` (eval/formats.h): each file read
// back by a reader written here for the format (PHN and CTM fields, Praat's
// quoted strings with doubled quotes, RFC 4180 CSV, JSON) gives the labels byte
// for byte, and the files hold the UTF-8 bytes themselves (no \u escapes, no
// Latin-1, nothing cut).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/formats.h"

using namespace timitseg;

namespace {

using Fmt = eval::OutputFormat;

// IPA: U+0283; t + U+0283; U+025B + U+0303 (combining tilde); U+02B0 aspiration; a length mark U+02D0;
// words: Latin-1 range, CJK, and one with a quote (Praat doubles it).
const std::vector<std::string> kPhones = {"ʃ", "tʃ", "ɛ̃", "pʰ", "aː"};
const std::vector<std::string> kWords = {"garçon", "日本", "\"ʔa\""};

eval::Segmentation utf8_sample() {
  eval::Segmentation a;
  a.utterance = "spk_ü1";
  a.audio = "in/ü.wav";
  a.sample_rate = 16000;
  a.num_samples = 5 * 1600;
  for (size_t i = 0; i < kPhones.size(); ++i)
    a.phones.emplace_back(static_cast<int64_t>(i) * 1600, static_cast<int64_t>(i + 1) * 1600, kPhones[i]);
  a.has_words = true;
  a.words = {{0, 3200, kWords[0]}, {3200, 6400, kWords[1]}, {6400, 8000, kWords[2]}};
  return a;
}

std::string text_of(const std::vector<std::pair<std::string, std::string>>& files, const std::string& suffix) {
  for (const auto& [s, t] : files)
    if (s == suffix) return t;
  ADD_FAILURE() << "no " << suffix;
  return "";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The n-th white-space separated field of a line (PHN: 2, CTM: 4).
std::string field(const std::string& line, int n) {
  std::istringstream in(line);
  std::string f;
  for (int i = 0; i <= n; ++i) in >> f;
  return f;
}

// Praat's text format: the strings of `key = "..."` lines, "" inside read as one quote.
std::vector<std::string> praat_strings(const std::string& text, const std::string& key) {
  std::vector<std::string> out;
  for (const std::string& l : lines_of(text)) {
    const size_t at = l.find(key + " = \"");
    if (at == std::string::npos) continue;
    std::string s;
    for (size_t i = at + key.size() + 4; i < l.size(); ++i) {
      if (l[i] == '"' && i + 1 < l.size() && l[i + 1] == '"') {
        s += '"';
        ++i;
      } else if (l[i] == '"') {
        break;
      } else {
        s += l[i];
      }
    }
    out.push_back(s);
  }
  return out;
}

// RFC 4180 rows (quoted fields, "" inside quotes).
std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') rows.back().back() += '"', ++i;
      else if (c == '"') quoted = false;
      else rows.back().back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\n') {
      rows.emplace_back(1);
    } else {
      rows.back().back() += c;
    }
  }
  if (rows.back().size() == 1 && rows.back()[0].empty()) rows.pop_back();
  return rows;
}

}  // namespace

TEST(AlignFormatsUtf8, PhnRoundTrip) {
  const std::string t = text_of(eval::render_segmentation(utf8_sample(), {Fmt::phn}), ".PHN");
  const auto l = lines_of(t);
  ASSERT_EQ(l.size(), kPhones.size());
  for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(field(l[i], 2), kPhones[i]) << i;
  EXPECT_NE(t.find("\xc9\x9b\xcc\x83"), std::string::npos);  // ɛ̃ as U+025B U+0303 in UTF-8, combining mark kept
}

TEST(AlignFormatsUtf8, TextGridRoundTrip) {
  const std::string t = text_of(eval::render_segmentation(utf8_sample(), {Fmt::textgrid}), ".TextGrid");
  const std::vector<std::string> texts = praat_strings(t, "text");
  std::vector<std::string> want = kPhones;
  want.insert(want.end(), kWords.begin(), kWords.end());
  EXPECT_EQ(texts, want);
  EXPECT_NE(t.find("text = \"\"\"ʔa\"\"\""), std::string::npos) << t;  // Praat's doubled quotes
  EXPECT_EQ(praat_strings(t, "name"), (std::vector<std::string>{"phones", "words"}));
}

TEST(AlignFormatsUtf8, CsvRoundTrip) {
  const auto rows = csv_rows(text_of(eval::render_segmentation(utf8_sample(), {Fmt::csv}), ".csv"));
  ASSERT_EQ(rows.size(), 1 + kPhones.size() + kWords.size());
  EXPECT_EQ(rows[0][5], "label");
  for (size_t i = 0; i < kPhones.size(); ++i) EXPECT_EQ(rows[1 + i][5], kPhones[i]) << i;
  for (size_t i = 0; i < kWords.size(); ++i) {
    EXPECT_EQ(rows[1 + kPhones.size() + i][0], "word");
    EXPECT_EQ(rows[1 + kPhones.size() + i][5], kWords[i]) << i;
  }
}

TEST(AlignFormatsUtf8, JsonRoundTrip) {
  const std::string t = text_of(eval::render_segmentation(utf8_sample(), {Fmt::json}), ".json");
  const nlohmann::json j = nlohmann::json::parse(t);
  EXPECT_EQ(j["utterance"], "spk_ü1");
  EXPECT_EQ(j["audio"], "in/ü.wav");
  ASSERT_EQ(j["phones"].size(), kPhones.size());
  for (size_t i = 0; i < kPhones.size(); ++i) EXPECT_EQ(j["phones"][i]["label"].get<std::string>(), kPhones[i]);
  ASSERT_EQ(j["words"].size(), kWords.size());
  for (size_t i = 0; i < kWords.size(); ++i) EXPECT_EQ(j["words"][i]["label"].get<std::string>(), kWords[i]);
  // UTF-8 written as such (readable in an editor), the quote escaped as JSON requires
  EXPECT_NE(t.find("\"label\": \"tʃ\""), std::string::npos) << t;
  EXPECT_NE(t.find("\"label\": \"\\\"ʔa\\\"\""), std::string::npos) << t;
  EXPECT_EQ(t.find("\\u"), std::string::npos) << t;
}

TEST(AlignFormatsUtf8, CtmRoundTrip) {
  const auto files = eval::render_segmentation(utf8_sample(), {Fmt::ctm});
  const auto p = lines_of(text_of(files, ".ctm"));
  ASSERT_EQ(p.size(), kPhones.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(field(p[i], 0), "spk_ü1");
    EXPECT_EQ(field(p[i], 4), kPhones[i]) << i;
  }
  const auto w = lines_of(text_of(files, ".words.ctm"));
  ASSERT_EQ(w.size(), kWords.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(field(w[i], 4), kWords[i]) << i;
}
