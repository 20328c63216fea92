// Silence edges at the energy change (eval/silence_edges.h). The oracle is a
// signal made here with its edges known by construction: a low noise (the
// silence) and a sine burst between two known samples. The centred 5 ms
// envelope crosses floor + 10 dB as soon as its window touches the burst, so a
// moved edge must land within the window's half-width (40 samples at 16 kHz)
// outside the burst's true edge.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "eval/silence_edges.h"

using namespace timitseg;

namespace {

constexpr int kRate = 16000;
constexpr int64_t kHalf = 40;  // 5 ms / 2 at 16 kHz
constexpr int64_t kOnset = 8000, kOffset = 16000, kN = 24000;  // silence [0, 0.5 s), burst to 1 s, silence to 1.5 s

// Noise of amplitude ~10 (int16 range) everywhere, plus a sine of amplitude 3000 over [kOnset, kOffset).
std::vector<float> burst() {
  std::vector<float> x(kN);
  uint32_t state = 12345;
  for (int64_t i = 0; i < kN; ++i) {
    state = state * 1664525u + 1013904223u;
    x[i] = 20.0f * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
    if (i >= kOnset && i < kOffset) x[i] += 3000.0f * static_cast<float>(std::sin(2 * M_PI * 440.0 * i / kRate));
  }
  return x;
}

// Phones: silence [0, b1), the burst's phone [b1, b2), silence [b2, kN).
std::vector<int64_t> refine(int64_t b1, int64_t b2, eval::SilenceEdgeCount* c, double max_move_ms = 50.0,
                            std::vector<char> silence = {1, 0, 1}) {
  const std::vector<float> x = burst();
  std::vector<int64_t> starts{0, b1, b2};
  eval::SilenceEdgeOptions o;
  o.max_move_ms = max_move_ms;
  eval::refine_silence_edges(x.data(), kN, kRate, silence, kN, o, &starts, c);
  return starts;
}

}  // namespace

TEST(SilenceEdges, EnvelopeAndFloorOfKnownSignals) {
  const std::vector<float> c(1000, 100.0f);  // power 1e4 everywhere: 40 dB
  for (float v : eval::energy_envelope_db(c.data(), 1000, kRate, 5.0)) EXPECT_NEAR(v, 40.0, 1e-4);
  // a step 0 -> 100 at sample 500: the window [i-40, i+40] holds k loud samples of 81 -> 10 log10(1e4 k / 81)
  std::vector<float> step(1000, 0.0f);
  for (int i = 500; i < 1000; ++i) step[i] = 100.0f;
  const std::vector<float> e = eval::energy_envelope_db(step.data(), 1000, kRate, 5.0);
  EXPECT_NEAR(e[459], -100.0, 1e-3);                          // no loud sample in its window
  EXPECT_NEAR(e[460], 10.0 * std::log10(1e4 / 81.0), 1e-3);  // one
  EXPECT_NEAR(e[500], 10.0 * std::log10(1e4 * 41 / 81.0), 1e-3);
  EXPECT_NEAR(e[0], -100.0, 1e-3);  // cut at the start: [0, 40]
  // floor: envelope every 16 samples (1 ms) = 0..62 ms -> values 0..62; 10th percentile, nearest rank:
  // ceil(0.1 * 63) = 7th smallest = 6
  std::vector<float> ramp(1000);
  for (int i = 0; i < 1000; ++i) ramp[i] = static_cast<float>(i / 16);
  EXPECT_DOUBLE_EQ(eval::envelope_floor_db(ramp, kRate, 10.0), 6.0);
  EXPECT_DOUBLE_EQ(eval::envelope_floor_db(ramp, kRate, 50.0), 31.0);  // ceil(31.5) = 32nd -> 31
}

