// Synthetic TIMIT-like corpus; see data/synth.h and docs/synth.md.
#include "data/synth.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "data/corpus.h"
#include "data/timit_lists.h"
#include "data/synth_internal.h"
#include "data/synth_specs.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

using synth_detail::Rng;
using synth_detail::hash_str;
using synth_detail::mix;
constexpr double kPi = 3.14159265358979323846;
constexpr double kRate = 16000.0;

using synth_detail::Kind;
using synth_detail::Spec;
const std::map<std::string, Spec>& specs() { return synth_detail::phone_specs(); }

using W = std::vector<std::pair<std::string, double>>;
const W kVowels = {{"iy", 6}, {"ih", 6}, {"eh", 4}, {"ae", 4}, {"aa", 4}, {"ah", 3}, {"ao", 3}, {"uh", 1},
                   {"uw", 2}, {"ux", 2}, {"er", 2}, {"axr", 3}, {"ix", 8}, {"ax", 6}, {"ey", 3}, {"ay", 3},
                   {"oy", 1}, {"aw", 1}, {"ow", 2}};
const W kOnsets = {{"b", 3}, {"d", 4}, {"g", 2}, {"p", 3}, {"t", 5}, {"k", 4}, {"s", 5}, {"sh", 2}, {"f", 3},
                   {"th", 1}, {"v", 2}, {"dh", 4}, {"z", 1}, {"hh", 3}, {"hv", 1}, {"m", 4}, {"n", 4},
                   {"l", 4}, {"r", 4}, {"w", 3}, {"y", 2}, {"ch", 1}, {"jh", 1}};
const W kCodas = {{"n", 6}, {"m", 3}, {"ng", 2}, {"t", 5}, {"d", 4}, {"k", 3}, {"p", 2}, {"s", 5}, {"z", 4},
                  {"l", 4}, {"r", 3}, {"v", 2}, {"f", 1}, {"sh", 1}, {"th", 1}, {"el", 1}, {"en", 1}, {"zh", 0.3},
                  {"em", 0.3}};

bool is_stop(const std::string& p) { return p == "b" || p == "d" || p == "g" || p == "p" || p == "t" || p == "k"; }
std::string closure_of(const std::string& p) {
  if (p == "ch") return "tcl";
  if (p == "jh") return "dcl";
  return p + "cl";
}

// Word-level phone string (no closures yet) -> 61-set phone sequence.
std::vector<std::string> sentence_phones(Rng& rng, int words) {
  std::vector<std::string> seq{"h#"};
  for (int w = 0; w < words; ++w) {
    std::vector<std::string> word;
    const int syl = rng.pick<int>({{1, 0.5}, {2, 0.35}, {3, 0.15}});
    for (int s = 0; s < syl; ++s) {
      const double r = rng.uniform();
      if (r < 0.12) {  // cluster
        if (rng.uniform() < 0.5) { word.push_back("s"); word.push_back(rng.pick<std::string>({{"t", 1}, {"p", 1}, {"k", 1}})); }
        else { word.push_back(rng.pick<std::string>({{"b", 1}, {"p", 1}, {"k", 1}, {"g", 1}, {"t", 1}})); word.push_back(rng.pick<std::string>({{"r", 2}, {"l", 1}})); }
      } else if (r < 0.7) {
        word.push_back(rng.pick(kOnsets));
      }
      word.push_back(rng.pick(kVowels));
      const double c = rng.uniform();
      if (c < 0.4) word.push_back(rng.pick(kCodas));
      else if (c < 0.47) { word.push_back(rng.pick<std::string>({{"n", 2}, {"s", 2}, {"m", 1}})); word.push_back(rng.pick<std::string>({{"t", 2}, {"d", 1}, {"p", 1}})); }
    }
    if (w > 0 && rng.uniform() < 0.1) seq.push_back("pau");
    if (specs().at(word[0]).kind == Kind::Vowel && rng.uniform() < 0.2) seq.push_back("q");
    for (const auto& p : word) seq.push_back(p);
  }
  seq.push_back("h#");
  // stops and affricates get their closure; intervocalic t/d may become a flap;
  // a short epenthetic silence sometimes precedes a closure
  std::vector<std::string> out;
  for (size_t i = 0; i < seq.size(); ++i) {
    const std::string& p = seq[i];
    const bool prev_v = i > 0 && specs().at(seq[i - 1]).kind == Kind::Vowel;
    const bool next_v = i + 1 < seq.size() && specs().at(seq[i + 1]).kind == Kind::Vowel;
    if ((p == "t" || p == "d") && prev_v && next_v && rng.uniform() < 0.35) { out.push_back("dx"); continue; }
    if (is_stop(p) || p == "ch" || p == "jh") {
      if (specs().at(out.back()).kind == Kind::Nasal && rng.uniform() < 0.05) out.push_back("epi");
      out.push_back(closure_of(p));
      // a stop before a consonant or the final silence is often unreleased (closure only), as in TIMIT
      if (is_stop(p) && i + 1 < seq.size() && specs().at(seq[i + 1]).kind != Kind::Vowel && rng.uniform() < 0.25)
        continue;
    }
    // syllabic variants after a consonant
    if (p == "n" && !prev_v && i > 0 && seq[i - 1] != "h#" && rng.uniform() < 0.5) { out.push_back("en"); continue; }
    if (p == "n" && prev_v && next_v && rng.uniform() < 0.3) { out.push_back("nx"); continue; }
    out.push_back(p);
  }
  return out;
}

