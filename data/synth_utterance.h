// The samples and phones of one synthesized utterance (data/synth.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace timitseg::data {

// One synthesized utterance: 16 kHz int16 samples and its .PHN entries
// (start, end in samples, 61-set phone).
struct SynthUtterance {
  std::vector<int16_t> samples;
  struct Phone { int64_t start, end; std::string label; };
  std::vector<Phone> phones;
  // --voice espeak only: the words with their [start, end) samples, and the text spoken
  struct Word { int64_t start, end; std::string text; };
  std::vector<Word> words;
  std::string text;
};

}  // namespace timitseg::data
