// The checkpoint half of the C API (include/timitseg.h): a loaded checkpoint
// and its executor; decode as `timitseg decode` and align as `timitseg align`
// through eval/'s pipeline (eval/pipeline.h decode_audio, eval/align.h
// align_input / align_one) on the handle's executor, in memory.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include <spdlog/spdlog.h>

#include "capi/api_detail.h"
#include "common/parallel.h"
#include "data/corpus.h"
#include "data/transcripts.h"
#include "eval/align.h"
#include "eval/align_dictionary.h"
#include "eval/infer.h"
#include "eval/pipeline.h"
#include "model/checkpoint.h"
#include "model/feature_check.h"
#include "settings/limits.h"

using timitseg::capi::ApiError;
using timitseg::capi::guard;
namespace config = timitseg::config;
namespace model = timitseg::model;
namespace eval = timitseg::eval;
namespace crf = timitseg::crf;
namespace limits = timitseg::limits;
namespace fs = std::filesystem;

struct timitseg_model {
  std::string checkpoint;
  config::DeviceSetting device = config::DeviceSetting::automatic;
  std::optional<crf::BackendKind> backend;  // unset: inference_crf_backend
  int threads = 0;
  model::ModelState state;
  std::unique_ptr<model::Executor> exec;
  std::string phone_set_json;  // timitseg_model_phone_set
  std::optional<eval::BoundaryShifts> shifts;  // timitseg_model_set_shifts (unset: none)
  eval::SilenceEdgesSetting silence_edges = eval::SilenceEdgesSetting::automatic;  // timitseg_model_set_silence_edges
  eval::SilenceEdgeOptions silence_edge_options;
  eval::BoundariesSetting boundaries = eval::BoundariesSetting::automatic;  // timitseg_model_set_boundaries
};

struct timitseg_segments {
  std::vector<eval::Segmentation::Interval> rows;  // (begin sample, end sample, label)
};

namespace {

void need(const void* p, const char* what) {
  if (p == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string(what) + " is NULL");
}

// The device of the params: device_kind (timitseg_model_device), or the
// words of the string field `device` (API version 1); both given and not the
// same: refused in one line.
config::DeviceSetting device_of(const timitseg_model_params& d) {
  static const config::DeviceSetting kinds[] = {config::DeviceSetting::automatic, config::DeviceSetting::cpu,
                                               config::DeviceSetting::cuda};
  if (d.device_kind < 0 || d.device_kind > 2)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "device_kind must be TIMITSEG_MODEL_DEVICE_AUTO (0), _CPU (1) or _CUDA (2), got " +
                                              std::to_string(d.device_kind));
  const config::DeviceSetting kind = kinds[d.device_kind];
  if (!d.device || !*d.device) return kind;
  config::DeviceSetting words{};
  if (!config::parse_enum(d.device, &words))
    throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string("device must be cpu, cuda or auto, got '") + d.device + "'");
  if (d.device_kind != TIMITSEG_MODEL_DEVICE_AUTO && words != kind)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string("device '") + d.device + "' and device_kind (" +
                                              config::to_string(kind) + ") disagree; set one of them");
  return words;
}

// The CRF backend of the params: backend_kind (timitseg_backend; AUTO:
// unset), or the words of the string field `backend` (API version 1); both
// given and not the same: refused in one line. Unset: as `timitseg decode`
// picks it (eval/infer.h make_inference_executor).
std::optional<crf::BackendKind> backend_of(const timitseg_model_params& d) {
  std::optional<crf::BackendKind> kind;
  switch (d.backend_kind) {
    case TIMITSEG_BACKEND_AUTO: break;
    case TIMITSEG_BACKEND_REFERENCE: kind = crf::BackendKind::reference; break;
    case TIMITSEG_BACKEND_CPU: kind = crf::BackendKind::cpu; break;
    case TIMITSEG_BACKEND_CUDA: kind = crf::BackendKind::cuda; break;
    default:
      throw ApiError(TIMITSEG_ERR_ARGUMENT, "backend_kind must be a timitseg_backend (0 to 3), got " +
                                                std::to_string(d.backend_kind));
  }
  if (!d.backend || !*d.backend) return kind;
  const crf::BackendKind words = crf::backend_kind(d.backend);  // "unknown crf backend 'X' (known: ...)"
  if (kind && *kind != words)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string("backend '") + d.backend + "' and backend_kind (" +
                                              crf::to_string(*kind) + ") disagree; set one of them");
  return words;
}