// Klatt resonator y = A x + B y1 + C y2 (unity gain at DC).
struct Resonator {
  double a = 1, b = 0, c = 0, y1 = 0, y2 = 0;
  void set(double f, double bw) {
    const double T = 1.0 / kRate;
    c = -std::exp(-2.0 * kPi * bw * T);
    b = 2.0 * std::exp(-kPi * bw * T) * std::cos(2.0 * kPi * f * T);
    a = 1.0 - b - c;
  }
  double step(double x) {
    const double y = a * x + b * y1 + c * y2;
    y2 = y1;
    y1 = y;
    return y;
  }
};

// Constant-peak-gain band-pass biquad (frication noise shaping).
struct BandPass {
  double b0 = 0, b2 = 0, a1 = 0, a2 = 0, x1 = 0, x2 = 0, y1 = 0, y2 = 0;
  void set(double fc, double bw) {
    fc = std::min(fc, 0.45 * kRate);
    const double w0 = 2.0 * kPi * fc / kRate, q = std::max(fc / bw, 0.3);
    const double alpha = std::sin(w0) / (2.0 * q), a0 = 1.0 + alpha;
    b0 = alpha / a0; b2 = -alpha / a0; a1 = -2.0 * std::cos(w0) / a0; a2 = (1.0 - alpha) / a0;
  }
  double step(double x) {
    const double y = b0 * x + b2 * x2 - a1 * y1 - a2 * y2;
    x2 = x1; x1 = x; y2 = y1; y1 = y;
    return y;
  }
};

double rms_where(const std::vector<double>& x, const std::vector<double>& amp, double thr) {
  double s = 0;
  int64_t n = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (amp[i] > thr) { s += x[i] * x[i] / (amp[i] * amp[i]); ++n; }
  return n ? std::sqrt(s / n) : 0.0;
}

}  // namespace

