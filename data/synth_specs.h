// The tone synthesizer's phone table (data/synth.cpp; internal to data/):
// per TIMIT phone its kind, formant targets, mean duration and source
// amplitudes (adult male values, scaled per speaker by the synthesizer).
#pragma once

#include <map>
#include <string>

namespace timitseg::data::synth_detail {

enum class Kind { Vowel, Glide, Nasal, Fric, Aspirate, Closure, Burst, Flap, Glottal, Silence };

struct Spec {
  Kind kind;
  double f1, f2, f3;     // formant targets (Hz, adult male); 0: none (inherit by interpolation)
  double e1, e2, e3;     // diphthong end targets; 0: same as start
  double dur_ms;         // mean duration (TIMIT-like)
  double av, af, ah;     // voicing, frication, aspiration amplitudes
  double fc, fbw;        // frication band centre and bandwidth (Hz)
};

// Every phone the synthesizer can say (the 61-set), by its TIMIT name.
const std::map<std::string, Spec>& phone_specs();

}  // namespace timitseg::data::synth_detail
