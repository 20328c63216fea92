// .PHN parsing, every validation case, frame labels (centre rule, gaps, q) and
// frame-level segments. Expected values are written out by hand.
#include <gtest/gtest.h>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/phones.h"

using namespace timitseg::data;

namespace {
std::vector<Problem> check(const std::string& text, int64_t n) {
  std::vector<Problem> p;
  parse_phn("DR1/FCJF0/SI1027.PHN", text, n, &p);
  return p;
}
int idx(const std::string& p) { return PhoneSet::timit().index61(p); }
}  // namespace

TEST(Phn, ParsesValidFile) {
  std::vector<Problem> probs;
  auto e = parse_phn("x.PHN", "0 3050 h#\n3050 4559 sh\r\n\n4559 5723 ix\n5723 8000 h#\n", 8000, &probs);
  EXPECT_TRUE(probs.empty());
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[1].start, 3050);
  EXPECT_EQ(e[1].end, 4559);
  EXPECT_EQ(e[1].phone, "sh");
  EXPECT_EQ(e[1].line, 2);
  EXPECT_EQ(e[3].line, 5);  // blank line counted
}

TEST(Phn, EachValidationCaseIsOneLineNamingFileAndLine) {
  // n: number of audio samples (-1: unknown, no end checks)
  struct Case { std::string text; int64_t n; int line; std::string needle; bool error; };
  const std::vector<Case> cases = {
      {"0 100 h#\n100 200\n", -1, 2, "expected 'start end phone'", true},
      {"0 100 h#\n100 2x0 aa\n", -1, 2, "expected 'start end phone'", true},
      {"0 100 h# extra\n", -1, 1, "expected 'start end phone'", true},
      {"-5 100 h#\n", -1, 1, "negative", true},
      {"0 100 h#\n100 100 aa\n", -1, 2, "not before end", true},
      {"0 100 h#\n100 90 aa\n", -1, 2, "not before end", true},
      {"0 100 h#\n100 100001 aa\n", 100000, 2, "past the end of the audio (100000 samples)", true},
      {"0 100 h#\n100 200 xx\n", 200, 2, "unknown phone 'xx'", true},
      {"0 100 h#\n50 200 aa\n", 200, 2, "overlaps the previous phone", true},
      {"0 100 h#\n150 200 aa\n", 200, 2, "gap of 50 samples after the previous phone (100 .. 150)", false},
      {"10 100 h#\n100 200 aa\n", 200, 1, "gap of 10 samples before the first phone", false},
      // the audio goes on after the last phone: reported on the last phone's line
      {"0 100 h#\n100 200 aa\n", 650, 2, "gap of 450 samples after the last phone (200 .. 650)", false},
      {"0 100 h#\n100 200 aa\n\n\n", 601, 2, "gap of 401 samples after the last phone (200 .. 601)", false},
      {"", 100, 0, "no phones", true},
      {"\n\n", 100, 0, "no phones", true},
      {"0 100 q\n100 200 q\n", 200, 0, "only q", true},
  };
  for (const auto& c : cases) {
    auto p = check(c.text, c.n);
    ASSERT_EQ(p.size(), 1u) << c.text;
    EXPECT_EQ(p[0].line, c.line) << c.text;
    EXPECT_EQ(p[0].error, c.error) << c.text;
    EXPECT_NE(p[0].message.find(c.needle), std::string::npos) << p[0].message;
    const std::string s = p[0].str();
    EXPECT_EQ(s.find('\n'), std::string::npos);
    const std::string prefix = c.line > 0 ? "DR1/FCJF0/SI1027.PHN:" + std::to_string(c.line) + ": "
                                          : std::string("DR1/FCJF0/SI1027.PHN: ");
    EXPECT_EQ(s.rfind(prefix, 0), 0u) << s;
    EXPECT_EQ(s, prefix + p[0].message);  // the severity is not repeated in the text
    EXPECT_EQ(s.find("warning"), std::string::npos) << s;
  }
  // the audio ends exactly with the last phone, or its length is unknown: no trailing gap
  EXPECT_TRUE(check("0 100 h#\n100 200 aa\n", 200).empty());
  EXPECT_TRUE(check("0 100 h#\n100 200 aa\n", -1).empty());
  // up to one frame length (400 samples) of untranscribed tail is normal in TIMIT
  EXPECT_TRUE(check("0 100 h#\n100 200 aa\n", 600).empty());
  // several problems in one file: one line each, in order
  auto p = check("0 100 h#\n100 200 xx\n150 120 aa\n", 200);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].line, 2);
  EXPECT_EQ(p[1].line, 3);
  // unknown length: the end check is skipped
  EXPECT_TRUE(check("0 100 h#\n100 200000 aa\n", -1).empty());
}