std::vector<SynthSpeaker> synth_speakers(int count, uint64_t seed) {
  if (count < 4) throw std::invalid_argument("synth: --speakers must be >= 4 (TRAIN needs one, TEST three)");
  Rng rng(mix(seed, 0x5eed));
  const int n_test = std::max(3, count / 3);
  // about a third each from the core-test (24) and dev (50) lists, capped by the list sizes
  const int n_core = std::min(24, std::max(1, (n_test + 2) / 3)), n_dev = std::min(50, std::max(1, (n_test + 1) / 3));
  const int n_other = n_test - n_core - n_dev;
  std::vector<std::string> core(core_test_speakers().begin(), core_test_speakers().end());
  std::vector<std::string> dev(dev_speakers().begin(), dev_speakers().end());
  std::set<std::string> used;
  std::vector<SynthSpeaker> out;
  auto add = [&](const std::string& id, SplitName part) {
    used.insert(id);
    SynthSpeaker s;
    s.id = id;
    s.part = part;
    const bool female = id[0] == 'f';
    s.f0 = female ? 205.0 + 20.0 * rng.normal() : 118.0 + 14.0 * rng.normal();
    s.f0 = std::clamp(s.f0, female ? 150.0 : 80.0, female ? 280.0 : 170.0);
    s.vtl = std::clamp((female ? 1.16 : 1.0) + 0.08 * rng.normal(), 0.84, 1.36);
    s.rate = std::clamp(1.0 + 0.12 * rng.normal(), 0.72, 1.35);
    s.gain = std::exp(0.25 * rng.normal());
    // voice quality and accent from a generator of their own (the id draws above stay as they were)
    Rng vr(mix(mix(seed, 0x701ce), hash_str(id)));
    s.tilt_bw = 100.0 * std::exp(0.35 * vr.normal());  // ~50-200 Hz: pressed .. breathy voices
    s.breathy = (female ? 0.25 : 0.12) * std::exp(0.5 * vr.normal());
    for (double& f : s.fscale) f = std::exp(0.04 * vr.normal());
    s.accent = vr.next() | 1;
    out.push_back(s);
  };
  auto take = [&](std::vector<std::string>& list) {  // a random unused entry of an embedded list
    for (;;) {
      const std::string id = list[rng.below(static_cast<int>(list.size()))];
      if (!used.count(id)) return id;
    }
  };
  auto invent = [&] {  // TIMIT style: sex, three initials, digit; never one of the listed TEST speakers
    for (;;) {
      std::string id(1, rng.uniform() < 0.3 ? 'f' : 'm');
      for (int k = 0; k < 3; ++k) id += static_cast<char>('a' + rng.below(26));
      id += '0';
      if (!used.count(id) && !dev_speakers().count(id) && !core_test_speakers().count(id)) return id;
    }
  };
  for (int i = 0; i < n_core; ++i) add(take(core), SplitName::test);
  for (int i = 0; i < n_dev; ++i) add(take(dev), SplitName::test);
  for (int i = 0; i < n_other; ++i) add(invent(), SplitName::test);
  for (int i = 0; i < count - n_test; ++i) add(invent(), SplitName::train);
  for (size_t i = 0; i < out.size(); ++i) out[i].dialect = 1 + static_cast<int>(i % 8);
  return out;
}

