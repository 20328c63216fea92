// The HTML of `timitseg report` (app/report/report.cpp), from run folders
// written here: the config table's version (run.json's timitseg_version) and
// resolved device/backend, the confusion matrix in phonetic class order with
// counts in the right cells and 12 px labels, a line style per overlaid run
// (stroke-dasharray on the curves and the legend), and the drawn utterance's
// log-mel spectrogram computed from its audio (its peak bin against the mel
// formula for a 1 kHz tone), or a note when the audio is gone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "app/report/phone_classes.h"
#include "app/report/report.h"
#include "app/report/svg.h"
#include "data/features.h"
#include "model/labels.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

// A run folder with metrics.jsonl (epochs 1..n), config.yaml and run.json.
void write_run(const fs::path& dir, int epochs) {
  fs::create_directories(dir);
  std::ofstream m(dir / "metrics.jsonl");
  for (int e = 1; e <= epochs; ++e)
    m << "{\"epoch\": " << e << ", \"train_loss\": " << 10.0 / e << ", \"dev_loss\": " << 12.0 / e
      << ", \"dev_per\": " << 0.5 / e << ", \"lr\": 0.001, \"frames_per_sec\": 1000}\n";
  std::ofstream(dir / "config.yaml") << "train:\n  device: \"auto\"\ncrf:\n  backend: \"auto\"\n  max_duration: 60\n";
  std::ofstream(dir / "run.json") << R"({"timitseg_version": "9.8.7", "git_commit": "abc", "device": "cpu",
                                      "crf_backend": "cpu", "rnn_algo": "standard"})";
}

// RIFF WAV, 16 kHz mono 16-bit, of a 1 kHz sine, n samples.
void write_tone(const fs::path& path, int n) {
  std::vector<int16_t> s(n);
  for (int i = 0; i < n; ++i) s[i] = static_cast<int16_t>(std::lround(8000 * std::sin(2 * M_PI * 1000.0 * i / 16000)));
  std::ofstream f(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [&](uint16_t v) { f.write(reinterpret_cast<const char*>(&v), 2); };
  f.write("RIFF", 4);
  u32(36 + 2 * n);
  f.write("WAVEfmt ", 8);
  u32(16);
  u16(1);
  u16(1);
  u32(16000);
  u32(32000);
  u16(2);
  u16(16);
  f.write("data", 4);
  u32(2 * n);
  f.write(reinterpret_cast<const char*>(s.data()), 2 * n);
}

std::vector<std::string> all(const std::string& text, const std::regex& re, int group = 1) {
  std::vector<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) out.push_back((*it)[group]);
  return out;
}

// The <svg ...>...</svg> element whose attributes contain `attr`.
std::string svg_with(const std::string& html, const std::string& attr) {
  const size_t a = html.find(attr);
  if (a == std::string::npos) return "";
  const size_t b = html.rfind("<svg", a), e = html.find("</svg>", a);
  return html.substr(b, e - b);
}

class ReportHtml : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("timitseg_report_html_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    write_run(dir_ / "semi", 3);
    write_run(dir_ / "linear", 3);
    names_ = model::LabelSet::make(39).scoring_names;
  }
  void TearDown() override { fs::remove_all(dir_); }
  int idx(const std::string& n) const {
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == n) return static_cast<int>(i);
    return -1;
  }
  // 3 frames of iy decoded as ih, 2 of sil right, 4 of s right
  app::report::RunReport run(const std::string& name) const {
    app::report::RunReport r;
    r.run_dir = (dir_ / name).string();
    r.has_predictions = true;
    app::report::UtteranceLabels u;
    u.id = "dev/u1";
    u.ref = {idx("iy"), idx("iy"), idx("iy"), idx("sil"), idx("sil"), idx("s"), idx("s"), idx("s"), idx("s")};
    u.pred = {idx("ih"), idx("ih"), idx("ih"), idx("sil"), idx("sil"), idx("s"), idx("s"), idx("s"), idx("s")};
    r.predictions.utterances = {u};
    r.predictions.source = "test";
    return r;
  }
  fs::path dir_;
  std::vector<std::string> names_;
};

}  // namespace

