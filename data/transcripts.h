// Transcripts for forced alignment (`timitseg align`, docs/align.md):
// pronunciation dictionaries (TIMIT's TIMITDIC.TXT format and CMUdict's),
// word transcripts (.WRD, .TXT, one-utterance-per-line lists) and phone
// transcripts (.PHN with times ignored, or lists). Phones are TIMIT 61-set
// names here (data/phones.h), except in MFA dictionaries, whose phones are
// kept as written (any phone set, IPA included); the model layer maps them
// into a checkpoint's label set. Every reader takes the file's text and its path (for messages,
// so the fuzz targets need no files) and throws TranscriptError, one line
// "FILE:LINE: message" (or "FILE: message" for the file as a whole).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/enum_names.h"

namespace timitseg::data {

class TranscriptError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DictFormat { timit, cmudict, mfa };
// --dict-format: a format, or auto (detected from the text).
enum class DictFormatSetting { timit, cmudict, mfa, automatic };
TIMITSEG_ENUM_NAMES(DictFormatSetting, 4, {DictFormatSetting::timit, "timit"}, {DictFormatSetting::cmudict, "cmudict"},
                    {DictFormatSetting::mfa, "mfa"}, {DictFormatSetting::automatic, "auto"});

// --g2p: who pronounces words missing from the dictionary (none: a missing word is an error).
enum class G2pEngine { espeak };
TIMITSEG_ENUM_NAMES(G2pEngine, 1, {G2pEngine::espeak, "espeak"});

// timit | cmudict | mfa -> the format; auto -> detect: TIMIT when the
// first entry line has a '/'; CMUdict when every entry line's tokens after the
// word are ARPAbet and at least one carries a stress digit (CMUdict marks every
// vowel: a few lines such as "zzz l" read the same in MFA's format, whose
// phones are kept as written and get no closures); else MFA.
DictFormat dict_format_from_text(DictFormatSetting setting, const std::string& text);

// ARPAbet (CMUdict, stress digit included) -> TIMIT 61-set name: the
// lower-cased symbol, except AH0 -> ax (schwa) and ER0 -> axr (unstressed r-
// coloured schwa), as TIMIT transcribes them; other stress digits are dropped.
// Returns "" for a symbol that is not ARPAbet.
std::string arpabet_to_timit(const std::string& symbol);

// One pronunciation's probability (MFA's; 1 for the other formats) and its line.
struct PronunciationInfo {
  double prob = 1.0;
  int line = 0;
};

// A pronunciation dictionary: lower-case word (ASCII letters, the Latin-1
// capitals À..Þ and Œ lowered; other bytes, UTF-8 included, kept) -> pronunciations in file order, phonemic (no
// closures): TIMIT 61-set names (timit, cmudict) or the phones as written (mfa).
class Dictionary {
 public:
  // TIMIT: lines "word  /p h o n e s/", ';' starts a comment line, stress
  // digits 1 and 2 dropped, "word~tag" (part-of-speech variants) is a variant
  // of "word". CMUdict: lines "WORD  AH0 B ...", ";;;" comment lines, "#"
  // starts a trailing comment, "WORD(2)" a variant, ARPAbet mapped by
  // arpabet_to_timit. Errors name PATH and the line: a line that does not
  // parse, a phone that is not TIMIT's (or ARPAbet), an empty pronunciation;
  // a file without entries is an error too.
  // MFA (Montreal Forced Aligner's format): lines "word [prob [sil_prob
  // sil_before_correction nonsil_before_correction]] phone phone ...", white
  // space (tab or spaces) between fields: after the word, 0, 1 or 4 numbers
  // (a pronunciation probability in (0, 1], then three silence figures, which
  // are read and not used), then the phones as written (any UTF-8, never
  // mapped); a word on several lines has several pronunciations; ';' and '#'
  // start comment lines. Errors name PATH and the line.
  static Dictionary parse(const std::string& path, const std::string& text, DictFormat format);
  static Dictionary load(const std::string& path, DictFormatSetting format);  // reads PATH
  // The first pronunciation of WORD (any case), or nullptr.
  const std::vector<std::string>* lookup(const std::string& word) const;
  // Every pronunciation of WORD in file order, or nullptr; info(word)[k] is the k-th one's.
  const std::vector<std::vector<std::string>>* pronunciations(const std::string& word) const;
  const std::vector<PronunciationInfo>& info(const std::string& word) const;  // WORD must be in it
  DictFormat format() const { return format_; }
  size_t size() const { return entries_.size(); }
  const std::map<std::string, std::vector<std::vector<std::string>>>& entries() const { return entries_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  DictFormat format_ = DictFormat::timit;
  std::map<std::string, std::vector<std::vector<std::string>>> entries_;
  std::map<std::string, std::vector<PronunciationInfo>> info_;  // [word][k], as entries_
};

// A word as written (its case kept: the outputs name it so; dictionary lookups
// ignore case), with where it came from.
struct Word {
  std::string text;
  int line = 0;  // 1-based line of its file (0: unknown)
};

// TOKEN without the punctuation around it: ASCII . , ; : ! ? " ( ) [ ] { } and
// « » „ “ ” ‘ ’ ¿ ¡ … – — and the CJK full-width marks 。，、！？：；（）「」;
// apostrophes and hyphens inside a word (l'homme, aujourd'hui, well-known)
// are kept. A token of punctuation only gives "".
std::string strip_punctuation(const std::string& token);
// The words of a transcript line's tokens (strip_punctuation; tokens of
// punctuation only dropped), each with LINE.
std::vector<Word> words_of_tokens(const std::vector<std::string>& tokens, int line);

// A TIMIT .WRD file: lines "start end word" (samples). Times are not used;
// each word as strip_punctuation leaves it (a line of punctuation only is no word).
std::vector<Word> parse_wrd(const std::string& path, const std::string& text);
// A TIMIT .TXT file: "start end The sentence." (the two sample numbers are
// optional); words as written, punctuation around them dropped (words_of_tokens).
std::vector<Word> parse_txt(const std::string& path, const std::string& text);
// The phones of a .PHN file in order, times ignored; q (glottal stop, no
// 48/39 target; merged into its neighbour in training labels) is dropped.
std::vector<std::string> parse_phn_phones(const std::string& path, const std::string& text);

// One line of a list file (--phones FILE, --words FILE): "AUDIO tok tok ...".
struct ListEntry {
  std::string audio;
  std::vector<std::string> tokens;  // phones or words as written
  int line = 0;
};
// Blank lines and lines starting with '#' are skipped; a line with an audio
// path and no tokens is an entry with no tokens (align reports that input's
// empty transcript and aligns the others); an audio path listed twice is an
// error. Paths cannot contain white space.
std::vector<ListEntry> parse_list(const std::string& path, const std::string& text);

// An utterance's phone sequence for the aligner, with its words when known.
struct Transcript {
  std::string source;                 // "FILE" or "FILE:LINE", for messages
  std::vector<std::string> phones;    // phone names (61-set, or a label set's own names)
  std::vector<std::string> words;     // empty when the transcript was given as phones
  std::vector<int> word_of_phone;     // [phones] index into words, -1 for silence / no words
  std::vector<int> optional;          // [phones] 1 = may be skipped (0 frames); empty = none
  double log_prob = 0.0;              // sum of log pronunciation probabilities of its words (MFA; else 0)
  // Other candidate pronunciations of the same words (words_to_phones with
  // several pronunciations of a word): the aligner keeps the best scoring.
  std::vector<Transcript> alternatives;
};

// Words of a transcript not in the dictionary, all of them (file order, with
// repeats), thrown by words_to_phones; its what() is one line naming them.
class MissingWordsError : public TranscriptError {
 public:
  MissingWordsError(const std::string& msg, std::vector<std::string> words)
      : TranscriptError(msg), words_(std::move(words)) {}
  const std::vector<std::string>& words() const { return words_; }

