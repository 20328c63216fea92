// Forced alignment with a checkpoint: `timitseg align` (audio + known phone
// or word sequence -> .PHN + TextGrid) and the alignment metrics of
// `evaluate --align` (docs/align.md). The constrained Viterbi is
// crf::Backend::align (docs/crf.md "Forced alignment"); the transcripts come
// from data/transcripts.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/transcripts.h"
#include "eval/confidence_metrics.h"
#include "eval/formats.h"
#include "eval/pipeline.h"
#include "model/checkpoint.h"
#include "config/config_enums.h"
#include "model/executor.h"
#include "model/labels.h"

namespace timitseg::eval {

// --transcript: the file beside each audio file: .PHN, .WRD, .TXT, or auto
// (.WRD then .TXT with --dict, else .PHN).
enum class TranscriptSource { phn, wrd, txt, automatic };
TIMITSEG_ENUM_NAMES(TranscriptSource, 4, {TranscriptSource::automatic, "auto"}, {TranscriptSource::phn, "phn"},
                    {TranscriptSource::wrd, "wrd"}, {TranscriptSource::txt, "txt"});

struct AlignOptions {
  std::string checkpoint;
  std::vector<std::string> inputs;  // audio files or folders (searched for *.wav); --timit TREE is one more folder
  std::string phones_file;          // --phones FILE: "AUDIO phone phone ..." per line
  std::string words_file;           // --words FILE: "AUDIO word word ..." per line (needs --dict)
  std::string dict;                 // --dict FILE (TIMITDIC.TXT or CMUdict format)
  data::DictFormatSetting dict_format = data::DictFormatSetting::automatic;  // timit | cmudict | mfa | auto
  TranscriptSource transcript = TranscriptSource::automatic;  // --transcript: beside the audio: phn | wrd | txt | auto (wrd, then txt with --dict; else phn)
  data::WordOptions words;          // closures, edge silence, silence between words
  std::optional<data::G2pEngine> g2p;  // --g2p: none (a missing word is an error) or espeak (align_dictionary.h)
  std::string language;             // --language: espeak-ng's language of --g2p espeak (es, de, cmn, en-us, ...)
  std::string wav_scp;               // --wav-scp FILE: "UTTID AUDIO" per line; list lines then start with UTTID (Kaldi)
  std::vector<OutputFormat> formats = {OutputFormat::phn, OutputFormat::textgrid};  // --format: phn textgrid csv json ctm (eval/formats.h)
  std::string out_dir;
  std::optional<crf::BackendKind> backend;  // unset = cuda on the GPU, else the checkpoint's crf.backend (cpu for cuda)
  config::DeviceSetting device = config::DeviceSetting::automatic;  // --device
  int threads = 0;
  int batch_size = 32;
  int64_t centre_frames = 200;  // --centre-frames: a long recording's centring (0 = the whole recording)
};
// Writes OUT/<name>.<suffix> per input and format (eval/formats.h; by default
// .PHN in samples of the file as given, and .TextGrid with the tier "phones",
// and "words" when words were given), each atomically; a bad input is one error line and the others go on
// (then throws at the end with the count). Returns the number aligned.
int align(const AlignOptions& o);

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
// probabilities (eval/align_dictionary.h candidates_of).
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
AlignInput align_input(const std::string& audio, const std::string& id, const data::Transcript& tr,
                       const model::ModelState& s, int threads);
// Aligns one input in memory with exec, as `timitseg align` does (the
// pronunciation chosen by score, the constrained Viterbi; no confidences):
// the phones and, when the transcript had words, the words tier. Throws
// "AUDIO: no alignment of finite score (...)". The C API's model handle
// aligns through it.
Segmentation align_one(model::Executor& exec, AlignInput input, const model::ModelState& s);

// Phone names: the label set's own names, else labels its phone set maps into
// it (TIMIT 61-set names into 48/39); merged labels (q) dropped. Throws data::TranscriptError "SOURCE: phone 'x' is not in the
// label set (...)" and "SOURCE: empty transcript".
ClassSequence to_classes(const data::Transcript& tr, const model::LabelSet& ls);

// Reference phones of a prepared utterance: the runs of its frame labels in
// the label set, (class, frames) each.
std::vector<std::pair<int32_t, int32_t>> reference_runs(const data::Utterance& u, const model::LabelSet& ls);

// Boundary errors and their summary: within 10/20/25/50 ms, mean and median
// |error| (a boundary counts as within t ms when its error is at most t).
struct BoundaryErrors {
  std::vector<double> abs_ms;  // |aligned - reference| per boundary, ms
  std::vector<int> cls;        // broad class (index into class_names) of the phone after it; -1 none
  // the phone set's broad classes (PhoneSetSpec::broad_class_names; TIMIT's six by default); empty: none
  std::vector<std::string> class_names = data::broad_class_names();
  // {"boundaries": N, "within_ms": {"10": f, ...}, "mean_abs_ms": m, "median_abs_ms": m}; no
  // fractions when N = 0 (never NaN)
  nlohmann::json summary() const;
  // summary() of the boundaries of each broad class, keyed by its name (classes with none left out)
  nlohmann::json by_class() const;
};

// Reference phones of a .PHN in a label set, in samples of the file: q merged
// into the phone before it (into the next one when it comes first), then
// consecutive phones of one class merged into one (as the frame labels merge
// them); a phone's end is the next one's start (a gap goes to the phone before
// it, as in the frame labels), the last one's end is its .PHN end.
struct RefPhone {
  int32_t cls = 0;
  int64_t start = 0, end = 0;
};
std::vector<RefPhone> phn_reference(const std::vector<data::PhnEntry>& phn, const model::LabelSet& ls);

// The sample-accurate reference of a prepared utterance in a label set and its
// file's rate: the one prepare --corpus recorded, else the .PHN beside its
// audio (phn_reference). Returns "" when fine, else one line saying why there
// is none (no .PHN, an unreadable one, no phones).
std::string sample_reference(const data::Utterance& u, const model::LabelSet& labels,
                             const data::FeatureOptions& features, std::vector<RefPhone>* ref, int* rate);

// Alignment accuracy, the field's metric: every internal reference boundary
// (between phones n and n+1) against the aligned one of the same index, twice:
// frame-quantized (abs_ms: against the prepared frame labels' runs, whole
// frames) and sample-accurate (samples: against the .PHN times, the aligned
// boundary in samples as `align` writes it).
struct AlignMetrics {
  std::vector<double> abs_ms;  // frame-quantized |aligned - reference| per boundary, ms
  BoundaryErrors samples;      // sample-accurate
  int64_t utterances = 0, infeasible = 0, without_phn = 0;  // without_phn: no readable .PHN beside the audio
  double seconds = 0.0;  // wall time of align_utterances (forward + constrained Viterbi, batches collated)
  ConfidenceMetrics confidence;  // the confidences scored (docs/align.md "Confidence")
  std::string phone_set = "timit39";  // name of the checkpoint's phone set (the note when it has no broad classes)
  void add(const std::vector<int32_t>& ref_ends, const std::vector<int32_t>& hyp_ends, double frame_ms);
  // Sample-accurate boundaries of one utterance: reference in samples at ref_rate,
  // aligned in samples at hyp_rate, with the broad class of the phone after each.
  void add_samples(const std::vector<int64_t>& ref, int ref_rate, const std::vector<int64_t>& hyp, int hyp_rate,
                   const std::vector<int>& cls);
  // The frame-quantized figures at the top level {"boundaries", "within_ms", "mean_abs_ms",
  // "median_abs_ms"}, and "samples": {the same, "by_class": {...}, "without_phn": n}
  nlohmann::json to_json() const;
  std::string table() const;
};
// evaluate --align: aligns each utterance's reference phone sequence
// (reference_runs) with the executor, batch by batch, and scores the boundaries.
AlignMetrics align_utterances(model::Executor& exec, const std::vector<const data::Utterance*>& utts, const model::ModelState& s,
                              int batch_size);

}  // namespace timitseg::eval