// Another phone set (an espeak-ng corpus's IPA phones, some spelled as TIMIT's:
// s, n, m, l): the matrix follows the set's own order, without TIMIT's classes.
TEST_F(ReportHtml, ConfusionMatrixOfAnotherPhoneSetFollowsItsOwnOrder) {
  const std::vector<std::string> ipa = {"a", "e", "l", "m", "n", "o", "s", "\xc9\xa3", "\xce\xb2", "sil"};
  std::vector<std::string> cls;
  const std::vector<int> ord = app::report::phone_class_order(ipa, &cls);
  EXPECT_EQ(ord, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(cls, std::vector<std::string>(ipa.size(), ""));
  EXPECT_FALSE(app::report::timit_scoring_set(ipa));
  EXPECT_TRUE(app::report::timit_scoring_set(names_));
  // a subset of TIMIT's names is another set too
  const std::vector<std::string> tiny = {"sil", "aa", "s", "t", "iy"};
  EXPECT_EQ(app::report::phone_class_order(tiny), (std::vector<int>{0, 1, 2, 3, 4}));

  app::report::ReportInput in;
  in.scoring_names = ipa;
  app::report::RunReport r;
  r.run_dir = (dir_ / "semi").string();
  r.has_predictions = true;
  app::report::UtteranceLabels u;
  u.id = "dev/u1";
  u.ref = {6, 6, 0, 0, 9, 7};
  u.pred = {6, 4, 0, 0, 9, 8};
  r.predictions.utterances = {u};
  r.predictions.source = "test";
  in.runs = {r};
  const std::string html = app::report::build_html(in);
  EXPECT_NE(html.find("predicted phone, both in the phone set's order; colour"), std::string::npos);
  const std::string svg = svg_with(html, "id=\"plot-confusion-0\"");
  ASSERT_FALSE(svg.empty());
  EXPECT_EQ(all(svg, std::regex("font-size=\"12\"[^>]*class=\"row-label\"[^>]*>([^<]*)<")), ipa);
  EXPECT_EQ(all(svg, std::regex("class=\"col-label\"[^>]*>([^<]*)<")), ipa);
  EXPECT_TRUE(all(svg, std::regex("class=\"class-label\"[^>]*>([^<]*)<")).empty());
  EXPECT_EQ(svg.find("class-line"), std::string::npos);
  // s (index 6) as n (index 4): row 6, column 4
  const std::regex re("<rect class=\"cell\" x=\"([0-9.]+)\" y=\"([0-9.]+)\"[^>]*data-count=\"([0-9]+)\" "
                      "data-ref=\"s\" data-pred=\"n\"");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, re));
  EXPECT_EQ(std::stod(m[1]), 112 + 4 * 17.0);
  EXPECT_EQ(std::stod(m[2]), 70 + 6 * 17.0);
  EXPECT_EQ(std::stod(m[3]), 1.0);
}

TEST_F(ReportHtml, ConfigTableShowsTheVersionAndResolvedChoices) {
  app::report::ReportInput in;
  in.scoring_names = names_;
  in.runs = {run("semi")};
  const std::string h = app::report::build_html(in);
  EXPECT_NE(h.find("<tr><td>version</td><td>9.8.7</td></tr>"), std::string::npos);
  EXPECT_NE(h.find("<tr><td>device</td><td>cpu</td></tr>"), std::string::npos);
  EXPECT_NE(h.find("<tr><td>CRF backend</td><td>cpu</td></tr>"), std::string::npos);
}

