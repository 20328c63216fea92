// Corpus readers other than TIMIT's (docs/data.md "Other corpora"): MFA-style
// TextGrid trees, Buckeye, Kaldi data directories with a phone CTM, and CSV /
// JSON-lines manifests. Each reader lists the corpus's utterances
// (CorpusEntry: id, speaker, split when the corpus says, audio path and
// optional segment) and reads their label intervals (seconds, label STRINGS
// as written in the corpus; mapping to a phone set happens in prepare).
// Problems are data::Problem lines (file, line, message).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <istream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/corpus_format.h"
#include "data/split_name.h"

namespace timitseg::data {

// CorpusFormat's word (data/corpus_format.h); parse_corpus_format
// throws std::invalid_argument naming the accepted words.
std::string corpus_format_name(CorpusFormat f);
CorpusFormat parse_corpus_format(const std::string& name);

// The format of PATH when exactly one layout fits: a folder with wav.scp (or
// train|dev|test/wav.scp): kaldi; a .csv/.jsonl/.json file, or a folder with
// manifest.csv or manifest.jsonl: manifest; TRAIN and/or TEST folders holding
// .PHN files: timit; .TextGrid files, or (no manifest) a .lab beside an audio file
// of its name: textgrid; .phones files: buckeye;
// SPEAKER-CHAPTER.trans.txt files: librispeech.
// Throws std::invalid_argument (one line) when none or several fit, naming them.
CorpusFormat detect_corpus_format(const std::string& path);

// One labelled interval: [start, end) in seconds of the utterance (relative to
// its segment start when the utterance is a segment), the label as written.
struct LabelInterval {
  double start = 0.0, end = 0.0;
  std::string label;
  int line = 0;  // 1-based line of the label in label_path
};

// Label intervals a scan found for many utterances in one file (a Kaldi CTM,
// a manifest's inline segments), kept on disk rather than in memory: records
// (start, end, line, label) in an unnamed temporary file (tmpfile(3), gone
// when closed). Each entry names its records by byte spans, in order.
struct LabelSpan {
  int64_t offset = 0, bytes = 0;
};
class IntervalSpill {
 public:
  IntervalSpill();  // throws std::runtime_error when no temporary file can be made
  ~IntervalSpill();
  IntervalSpill(const IntervalSpill&) = delete;
  IntervalSpill& operator=(const IntervalSpill&) = delete;
  // Appends iv's record to the file and to *spans (extending its last span when adjacent).
  void append(const LabelInterval& iv, std::vector<LabelSpan>* spans);
  // The intervals of `spans`, in order; safe on several threads at once.
  std::vector<LabelInterval> read(const std::vector<LabelSpan>& spans) const;

