// What `timitseg align` aligns: a transcript in the checkpoint's label set
// (its classes, its alternative pronunciations) and the audio through the
// pipeline, one utterance ready to align (eval/align.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/transcripts.h"
#include "eval/pipeline.h"
#include "model/checkpoint.h"
#include "model/labels.h"

namespace timitseg::eval {

// The label-set class of a phone name: the label set's own name, else a TIMIT
// 61-set name mapped into it, else an ARPAbet symbol (stress digit allowed:
// MFA's english_us_arpa dictionary) mapped as CMUdict's (data::arpabet_to_timit);
// -1 when none ("q" included).
int phone_class(const std::string& name, const model::LabelSet& ls);

// A transcript in a label set: classes [n] (consecutive equal classes merged
// into one phone, as frame labels merge them into one run; the merged phone
// is optional only when all its parts are), per phone the first and last word
// it belongs to (-1: silence, or no words), and optional [n] (1 = may be
// skipped; an optional phone right after another optional one is dropped, so
// the CRF's rule "never two in a row" holds).
struct ClassSequence {
  std::vector<int32_t> classes;
  std::vector<int> word_first, word_last;
  std::vector<int32_t> optional;
  std::vector<std::string> words;
};
// A transcript and its alternatives (data::words_to_phones) in the label set:
// candidates[0] the transcript's, log_prob[k] the sum of log pronunciation
// probabilities (candidates_of below).
struct Candidates {
  std::vector<ClassSequence> alternatives;  // besides the primary one
  std::vector<double> log_prob;             // [1 + alternatives]
};

// One utterance ready to align: its audio through the pipeline
// (eval/pipeline.h), its transcript's classes and the other pronunciations
// of its words.
struct AlignInput {
  std::string audio;  // the audio path as given (errors, log lines)
  std::string id;     // the output name (a Kaldi utterance id, or the path's stem)
  AudioInput in;
  ClassSequence cs;
  Candidates alternatives;
};
// The transcript into the label set (to_classes, candidates_of; their errors
// first), then the audio file through the pipeline (audio_input). Throws one
// line "AUDIO: the transcript has N phones but the audio only F frames (...)"
// when the obligatory phones outnumber the frames.
// keep_samples: AudioInput::file_samples kept (silence edges, eval/silence_edges.h).
AlignInput align_input(const std::string& audio, const std::string& id, const data::Transcript& tr,
                       const model::ModelState& s, int threads, bool keep_samples = false);
// Phone names: the label set's own names, else labels its phone set maps into
// it (TIMIT 61-set names into 48/39); merged labels (q) dropped. Throws data::TranscriptError "SOURCE: phone 'x' is not in the
// label set (...)" and "SOURCE: empty transcript".
ClassSequence to_classes(const data::Transcript& tr, const model::LabelSet& ls);

// A transcript and its alternatives (data::words_to_phones) in the label set
// (Candidates: eval/align.h).
Candidates candidates_of(const data::Transcript& tr, const model::LabelSet& ls);

}  // namespace timitseg::eval