TEST_F(ReportHtml, ConfusionMatrixInPhoneticClassOrder) {
  // the order: every 39-set phone once, the classes in their conventional order
  std::vector<std::string> cls;
  const std::vector<int> ord = app::report::phone_class_order(names_, &cls);
  ASSERT_EQ(ord.size(), 39u);
  std::vector<std::string> ordered;
  for (int i : ord) ordered.push_back(names_[i]);
  const std::vector<std::string> want = {"iy", "ih", "eh", "ae", "ah", "uw", "uh", "aa", "ey", "ay", "oy", "aw", "ow",
                                         "er", "l",  "r",  "w",  "y",  "hh", "m",  "n",  "ng", "s",  "sh", "z",  "f",
                                         "th", "v",  "dh", "jh", "ch", "b",  "d",  "g",  "p",  "t",  "k",  "dx", "sil"};
  EXPECT_EQ(ordered, want);
  EXPECT_EQ(std::count(cls.begin(), cls.end(), "other"), 0);
  EXPECT_EQ(cls.front(), "vowels");
  EXPECT_EQ(cls.back(), "silence");

  app::report::ReportInput in;
  in.scoring_names = names_;
  in.runs = {run("semi")};
  const std::string svg = svg_with(app::report::build_html(in), "id=\"plot-confusion-0\"");
  ASSERT_FALSE(svg.empty());
  // row labels in that order, at a readable size
  EXPECT_EQ(all(svg, std::regex("font-size=\"12\"[^>]*class=\"row-label\"[^>]*>([^<]*)<")), want);
  EXPECT_EQ(all(svg, std::regex("class=\"col-label\"[^>]*>([^<]*)<")), want);
  EXPECT_EQ(all(svg, std::regex("class=\"class-label\"[^>]*>([^<]*)<")),
            (std::vector<std::string>{"vowels", "semivowels", "nasals", "fricatives", "affricates", "stops", "silence"}));
  // the counts sit in the cells of their phones' positions: iy row 0, ih column 1; s row/column 22; sil 38
  auto cell = [&](const std::string& ref, const std::string& pred) {
    const std::regex re("<rect class=\"cell\" x=\"([0-9.]+)\" y=\"([0-9.]+)\"[^>]*data-count=\"([0-9]+)\" data-ref=\"" +
                        ref + "\" data-pred=\"" + pred + "\"");
    std::smatch m;
    EXPECT_TRUE(std::regex_search(svg, m, re)) << ref << " as " << pred;
    return std::vector<double>{std::stod(m[1]), std::stod(m[2]), std::stod(m[3])};
  };
  const double left = 112, top = 70, size = 17;
  EXPECT_EQ(cell("iy", "ih"), (std::vector<double>{left + 1 * size, top + 0 * size, 3}));
  EXPECT_EQ(cell("iy", "iy"), (std::vector<double>{left + 0 * size, top + 0 * size, 0}));
  EXPECT_EQ(cell("s", "s"), (std::vector<double>{left + 22 * size, top + 22 * size, 4}));
  EXPECT_EQ(cell("sil", "sil"), (std::vector<double>{left + 38 * size, top + 38 * size, 2}));
}

TEST_F(ReportHtml, OverlaidRunsDifferInLineStyle) {
  app::report::ReportInput in;
  in.scoring_names = names_;
  in.runs = {run("semi"), run("linear")};
  const std::string h = app::report::build_html(in);
  for (const char* plot : {"id=\"plot-dev-per\"", "id=\"plot-boundary-f1-tolerance\""}) {
    const std::string svg = svg_with(h, plot);
    ASSERT_FALSE(svg.empty()) << plot;
    const std::regex r0("<polyline[^>]*class=\"series\" data-run=\"0\"[^>]*>"),
        r1("<polyline[^>]*class=\"series\" data-run=\"1\"[^>]*>");
    std::smatch m0, m1;
    ASSERT_TRUE(std::regex_search(svg, m0, r0)) << plot;
    ASSERT_TRUE(std::regex_search(svg, m1, r1)) << plot;
    EXPECT_EQ(m0.str().find("stroke-dasharray"), std::string::npos) << "run 0 is solid: " << m0.str();
    EXPECT_NE(m1.str().find("stroke-dasharray=\"" + app::report::run_dash(1) + "\""), std::string::npos) << m1.str();
    // the chart's legend draws the same style
    EXPECT_NE(svg.find("class=\"legend-line\" stroke-dasharray=\"" + app::report::run_dash(1) + "\""), std::string::npos)
        << plot;
  }
  // the per-phone duration panels too
  const size_t grid = h.find("id=\"duration-grid\"");
  ASSERT_NE(grid, std::string::npos);
  const std::string durations = h.substr(grid, h.find("id=\"confusion\"") - grid);
  EXPECT_TRUE(std::regex_search(durations, std::regex("<polyline[^>]*class=\"series\" data-run=\"1\"[^>]*stroke-dasharray=\"" +
                                                      app::report::run_dash(1) + "\"")));
  EXPECT_FALSE(std::regex_search(durations, std::regex("<polyline[^>]*data-run=\"0\"[^>]*stroke-dasharray")));
  // the second series (dev loss) is dotted and marked, whatever the run
  const std::string loss = svg_with(h, "id=\"plot-train-loss\"");
  EXPECT_NE(loss.find("class=\"series second\" data-run=\"1\""), std::string::npos);
  EXPECT_NE(loss.find(std::string("stroke-dasharray=\"") + app::report::kSecondSeriesDash + "\""), std::string::npos);
  // the page legend shows each run's style
  EXPECT_NE(h.find("data-run=\"1\"><line x1=\"1\" y1=\"5\" x2=\"33\" y2=\"5\" stroke=\"" + app::report::run_color(1) +
                   "\" stroke-width=\"2.5\" stroke-dasharray=\"" + app::report::run_dash(1) + "\""),
            std::string::npos);
  EXPECT_NE(app::report::run_dash(1), app::report::run_dash(2));
  EXPECT_EQ(app::report::run_dash(0), "");
}

