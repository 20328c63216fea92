// Pronunciation dictionaries in `timitseg align` (docs/align.md "Dictionaries"):
// the dictionary's phones checked against the checkpoint's phone set, the
// word options for its label set, the G2P of missing words, and the choice
// among a word's several pronunciations by the aligner's score.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/transcripts.h"
#include "eval/align_input.h"
#include "eval/align_options.h"
#include "model/executor.h"

namespace timitseg::eval {

// Every phone of an MFA dictionary (phones as written) must be a phone of the
// checkpoint: throws data::TranscriptError "DICT:LINE: phone 'x' of 'word' is
// not in the checkpoint's phone set (N phones: ...)" for the first that is not.
// TIMIT and CMUdict dictionaries hold TIMIT names, mapped as transcripts are.
void check_dictionary_phones(const data::Dictionary& dict, const model::LabelSet& ls);

// The word options for a checkpoint's label set: its silence (the phone set's
// first silence label) for the edge and between-word silences, and TIMIT's
// closures only when the label set is TIMIT's (never added to another phone
// set's pronunciations). A label set without silence gets no silences.
data::WordOptions words_for_labels(const data::WordOptions& o, const model::LabelSet& ls);

// The dictionary of --dict (null without one), its phones checked as above.
std::shared_ptr<data::Dictionary> load_dictionary(const std::string& path, data::DictFormatSetting format,
                                                  const model::LabelSet& ls);

// The options with words.g2p set for --g2p: "espeak" pronounces a word
// missing from the dictionary by espeak-ng in o.language (data/espeak_tts.h:
// espeak_phones, IPA, silences left out). Throws std::invalid_argument, one
// line, for another name, for --g2p without --dict or --language (or
// --language without --g2p), an unknown language, or a build without
// libespeak-ng. "" returns o as it is.
// The g2p is cached_g2p's: each word is pronounced once per run.
AlignOptions with_g2p(const AlignOptions& o);

// A G2P that asks `g2p` once per distinct word and answers again from memory
// (thread-safe; a word recurs over the inputs, and espeak-ng forks a child
// per call). An exception
// of `g2p` is not remembered.
using G2p = std::function<std::vector<std::string>(const std::string& word)>;
G2p cached_g2p(G2p g2p);

// For each utterance b with alternatives, aligns every candidate (primary[b]
// and alternatives[b], in one batch) and returns the index of the one of the
// highest score + log_prob (0: the primary; ties to the lower index;
// infeasible candidates, and alternatives with more obligatory phones than
// the utterance has frames, never chosen unless all are). Utterances without
// alternatives get 0 and are not aligned here.
std::vector<size_t> choose_pronunciations(model::Executor& exec, const std::vector<const data::Utterance*>& utts,
                                          const std::vector<const ClassSequence*>& primary,
                                          const std::vector<const Candidates*>& alternatives,
                                          const model::ModelState& s);

}  // namespace timitseg::eval