namespace {

// Phone durations: log-normal per token, speaker and utterance rate,
// phrase-final lengthening; appends the phones to u (16 kHz samples).
void phone_durations(const SynthSpeaker& spk, const std::vector<std::string>& seq, Rng& rng, SynthUtterance& u) {
  const size_t P = seq.size();
  const double utt_rate = spk.rate * std::exp(0.08 * rng.normal());
  int64_t pos = 0;
  for (size_t i = 0; i < P; ++i) {
    const Spec& sp = specs().at(seq[i]);
    const double sigma = sp.kind == Kind::Silence ? 0.6 : 0.45;
    double ms = sp.dur_ms * std::exp(sigma * rng.normal() - 0.5 * sigma * sigma) * utt_rate;
    if (i + 1 == P || (i + 2 < P && specs().at(seq[i + 1]).kind == Kind::Silence && sp.kind == Kind::Vowel))
      ms *= 1.3;  // phrase-final lengthening
    ms = std::clamp(ms, 8.0, 4.0 * sp.dur_ms);
    const int64_t n = std::max<int64_t>(128, static_cast<int64_t>(ms * 16.0));
    u.phones.push_back({pos, pos + n, seq[i]});
    pos += n;
  }
}

// Per-token formant targets: speaker scale x per-formant scale x accent x token jitter.
// tgt[i][0..2]: start targets, tgt[i][3..5]: end targets (== start for monophthongs); 0: none
std::vector<std::array<double, 6>> formant_targets(const SynthSpeaker& spk, const std::vector<std::string>& seq,
                                                   Rng& rng) {
  const size_t P = seq.size();
  std::vector<std::array<double, 6>> tgt(P, std::array<double, 6>{0, 0, 0, 0, 0, 0});
  for (size_t i = 0; i < P; ++i) {
    const Spec& sp = specs().at(seq[i]);
    if (sp.f1 <= 0) continue;
    Rng acc(mix(spk.accent, hash_str(seq[i])));  // this speaker's habitual realization of this phone
    const double shared = std::exp(0.02 * rng.normal());  // token-wide scale (local vocal-tract shape)
    for (int k = 0; k < 3; ++k) {
      const double accent = spk.accent ? std::exp(0.025 * acc.normal()) : 1.0;
      const double jit = shared * std::exp(0.04 * rng.normal());  // per formant, per token
      const double sc = spk.vtl * spk.fscale[k] * accent * jit;
      const double st = (k == 0 ? sp.f1 : k == 1 ? sp.f2 : sp.f3), en = (k == 0 ? sp.e1 : k == 1 ? sp.e2 : sp.e3);
      tgt[i][k] = st * sc;
      tgt[i][3 + k] = (en > 0 ? en : st) * sc;
    }
  }
  return tgt;
}

struct Anchor { double t, f[3]; };

// Target undershoot (Lindblom): a short segment moves only part of the way from its
// context (the neighbours' targets) to its own target: x = ctx + (t - ctx)(1 - e^{-d/tau}).
// One anchor per monophthong, two per diphthong, at sample times.
std::vector<Anchor> formant_anchors(const SynthSpeaker& spk, const std::vector<std::string>& seq,
                                    const std::vector<std::array<double, 6>>& tgt, const SynthUtterance& u) {
  const size_t P = seq.size();
  std::vector<Anchor> anchors;
  const double neutral[3] = {500.0 * spk.vtl, 1500.0 * spk.vtl, 2500.0 * spk.vtl};
  for (size_t i = 0; i < P; ++i) {
    if (tgt[i][0] <= 0) continue;
    const Spec& sp = specs().at(seq[i]);
    const auto& p = u.phones[i];
    const double len = static_cast<double>(p.end - p.start), dur_ms = len / 16.0;
    const double tau = sp.kind == Kind::Vowel ? 25.0 : 20.0;
    const double reach = 1.0 - std::exp(-dur_ms / tau);
    const bool has_prev = i > 0 && tgt[i - 1][0] > 0, has_next = i + 1 < P && tgt[i + 1][0] > 0;
    double left[3], right[3];
    for (int k = 0; k < 3; ++k) {
      left[k] = has_prev ? tgt[i - 1][3 + k] : (has_next ? tgt[i + 1][k] : neutral[k]);
      right[k] = has_next ? tgt[i + 1][k] : (has_prev ? tgt[i - 1][3 + k] : neutral[k]);
    }
    if (sp.e1 > 0) {  // diphthong: onset pulled by the left context, offglide by the right
      Anchor a0{p.start + 0.2 * len, {}}, a1{p.start + 0.8 * len, {}};
      for (int k = 0; k < 3; ++k) {
        a0.f[k] = left[k] + reach * (tgt[i][k] - left[k]);
        a1.f[k] = right[k] + reach * (tgt[i][3 + k] - right[k]);
      }
      anchors.push_back(a0);
      anchors.push_back(a1);
    } else {
      Anchor a{p.start + 0.5 * len, {}};
      for (int k = 0; k < 3; ++k) {
        const double ctx = 0.5 * (left[k] + right[k]);
        a.f[k] = ctx + reach * (tgt[i][k] - ctx);
      }
      anchors.push_back(a);
    }
  }

  return anchors;
}

// The control tracks of the synthesizer, one value per sample [N].
struct Tracks {
  std::vector<double> av, af, ah, fc, fbw, bwscale, gbw, f1, f2, f3;
};

// Per-token amplitude, voicing, frication place and glottal tilt tracks.
Tracks control_tracks(const SynthSpeaker& spk, const std::vector<std::string>& seq, const SynthUtterance& u,
                      int64_t N, Rng& rng) {
  const size_t P = seq.size();
  Tracks tr{std::vector<double>(N), std::vector<double>(N), std::vector<double>(N), std::vector<double>(N),
            std::vector<double>(N), std::vector<double>(N), std::vector<double>(N), std::vector<double>(N),
            std::vector<double>(N), std::vector<double>(N)};
  auto& [av, af, ah, fc, fbw, bwscale, gbw, f1, f2, f3] = tr;
  const double utt_tilt = spk.tilt_bw * std::exp(0.15 * rng.normal());
  for (size_t i = 0; i < P; ++i) {
    const auto& p = u.phones[i];
    const Spec& sp = specs().at(p.label);
    const bool burst = sp.kind == Kind::Burst;
    const double gain = std::exp(0.25 * rng.normal());  // token loudness (stress, emphasis)
    double voicing = sp.av;
    const bool voiced_obstruent = sp.av > 0 && (sp.kind == Kind::Fric || sp.kind == Kind::Burst ||
                                                sp.kind == Kind::Closure);
    const bool voiceless_obstruent = sp.av == 0 && (sp.kind == Kind::Fric || sp.kind == Kind::Burst ||
                                                    sp.kind == Kind::Closure);
    if (voiced_obstruent) voicing *= 0.25 + 1.15 * rng.uniform();  // partial devoicing, as in running speech
    if (voiceless_obstruent && rng.uniform() < 0.3) voicing = 0.12 * rng.uniform();  // voicing carry-over
    double asp_amp = sp.ah;
    if (burst && sp.ah > 0 && i >= 2 && seq[i - 2] == "s") asp_amp *= 0.15;  // s+stop: unaspirated
    const double place = std::exp(0.1 * rng.normal()), width = std::exp(0.2 * rng.normal());
    const double release = 0.012 * std::exp(0.3 * rng.normal());  // burst transient decay (s)
    const double tilt = utt_tilt * std::exp(0.2 * rng.normal());
    const double bws = (sp.kind == Kind::Nasal ? 2.2 : (sp.kind == Kind::Closure ? 3.0 : 1.0)) *
                       std::exp(0.15 * rng.normal());
    for (int64_t n = p.start; n < p.end; ++n) {
      const double tau = (n - p.start) / kRate;
      const double decay = burst ? std::exp(-tau / release) : 1.0;  // burst transient, then aspiration
      av[n] = voicing * gain;
      af[n] = sp.af * decay * gain;
      ah[n] = asp_amp * (burst ? (1.0 - decay) : 1.0) * gain;
      fc[n] = sp.fc * spk.vtl * place;
      fbw[n] = sp.fbw * width;
      bwscale[n] = bws;
      gbw[n] = tilt;
    }
  }
  return tr;
}

// Formants piecewise-linear between anchors (across phone boundaries), then the amplitude
// tracks smoothed by one pole (~4 ms) so boundaries are quick but click-free.
void formant_and_smooth_tracks(const std::vector<Anchor>& anchors, int64_t N, Tracks& tr) {
  auto& [av, af, ah, fc, fbw, bwscale, gbw, f1, f2, f3] = tr;
  size_t k = 0;
  for (int64_t n = 0; n < N; ++n) {
    while (k + 1 < anchors.size() && anchors[k + 1].t <= n) ++k;
    const Anchor& a = anchors[k];
    const Anchor& b = anchors[std::min(k + 1, anchors.size() - 1)];
    double w = (b.t > a.t) ? std::clamp((n - a.t) / (b.t - a.t), 0.0, 1.0) : 0.0;
    if (n < anchors[0].t) w = 0.0;
    f1[n] = a.f[0] + w * (b.f[0] - a.f[0]);
    f2[n] = a.f[1] + w * (b.f[1] - a.f[1]);
    f3[n] = a.f[2] + w * (b.f[2] - a.f[2]);
  }
  const double alpha = 1.0 - std::exp(-1.0 / (0.004 * kRate));
  for (auto* tr2 : {&av, &af, &ah}) {
    double s = 0;
    for (int64_t n = 0; n < N; ++n) { s += alpha * ((*tr2)[n] - s); (*tr2)[n] = s; }
  }

}

// The three source paths through their filters, one value per sample [N].
struct Paths {
  std::vector<double> voiced, fric, asp;
};

// Sources and filters: glottal pulses (F0 contour, jitter, shimmer) through the
// glottal low-pass, lip radiation and the formant cascade; aspiration through the
// same cascade; frication noise through its band-pass.
Paths source_paths(const SynthSpeaker& spk, const Tracks& tr, int64_t N, Rng& rng) {
  const auto& [av, af, ah, fc, fbw, bwscale, gbw, f1, f2, f3] = tr;
  std::vector<double> voiced(N, 0.0), fric(N, 0.0), asp(N, 0.0);
  Resonator glottal;  // glottal pulse shaping: low-pass (Klatt RGP: F=0, BW per speaker / token)
  Resonator casc[5], casc_asp[5];
  BandPass bp;
  double phase = 1.0, period_jitter = 0.0, pulse_amp = 1.0, prev_v = 0.0;
  const double dur_s = N / kRate;
  // F0 contour: declination from a random onset to a random offset, two slow random
  // intonation components, vibrato-like wobble; 1.5% period jitter, ~1 dB shimmer
  const double f0_on = 1.05 + 0.12 * rng.uniform(), f0_off = 0.78 + 0.12 * rng.uniform();
  const double in1 = 0.5 + rng.uniform(), in2 = 1.5 + 1.5 * rng.uniform();
  const double ip1 = 2 * kPi * rng.uniform(), ip2 = 2 * kPi * rng.uniform();
  const double ia1 = 0.05 + 0.05 * rng.uniform(), ia2 = 0.02 + 0.03 * rng.uniform();
  for (int64_t n = 0; n < N; ++n) {
    if (n % 32 == 0) {
      const double bs = bwscale[n];
      const double F[5] = {f1[n], f2[n], f3[n], 3500.0 * spk.vtl, 4500.0 * spk.vtl};
      const double B[5] = {70.0 * bs, 100.0 * bs, 150.0 * bs, 250.0, 300.0};
      for (int r = 0; r < 5; ++r) {
        const double f = std::min(F[r], 0.45 * kRate);
        casc[r].set(f, B[r]);
        casc_asp[r].set(f, B[r]);
      }
      if (fbw[n] > 0) bp.set(fc[n], fbw[n]);
      glottal.set(0.0, gbw[n]);
    }
    const double t = n / kRate;
    const double f0 = spk.f0 * (f0_on + (f0_off - f0_on) * t / dur_s) *
                      (1.0 + ia1 * std::sin(2 * kPi * in1 * t + ip1) + ia2 * std::sin(2 * kPi * in2 * t + ip2));
    phase += f0 * (1.0 + period_jitter) / kRate;
    double pulse = 0.0;
    if (phase >= 1.0) {
      phase -= std::floor(phase);
      pulse = pulse_amp;
      period_jitter = 0.015 * rng.normal();
      pulse_amp = std::exp(0.12 * rng.normal());
    }
    const double noise = rng.normal();
    double v = glottal.step(pulse * av[n]);
    const double rad = v - prev_v;  // lip radiation (first difference)
    prev_v = v;
    v = rad;
    double a = noise * (ah[n] + spk.breathy * av[n]);  // aspiration + breathy voicing
    for (int r = 0; r < 5; ++r) { v = casc[r].step(v); a = casc_asp[r].step(a); }
    voiced[n] = v;
    asp[n] = a;
    fric[n] = fbw[n] > 0 ? bp.step(noise * af[n]) : 0.0;
  }
  return Paths{std::move(voiced), std::move(fric), std::move(asp)};
}

// Levels (the voicing, frication and aspiration paths normalized separately),
// then channel and background noise, rounded into u.samples.
void mix_to_samples(const SynthSpeaker& spk, const Paths& paths, const Tracks& tr, int64_t N, double noise_db, Rng& rng,
                    SynthUtterance& u) {
  const auto& [voiced, fric, asp] = paths;
  const auto& av = tr.av;
  const auto& af = tr.af;
  const auto& ah = tr.ah;
  const double rv = rms_where(voiced, av, 0.5), rf = rms_where(fric, af, 0.2), ra = rms_where(asp, ah, 0.2);
  const double target = 2200.0 * spk.gain;
  std::vector<double> y(N);
  for (int64_t n = 0; n < N; ++n)
    y[n] = target * ((rv > 0 ? voiced[n] / rv : 0.0) + 0.4 * (rf > 0 ? fric[n] / rf : 0.0) +
                     0.25 * (ra > 0 ? asp[n] / ra : 0.0));
  // ---- channel and background noise: per-utterance microphone tilt; noise at a per-utterance
  // level noise_db +- 7 dB, a random mix of white and low-pass (pink/brown-like) noise ----
  const double chan = 0.3 * (2.0 * rng.uniform() - 1.0);
  const double noise_rms = target * std::pow(10.0, (noise_db + 14.0 * (rng.uniform() - 0.5)) / 20.0);
  const double colour = rng.uniform(), pole = 0.8 + 0.18 * rng.uniform();
  const double cw = std::sqrt(1.0 - colour), cc = std::sqrt(colour), innov = std::sqrt(1.0 - pole * pole);
  double lp = 0.0, prev_y = 0.0;
  u.samples.resize(N);
  for (int64_t n = 0; n < N; ++n) {
    const double yc = y[n] + chan * prev_y;
    prev_y = y[n];
    const double w = rng.normal();
    lp = pole * lp + innov * rng.normal();  // unit-variance AR(1) noise
    const double s = std::round(yc + noise_rms * (cw * w + cc * lp));
    u.samples[n] = static_cast<int16_t>(std::clamp(s, -32768.0, 32767.0));
  }
}

}  // namespace