TEST_F(ReportHtml, SpectrogramIsTheLogMelOfTheAudioOrSaysWhyNot) {
  const int n = 8000;  // 0.5 s: 1 + (8000 - 400) / 160 = 48 frames of 25 ms every 10 ms
  const fs::path wav = dir_ / "tone.wav";
  write_tone(wav, n);
  data::Utterance u;
  u.id = "dev/tone";
  u.num_frames = 48;
  u.dim = 39;
  u.features.assign(48 * 39, 0.5f);
  u.audio_path = wav.string();
  const data::FeatureOptions mfcc = data::FeatureOptions::defaults_for(data::FeatureType::mfcc);
  std::vector<app::report::Spectrogram> d = app::report::pick_drawn({&u}, mfcc, 1);
  ASSERT_EQ(d.size(), 1u);
  ASSERT_TRUE(d[0].log_mel) << d[0].note;
  EXPECT_EQ(d[0].D, app::report::kSpectrogramMelBins);
  EXPECT_EQ(d[0].T, 48);
  // the loudest bin of a middle frame: the mel filter whose centre is nearest 1 kHz
  // (centres evenly spaced in mel = 1127 ln(1 + f / 700) between 20 Hz and 8 kHz)
  auto mel = [](double f) { return 1127.0 * std::log(1.0 + f / 700.0); };
  const double lo = mel(20), hi = mel(8000), step = (hi - lo) / (app::report::kSpectrogramMelBins + 1);
  int want = 0;
  for (int k = 0; k < app::report::kSpectrogramMelBins; ++k)
    if (std::abs(lo + (k + 1) * step - mel(1000)) < std::abs(lo + (want + 1) * step - mel(1000))) want = k;
  const float* row = &d[0].features[24 * app::report::kSpectrogramMelBins];
  const int got = static_cast<int>(std::max_element(row, row + app::report::kSpectrogramMelBins) - row);
  EXPECT_EQ(got, want);
  EXPECT_GT(row[got] - row[5], 5.0) << "1 kHz tone: bin " << got << " should stand well above 100 Hz";

  write_run(dir_ / "semi", 1);
  app::report::ReportInput in;
  in.scoring_names = names_;
  in.runs = {run("semi")};
  in.drawn = d;
  std::string h = app::report::build_html(in);
  EXPECT_NE(h.find("class=\"spec-kind\">log-mel<"), std::string::npos);
  EXPECT_EQ(h.find("no spectrogram"), std::string::npos);

  // the audio gone: the model's features, with a note naming the file
  fs::remove(wav);
  d = app::report::pick_drawn({&u}, mfcc, 1);
  ASSERT_FALSE(d[0].log_mel);
  EXPECT_EQ(d[0].D, 39);
  EXPECT_NE(d[0].note.find(wav.string()), std::string::npos) << d[0].note;
  in.drawn = d;
  h = app::report::build_html(in);
  EXPECT_NE(h.find("class=\"spec-kind\">mfcc features<"), std::string::npos);
  EXPECT_NE(h.find("no spectrogram: audio not reachable (" + wav.string()), std::string::npos);
}