void load(const char* checkpoint, const timitseg_model_params* p, timitseg_model** out) {
  need(checkpoint, "checkpoint");
  need(out, "out");
  *out = nullptr;
  const timitseg_model_params d = p ? *p : timitseg_model_default_params();
  auto m = std::make_unique<timitseg_model>();
  m->checkpoint = checkpoint;
  m->threads = d.threads;
  m->device = device_of(d);  // the enums, or the user's words read here into them
  m->backend = backend_of(d);
  if (!limits::kThreads.contains(m->threads))
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "threads must be in " + limits::to_string(limits::kThreads) +
                                              " (0 = all cores), got " + std::to_string(m->threads));
  m->state = model::load_checkpoint(m->checkpoint);
  model::check_checkpoint_features(m->state, m->checkpoint);  // decode computes features with these options
  eval::use_file_cmvn(m->state, "the C API");  // each audio alone (data.cmvn speaker: its own statistics)
  nlohmann::json ps = m->state.labels.spec.to_json();
  ps["scoring_labels"] = m->state.labels.scoring_names;
  ps["sha256"] = m->state.labels.spec.digest();
  m->phone_set_json = ps.dump();
  // a long recording centred as `timitseg decode` and `timitseg align` centre it (their --centre-frames default)
  m->exec = eval::make_inference_executor(m->state, m->device, m->backend, m->threads, std::nullopt, std::nullopt,
                                          eval::DecodeOptions{}.centre_frames);
  *out = m.release();
}

void decode(timitseg_model* m, const timitseg::data::Audio& audio, const std::string& src, timitseg_segments** out) {
  need(m, "model");
  need(out, "out");
  *out = nullptr;
  auto s = std::make_unique<timitseg_segments>();
  s->rows = eval::decode_audio(audio, src, src, m->state, *m->exec, /*posterior=*/false, /*threads=*/1).phones;
  *out = s.release();
}

// The phones (and words) of one file aligned with the handle's executor
// through eval/'s pipeline, in memory, as `timitseg align` aligns them.
eval::Segmentation align_transcript(timitseg_model* m, const char* path, const timitseg::data::Transcript& tr) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string audio = path;
  const std::string id = fs::path(audio).filename().replace_extension().string();
  const bool edges = eval::silence_edges_on(m->silence_edges, m->state.transcript_trained);
  eval::Segmentation out = eval::align_one(
      *m->exec, eval::align_input(audio, id, tr, m->state, timitseg::resolve_threads(m->threads), edges), m->state,
      m->shifts ? &*m->shifts : nullptr, edges ? &m->silence_edge_options : nullptr,
      eval::align_boundaries(m->boundaries));
  spdlog::info("aligned 1 utterance(s) ({}) in {:.2f} s", audio,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

// `timitseg align --phones` on one file.
void align(timitseg_model* m, const char* path, const char* phones, timitseg_segments** out) {
  need(m, "model");
  need(path, "path");
  need(phones, "phones");
  need(out, "out");
  *out = nullptr;
  timitseg::data::Transcript t;
  t.source = "phones";
  std::istringstream words(phones);
  for (std::string w; words >> w;) t.phones.push_back(w);
  auto s = std::make_unique<timitseg_segments>();
  s->rows = align_transcript(m, path, t).phones;
  *out = s.release();
}

// `timitseg align --words --dict` on one file: the phones and the words (the words tier without its gaps).
void align_words(timitseg_model* m, const char* path, const char* words, const char* dictionary,
                 const timitseg_align_words_options* opt, timitseg_segments** phones_out,
                 timitseg_segments** words_out) {
  need(m, "model");
  need(path, "path");
  need(words, "words");
  need(dictionary, "dictionary");
  need(phones_out, "phones");
  need(words_out, "words_out");
  *phones_out = *words_out = nullptr;
  const timitseg_align_words_options d = opt ? *opt : timitseg_align_words_default_options();
  timitseg::data::WordOptions word_opts;
  word_opts.closures = d.closures != 0;
  word_opts.edge_silence = d.edge_silence != 0;
  word_opts.word_silence = d.word_silence != 0;
  word_opts.optional_silence = d.obligatory_silence == 0;
  // the dictionary, its phones checked against the checkpoint's (as the command loads it)
  using timitseg::data::DictFormatSetting;
  const DictFormatSetting format = d.dict_format ? timitseg::common::enum_value<DictFormatSetting>(d.dict_format, "dict_format")
                                                 : DictFormatSetting::automatic;
  const std::shared_ptr<timitseg::data::Dictionary> dict = eval::load_dictionary(dictionary, format, m->state.labels);
  std::vector<std::string> tokens;
  std::istringstream in(words);
  for (std::string w; in >> w;) tokens.push_back(w);
  const std::vector<timitseg::data::Word> list = timitseg::data::words_of_tokens(tokens, 0);
  word_opts = eval::words_for_labels(word_opts, m->state.labels);  // the checkpoint's silence; closures for TIMIT's sets only
  const eval::Segmentation a = align_transcript(m, path, timitseg::data::words_to_phones(list, *dict, "words", word_opts));
  auto ph = std::make_unique<timitseg_segments>(), wd = std::make_unique<timitseg_segments>();
  ph->rows = a.phones;
  for (const auto& w : a.words)
    if (!std::get<2>(w).empty()) wd->rows.push_back(w);  // a gap between words is no word
  *phones_out = ph.release();
  *words_out = wd.release();
}

}  // namespace

