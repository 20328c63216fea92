// Internals of `prepare` for corpora other than TIMIT, shared by
// data/prepare_corpus.cpp (reading, labels, splits, phone set, per-utterance
// processing) and data/prepare_corpus_write.cpp (the streamed WORKDIR).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus_formats.h"
#include "data/dataset.h"
#include "data/phone_set.h"
#include "data/prepare_internal.h"

namespace timitseg::data {

// A label interval resolved to a class index of the phone set: [start, end) seconds.
struct MappedInterval {
  double start = 0.0, end = 0.0;
  int index = 0;
  int line = 0;
};

// What prepare decided before processing: the format, splits, phone set and
// what manifest.json records about them.
struct CorpusPlan {
  CorpusFormat format = CorpusFormat::textgrid;
  nlohmann::ordered_json split_rule;  // {"rule": "corpus" | "split file" | "by speaker", ...}
  PhoneSetSpec phone_set;
  std::string phone_set_how;  // "--phone-set FILE", "shipped (buckeye)", "derived from the train split (N phones)"
  std::string source, fingerprint;
  nlohmann::ordered_json opts_json, split_opts;
  nlohmann::ordered_json transcripts;  // manifest.json "transcripts" (null: the corpus has none)
};

// e.intervals resolved against `ps`: empty intervals (and the words sil, sp,
// silence, <sil> when not labels of the set) become ps's silence; merged
// labels extend the interval before them (the one after, at the start). An
// unknown label (with the nearest phones by spelling) or a dropped one adds
// one error to e.problems and returns nothing.
std::vector<MappedInterval> map_labels(CorpusEntry& e, const PhoneSetSpec& ps);

// Buckeye's long recordings around the labels the phone set drops (the
// interviewer, laughter, unknown words) and at long silences: each maximal run
// of intervals without a dropped label, cut again inside every stretch of the
// set's silence longer than kLongSilence (the part before keeps its first
// kSilenceMargin, the part after its last), becomes an utterance ID.001,
// ID.002, ... (a segment of the recording, `part` its number among the
// recording's parts; parts of silence only are left out). Entries with neither
// stay as they are. The labels are read again (corpus_intervals), a chunk of
// entries at a time, and not kept.
constexpr double kLongSilence = 0.5, kSilenceMargin = 0.1;  // seconds
std::vector<CorpusEntry> split_at_dropped(std::vector<CorpusEntry> es, const PhoneSetSpec& ps, const ReaderOptions& reader_opts,
                                          int threads);

// Reads the labels of every entry on `threads` threads (read_labels), keeping
// the problems and not the intervals (memory: the threads' utterances).
void check_corpus_labels(std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts, int threads);

// The intervals of one entry as read_labels gave them after the scan (read
// again from its file or spill), a part of a recording (e.part) cut as
// split_at_dropped cut it with `ps` (nullptr: no part is cut).
std::vector<LabelInterval> corpus_intervals(const CorpusEntry& e, const ReaderOptions& reader_opts, const PhoneSetSpec* ps);

// fn(i, intervals) for every entry in order, the intervals read (corpus_intervals,
// no part cut) a chunk at a time on `threads` threads.
void for_each_intervals(const std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts, int threads,
                        const std::function<void(size_t, const std::vector<LabelInterval>&)>& fn);

// Frame labels [num_frames]: frame t takes the interval covering its centre
// sample frame_center_sample(t) (interval boundaries rounded to samples of
// the feature rate); a centre no interval covers takes `silence` (>= 0), or
// the phone before it when the set has no silence.
std::vector<int32_t> corpus_frame_labels(const std::vector<MappedInterval>& m, int64_t num_frames,
                                         const FeatureOptions& feature_opts, int silence);

// Audio (its segment when the entry is one; resampled and down-mixed as
// needed), features and frame labels of one utterance. Problems of the scan
// and of the labels come first; an error leaves ok false.
ProcessedUtterance process_entry(const CorpusEntry& e, const std::vector<MappedInterval>& m, const FeatureOptions& feature_opts,
                                 int silence);

// The kind of a problem for the summary's counts (the readers' messages, then problem_kind's).
std::string corpus_problem_kind(const std::string& message);

// ---- labels without times (data/prepare_transcript.cpp) ----
struct TranscriptStats {
  int64_t words_with_alternatives = 0;  // word tokens whose dictionary gives several pronunciations (first kept)
  int64_t g2p_words = 0;                // distinct words pronounced by the G2P
  std::set<std::string> dictionary_phones;  // every phone of --dict's pronunciations
};
// The phones (CorpusEntry::phones, word_start) of every usable entry with a transcript:
// a phones transcript as written, words through --dict / --g2p (words_to_phones, each
// word's most probable pronunciation). An empty transcript or a word without a
// pronunciation is one error in e.problems naming the utterance; word transcripts with
// neither --dict nor --g2p throw (one line).
TranscriptStats pronounce_transcripts(std::vector<CorpusEntry>& es, const PrepareOptions& prepare_opts);
// Phone counts of the transcripts (the train split's; every split's when all_splits),
// every dictionary phone at least 0: the labels a derived phone set is made of.
std::map<std::string, int64_t> transcript_phone_counts(const std::vector<CorpusEntry>& es, const TranscriptStats& st,
                                                       bool all_splits);
// e.phones as indices of ps (seq [N]) with opt [N] (Utterance::transcript_optional): the
// set's silence (optional) at both ends and, for words, between words; silence written
// in the transcript is the set's silence (obligatory); merged labels left out; runs of
// equal phones merged. A phone outside the set, or nothing but silence, is one error.
// With alternatives (e.alternatives: a word with several pronunciations that
// differ in ps), slot [N] gets Utterance::transcript_slot: each word one slot
// of its distinct pronunciations (repeated labels merged inside each), the
// silence between words and at both ends an optional slot of its own; else
// slot is left empty and seq/opt are the chain above.
bool transcript_indices(const CorpusEntry& e, const PhoneSetSpec& ps, std::vector<int32_t>* seq,
                        std::vector<uint8_t>* opt, std::vector<Problem>* problems,
                        std::vector<int32_t>* slot = nullptr);
// The fewest phones a path through the transcript takes (the frames it needs at
// least): the obligatory phones of a chain (slot empty), else the sum over the
// obligatory slots of their shortest alternative.
int64_t transcript_min_phones(const std::vector<uint8_t>& opt, const std::vector<int32_t>& slot);
// "" when seq (a phones transcript) and the mapped intervals m give the same phones
// (silence aside, runs merged), else the message naming both.
std::string transcript_conflict(const std::vector<int32_t>& seq, const std::vector<MappedInterval>& m,
                                const PhoneSetSpec& ps);

// Processes every utterance in chunks (threaded, a progress bar; each one's
// labels read again, corpus_intervals, and mapped, map_labels), streams the
// usable ones into a staging folder of WORKDIR (split files, cmvn, durations,
// phone_set.yaml, manifest.json last) and renames them into place. Problems go
// into `sum`; with --strict the first bad utterance (in id order) throws and
// nothing is written.
void write_corpus_workdir(const PrepareOptions& prepare_opts, const std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts,
                          const CorpusPlan& plan, int threads, PrepareSummary& sum);

}  // namespace timitseg::data
