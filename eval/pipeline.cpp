// The one inference pipeline of eval/ (pipeline.h): audio in, decode.
#include "eval/pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "model/batch.h"
#include "model/long_input.h"

namespace timitseg::eval {

int64_t boundary_sample(int64_t frame, const data::FeatureOptions& opts) {
  if (frame <= 0) return 0;
  return (data::frame_center_sample(frame - 1, opts) + data::frame_center_sample(frame, opts)) / 2;
}

int64_t AudioInput::to_file(int64_t x) const {
  if (file_rate == model_rate) return x;
  const int64_t y = static_cast<int64_t>(std::llround(static_cast<double>(x) * file_rate / model_rate));
  return std::min(y, n_file);
}

int64_t offset_samples(double offset, const data::FeatureOptions& opts) {
  return std::llround(offset * opts.frame_shift_samples());
}

int64_t boundary_sample(int64_t frame, double offset, const data::FeatureOptions& opts) {
  if (frame <= 0) return 0;
  return std::max<int64_t>(0, boundary_sample(frame, opts) + offset_samples(offset, opts));
}

std::vector<int64_t> aligned_end_samples(const crf::AlignResult& r, int64_t b, int64_t N, size_t n,
                                         const data::FeatureOptions& f) {
  std::vector<int64_t> ends;
  for (size_t i = 0; i + 1 < n; ++i) {
    const size_t at = static_cast<size_t>(b * N) + i;
    const double offset = r.start_offset.empty() ? 0.0 : r.start_offset[at + 1];
    const int64_t e = boundary_sample(r.spans[at * 2] + r.spans[at * 2 + 1], offset, f);
    ends.push_back(ends.empty() ? e : std::max(e, ends.back() + 1));
  }
  return ends;
}

int64_t AudioInput::boundary(int64_t frame, const data::FeatureOptions& opts) const {
  return to_file(boundary_sample(frame, opts));
}

int64_t AudioInput::boundary(int64_t frame, double offset, const data::FeatureOptions& opts) const {
  return to_file(boundary_sample(frame, offset, opts));
}

void use_file_cmvn(model::ModelState& s, const char* command) {
  if (s.has_cmvn && s.cmvn.per_speaker)
    spdlog::info("data.cmvn speaker: {} normalizes each file with its own statistics (per-utterance CMVN; a file "
                 "read alone has no other utterance of its speaker)", command);
  s.cmvn = s.cmvn.each_utterance_alone();
}

AudioInput audio_input(data::Audio original, const std::string& src, const std::string& id,
                       const model::ModelState& s, int threads, bool keep_samples) {
  AudioInput in;
  if (keep_samples) in.file_samples = original.samples;
  in.n_file = static_cast<int64_t>(original.samples.size());  // samples and rate of the file as given
  in.file_rate = original.sample_rate;
  std::string converted;
  const data::Audio audio = data::to_rate(std::move(original), s.features.sample_rate, &converted);
  if (!converted.empty()) spdlog::info("{}: {} for the model", src, converted);
  in.model_rate = audio.sample_rate;
  data::Utterance& u = in.utt;
  u.id = id;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    u.features = data::compute_features(audio, s.features, &u.num_frames, threads);
  } catch (const std::exception& e) {
    throw std::runtime_error(src + ": " + e.what());
  }
  in.features_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  u.dim = s.features.dim();
  u.num_samples = static_cast<int64_t>(audio.samples.size());
  if (u.num_frames < 1)
    throw std::runtime_error(src + ": too short for one feature frame (" + std::to_string(in.n_file) +
                             " samples at " + std::to_string(in.file_rate) + " Hz)");
  if (u.dim != s.dims.input_dim)
    throw std::runtime_error(src + ": features have " + std::to_string(u.dim) + " dims, the model expects " +
                             std::to_string(s.dims.input_dim));
  u.labels.assign(u.num_frames, 0);  // unused by decoding and alignment
  return in;
}

Segmentation decode_audio(data::Audio original, const std::string& src, const std::string& id,
                           const model::ModelState& s, model::Executor& exec, bool posterior, int threads) {
  Segmentation out;
  out.utterance = id;
  out.audio = src;
  out.sample_rate = original.sample_rate;
  out.num_samples = static_cast<int64_t>(original.samples.size());
  const AudioInput in = audio_input(std::move(original), src, id, s, threads);
  if (in.utt.num_frames >= model::kWindowFrames)  // a long recording: where the time went
    spdlog::info("{}: {} frames of features in {:.2f} s", src, in.utt.num_frames, in.features_s);
  const model::Batch batch = model::make_batch({&in.utt}, s.has_cmvn ? &s.cmvn : nullptr, s.labels, 0);
  const auto segs = exec.decode(batch, nullptr);
  std::vector<int32_t> spans;  // [rows][3] (start frame, frames, label) of the merged rows
  for (size_t i = 0; i < segs[0].size(); ++i) {
    const crf::Segment& x = segs[0][i];
    const int64_t b = in.boundary(x.start, s.features);
    const int64_t e = i + 1 == segs[0].size() ? in.n_file : in.boundary(x.start + x.duration, s.features);
    // adjacent segments with the same label (a run longer than K) are merged
    if (!out.phones.empty() && std::get<2>(out.phones.back()) == s.labels.names[x.label]) {
      std::get<1>(out.phones.back()) = e;
      spans[spans.size() - 2] += x.duration;
    } else {
      out.phones.emplace_back(b, e, s.labels.names[x.label]);
      spans.insert(spans.end(), {x.start, x.duration, x.label});
    }
  }
  if (posterior) {  // each row's span marginal (a run longer than K: its pieces in a row; docs/crf.md "Confidence")
    const int32_t rows = static_cast<int32_t>(out.phones.size());
    out.phone_posterior = exec.span_marginals(batch, rows, spans, {rows});
  }
  return out;
}

}  // namespace timitseg::eval
