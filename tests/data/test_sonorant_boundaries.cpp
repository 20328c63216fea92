// data::transition_middles (data/transitions.h) and data::move_sonorant_boundaries
// (data/espeak_tts.h): between two sonorants a boundary goes to the middle of the
// spectral transition. The oracle is a signal made here: two
// steady "phones" of known spectra joined by a linear cross-fade, whose middle is known
// by construction; controls: an obstruent label, a phone under 30 ms, a boundary already
// at the middle. Needs no libespeak-ng (the function is plain signal processing).
#include <gtest/gtest.h>

#include <cmath>

#include "data/espeak_tts.h"
#include "data/transitions.h"

using namespace timitseg::data;

namespace {

constexpr int kRate = 22050;  // espeak-ng's rate

int64_t ms(double t) { return std::llround(t * kRate / 1000.0); }

// [0, fade_start) spectrum A (500 + 1500 Hz), [fade_start, fade_end) a linear cross-fade of
// the amplitudes, [fade_end, end) spectrum B (900 + 2500 Hz), then (optionally) A again.
std::vector<int16_t> two_spectra(int64_t fade_start, int64_t fade_end, int64_t end, int64_t back_to_a = -1) {
  std::vector<int16_t> x(end);
  const double pi = 3.14159265358979323846;
  for (int64_t n = 0; n < end; ++n) {
    const double t = double(n) / kRate;
    const double a = std::sin(2 * pi * 500 * t) + 0.5 * std::sin(2 * pi * 1500 * t);
    const double b = std::sin(2 * pi * 900 * t) + 0.5 * std::sin(2 * pi * 2500 * t);
    double w = n < fade_start ? 1.0 : n >= fade_end ? 0.0 : 1.0 - double(n - fade_start) / double(fade_end - fade_start);
    if (back_to_a >= 0 && n >= back_to_a) w = 1.0;
    x[n] = static_cast<int16_t>(std::lround(8000.0 * (w * a + (1.0 - w) * b)));
  }
  return x;
}

std::vector<EspeakPhone> tiling(std::initializer_list<std::pair<int64_t, const char*>> starts) {
  std::vector<EspeakPhone> p;
  for (const auto& [s, label] : starts) p.push_back({s, 0, label, 0});
  return p;
}

}  // namespace

TEST(SonorantBoundaries, SonorantLabelsByTheirFirstSymbol) {
  for (const char* s : {"a", "eː", "aʊ", "ɔ̃", "ə", "ər", "i.", "onɡ", "m", "ŋ", "ɲ", "l", "ʎ", "r", "ɾ", "j", "w", "ʋ"})
    EXPECT_TRUE(is_sonorant_label(s)) << s;
  for (const char* s : {"sil", "s", "t", "ts", "tʃ", "ʁ", "x", "β", "ð", "ʲ", "h", "", "\xC3"})
    EXPECT_FALSE(is_sonorant_label(s)) << s;
  EXPECT_EQ(sonorant_class("eː"), 'V');
  EXPECT_EQ(sonorant_class("ŋ"), 'N');
  EXPECT_EQ(sonorant_class("ʎ"), 'L');
  EXPECT_EQ(sonorant_class("ʋ"), 'G');
  EXPECT_EQ(sonorant_class("ʁ"), 0);
}

// espeak's event after the transition (as measured into a vowel from a nasal or liquid):
// the boundary moves back to the cross-fade's middle (140 ms), within one frame shift.
TEST(SonorantBoundaries, LateEventMovesToTheMiddleOfTheTransition) {
  const auto x = two_spectra(ms(120), ms(160), ms(320));
  for (const char* later : {"l", "a", "n", "j"}) {
    auto p = tiling({{0, "e"}, {ms(160), later}});
    move_sonorant_boundaries(x, kRate, &p);
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].start, 0);
    EXPECT_NEAR(double(p[1].start), double(ms(140)), double(ms(5))) << later;
  }
  // an event before the transition moves forward to its middle alike
  auto p = tiling({{0, "a"}, {ms(115), "m"}});
  move_sonorant_boundaries(x, kRate, &p);
  EXPECT_NEAR(double(p[1].start), double(ms(140)), double(ms(5)));
}

TEST(SonorantBoundaries, ObstruentsShortPhonesAndSettledBoundariesStay) {
  const auto x = two_spectra(ms(120), ms(160), ms(320));
  for (const char* later : {"s", "t", "ʁ", "sil"}) {  // not two sonorants
    auto p = tiling({{0, "a"}, {ms(160), later}});
    move_sonorant_boundaries(x, kRate, &p);
    EXPECT_EQ(p[1].start, ms(160)) << later;
  }
  {  // the later phone under 30 ms (the audio ends 25 ms after the event)
    const auto y = two_spectra(ms(120), ms(160), ms(185));
    auto p = tiling({{0, "a"}, {ms(160), "l"}});
    move_sonorant_boundaries(y, kRate, &p);
    EXPECT_EQ(p[1].start, ms(160));
  }
  {  // a boundary already at the middle stays within a frame shift
    auto p = tiling({{0, "a"}, {ms(140), "l"}});
    move_sonorant_boundaries(x, kRate, &p);
    EXPECT_NEAR(double(p[1].start), double(ms(140)), double(ms(5)));
  }
}

// Three phones a-l-a, the second boundary an abrupt return to A: the first moves to the
// fade's middle, the second stays at the abrupt change (within a frame shift); the middle
// phone keeps its samples and the tiling stays ordered.
TEST(SonorantBoundaries, EachBoundaryMovesAloneAndTheTilingStaysOrdered) {
  const auto x = two_spectra(ms(120), ms(160), ms(400), ms(250));
  auto p = tiling({{0, "a"}, {ms(160), "l"}, {ms(250), "a"}});
  move_sonorant_boundaries(x, kRate, &p);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_NEAR(double(p[1].start), double(ms(140)), double(ms(5)));
  EXPECT_NEAR(double(p[2].start), double(ms(250)), double(ms(5)));
  EXPECT_LT(p[0].start, p[1].start);
  EXPECT_LT(p[1].start, p[2].start);
  // too short an audio for one frame: nothing moves, nothing throws
  std::vector<int16_t> tiny(100, 0);
  auto q = tiling({{0, "a"}, {50, "l"}});
  move_sonorant_boundaries(tiny, kRate, &q);
  EXPECT_EQ(q[1].start, 50);
}

// transition_middles itself knows no labels: every boundary gets its middle (what
// bench/boundary_lags measures), -1 before the first phone and where a phone is short.
TEST(SonorantBoundaries, TransitionMiddlesAtEveryBoundaryOfATiling) {
  const auto x = two_spectra(ms(120), ms(160), ms(400), ms(250));
  Audio audio;
  audio.sample_rate = kRate;
  audio.samples.assign(x.begin(), x.end());
  const auto m = transition_middles(audio, {0, ms(160), ms(250)});
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], -1);
  EXPECT_NEAR(double(m[1]), double(ms(140)), double(ms(5)));
  EXPECT_NEAR(double(m[2]), double(ms(250)), double(ms(5)));
  const auto short_phone = transition_middles(audio, {0, ms(160), ms(180)});  // [160, 180) ms: 20 ms
  EXPECT_EQ(short_phone[1], -1);
  EXPECT_EQ(short_phone[2], -1);
}
