// The one place that talks to libflite (docs/synth.md, "The speech corpus"):
// text -> 16-bit audio at the voice's native rate + the Segment relation (phone
// names, stress, end times, the end of each segment's last-but-one HMM state).
// libflite is optional at build time (CMake TIMITSEG_FLITE): without it
// flite_built_in() is false and every other call throws flite_missing_message().
// flite keeps global state (registered voices, the regex tables): all calls are
// serialized by one mutex; one synthesis runs at a time. flite draws its excitation
// noise from libc rand(): each synthesis calls srand(rand_seed) first, so the same
// request gives the same samples whatever ran before (nothing else in timitseg uses rand()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace timitseg::data {

bool flite_built_in();
// "timitseg was built without libflite: ..." (what to install and rebuild).
std::string flite_missing_message();

// The voices synth may use. kal and kal16 are never linked (kept for an independent check).
const std::vector<std::string>& flite_voices();  // {"awb", "rms", "slt"}

struct FliteRequest {
  std::string voice;            // awb | rms | slt
  std::string text;
  double duration_stretch = 1.0;  // flite's duration_stretch (> 1: slower)
  double f0_mean = 0.0;           // int_f0_target_mean in Hz (0: the voice's own)
  double f0_stddev = 0.0;         // int_f0_target_stddev in Hz (0: the voice's own)
  unsigned rand_seed = 1;         // flite's excitation noise comes from libc rand(): srand(rand_seed) first
};

struct FliteSegment {
  std::string phone;       // flite's phone name (cmulex / usenglish phoneset)
  bool stressed = false;   // the syllable's lexical stress (R:SylStructure.parent.stress == 1)
  double end_s = 0.0;      // the Segment item's end time (s)
  double last_state_start_s = 0.0;  // start of the segment's last HMM state (s)
};

struct FliteOutput {
  int sample_rate = 0;
  std::vector<int16_t> samples;
  std::vector<FliteSegment> segments;
};

FliteOutput flite_speak(const FliteRequest& r);

// The voice's own F0 mean and standard deviation (Hz) from its clustergen model.
void flite_voice_f0(const std::string& voice, double* mean, double* stddev);

// Every phone name of the voice's phoneset (the superset of what it may emit).
std::vector<std::string> flite_phoneset(const std::string& voice);

}  // namespace timitseg::data