// The stages, in the order they draw from the utterance's random engine.
SynthUtterance synth_utterance(const SynthSpeaker& spk, uint64_t seed, int index, bool sa, double noise_db) {
  Rng rng(mix(mix(seed, hash_str(spk.id)), static_cast<uint64_t>(index) + (sa ? 1000003 : 0)));
  // SA sentences share their text across speakers (as in TIMIT): a seed-only RNG picks it.
  Rng text_rng(mix(seed, 0x5a5a));
  Rng& tr = sa ? text_rng : rng;
  const std::vector<std::string> seq = sentence_phones(tr, sa ? 6 : 4 + tr.below(5));
  SynthUtterance u;
  phone_durations(spk, seq, rng, u);
  const int64_t N = u.phones.empty() ? 0 : u.phones.back().end;
  const std::vector<std::array<double, 6>> tgt = formant_targets(spk, seq, rng);
  const std::vector<Anchor> anchors = formant_anchors(spk, seq, tgt, u);
  Tracks tracks = control_tracks(spk, seq, u, N, rng);
  formant_and_smooth_tracks(anchors, N, tracks);
  const Paths paths = source_paths(spk, tracks, N, rng);
  mix_to_samples(spk, paths, tracks, N, noise_db, rng, u);
  return u;
}

}  // namespace timitseg::data