 private:
  std::vector<std::string> words_;
};
// The one line naming missing words with their counts: "word 'a' is not in the dictionary
// DICT" (" (N times)" when repeated), or "N words are not in the dictionary DICT (M
// occurrences): 'a' (3), 'b' (1)" (most frequent first, then by spelling).
std::string missing_words_line(const std::vector<std::string>& words, const std::string& dict_path);

// How many pronunciation combinations of one utterance forced alignment tries, at most
// (align --dict through WordOptions::max_candidates; the Gaussian head's re-estimation
// through model::pronunciation_chains): beyond it a word keeps its most probable one.
inline constexpr int kMaxPronunciationCombinations = 16;

struct WordOptions {
  bool closures = true;           // stops and affricates get TIMIT's closure: b -> bcl b, ch -> tcl ch, jh -> dcl jh ...
  bool edge_silence = true;       // silence before the first and after the last word (TIMIT utterances have them)
  bool word_silence = false;      // silence between every two words
  bool optional_silence = true;   // those silences may be skipped (0 frames) by the aligner; false: obligatory
  // Pronounces a word missing from the dictionary (align --g2p); unset: a missing word is an error.
  std::function<std::vector<std::string>(const std::string& word)> g2p;
  int max_candidates = kMaxPronunciationCombinations;  // pronunciation combinations offered per utterance (see words_to_phones)
  // The label of the silences above: "" = TIMIT's (h# at the edges, pau between words);
  // else this one for both (a checkpoint's own silence: eval::words_for_labels).
  std::string silence;
};

// Words -> phones through DICT. The transcript holds each word's most probable
// pronunciation (the first of equal ones); with several pronunciations of a
// word, `alternatives` holds other combinations: every combination of the
// words' pronunciations while their number stays within max_candidates
// (words in order; a word whose alternatives would pass it keeps its most
// probable one). Closures (TIMIT names) are added only for the TIMIT and
// CMUdict formats, and only with options.closures (eval::words_for_labels
// turns them off for a label set that is not TIMIT's). Errors: MissingWordsError "SOURCE: " + missing_words_line
// naming every missing word of the transcript (SOURCE with
// the first one's line when known; unless options.g2p pronounces them) and
// "SOURCE: empty transcript" for no words.
Transcript words_to_phones(const std::vector<Word>& words, const Dictionary& dict, const std::string& source,
                           const WordOptions& options);

// The closure + release of a stop or affricate (61-set names), or {phone}.
std::vector<std::string> with_closure(const std::string& phone);

// Kaldi's wav.scp: "UTTID AUDIO" per line (blank lines and '#' lines skipped);
// a command (Kaldi's "... |" pipes) is refused, as are duplicate ids and ids
// that are not plain file names (std::invalid_argument naming file and line).
// Read by parse_wav_scp, as the Kaldi corpus reader's (data/corpus_kaldi.cpp).
std::map<std::string, std::string> read_wav_scp(const std::string& path);

}  // namespace timitseg::data