TEST(FrameLabels, CentreRuleGapsAndQ) {
  FeatureOptions o;  // 400 / 160: centre of frame t = 160 t + 200
  // h# [0,1000) q [1000,1500) aa [1500,4000) gap [4000,4500) s [4500,6000)
  std::vector<PhnEntry> ph = {{0, 1000, "h#", 1}, {1000, 1500, "q", 2}, {1500, 4000, "aa", 3}, {4500, 6000, "s", 4}};
  const int64_t T = num_frames_for(6400, o);  // audio longer than the last phone
  ASSERT_EQ(T, 38);
  auto lab = frame_labels(ph, T, o);
  ASSERT_EQ(static_cast<int64_t>(lab.size()), T);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t c = 160 * t + 200;
    std::string want;
    if (c < 1000) want = "h#";
    else if (c < 1500) want = "h#";  // q merged into the preceding phone
    else if (c < 4000) want = "aa";
    else if (c < 4500) want = "aa";  // gap: the phone before it
    else if (c < 6000) want = "s";
    else want = "h#";                // after the last phone (not transcribed): silence
    EXPECT_EQ(lab[t], idx(want)) << "frame " << t << " centre " << c;
  }
  EXPECT_EQ(lab[36], idx("s"));   // centre 5960
  EXPECT_EQ(lab[37], idx("h#"));  // centre 6120, past the end of s at 6000
  // frame 5: centre 1000 -> q region -> h#; frame 8: centre 1480 -> q -> h#; frame 9: 1640 -> aa
  EXPECT_EQ(lab[5], idx("h#"));
  EXPECT_EQ(lab[9], idx("aa"));
}

TEST(FrameLabels, LeadingQTakesFollowingPhoneAndNeverQ) {
  FeatureOptions o;
  std::vector<PhnEntry> ph = {{0, 800, "q", 1}, {800, 2000, "iy", 2}, {2000, 2400, "q", 3}, {2400, 4000, "n", 4}};
  auto lab = frame_labels(ph, num_frames_for(4000, o), o);
  const int q = idx("q");
  for (size_t t = 0; t < lab.size(); ++t) {
    EXPECT_NE(lab[t], q);
    const int64_t c = 160 * static_cast<int64_t>(t) + 200;
    EXPECT_EQ(lab[t], c < 2400 ? idx("iy") : idx("n")) << t;
  }
}

TEST(FrameLabels, ScaleForResampledAudio) {
  FeatureOptions o;
  // .PHN at 8 kHz: boundary at 1000 samples = 2000 samples at 16 kHz
  std::vector<PhnEntry> ph = {{0, 1000, "h#", 1}, {1000, 2000, "aa", 2}};
  auto lab = frame_labels(ph, num_frames_for(4000, o), o, 2.0);
  for (size_t t = 0; t < lab.size(); ++t)
    EXPECT_EQ(lab[t], 160 * static_cast<int64_t>(t) + 200 < 2000 ? idx("h#") : idx("aa"));
  // the end of the last phone is scaled too: aa ends at 1500 (8 kHz) = 3000 (16 kHz)
  ph[1].end = 1500;
  lab = frame_labels(ph, num_frames_for(4000, o), o, 2.0);
  ASSERT_EQ(lab.size(), 23u);  // centres 200 .. 3720
  for (size_t t = 0; t < lab.size(); ++t) {
    const int64_t c = 160 * static_cast<int64_t>(t) + 200;
    EXPECT_EQ(lab[t], c < 2000 ? idx("h#") : c < 3000 ? idx("aa") : idx("h#")) << t;
  }
}

TEST(FrameLabels, AfterTheLastPhoneIsSilenceEvenWhenTheLastPhoneIsQ) {
  FeatureOptions o;
  // iy [0,2000) q [2000,2400), audio 4000 samples: q takes iy; past 2400: h#
  std::vector<PhnEntry> ph = {{0, 2000, "iy", 1}, {2000, 2400, "q", 2}};
  auto lab = frame_labels(ph, num_frames_for(4000, o), o);
  for (size_t t = 0; t < lab.size(); ++t) {
    const int64_t c = 160 * static_cast<int64_t>(t) + 200;
    EXPECT_EQ(lab[t], c < 2400 ? idx("iy") : idx("h#")) << t;
  }
}

TEST(FrameSegments, MaximalRuns) {
  auto s = frame_segments({3, 3, 3, 7, 7, 3, 1});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].start, 0); EXPECT_EQ(s[0].length, 3); EXPECT_EQ(s[0].label, 3);
  EXPECT_EQ(s[1].start, 3); EXPECT_EQ(s[1].length, 2); EXPECT_EQ(s[1].label, 7);
  EXPECT_EQ(s[2].start, 5); EXPECT_EQ(s[2].length, 1); EXPECT_EQ(s[2].label, 3);
  EXPECT_EQ(s[3].start, 6); EXPECT_EQ(s[3].length, 1); EXPECT_EQ(s[3].label, 1);
  EXPECT_TRUE(frame_segments({}).empty());
}
