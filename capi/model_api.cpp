// The checkpoint half of the C API (include/timitseg.h): a loaded checkpoint
// and its executor; decode as `timitseg decode` (eval/infer.h decode_audio),
// align as `timitseg align --phones` (eval/align.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "capi/api_detail.h"
#include "common/files.h"
#include "data/transcripts.h"
#include "eval/align.h"
#include "eval/infer.h"
#include "model/checkpoint.h"
#include "model/feature_check.h"

using timitseg::capi::ApiError;
using timitseg::capi::guard;
namespace model = timitseg::model;
namespace eval = timitseg::eval;
namespace crf = timitseg::crf;
namespace fs = std::filesystem;

struct timitseg_model {
  std::string checkpoint;
  model::DeviceSetting device = model::DeviceSetting::automatic;
  std::optional<crf::BackendKind> backend;  // unset: inference_crf_backend
  int threads = 0;
  model::ModelState state;
  std::unique_ptr<model::Executor> exec;
  std::string phone_set_json;  // timitseg_model_phone_set
};

struct timitseg_segments {
  std::vector<eval::AlignedOutput::Interval> rows;  // (begin sample, end sample, label)
};

namespace {

void need(const void* p, const char* what) {
  if (p == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string(what) + " is NULL");
}

void load(const char* checkpoint, const timitseg_model_params* p, timitseg_model** out) {
  need(checkpoint, "checkpoint");
  need(out, "out");
  *out = nullptr;
  const timitseg_model_params d = p ? *p : timitseg_model_default_params();
  auto m = std::make_unique<timitseg_model>();
  m->checkpoint = checkpoint;
  const std::string device = d.device ? d.device : "auto";  // the user's words, read here into the enums
  m->threads = d.threads;
  if (!model::parse_enum(device, &m->device))
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "device must be cpu, cuda or auto, got '" + device + "'");
  if (m->threads < 0) throw ApiError(TIMITSEG_ERR_ARGUMENT, "threads must be >= 0");
  m->state = model::load_checkpoint(m->checkpoint);
  model::check_checkpoint_features(m->state, m->checkpoint);  // decode computes features with these options
  nlohmann::json ps = m->state.labels.spec.to_json();
  ps["scoring_labels"] = m->state.labels.names39;
  ps["sha256"] = m->state.labels.spec.digest();
  m->phone_set_json = ps.dump();
  if (d.backend && *d.backend) m->backend = crf::backend_kind(d.backend);  // "unknown crf backend 'X' (known: ...)"
  m->exec = eval::make_inference_executor(m->state, m->device, m->backend, m->threads, std::nullopt, std::nullopt);
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

// A fresh private folder for one alignment (removed by the destructor).
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() / ("timitseg-capi-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The audio path of a list line: a file, without white space (the list is space separated).
std::string list_audio(const char* path) {
  const std::string audio = path;
  if (audio.find_first_of(" \t\n") != std::string::npos)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "path '" + audio + "' has white space, which a phone list cannot hold");
  if (!fs::is_regular_file(audio)) throw ApiError(TIMITSEG_ERR_ARGUMENT, audio + ": no such file");
  return audio;
}

eval::AlignOptions align_options(const timitseg_model& m, const TempDir& dir) {
  eval::AlignOptions o;
  o.checkpoint = m.checkpoint;
  o.out_dir = (dir.path / "out").string();
  o.device = m.device;
  o.backend = m.backend;
  o.threads = m.threads;
  return o;
}

// `timitseg align --phones` on one file, its .PHN read back.
void align(timitseg_model* m, const char* path, const char* phones, timitseg_segments** out) {
  need(m, "model");
  need(path, "path");
  need(phones, "phones");
  need(out, "out");
  *out = nullptr;
  const std::string audio = list_audio(path);
  {  // the phone names checked here, so that a bad one is the message (align() logs it and counts)
    timitseg::data::Transcript t;
    t.source = "phones";
    std::istringstream words(phones);
    for (std::string w; words >> w;) t.phones.push_back(w);
    eval::to_classes(t, m->state.labels);
  }
  TempDir dir;
  eval::AlignOptions o = align_options(*m, dir);
  o.phones_file = (dir.path / "phones.txt").string();
  std::ofstream(o.phones_file) << audio << " " << phones << "\n";
  eval::align(o);
  const fs::path phn = dir.path / "out" / (fs::path(audio).filename().replace_extension().string() + ".PHN");
  std::istringstream in(timitseg::read_file(phn.string()));
  auto s = std::make_unique<timitseg_segments>();
  int64_t b = 0, e = 0;
  std::string name;
  while (in >> b >> e >> name) s->rows.emplace_back(b, e, name);
  *out = s.release();
}

// One field of a line of the align command's .csv (align_formats.cpp: quoted when it holds , " or a newline).
std::string csv_next(const std::string& line, size_t& at) {
  std::string v;
  if (at < line.size() && line[at] == '"') {
    for (++at; at < line.size(); ++at) {
      if (line[at] == '"' && at + 1 < line.size() && line[at + 1] == '"') {
        v += '"', ++at;
      } else if (line[at] == '"') {
        ++at;
        break;
      } else {
        v += line[at];
      }
    }
  } else {
    const size_t end = std::min(line.find(',', at), line.size());
    v = line.substr(at, end - at);
    at = end;
  }
  if (at < line.size() && line[at] == ',') ++at;
  return v;
}

// `timitseg align --words --dict` on one file: the phones and the words of its .csv.
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
  const std::string audio = list_audio(path);
  TempDir dir;
  eval::AlignOptions o = align_options(*m, dir);
  o.dict = dictionary;
  o.dict_format = d.dict_format ? d.dict_format : "auto";
  o.words.closures = d.closures != 0;
  o.words.edge_silence = d.edge_silence != 0;
  o.words.word_silence = d.word_silence != 0;
  o.words.optional_silence = d.obligatory_silence == 0;
  o.formats = {"csv"};
  {  // the dictionary, its format and every word checked here, so that a bad one is the message
    const timitseg::data::Dictionary dict = timitseg::data::Dictionary::load(o.dict, o.dict_format);
    std::vector<timitseg::data::Word> list;
    std::istringstream in(words);
    for (std::string w; in >> w;) list.push_back(timitseg::data::Word{w, 0});
    eval::to_classes(timitseg::data::words_to_phones(list, dict, "words", o.words), m->state.labels);
  }
  o.words_file = (dir.path / "words.txt").string();
  std::ofstream(o.words_file) << audio << " " << words << "\n";
  eval::align(o);
  const fs::path csv = dir.path / "out" / (fs::path(audio).filename().replace_extension().string() + ".csv");
  std::istringstream in(timitseg::read_file(csv.string()));
  auto ph = std::make_unique<timitseg_segments>(), wd = std::make_unique<timitseg_segments>();
  std::string line;
  std::getline(in, line);  // tier,start,end,start_sample,end_sample,label
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    size_t at = 0;
    const std::string tier = csv_next(line, at);
    csv_next(line, at), csv_next(line, at);  // start, end in seconds
    const int64_t b = std::stoll(csv_next(line, at)), e = std::stoll(csv_next(line, at));
    (tier == "word" ? wd : ph)->rows.emplace_back(b, e, csv_next(line, at));
  }
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