TEST(SilenceEdges, LateAndEarlyEdgesMoveToTheBurstsEdges) {
  eval::SilenceEdgeCount c;
  // onset aligned 30 ms late (inside the burst), offset 30 ms early (inside it)
  std::vector<int64_t> s = refine(kOnset + 480, kOffset - 480, &c);
  EXPECT_GE(s[1], kOnset - kHalf - 1);
  EXPECT_LE(s[1], kOnset);
  EXPECT_GE(s[2], kOffset);
  EXPECT_LE(s[2], kOffset + kHalf + 1);
  EXPECT_EQ(c.edges, 2);
  EXPECT_EQ(c.moved, 2);
  EXPECT_EQ(c.loud, 0);
  EXPECT_EQ(c.no_crossing, 0);
  // onset 20 ms early (in the silence), offset 20 ms late (in the silence): the same places
  eval::SilenceEdgeCount c2;
  const std::vector<int64_t> s2 = refine(kOnset - 320, kOffset + 320, &c2);
  EXPECT_EQ(s2[1], s[1]);
  EXPECT_EQ(s2[2], s[2]);
  EXPECT_EQ(c2.moved, 2);
  EXPECT_NEAR(c2.to_json()["mean_move_ms"].get<double>(),
              ((s2[1] - (kOnset - 320)) + (s2[2] - (kOffset + 320))) * 1000.0 / kRate / 2, 1e-9);
  EXPECT_EQ(s[0], 0);  // the utterance's start never moves
}

TEST(SilenceEdgesBounds, NoCrossingWithinTheBoundLeavesTheEdge) {
  eval::SilenceEdgeCount c;
  // 80 ms late with a 50 ms bound: the run of sound reaches past the bound
  const std::vector<int64_t> s = refine(kOnset + 1280, kOffset, &c, 50.0);
  EXPECT_EQ(s[1], kOnset + 1280);
  EXPECT_EQ(c.no_crossing, 1);
  // with 100 ms it is found
  eval::SilenceEdgeCount c2;
  const std::vector<int64_t> s2 = refine(kOnset + 1280, kOffset, &c2, 100.0);
  EXPECT_LE(s2[1], kOnset);
  EXPECT_GE(s2[1], kOnset - kHalf - 1);
  // bound 0: nothing moves
  eval::SilenceEdgeCount c3;
  const std::vector<int64_t> s3 = refine(kOnset + 480, kOffset - 480, &c3, 0.0);
  EXPECT_EQ(s3, (std::vector<int64_t>{0, kOnset + 480, kOffset - 480}));
  EXPECT_EQ(c3.moved, 0);
}

TEST(SilenceEdgesBounds, EveryPhoneKeepsASample) {
  // phones: silence [0, 7000), a 5-sample phone [7000, 7005) in the quiet, silence [7005, kN) (burst
  // included, its median still quiet). The onset at 7000 would move on to the burst (1000 samples on)
  // and the offset at 7005 back to the start of the quiet: each only by emptying a phone, so neither
  // moves (no crossing inside the two phones).
  const std::vector<float> x = burst();
  std::vector<int64_t> starts{0, 7000, 7005};
  eval::SilenceEdgeCount c;
  eval::refine_silence_edges(x.data(), kN, kRate, {1, 0, 1}, kN, eval::SilenceEdgeOptions{}, &starts, &c);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 7000, 7005}));
  EXPECT_EQ(c.edges, 2);
  EXPECT_EQ(c.no_crossing, 2);
  EXPECT_EQ(c.loud, 0);
}

