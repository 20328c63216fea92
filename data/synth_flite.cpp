// The flite speech corpus; see data/synth_flite.h and docs/synth.md.
#include "data/synth_flite.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "data/features.h"  // resample (libsoxr)
#include "data/flite_tts.h"
#include "data/synth_internal.h"

namespace timitseg::data {

using synth_detail::hash_str;
using synth_detail::mix;
using synth_detail::Rng;

namespace {

constexpr int kRate = 16000;

// ---- the vocabulary: common English words by part of speech, chosen to cover every
// English phone (zh: measure, usual, vision; oy: boy, voice; uh: book, good; th/dh; ng; ...)
const std::vector<std::string> kDet = {"the", "a", "this", "that", "every", "some", "my", "his", "her", "our",
                                       "their", "your", "one", "no", "each", "another"};
const std::vector<std::string> kAdj = {
    "big",    "small",  "old",     "young",  "new",    "good",    "bad",    "red",     "blue",    "green",
    "yellow", "black",  "white",   "brown",  "warm",   "cold",    "hot",    "cool",    "quiet",   "loud",
    "happy",  "sad",    "tired",   "busy",   "early",  "late",    "long",   "short",   "tall",    "heavy",
    "light",  "soft",   "hard",    "strong", "weak",   "rich",    "poor",   "clean",   "dirty",   "fresh",
    "sweet",  "bitter", "usual",   "strange","pleasant","careful","simple", "quick",   "slow",    "thick",
    "thin",   "smooth", "rough",   "bright", "dark",   "cheap",   "large",  "huge",    "tiny",    "famous",
    "gentle", "angry",  "hungry",  "thirsty","nervous","curious", "jolly",  "genuine", "casual",  "royal"};
const std::vector<std::string> kNoun = {
    "man",      "woman",   "child",    "boy",      "girl",     "teacher", "doctor",  "farmer",   "driver",  "friend",
    "mother",   "father",  "brother",  "sister",   "family",   "dog",     "cat",     "horse",    "bird",    "fish",
    "house",    "garden",  "kitchen",  "window",   "door",     "table",   "chair",   "bed",      "book",    "letter",
    "paper",    "picture", "music",    "song",     "voice",    "story",   "question","answer",   "idea",    "problem",
    "car",      "truck",   "boat",     "train",    "plane",    "road",    "street",  "bridge",   "river",   "lake",
    "ocean",    "mountain","valley",   "forest",   "tree",     "flower",  "grass",   "field",    "farm",    "village",
    "city",     "town",    "school",   "office",   "market",   "church",  "hospital","library",  "museum",  "station",
    "money",    "coin",    "watch",    "clock",    "hour",     "minute",  "morning", "evening",  "night",   "week",
    "year",     "summer",  "winter",   "autumn",   "weather",  "rain",    "snow",    "wind",     "sun",     "moon",
    "water",    "coffee",  "juice",    "bread",    "cheese",   "butter",  "sugar",   "orange",   "apple",   "egg",
    "shoe",     "shirt",   "jacket",   "hat",      "bag",      "box",     "bottle",  "glass",    "cup",     "knife",
    "treasure", "measure", "vision",   "decision", "pleasure", "garage",  "television","toy",    "coin",    "oil",
    "thing",    "nothing", "king",     "ring",     "song",     "path",    "mouth",   "tooth",    "thumb",   "health",
    "judge",    "bridge",  "cabbage",  "chicken",  "cheese",   "jewel",   "journey", "giant",    "engine",  "machine"};
const std::vector<std::string> kVerb = {
    "saw",     "found",   "took",    "gave",    "made",    "brought", "bought",  "sold",    "kept",    "left",
    "moved",   "pushed",  "pulled",  "carried", "painted", "washed",  "cleaned", "fixed",   "opened",  "closed",
    "watched", "heard",   "liked",   "loved",   "wanted",  "needed",  "helped",  "called",  "visited", "followed",
    "caught",  "threw",   "dropped", "lifted",  "touched", "measured","judged",  "changed", "enjoyed", "showed",
    "chose",   "counted", "checked", "reached", "joined",  "thanked", "thought", "passed",  "missed",  "cooked"};
const std::vector<std::string> kPrep = {"in", "on", "at", "near", "under", "over", "behind", "with", "from",
                                        "beside", "through", "across", "toward", "without", "after", "before"};
const std::vector<std::string> kSubjPron = {"she", "he", "we", "they", "you", "I"};
const std::vector<std::string> kAdv = {"today", "yesterday", "again", "quickly", "slowly", "usually", "always",
                                       "never", "often", "soon", "there", "here", "together", "early"};

const std::string& pick(Rng& r, const std::vector<std::string>& v) { return v[r.below(static_cast<int>(v.size()))]; }

void noun_phrase(Rng& r, std::vector<std::string>* w) {
  w->push_back(pick(r, kDet));
  if (r.uniform() < 0.45) w->push_back(pick(r, kAdj));
  w->push_back(pick(r, kNoun));
}

// flite's phone -> its TIMIT class, for the map below.
bool is_stop(const std::string& p) { return p == "b" || p == "d" || p == "g" || p == "p" || p == "t" || p == "k"; }

double log_energy(const std::vector<int16_t>& x, int64_t a, int64_t b) {  // dB of the mean square of [a, b)
  double e = 0.0;
  for (int64_t n = a; n < b; ++n) e += static_cast<double>(x[n]) * x[n];
  return 10.0 * std::log10(e / static_cast<double>(std::max<int64_t>(1, b - a)) + 1.0);
}

}  // namespace

const std::vector<std::string>& flite_vocabulary() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> all;
    for (const auto* l : {&kDet, &kAdj, &kNoun, &kVerb, &kPrep, &kSubjPron, &kAdv}) all.insert(all.end(), l->begin(), l->end());
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    return all;
  }();
  return v;
}

