// Forced alignment with a checkpoint (see align.h, docs/align.md).
#include "eval/align.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include <unistd.h>

#include "common/atomic_file.h"
#include "common/interrupt.h"
#include "settings/limits.h"
#include "model/feature_check.h"
#include "common/files.h"
#include "data/corpus.h"
#include "data/features.h"
#include "data/phones.h"
#include "common/parallel.h"
#include "model/batch.h"
#include "options/device_choice.h"
#include "model/long_input.h"
#include "eval/align_dictionary.h"
#include "eval/align_jobs.h"
#include "eval/boundary_shifts.h"
#include "eval/formats.h"
#include "eval/infer.h"
#include "eval/io.h"

namespace fs = std::filesystem;

namespace timitseg::eval {

namespace {

// The aligned utterance of r from the spans [n][2] (frames) of r, each kept
// phone's start moved by its offset between frames (offsets [n], nullptr: none;
// the starts kept strictly increasing in samples); skipped optional phones (0
// frames) are left out. conf (nullptr: not computed) holds
// the confidences of this utterance's phones at `at` ([B][N] arrays).
// edges (nullptr: none): the silence edges moved to the energy change (eval/silence_edges.h;
// r.in.file_samples), counted into *edge_count; then shifts (nullptr: none): `align --shifts`, each
// boundary moved by its shift (pair, else phone) (eval/boundary_shifts.h); both before the words
// are placed on the phones.
Segmentation aligned_output(const AlignInput& r, const int32_t* spans, const double* offsets,
                             const model::ModelState& s, const crf::AlignConfidence* conf, size_t at,
                             const BoundaryShifts* shifts,
                             const SilenceEdgeOptions* edges = nullptr, SilenceEdgeCount* edge_count = nullptr) {
  const size_t n = r.cs.classes.size();
  size_t last = 0;  // the last phone kept
  for (size_t i = 0; i < n; ++i)
    if (spans[2 * i + 1] > 0) last = i;
  std::vector<int64_t> b(n), e(n);
  Segmentation out;
  out.utterance = r.id;
  out.audio = r.audio;
  out.sample_rate = r.in.file_rate;
  out.num_samples = r.in.n_file;
  UtteranceConfidence uc;
  if (conf) {
    std::vector<int32_t> dur(n);
    for (size_t i = 0; i < n; ++i) dur[i] = spans[2 * i + 1];
    uc = utterance_confidence(dur, r.cs.word_first, r.cs.word_last, static_cast<int>(r.cs.words.size()),
                              conf->boundary.data() + at, conf->start.data() + at, conf->end.data() + at,
                              conf->label.data() + at);
    out.phone_confidence = uc.phones;
    spdlog::info("{}: {} phones, mean boundary_confidence {:.3f}, mean label_confidence {:.3f}", r.audio,
                 uc.phones.size(), uc.mean_boundary, uc.mean_label);
  }
  std::vector<size_t> kept;
  for (size_t i = 0; i < n; ++i) {
    if (spans[2 * i + 1] == 0) continue;
    b[i] = r.in.boundary(spans[2 * i], offsets ? offsets[i] : 0.0, s.features);
    if (!kept.empty()) {
      b[i] = std::max(b[i], b[kept.back()] + 1);  // two offsets of half a frame toward each other
      e[kept.back()] = b[i];
    }
    kept.push_back(i);
  }
  if (!kept.empty()) e[last] = r.in.n_file;
  if (edges && !kept.empty()) {
    if (r.in.file_samples.size() != static_cast<size_t>(r.in.n_file))
      throw std::logic_error("aligned_output: silence edges need the input's samples (align_input keep_samples)");
    std::vector<int64_t> starts;
    std::vector<char> silence;
    for (size_t i : kept) starts.push_back(b[i]), silence.push_back(s.labels.spec.is_silence(r.cs.classes[i]) ? 1 : 0);
    refine_silence_edges(r.in.file_samples.data(), r.in.n_file, r.in.file_rate, silence, e[last], *edges, &starts,
                         edge_count);
    for (size_t k = 0; k < kept.size(); ++k) {
      b[kept[k]] = starts[k];
      if (k + 1 < kept.size()) e[kept[k]] = starts[k + 1];
    }
  }
  if (shifts && !kept.empty()) {
    std::vector<int64_t> starts;
    std::vector<std::string> labels;
    for (size_t i : kept) starts.push_back(b[i]), labels.push_back(s.labels.names[r.cs.classes[i]]);
    apply_boundary_shifts(*shifts, labels, r.in.file_rate, e[last], &starts);
    for (size_t k = 0; k < kept.size(); ++k) {
      b[kept[k]] = starts[k];
      if (k + 1 < kept.size()) e[kept[k]] = starts[k + 1];
    }
  }
  for (size_t i : kept) out.phones.emplace_back(b[i], e[i], s.labels.names[r.cs.classes[i]]);
  if (r.cs.words.empty()) return out;
  // Word w spans its first to its last phone; a phone shared by two words
  // (equal labels merged across the boundary) is split at its midpoint.
  out.has_words = true;
  int64_t t = 0;
  size_t next_word = 0;
  auto gap_conf = [&] {
    if (conf) out.word_confidence.emplace_back(0.0, 0.0);  // a gap: not written
  };
  for (int w = 0; w < static_cast<int>(r.cs.words.size()); ++w) {
    int64_t ws = -1, we = -1;
    for (size_t i = 0; i < n; ++i) {
      if (spans[2 * i + 1] == 0 || r.cs.word_first[i] < 0 || w < r.cs.word_first[i] || w > r.cs.word_last[i])
        continue;
      const int64_t mid = (b[i] + e[i]) / 2;
      if (ws < 0) ws = r.cs.word_first[i] < w ? mid : b[i];
      we = r.cs.word_last[i] > w ? mid : e[i];
    }
    if (ws < 0) continue;  // cannot happen: every word has a phone
    if (ws > t) out.words.emplace_back(t, ws, ""), gap_conf();
    out.words.emplace_back(ws, we, r.cs.words[w]);
    if (conf) out.word_confidence.push_back(uc.words[next_word++]);
    t = we;
  }
  if (t < r.in.n_file) out.words.emplace_back(t, r.in.n_file, ""), gap_conf();
  return out;
}

// Writes OUT/id.<suffix> of every format of r's alignment (eval/formats.h write_outputs).
void write_alignment(const AlignInput& r, const int32_t* spans, const double* offsets, const model::ModelState& s,
                     const AlignOptions& o, const crf::AlignConfidence* conf, size_t at, const BoundaryShifts* shifts,
                     const SilenceEdgeOptions* edges, SilenceEdgeCount* edge_count) {
  const auto t0 = std::chrono::steady_clock::now();
  write_outputs(aligned_output(r, spans, offsets, s, conf, at, shifts, edges, edge_count), o.formats, o.out_dir, r.id);
  if (r.in.utt.num_frames > model::kWindowFrames)  // a long recording: where the time goes
    spdlog::info("{}: outputs written in {:.2f} s", r.audio,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// Throws "AUDIO: no alignment of finite score (...)" for an alignment of score -inf.
void check_finite(double score, const std::string& audio) {
  if (!(score > -INFINITY))
    throw std::runtime_error(audio + ": no alignment of finite score (the model's -inf transition or duration "
                                     "entries forbid this phone sequence at this length)");
}

}  // namespace

namespace {

// The options' own consistency, before anything is read: one error naming the option.
void check_align_options(const AlignOptions& o) {
  if (!limits::kThreads.contains(o.threads))
    throw std::invalid_argument("--threads must be in " + limits::to_string(limits::kThreads) + " (0 = all cores), got " +
                                std::to_string(o.threads));
  if (o.batch_size < 1) throw std::invalid_argument("--batch-size must be >= 1");
  const int sources = (o.inputs.empty() ? 0 : 1) + (o.phones_file.empty() ? 0 : 1) + (o.words_file.empty() ? 0 : 1);
  if (sources == 0) throw std::invalid_argument("align: give audio files or folders, --timit TREE, --phones FILE or --words FILE");
  if (sources > 1)
    throw std::invalid_argument("align: give only one of: audio files/folders (or --timit), --phones FILE, --words FILE");
  if (!o.words_file.empty() && o.dict.empty()) throw std::invalid_argument("align: --words needs --dict FILE");
  if (!o.wav_scp.empty() && o.phones_file.empty() && o.words_file.empty())
    throw std::invalid_argument("align: --wav-scp needs --phones or --words (lines starting with utterance ids)");
  check_formats(o.formats);  // no format stops the command before any work
  check_silence_edge_options(o.silence_edge_options);
  if ((o.transcript == TranscriptSource::wrd || o.transcript == TranscriptSource::txt) && o.dict.empty())
    throw std::invalid_argument(std::string("align: --transcript ") + common::to_string(o.transcript) +
                                " needs --dict FILE");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The executor (on a GPU: the CUDA context, cuDNN, the parameters uploaded),
// made on a thread of its own while the first inputs are read (audio,
// features); the first batch waits for it. Its errors (no device) stop the
// command with one line, as when it was made first.
class LazyExecutor {
 public:
  LazyExecutor(const model::ModelState& s, const AlignOptions& o, size_t jobs, std::chrono::steady_clock::time_point start)
      : jobs_(jobs), start_(start), making_(std::async(std::launch::async, [this, &s, &o] {
          auto exec = make_inference_executor(s, o.device, o.backend, o.threads, /*phone_bonus=*/0.0, config::DecodeMode::viterbi,
                                              o.centre_frames);
          ready_s_ = seconds_since(start_);  // read after the future's get()
          return exec;
        })) {}
  // The executor without the log line (no input reached it): its error, if any, is the command's.
  void wait() {
    if (!exec_) exec_ = making_.get();
  }
  model::Executor& operator()() {
    if (!exec_) {
      exec_ = making_.get();
      spdlog::info("align: {} utterance(s) on {} (ready {:.2f} s after the start, made alongside the first inputs)",
                   jobs_, exec_->description(), ready_s_);
    }
    return *exec_;
  }

 private:
  size_t jobs_;
  std::chrono::steady_clock::time_point start_;
  double ready_s_ = 0.0;
  std::future<std::unique_ptr<model::Executor>> making_;
  std::unique_ptr<model::Executor> exec_;
};

// The phone sequences of the pending utterances [B][N] (N: the longest,
// written back) aligned in one batch.
crf::AlignResult align_batch(model::Executor& exec, std::vector<AlignInput>& pending, const model::ModelState& s, int64_t& N,
                             crf::AlignConfidence* conf, crf::AlignBoundaries boundaries) {
  std::vector<const data::Utterance*> utts;
  for (const AlignInput& r : pending) utts.push_back(&r.in.utt);
  for (const AlignInput& r : pending) N = std::max<int64_t>(N, static_cast<int64_t>(r.cs.classes.size()));
  const int64_t B = static_cast<int64_t>(pending.size());
  std::vector<int32_t> phones(B * N, 0), nph(B), optional(B * N, 0);
  for (int64_t b = 0; b < B; ++b) {
    nph[b] = static_cast<int32_t>(pending[b].cs.classes.size());
    std::copy(pending[b].cs.classes.begin(), pending[b].cs.classes.end(), phones.begin() + b * N);
    std::copy(pending[b].cs.optional.begin(), pending[b].cs.optional.end(), optional.begin() + b * N);
  }
  std::vector<const ClassSequence*> primary;
  std::vector<const Candidates*> alternatives;
  for (AlignInput& r : pending) primary.push_back(&r.cs), alternatives.push_back(&r.alternatives);
  const std::vector<size_t> pick = choose_pronunciations(exec, utts, primary, alternatives, s);
  for (size_t b = 0; b < pending.size(); ++b)
    if (pick[b] > 0) pending[b].cs = pending[b].alternatives.alternatives[pick[b] - 1];
  const auto t0 = std::chrono::steady_clock::now();
  const model::Batch batch = model::make_batch(utts, s.has_cmvn ? &s.cmvn : nullptr, s.labels, 0);
  crf::AlignResult r = exec.align(batch, N, phones, nph, optional, conf, boundaries);
  if (r.posterior.over_limit > 0)
    spdlog::warn("{}: boundaries left at the constrained Viterbi's: even a window of its transcript is over the "
                 "posteriors' {:.0f} MiB limit",
                 pending[r.posterior.first_over_limit].audio, crf::kPosteriorBoundaryBytes / (1024.0 * 1024.0));
  else if (r.posterior.windowed > 0 && B == 1)
    spdlog::info("{}: boundaries from the posteriors by windows of {} phones with {} of context on each side",
                 pending[0].audio, crf::PosteriorWindows().core, crf::PosteriorWindows().margin);
  if (B == 1 && pending[0].in.utt.num_frames > model::kWindowFrames)  // a long recording: where the time goes
    spdlog::info("{}: encoder, alignment and confidences in {:.2f} s", pending[0].audio, seconds_since(t0));
  return r;
}

// One run of the command past its set-up: the inputs waiting for a batch,
// the failed inputs (one error line each) and the count of those aligned.
class AlignRun {
 public:
  AlignRun(const model::ModelState& s, const AlignOptions& o, LazyExecutor& executor, size_t total,
           const BoundaryShifts* shifts, const SilenceEdgeOptions* edges, crf::AlignBoundaries boundaries)
      : s_(s), o_(o), executor_(executor), total_(total), shifts_(shifts), edges_(edges), boundaries_(boundaries) {}

  // One line per bad input: transcript errors name their file and line
  // (the .PHN/.WRD/.TXT beside the audio, or the list file's line); every
  // other error is prefixed with the audio path unless it starts with it.
  // missing: the input's words not in the dictionary (its error), for the summary.
  void report(const std::string& src, const std::string& what, bool names_file,
              const std::vector<std::string>& missing = {}) {
    report_failed_input(src, what, names_file);  // one "error:" line (eval/infer.h)
    failed_.push_back(src);
    if (missing.empty()) return;
    missing_.insert(missing_.end(), missing.begin(), missing.end());
    missing_inputs_.push_back(src);
  }

  const SilenceEdgeCount& edge_count() const { return edge_count_; }
  const crf::PosteriorBoundaryCount& posterior_count() const { return posterior_count_; }

  // SIGINT/SIGTERM: before a batch, before its outputs and at the end, saying how far it got
  void check_stop() const {
    throw_if_stopped("align", stop_text(static_cast<size_t>(done_), total_, failed_.size(), "aligned", o_.out_dir));
  }

  // An input read; a long recording is a batch of its own (encoder in windows, alignment in a band).
  void add(AlignInput r) {
    const bool alone = r.in.utt.num_frames > model::kWindowFrames;
    if (alone) flush();
    pending_.push_back(std::move(r));
    if (alone) flush();
  }

  // The pending inputs aligned in one batch and their outputs written.
  void flush() {
    if (pending_.empty()) return;
    int64_t N = 1;
    crf::AlignResult r;
    crf::AlignConfidence conf;
    model::Executor& ex = executor_();  // (outside the try: a device error is the command's, not an input's)
    try {
      r = align_batch(ex, pending_, s_, N, &conf, boundaries_);
      count_offsets_in_samples(&r, s_.features);
      posterior_count_.add(r.posterior);
    } catch (const std::exception& e) {  // e.g. a long recording over the memory limit: one line per input
      for (const AlignInput& p : pending_) report(p.audio, e.what(), false);
      pending_.clear();
      return;
    }
    check_stop();  // a stop during a long alignment: its outputs are not written
    const int64_t B = static_cast<int64_t>(pending_.size());
    for (int64_t b = 0; b < B; ++b) write_one(r, conf, N, b);
    pending_.clear();
  }

  // The last line of a run with failed inputs, naming them; before it, the words missing
  // from the dictionary over all inputs in one warning naming the inputs left out for them.
  void throw_if_failed() const {
    if (!missing_.empty())
      spdlog::warn("align: {} ({} input(s) left out for them: {})", data::missing_words_line(missing_, o_.dict),
                   missing_inputs_.size(), failed_names(missing_inputs_));
    if (!failed_.empty())
      throw std::runtime_error("align: " + std::to_string(failed_.size()) + " of " + std::to_string(total_) +
                               " input file(s) failed (each named above: " + failed_names(failed_) + "); " +
                               std::to_string(done_) + " aligned into " + o_.out_dir);
  }

  int done() const { return done_; }

 private:
  // Pending input b's outputs from the batch's result (N phones a row), or its error line.
  void write_one(const crf::AlignResult& r, const crf::AlignConfidence& conf, int64_t N, int64_t b) {
    const std::string& src = pending_[b].audio;
    try {
      check_finite(r.score[b], src);
      if (!conf.computed[b] && !conf.reason[b].empty())
        spdlog::warn("{}: confidences not computed: {}", src, conf.reason[b]);
      else if (conf.windowed[b])
        spdlog::info("{}: confidences {}", src, conf.reason[b]);
      const double* offsets = r.start_offset.empty() ? nullptr : r.start_offset.data() + b * N;
      write_alignment(pending_[b], r.spans.data() + b * N * 2, offsets, s_, o_, conf.computed[b] ? &conf : nullptr,
                      static_cast<size_t>(b * N), shifts_, edges_, &edge_count_);
      ++done_;
    } catch (const std::exception& e) {
      report(src, e.what(), false);
    }
  }

  const model::ModelState& s_;
  const AlignOptions& o_;
  LazyExecutor& executor_;
  size_t total_;
  const BoundaryShifts* shifts_;  // --shifts (nullptr: none)
  const SilenceEdgeOptions* edges_;  // --silence-edges (nullptr: off)
  SilenceEdgeCount edge_count_;      // what they did
  crf::AlignBoundaries boundaries_;  // --boundaries, resolved
  crf::PosteriorBoundaryCount posterior_count_;  // what the posteriors moved
  std::vector<AlignInput> pending_;
  std::vector<std::string> failed_;
  std::vector<std::string> missing_, missing_inputs_;  // words not in the dictionary (with repeats), their inputs
  int done_ = 0;
};

}  // namespace

Segmentation align_one(model::Executor& exec, AlignInput input, const model::ModelState& s, const BoundaryShifts* shifts,
                       const SilenceEdgeOptions* edges, crf::AlignBoundaries boundaries) {
  std::vector<AlignInput> pending;
  pending.push_back(std::move(input));
  int64_t N = 1;
  const crf::AlignResult r = align_batch(exec, pending, s, N, nullptr, boundaries);
  check_finite(r.score[0], pending[0].audio);
  const double* offsets = r.start_offset.empty() ? nullptr : r.start_offset.data();
  return aligned_output(pending[0], r.spans.data(), offsets, s, nullptr, 0, shifts, edges);
}

int align(const AlignOptions& options) {
  const auto start = std::chrono::steady_clock::now();  // the log's stage times add up to the last line's total
  check_align_options(options);
  AlignOptions o = with_g2p(options);  // --g2p espeak: missing words pronounced by espeak-ng
  model::set_threads(o.threads);
  model::ModelState s = model::load_checkpoint(o.checkpoint);
  model::check_checkpoint_features(s, o.checkpoint);  // its own options give its input (model/feature_check.h)
  use_file_cmvn(s, "align");
  o.words = words_for_labels(o.words, s.labels);       // the checkpoint's silence; closures for TIMIT's sets only
  const std::shared_ptr<data::Dictionary> dict = load_dictionary(o.dict, o.dict_format, s.labels);
  std::optional<BoundaryShifts> shifts;  // a bad file: one line before any input is read
  if (!o.shifts.empty()) {
    shifts = load_boundary_shifts(o.shifts, s.labels);
    spdlog::info("align: boundaries moved by the shifts of {} ({} phone(s), {} phone pair(s))", o.shifts,
                 shifts->shift_ms.size(), shifts->pair_shift_ms.size());
  }
  // --silence-edges (auto: for a checkpoint trained on transcripts)
  const std::optional<SilenceEdgeOptions> edges =
      resolve_silence_edges(o.silence_edges, o.silence_edge_options, s.transcript_trained, "align");
  // --boundaries (auto: the posteriors', for every checkpoint: docs/training.md rules 15 and 16)
  const crf::AlignBoundaries boundaries = resolve_boundaries(o.boundaries, "align");
  InputSet protect;  // never written: the audio, the transcripts, lists, dictionary, checkpoint and shifts
  protect.add(o.checkpoint);
  if (!o.dict.empty()) protect.add(o.dict);
  if (!o.shifts.empty()) protect.add(o.shifts);
  std::vector<std::pair<std::string, std::string>> bad;  // inputs that give no audio: failed, the others go on
  const std::vector<AlignJob> jobs = collect_jobs(o, dict, protect, bad);
  const std::vector<fs::path> stems = distinct_stems(jobs);
  CreatedFolders made;  // a failure before the first write leaves no --out folder
  prepare_out_dir(o.out_dir, stems, protect, &made);
  LazyExecutor executor(s, o, jobs.size(), start);
  AlignRun run(s, o, executor, jobs.size() + bad.size(), shifts ? &*shifts : nullptr, edges ? &*edges : nullptr,
               boundaries);
  for (const auto& [in, problem] : bad) run.report(in, problem, true);
  // Each batch's inputs (audio, features, transcript) are read in parallel
  // (one job per index: the results and the order of the error lines do not
  // depend on the thread count), then aligned in one call.
  const int threads = resolve_threads(o.threads);
  install_stop_handlers();
  for (size_t at = 0; at < jobs.size(); at += static_cast<size_t>(o.batch_size)) {
    run.check_stop();
    const size_t n = std::min(jobs.size() - at, static_cast<size_t>(o.batch_size));
    std::vector<AlignInput> ready(n);
    std::vector<std::string> error(n);
    std::vector<char> names_file(n, 0);
    std::vector<std::vector<std::string>> missing(n);
    read_jobs(jobs, at, s, threads, ready, error, names_file, missing, edges.has_value());
    for (size_t i = 0; i < n; ++i) {
      if (error[i].empty())
        run.add(std::move(ready[i]));
      else
        run.report(jobs[at + i].audio, error[i], names_file[i] != 0, missing[i]);
    }
    run.flush();
  }
  run.check_stop();
  executor.wait();  // made even when no input was read (its error, if any, is the command's)
  if (boundaries != crf::AlignBoundaries::viterbi)
    spdlog::info("align: boundaries from the posteriors: {}", posterior_boundaries_line(run.posterior_count()));
  if (edges) {
    const SilenceEdgeCount& c = run.edge_count();
    spdlog::info("align: silence edges: {} of {} moved (mean move {:+.1f} ms), {} left by a loud silence, {} without a "
                 "crossing within {} ms",
                 c.moved, c.edges, c.to_json()["mean_move_ms"].get<double>(), c.loud, c.no_crossing, edges->max_move_ms);
  }
  run.throw_if_failed();
  made.keep();
  spdlog::info("aligned {} utterance(s) into {} in {:.2f} s", run.done(), o.out_dir, seconds_since(start));
  return run.done();
}

}  // namespace timitseg::eval
