// The one inference pipeline of eval/: audio in (read, resampled to the
// model's rate, features) once for decode, align and the C API's model
// handle; decoding into the one result type, Segmentation (eval/formats.h),
// that every output format writes. Forced alignment of an input is
// eval/align.h's align_input / align_one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "crf/host_run.h"
#include "data/dataset.h"
#include "data/features.h"
#include "eval/formats.h"
#include "model/checkpoint.h"
#include "model/executor.h"

namespace timitseg::eval {

// Segment boundary in samples for a boundary before frame `frame`: the midpoint
// between the centres of frames frame-1 and frame (0 for frame 0); with an offset
// between frames (crf::AlignResult::start_offset, |offset| <= 1/2), that plus
// offset frame shifts, rounded (docs/crf.md "Between frames").
int64_t boundary_sample(int64_t frame, const data::FeatureOptions& opts);
int64_t boundary_sample(int64_t frame, double offset, const data::FeatureOptions& opts);
// An offset between frames in samples: offset x the frame shift, rounded (the term
// boundary_sample adds; 0 for an offset under half a sample).
int64_t offset_samples(double offset, const data::FeatureOptions& opts);

// The aligned ends of phones 0..n-2 of utterance b of r (N phones a row) in samples at the
// model's rate: each the next phone's start, between frames when r has offsets
// (boundary_sample), kept strictly increasing.
std::vector<int64_t> aligned_end_samples(const crf::AlignResult& r, int64_t b, int64_t N, size_t n,
                                         const data::FeatureOptions& f);

// One audio read for the model: its utterance (features at the model's rate,
// labels unused) and what maps the model's samples back to the file's.
struct AudioInput {
  data::Utterance utt;
  int64_t n_file = 0;   // samples of the file as given
  int file_rate = 0;    // its rate
  int model_rate = 0;   // the model's (features.sample_rate)
  double features_s = 0.0;  // the wall time of the features (the log of a long recording)
  // The file's samples as given (mono), kept when asked (keep_samples): align's silence edges
  // (eval/silence_edges.h) read the energy there. Empty otherwise.
  std::vector<float> file_samples;
  // A sample at the model's rate -> the sample of the file as given (rounded, at most n_file).
  int64_t to_file(int64_t model_sample) const;
  // The file sample of the boundary before frame `frame` (boundary_sample, then to_file).
  int64_t boundary(int64_t frame, const data::FeatureOptions& opts) const;
  int64_t boundary(int64_t frame, double offset, const data::FeatureOptions& opts) const;
};

// Audio at another rate or with several channels is resampled (libsoxr) and
// down-mixed to the model's rate, saying so in one line ("SRC: ... for the
// model"); then the features (threads: their workers; the result does not
// depend on it). `src` names the audio in errors: "SRC: too short for one
// feature frame (...)", "SRC: features have D dims, the model expects E", the
// feature errors prefixed with SRC. id: the utterance's id.
AudioInput audio_input(data::Audio original, const std::string& src, const std::string& id,
                       const model::ModelState& s, int threads, bool keep_samples = false);

// decode: the executor's segmentation of one audio (exec.decode: Viterbi or
// posterior, as the executor was made), adjacent segments of one label merged
// (a run longer than K), in samples of the file as given, the last ending at
// the file's end. utterance = id, audio = src. posterior: also each phone's
// span marginal (Segmentation::phone_posterior; docs/crf.md "Confidence").
// `timitseg decode` and the C API's timitseg_model_decode_* (include/timitseg.h)
// call it.
Segmentation decode_audio(data::Audio original, const std::string& src, const std::string& id,
                           const model::ModelState& s, model::Executor& exec, bool posterior, int threads);

// For `command` (decode, align, the C API), which reads files one by one: a checkpoint trained
// with data.cmvn speaker normalizes each file with its own statistics (per-utterance CMVN: a file
// read alone has no other utterance of its speaker; data::Cmvn::each_utterance_alone), said in
// one info line; other modes unchanged.
void use_file_cmvn(model::ModelState& s, const char* command);

}  // namespace timitseg::eval