TEST(SilenceEdges, AMostlyLoudSilenceMovesOnlyWithALowerQuietShare) {
  // phones: quiet "speech" [0, kOnset - 480), silence [kOnset - 480, kOnset + 960) (30 ms quiet, then 60 ms
  // of the burst: about 30 % quiet), the burst [kOnset + 960, kOffset), silence to the end
  const std::vector<float> x = burst();
  auto go = [&](double min_quiet, eval::SilenceEdgeCount* c) {
    std::vector<int64_t> starts{0, kOnset - 480, kOnset + 960, kOffset};
    eval::SilenceEdgeOptions o;
    o.max_move_ms = 80;
    o.min_quiet_pct = min_quiet;
    eval::refine_silence_edges(x.data(), kN, kRate, {0, 1, 0, 1}, kN, o, &starts, c);
    return starts;
  };
  eval::SilenceEdgeCount half, quarter;
  const std::vector<int64_t> a = go(50, &half), b = go(25, &quarter);
  EXPECT_EQ(a[2], kOnset + 960);  // the median of the silence is loud: both its edges left
  EXPECT_EQ(half.loud, 2);
  EXPECT_GE(b[2], kOnset - kHalf - 1);  // a quarter of it is quiet: moved back to the burst's start
  EXPECT_LE(b[2], kOnset);
  EXPECT_EQ(quarter.loud, 0);
  EXPECT_EQ(a[1], kOnset - 480);  // the quiet "speech" before it has no crossing: left either way
  EXPECT_EQ(b[1], kOnset - 480);
  EXPECT_EQ(a[3], b[3]);
}

TEST(SilenceEdges, LoudSilenceAndSpeechPairsAreLeftAlone) {
  // the burst's phone labelled silence and the silences labelled speech: the "silence" is loud
  eval::SilenceEdgeCount c;
  const std::vector<int64_t> s = refine(kOnset + 480, kOffset - 480, &c, 50.0, {0, 1, 0});
  EXPECT_EQ(s, (std::vector<int64_t>{0, kOnset + 480, kOffset - 480}));
  EXPECT_EQ(c.edges, 2);
  EXPECT_EQ(c.loud, 2);
  EXPECT_EQ(c.moved, 0);
  // no silence at all: no edge
  eval::SilenceEdgeCount c2;
  const std::vector<int64_t> s2 = refine(kOnset + 480, kOffset - 480, &c2, 50.0, {0, 0, 0});
  EXPECT_EQ(s2[1], kOnset + 480);
  EXPECT_EQ(c2.edges, 0);
}

TEST(SilenceEdges, BadInputAndOptions) {
  const std::vector<float> x = burst();
  std::vector<int64_t> starts{0, 100, 100};
  EXPECT_THROW(eval::refine_silence_edges(x.data(), kN, kRate, {1, 0, 1}, kN, {}, &starts), std::invalid_argument);
  starts = {0, 100};
  EXPECT_THROW(eval::refine_silence_edges(x.data(), kN, kRate, {1, 0, 1}, kN, {}, &starts), std::invalid_argument);
  EXPECT_THROW(eval::refine_silence_edges(x.data(), kN, kRate, {1, 0}, kN + 1, {}, &starts), std::invalid_argument);
  eval::SilenceEdgeOptions o;
  o.margin_db = 0;
  EXPECT_THROW(eval::check_silence_edge_options(o), std::invalid_argument);
  o.margin_db = 10;
  o.max_move_ms = -1;
  EXPECT_THROW(eval::check_silence_edge_options(o), std::invalid_argument);
  o.max_move_ms = NAN;
  EXPECT_THROW(eval::check_silence_edge_options(o), std::invalid_argument);
  o.max_move_ms = 50;
  o.min_quiet_pct = 0;
  EXPECT_THROW(eval::check_silence_edge_options(o), std::invalid_argument);
  o.min_quiet_pct = 101;
  EXPECT_THROW(eval::check_silence_edge_options(o), std::invalid_argument);
  o.min_quiet_pct = 100;
  EXPECT_NO_THROW(eval::check_silence_edge_options(o));
  EXPECT_TRUE(eval::silence_edges_on(eval::SilenceEdgesSetting::automatic, true));
  EXPECT_FALSE(eval::silence_edges_on(eval::SilenceEdgesSetting::automatic, false));
  EXPECT_TRUE(eval::silence_edges_on(eval::SilenceEdgesSetting::on, false));
  EXPECT_FALSE(eval::silence_edges_on(eval::SilenceEdgesSetting::off, true));
}