// Grammar: S -> (pronoun | NP) verb NP [PP | adverb]* ; NP -> det [adj] noun ; PP -> prep NP;
// a comma (flite: a pause) before some PPs. Redrawn until 4-10 words.
std::string flite_sentence(uint64_t seed) {
  Rng r(seed);
  for (;;) {
    const int target = 4 + r.below(7);  // 4..10
    std::vector<std::string> w;
    std::vector<bool> comma_before;
    if (r.uniform() < 0.3) w.push_back(pick(r, kSubjPron));
    else noun_phrase(r, &w);
    w.push_back(pick(r, kVerb));
    noun_phrase(r, &w);
    comma_before.assign(w.size(), false);
    while (static_cast<int>(w.size()) < target) {
      const bool comma = r.uniform() < 0.25;
      const size_t at = w.size();
      if (target - static_cast<int>(w.size()) == 1 || r.uniform() < 0.2) {
        w.push_back(pick(r, kAdv));
      } else {
        w.push_back(pick(r, kPrep));
        noun_phrase(r, &w);
      }
      comma_before.resize(w.size(), false);
      comma_before[at] = comma;
    }
    if (w.size() > 10) continue;
    std::string s;
    for (size_t i = 0; i < w.size(); ++i) {
      if (i > 0) s += comma_before[i] ? ", " : " ";
      std::string word = w[i];
      if (i == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      s += word;
    }
    return s + ".";
  }
}

const std::vector<std::string>& flite_emitted_phones() {
  // cmulex (CMUdict's 39 phones) + ax (its unstressed ah) + pau; measured in
  // tests/data/test_synth_flite.cpp over the whole vocabulary and random sentences.
  static const std::vector<std::string> v = {
      "aa", "ae", "ah", "ao", "aw", "ax", "ay", "b",  "ch", "d",  "dh", "eh", "er", "ey", "f",  "g",  "hh",
      "ih", "iy", "jh", "k",  "l",  "m",  "n",  "ng", "ow", "oy", "p",  "r",  "s",  "sh", "t",  "th", "uh",
      "uw", "v",  "w",  "y",  "z",  "zh", "pau"};
  return v;
}

std::vector<std::string> flite_to_timit(const std::string& p, bool stressed, bool edge) {
  static const std::vector<std::string>& known = flite_emitted_phones();
  if (std::find(known.begin(), known.end(), p) == known.end())
    throw std::invalid_argument("flite phone '" + p + "' has no TIMIT mapping");
  if (p == "pau") return {edge ? "h#" : "pau"};
  if (is_stop(p)) return {p + "cl", p};
  if (p == "ch") return {"tcl", "ch"};
  if (p == "jh") return {"dcl", "jh"};
  if (!stressed) {  // TIMIT's reduced vowels
    if (p == "ih") return {"ix"};
    if (p == "ah") return {"ax"};
    if (p == "er") return {"axr"};
  }
  return {p};
}

int64_t release_onset(const std::vector<int16_t>& x, int64_t start, int64_t end, int64_t fallback, int64_t min_part,
                      bool* found) {
  if (end - start < 2 * min_part) throw std::invalid_argument("release_onset: segment shorter than two parts");
  const int64_t W = kRate / 200, hop = kRate / 1000;  // 5 ms windows, 1 ms steps
  // the last run of candidate points whose rise (right window over left, dB) reaches
  // kBurstRiseDb; the split is that run's largest rise
  int64_t best = -1;
  double best_rise = 0.0;
  bool in_run = false;
  for (int64_t n = start + std::max(W, min_part); n + std::max(W, min_part) <= end; n += hop) {
    const double rise = log_energy(x, n, n + W) - log_energy(x, n - W, n);
    if (rise >= kBurstRiseDb) {
      if (!in_run) { best = n; best_rise = rise; in_run = true; }  // a new run replaces the earlier ones
      else if (rise > best_rise) { best = n; best_rise = rise; }
    } else {
      in_run = false;
    }
  }
  if (found) *found = best >= 0;
  if (best >= 0) return best;
  return std::clamp(fallback, start + min_part, end - min_part);
}

FliteSpeaker flite_speaker(const SynthSpeaker& spk, uint64_t seed) {
  Rng r(mix(mix(seed, hash_str(spk.id)), 0xf117e));
  FliteSpeaker f;
  f.voice = spk.id[0] == 'f' ? "slt" : (r.uniform() < 0.5 ? "awb" : "rms");
  f.stretch = std::clamp(std::exp(0.10 * r.normal()), 0.8, 1.25);
  f.f0_scale = std::clamp(std::exp(0.10 * r.normal()), 0.8, 1.25);
  f.f0_range = std::clamp(std::exp(0.20 * r.normal()), 0.6, 1.6);
  f.warp = std::clamp(std::exp(0.035 * r.normal()), 0.92, 1.08);
  f.gain = std::exp(0.2 * r.normal());
  return f;
}

SynthUtterance synth_flite_utterance(const SynthSpeaker& spk, uint64_t seed, int index, bool sa, double noise_db) {
  if (!flite_built_in()) throw std::runtime_error(flite_missing_message());
  const FliteSpeaker fs = flite_speaker(spk, seed);
  Rng rng(mix(mix(seed, hash_str(spk.id)), static_cast<uint64_t>(index) + (sa ? 1000003 : 0)));
  // SA sentences share their text across speakers (as in TIMIT)
  const std::string text = flite_sentence(sa ? mix(seed, 0x5a5a) : rng.next());
  double f0_mean = 0, f0_sd = 0;
  flite_voice_f0(fs.voice, &f0_mean, &f0_sd);
  FliteRequest req;
  req.voice = fs.voice;
  req.text = text;
  req.duration_stretch = fs.stretch * std::exp(0.05 * rng.normal());  // per utterance
  req.f0_mean = f0_mean * fs.f0_scale * std::exp(0.04 * rng.normal());
  req.f0_stddev = f0_sd * fs.f0_range;
  req.rand_seed = static_cast<unsigned>(rng.next() >> 33);
  const FliteOutput out = flite_speak(req);
  const std::vector<int16_t>& x = out.samples;
  const int64_t N0 = static_cast<int64_t>(x.size());
  if (out.segments.empty() || N0 == 0) throw std::runtime_error("flite: empty utterance for \"" + text + "\"");

  // ---- flite's segments -> TIMIT phones at the native rate (boundaries in samples) ----
  struct Ph { int64_t end; std::string label; };
  std::vector<Ph> native;
  const int64_t min_part = out.sample_rate / 400;  // 2.5 ms
  int64_t prev = 0;
  for (size_t i = 0; i < out.segments.size(); ++i) {
    const FliteSegment& s = out.segments[i];
    const bool last = i + 1 == out.segments.size();
    int64_t end = last ? N0 : std::min<int64_t>(N0, std::llround(s.end_s * out.sample_rate));
    if (end <= prev) continue;  // empty after rounding (never seen): dropped
    const auto labels = flite_to_timit(s.phone, s.stressed, i == 0 || last);
    if (labels.size() == 2 && end - prev >= 2 * min_part) {
      const int64_t fb = std::llround(s.last_state_start_s * out.sample_rate);
      const int64_t split = release_onset(x, prev, end, fb, min_part);
      native.push_back({split, labels[0]});
      native.push_back({end, labels[1]});
    } else {
      native.push_back({end, labels.back()});
    }
    prev = end;
  }

  // ---- speaker warp (pitch and formants x warp) and the 16 kHz output rate, by libsoxr ----
  const int from = static_cast<int>(std::lround(out.sample_rate * fs.warp));
  std::vector<float> xf(x.begin(), x.end());
  const std::vector<float> y = resample(xf, from, kRate);
  const int64_t N = static_cast<int64_t>(y.size());
  SynthUtterance u;
  int64_t start = 0;
  for (size_t i = 0; i < native.size(); ++i) {
    int64_t end = i + 1 == native.size() ? N : std::llround(static_cast<double>(native[i].end) * kRate / from);
    end = std::min(end, N);
    if (end <= start) continue;
    u.phones.push_back({start, end, native[i].label});
    start = end;
  }
  if (u.phones.empty() || u.phones.back().end != N) throw std::runtime_error("flite: no phones for \"" + text + "\"");

  // ---- loudness (the speaker's gain) and a noise floor (synth_detail::level_and_noise) ----
  u.samples = synth_detail::level_and_noise(
      y, u.phones, [](const std::string& l) { return l == "h#" || l == "pau"; },
      [&](double) { return fs.gain; }, noise_db, rng);
  return u;
}

}  // namespace timitseg::data