 private:
  void flush_locked() const;
  mutable std::mutex mu_;
  std::FILE* f_ = nullptr;
  mutable std::string pending_;  // appended records not yet written
  mutable int64_t written_ = 0;
};

// How read_labels reads an entry's label_path: a TextGrid, a Buckeye .phones
// file, seconds (start end label lines), TIMIT's samples (.PHN), MFA's
// transcript beside the audio (.lab/.txt: words, no times), the records
// `spans` of `spill` (a CTM, inline segments), or none (the labels are
// already in `intervals`).
enum class LabelFileKind { none, textgrid, buckeye, seconds, phn, transcript, spill };

// What an entry's transcript (labels without times) holds: none, phone names, or words.
enum class TranscriptKind { none, phones, words };

// One utterance of a corpus.
struct CorpusEntry {
  std::string id;       // unique in the corpus (e.g. "s01/s0101a", a Kaldi utterance id)
  std::string speaker;  // speaker id (folder name, utt2spk, manifest column)
  std::optional<SplitName> split;  // train | dev | test when the corpus says, else unset
  std::string audio_path;
  // The utterance is audio [seg_start, seg_end) seconds of audio_path (Kaldi
  // segments, manifest start/end); seg_end < 0: the whole file.
  double seg_start = 0.0, seg_end = -1.0;
  std::string label_path;  // the file the labels come from (messages, fingerprint)
  LabelFileKind label_kind = LabelFileKind::none;  // how read_labels reads label_path
  std::shared_ptr<const IntervalSpill> spill;
  std::vector<LabelSpan> spans;
  // A part of a recording (prepare's cut of Buckeye recordings): its 1-based
  // number among the recording's parts; 0 for a whole recording.
  int part = 0;
  // Filled by read_labels (or by the scan: label_kind none). prepare reads them
  // again when it processes the utterance, so that the corpus's labels are never
  // all in memory at once.
  std::vector<LabelInterval> intervals;
  // A transcript (labels without times): transcript_kind phones (phone names) or words
  // (none when the labels are intervals only), tokens as written: filled by the scan (a
  // manifest's phones/text column, Kaldi's text, LibriSpeech's .trans.txt) or by read_labels
  // (label_kind transcript: MFA's .lab/.txt beside the audio; a TextGrid with a words tier
  // and no phones tier); transcript_line its line in transcript_path.
  TranscriptKind transcript_kind = TranscriptKind::none;
  std::vector<std::string> tokens;
  std::string transcript_path;
  int transcript_line = 0;
  // prepare: the transcript's phones (names, before the phone set; no silence added) and
  // [phones] 1 where a word starts (words) or where the phone is a silence written in a
  // phones transcript; filled by pronounce_transcripts.
  std::vector<std::string> phones;
  std::vector<uint8_t> word_start;
  // [word][k] the other pronunciations of each word (phone names, the dictionary's
  // variants after the most probable one that `phones` holds); empty when no word has any.
  std::vector<std::vector<std::vector<std::string>>> alternatives;
  std::vector<Problem> problems;         // found by the scan; an error makes the utterance unusable
  size_t scan_problems = 0;              // prepare: how many of `problems` the scan found (before read_labels)
};

struct ReaderOptions {
  std::string tier = "phones";  // TextGrid tier holding the phones (by name, case-sensitive)
};

// Lists the utterances of the corpus at PATH (a folder, or a manifest file),
// sorted by id. `problems` receives findings not tied to one utterance
// (stray files: warnings). Throws std::runtime_error (one line) when PATH
// holds no corpus of that format.
// *sa_excluded (when given) counts the SA utterances the timit layout leaves out.
std::vector<CorpusEntry> scan_corpus(const std::string& path, CorpusFormat format, const ReaderOptions& reader_opts,
                                     std::vector<Problem>* problems, int64_t* sa_excluded = nullptr);

// TIMIT's layout for prepare --corpus with another phone set (data/corpus_timit.cpp):
// the utterances of scan_timit but SA (counted in *sa_excluded), id
// "part/dialect/speaker/name", split train (TRAIN), dev (TEST speakers of the
// standard dev list), test (the other TEST speakers); when no TEST speaker is
// on the dev list, no split (prepare splits by speaker). Labels: the .PHN rows
// (label_kind phn: samples of the audio file, read at its rate).
std::vector<CorpusEntry> scan_timit_layout(const std::string& root, std::vector<Problem>* problems,
                                           int64_t* sa_excluded);
// Lines "START END LABEL", START and END in samples at `rate` (a .PHN of any
// labels), as intervals in seconds; a line of other fields is one error.
std::vector<LabelInterval> parse_sample_labels(const std::string& path, const std::string& text, int rate,
                                               std::vector<Problem>* problems);
// The sample rate of an audio file's header (libsndfile), 0 when it does not open.
int audio_file_rate(const std::string& path);

// Reads e.label_path (when e.label_kind is not none) into e.intervals, then
// checks the intervals (check_intervals); problems go into e.problems.
void read_labels(CorpusEntry& e, const ReaderOptions& reader_opts);

// Overlapping (by more than kIntervalOverlapTolerance), unsorted, reversed
// or empty intervals are errors, one line each; ones ending past `audio_seconds` (>= 0) are errors ("past the end of
// the audio"). Zero intervals is an error ("no labels").
constexpr double kIntervalOverlapTolerance = 1e-4;  // seconds: less than 2 samples at 16 kHz
void check_intervals(const std::string& path, const std::vector<LabelInterval>& iv, double audio_seconds,
                     std::vector<Problem>* problems);

// The samples [start_s, end_s) seconds (rounded to samples; end clipped to
// the file's end) of an audio file, read with a seek (a Kaldi segment, a part
// of a Buckeye recording), otherwise as read_audio (data/features.h);
// *total_seconds (when given) gets the length of the whole file. In data/audio.cpp.
Audio read_audio_segment(const std::string& path, double start_s, double end_s, double* total_seconds);

// ---- parsers on text (exposed for the tests) ----
// A Kaldi wav.scp (the corpus reader's and align --wav-scp's): one WavScpLine
// per line "ID AUDIO", AUDIO the rest of the line without surrounding blanks
// ("" when the line is the id alone; pipe when it ends with '|', Kaldi's
// command). Blank lines and lines whose id starts with '#' are skipped; any
// encoding decode_text reads.
struct WavScpLine {
  int line = 0;  // 1-based
  std::string id, audio;
  bool pipe = false;
};
std::vector<WavScpLine> parse_wav_scp(const std::string& bytes);
// Text as UTF-8: a UTF-8 byte-order mark is dropped; UTF-16 (LE or BE, with a
// byte-order mark, or without one when every other byte is zero) is converted.
std::string decode_text(const std::string& bytes);
// The intervals of tier `tier` of a TextGrid (long or short text format, any
// encoding decode_text reads). Empty texts are kept as "" (prepare maps them
// to the phone set's silence). A TextGrid without that tier is one error
// naming the tiers it has.
std::vector<LabelInterval> parse_textgrid(const std::string& path, const std::string& bytes, const std::string& tier,
                                          std::vector<Problem>* problems);
// A Buckeye .phones file: a header up to the line "#", then lines
// "END COLOR LABEL" (END in seconds; each interval starts at the previous END,
// the first at 0; text after ';' in LABEL is dropped).
std::vector<LabelInterval> parse_buckeye_phones(const std::string& path, const std::string& text,
                                                std::vector<Problem>* problems);
// Lines "START END LABEL" in seconds (Audacity label files, .lab): blank lines
// and lines starting with '#' are skipped.
std::vector<LabelInterval> parse_seconds_labels(const std::string& path, const std::string& text,
                                                std::vector<Problem>* problems);
// RFC 4180 CSV: fields separated by commas, quoted fields may hold commas,
// doubled quotes and line breaks. Each row with the 1-based line it starts on.
struct CsvRow {
  int line = 0;
  std::vector<std::string> fields;
};
std::vector<CsvRow> parse_csv(const std::string& path, const std::string& text, std::vector<Problem>* problems);
// The same rows, one at a time, from a stream (a manifest of any size is never in memory whole).
void for_each_csv_row(const std::string& path, std::istream& in, std::vector<Problem>* problems,
                      const std::function<void(CsvRow&&)>& fn);
// A text file as decode_text reads it, streamed when it is UTF-8 (a byte-order
// mark skipped), decoded whole when it is UTF-16; throws "PATH: cannot read".
std::unique_ptr<std::istream> open_text(const std::string& path);

// The splits of utterances whose corpus says none: by speaker, sorted speaker
// ids shuffled as choose_dev_speakers does (seed), round(dev_fraction * n)
// dev and round(test_fraction * n) test speakers, at least one each when
// there are 3 or more speakers, the rest train. Returns speaker -> split.
std::vector<std::pair<std::string, std::string>> speaker_splits(std::vector<std::string> speakers,
                                                                double dev_fraction, double test_fraction,
                                                                uint64_t seed);
// A --split-file: lines "SPEAKER train|dev|test" ('#' comments, blank lines
// skipped); a bad line or a speaker named twice is a std::runtime_error "FILE:LINE: ...".
std::vector<std::pair<std::string, std::string>> read_split_file(const std::string& path);

}  // namespace timitseg::data
