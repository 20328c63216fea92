// The output formats of `timitseg decode --format` and `timitseg align
// --format` (docs/align.md), one set of writers for both: one table of (name,
// file suffix, writer); each writer renders one segmented utterance (a
// Segmentation, decode's or align's). A new format is one row of the table
// in formats.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/enum_names.h"

namespace timitseg::eval {

// --format's words, in table order (the order of the files written).
enum class OutputFormat { phn, textgrid, csv, json, ctm };
TIMITSEG_ENUM_NAMES(OutputFormat, 5, {OutputFormat::phn, "phn"}, {OutputFormat::textgrid, "textgrid"},
                    {OutputFormat::csv, "csv"}, {OutputFormat::json, "json"}, {OutputFormat::ctm, "ctm"});

// One segmented utterance, decode's (eval/pipeline.h decode_audio) or
// align's (eval/align.h), in samples of the file as given.
struct Segmentation {
  using Interval = std::tuple<int64_t, int64_t, std::string>;  // start sample, end sample, label
  std::string utterance;  // its id: the output name (a Kaldi utterance id, or the audio file's name)
  std::string audio;      // the audio path as given
  int sample_rate = 0;    // of the file
  int64_t num_samples = 0;
  std::vector<Interval> phones;  // contiguous, covering [0, num_samples)
  bool has_words = false;
  std::vector<Interval> words;  // the words tier: the words and "" where no word is (covers the file)
  // Confidence (docs/crf.md "Confidence"), one (boundary_confidence,
  // label_confidence) per entry of phones and of words (gaps: unused); empty
  // when not computed (the formats then leave the fields out).
  std::vector<std::pair<double, double>> phone_confidence, word_confidence;
  // decode: each phone's posterior (its span marginal), csv column and JSON key "posterior"; empty = none.
  std::vector<double> phone_posterior;
};

// Confidence of the phones of one utterance, aligned spans given: per kept
// phone (boundary, label) and per word (min of its first phone's start and
// last phone's end window; min of its phones' label confidence). word_first/
// word_last [n] as ClassSequence; durations [n] (0 = skipped); start/end/
// boundary/label [n]. Returns per kept phone and per word (in word order).
struct UtteranceConfidence {
  std::vector<std::pair<double, double>> phones, words;
  double mean_boundary = 0.0, mean_label = 0.0;
};
UtteranceConfidence utterance_confidence(const std::vector<int32_t>& durations, const std::vector<int>& word_first,
                                         const std::vector<int>& word_last, int num_words, const double* boundary,
                                         const double* start, const double* end, const double* label);

// Format names in table order: phn, textgrid, csv, json, ctm.
const std::vector<std::string>& output_format_names();
// "phn,textgrid" -> the formats, in the table's order without repeats; throws
// std::invalid_argument "--format: unknown format 'x' (one or more of phn, textgrid, csv, json, ctm)".
std::vector<OutputFormat> parse_formats(const std::vector<std::string>& names);
// Throws std::invalid_argument "--format: give at least one of phn, ..." for an empty list.
void check_formats(const std::vector<OutputFormat>& formats);
// csv and json: the formats that write each phone's posterior (decode).
bool writes_posterior(OutputFormat f);
// (file suffix, text) of each file of the given formats: phn ".PHN", textgrid
// ".TextGrid", csv ".csv", json ".json", ctm ".ctm" (phones) and, with words,
// ".words.ctm".
std::vector<std::pair<std::string, std::string>> render_segmentation(const Segmentation& a,
                                                                     const std::vector<OutputFormat>& formats);

// Writes OUT_DIR/STEM.<suffix> of each of the formats (render_segmentation),
// creating STEM's folders (removed again when the write fails): all the files
// or none (a full disk: written, then all renamed), rendered and written in
// parallel.
void write_outputs(const Segmentation& a, const std::vector<OutputFormat>& formats, const std::string& out_dir,
                   const std::string& stem);

// Praat TextGrid (long text format) with several interval tiers (name,
// intervals (start sample, end sample, text)); gaps are not filled here.
std::string textgrid_tiers(
    const std::vector<std::pair<std::string, std::vector<std::tuple<int64_t, int64_t, std::string>>>>& tiers,
    int64_t num_samples, int sample_rate);

}  // namespace timitseg::eval