extern "C" {

timitseg_model_params timitseg_model_default_params(void) {
  timitseg_model_params p;
  std::memset(&p, 0, sizeof p);
  return p;
}

int timitseg_model_load(const char* checkpoint, const timitseg_model_params* params, timitseg_model** out) {
  return guard("timitseg_model_load", [&] { load(checkpoint, params, out); });
}

void timitseg_model_free(timitseg_model* model) { delete model; }

int timitseg_model_sample_rate(const timitseg_model* model) { return model ? model->state.features.sample_rate : 0; }
int timitseg_model_num_labels(const timitseg_model* model) {
  return model ? static_cast<int>(model->state.labels.names.size()) : 0;
}
const char* timitseg_model_label_name(const timitseg_model* model, int label) {
  if (!model || label < 0 || label >= static_cast<int>(model->state.labels.names.size())) return nullptr;
  return model->state.labels.names[static_cast<size_t>(label)].c_str();
}

const char* timitseg_model_phone_set(const timitseg_model* model) {
  return model ? model->phone_set_json.c_str() : nullptr;
}

int timitseg_model_decode_file(timitseg_model* model, const char* path, timitseg_segments** out) {
  return guard("timitseg_model_decode_file", [&] {
    need(path, "path");
    decode(model, timitseg::data::read_audio(path), path, out);
  });
}

int timitseg_model_decode_samples(timitseg_model* model, const float* samples, int64_t num_samples,
                                  int32_t sample_rate, timitseg_segments** out) {
  return guard("timitseg_model_decode_samples", [&] {
    if (num_samples < 0 || (num_samples > 0 && samples == nullptr))
      throw ApiError(TIMITSEG_ERR_ARGUMENT, "samples is NULL or num_samples < 0");
    if (sample_rate < 1000 || sample_rate > 384000)
      throw ApiError(TIMITSEG_ERR_ARGUMENT, "sample_rate must be in [1000, 384000] Hz, got " + std::to_string(sample_rate));
    timitseg::data::Audio a;
    a.samples.resize(static_cast<size_t>(num_samples));
    for (int64_t i = 0; i < num_samples; ++i) a.samples[i] = samples[i] * 32768.0f;  // the int16 range of read_audio
    a.sample_rate = sample_rate;
    a.bits = 0;
    a.container = "samples";
    decode(model, a, "samples", out);
  });
}

int timitseg_model_align_file(timitseg_model* model, const char* path, const char* phones, timitseg_segments** out) {
  return guard("timitseg_model_align_file", [&] { align(model, path, phones, out); });
}

int timitseg_model_set_shifts(timitseg_model* model, const char* path) {
  return guard("timitseg_model_set_shifts", [&] {
    need(model, "model");
    if (path == nullptr || *path == '\0') {
      model->shifts.reset();
      return;
    }
    model->shifts = eval::load_boundary_shifts(path, model->state.labels);  // a bad file: the old shifts stay
  });
}

int timitseg_model_set_silence_edges(timitseg_model* model, int mode, double margin_db, double max_move_ms,
                                     double min_quiet_pct) {
  return guard("timitseg_model_set_silence_edges", [&] {
    need(model, "model");
    eval::SilenceEdgesSetting setting;
    switch (mode) {
      case TIMITSEG_SILENCE_EDGES_AUTO: setting = eval::SilenceEdgesSetting::automatic; break;
      case TIMITSEG_SILENCE_EDGES_ON: setting = eval::SilenceEdgesSetting::on; break;
      case TIMITSEG_SILENCE_EDGES_OFF: setting = eval::SilenceEdgesSetting::off; break;
      default:
        throw std::invalid_argument("mode must be TIMITSEG_SILENCE_EDGES_AUTO (0), _ON (1) or _OFF (2), got " +
                                    std::to_string(mode));
    }
    eval::SilenceEdgeOptions o;
    o.margin_db = margin_db;
    o.max_move_ms = max_move_ms;
    o.min_quiet_pct = min_quiet_pct;
    eval::check_silence_edge_options(o);  // a bad value: the handle keeps its setting
    model->silence_edges = setting;
    model->silence_edge_options = o;
  });
}

int timitseg_model_set_boundaries(timitseg_model* model, int mode) {
  return guard("timitseg_model_set_boundaries", [&] {
    need(model, "model");
    switch (mode) {
      case TIMITSEG_BOUNDARIES_AUTO: model->boundaries = eval::BoundariesSetting::automatic; break;
      case TIMITSEG_BOUNDARIES_VITERBI: model->boundaries = eval::BoundariesSetting::viterbi; break;
      case TIMITSEG_BOUNDARIES_POSTERIOR: model->boundaries = eval::BoundariesSetting::posterior; break;
      case TIMITSEG_BOUNDARIES_POSTERIOR_FRAMES: model->boundaries = eval::BoundariesSetting::posterior_frames; break;
      default:
        throw std::invalid_argument(
            "mode must be TIMITSEG_BOUNDARIES_AUTO (0), _VITERBI (1), _POSTERIOR (2) or _POSTERIOR_FRAMES (3), got " +
            std::to_string(mode));
    }
  });
}

timitseg_align_words_options timitseg_align_words_default_options(void) {
  timitseg_align_words_options o;
  std::memset(&o, 0, sizeof o);
  o.closures = 1;
  o.edge_silence = 1;
  return o;
}

int timitseg_model_align_words_file(timitseg_model* model, const char* path, const char* words, const char* dictionary,
                                    const timitseg_align_words_options* options, timitseg_segments** phones,
                                    timitseg_segments** words_out) {
  return guard("timitseg_model_align_words_file",
               [&] { align_words(model, path, words, dictionary, options, phones, words_out); });
}

int64_t timitseg_segments_count(const timitseg_segments* segs) {
  return segs ? static_cast<int64_t>(segs->rows.size()) : 0;
}

int timitseg_segments_get(const timitseg_segments* segs, int64_t i, int64_t* begin, int64_t* end, const char** label) {
  return guard("timitseg_segments_get", [&] {
    need(segs, "segs");
    if (i < 0 || i >= static_cast<int64_t>(segs->rows.size()))
      throw ApiError(TIMITSEG_ERR_ARGUMENT, "index " + std::to_string(i) + " is outside [0, " +
                                                std::to_string(segs->rows.size()) + ")");
    const auto& [b, e, name] = segs->rows[static_cast<size_t>(i)];
    if (begin) *begin = b;
    if (end) *end = e;
    if (label) *label = name.c_str();
  });
}

void timitseg_segments_free(timitseg_segments* segs) { delete segs; }

}  // extern "C"
