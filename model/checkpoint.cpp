#include "model/checkpoint.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/features.h"

namespace timitseg::model {

static std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::string checkpoint_tensor_sha256(const st::File& f) {
  Sha256 h;
  const char nul = '\0';
  for (const auto& [name, t] : f.tensors) {
    h.update(name.data(), name.size());
    h.update(&nul, 1);
    const std::string dt = st::dtype_name(t.dtype);
    h.update(dt.data(), dt.size());
    h.update(&nul, 1);
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    h.update(shape.data(), shape.size());
    h.update(&nul, 1);
    uint8_t len[8];
    const uint64_t n = t.bytes.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    h.update(len, 8);
    if (!t.bytes.empty()) h.update(t.bytes.data(), t.bytes.size());
  }
  return h.hex();
}

namespace {

// -inf marks forbidden transitions / durations / start / end labels (crf/):
// accepted there, nowhere else.
bool allows_neg_inf(const ParamLayout& layout, const ParamInfo& p) {
  for (const CrfTensor* t : layout.crf().may_hold_neg_inf())
    if (t->present && t->offset == p.offset) return true;
  return false;
}

std::string index_str(const std::vector<int64_t>& shape, size_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[d] = static_cast<int64_t>(flat % static_cast<size_t>(n));
    flat /= static_cast<size_t>(n);
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? "][" : "") + std::to_string(idx[d]);
  return s + "]";
}

// Throws "PATH: tensor 'NAME' [i][j] = VALUE: WHY" at the first value of
// data[0..n) that `ok` rejects.
template <class T, class Ok>
void check_range(const std::string& path, const std::string& name, const std::vector<int64_t>& shape, const T* data,
                  size_t n, Ok ok, const char* why) {
  for (size_t i = 0; i < n; ++i)
    if (!ok(data[i])) {
      std::ostringstream v;
      v.precision(9);
      v << data[i];
      throw std::runtime_error(path + ": tensor '" + name + "' " + index_str(shape, i) + " = " + v.str() + ": " +
                               why + " (corrupted or hand-edited checkpoint)");
    }
}

}  // namespace

std::string dims_json(const ModelDims& d) {
  nlohmann::json j{{"input_dim", d.input_dim},
                   {"hidden_dim", d.hidden_dim},
                   {"num_layers", d.num_layers},
                   {"num_classes", d.num_classes},
                   {"max_duration", d.max_duration}};
  if (d.onset) j["onset_features"] = true;  // absent = false: checkpoints without onset stay as they were
  if (d.end) j["end_features"] = true;      // likewise
  if (d.gaussian) j["gaussian_head"] = true;  // likewise (crf.gaussian_head resolved on)
  if (d.duration_lognormal) j["duration_model"] = "lognormal";  // absent = table
  return j.dump();
}

void write_phone_set_metadata(const LabelSet& ls, std::map<std::string, std::string>& m) {
  if (ls.is_timit()) {  // a shipped TIMIT set, embedded in every binary: its number, as before phone sets were data
    m["label_set"] = std::to_string(ls.set);
    return;
  }
  m["phone_set"] = ls.spec.to_json().dump();
  m["phone_set_sha256"] = ls.spec.digest();
}

LabelSet read_phone_set_metadata(const std::map<std::string, std::string>& m, const std::string& path) {
  const auto it = m.find("phone_set");
  if (it == m.end()) {
    const auto ls = m.find("label_set");
    if (ls == m.end()) throw std::runtime_error(path + ": not a timitseg checkpoint (no metadata 'label_set' or 'phone_set')");
    const std::string& t = ls->second;
    data::TimitLabelSet timit{};
    if (!common::parse_enum(t, &timit))
      throw std::runtime_error(path + ": bad checkpoint metadata 'label_set': '" + t + "' is not 39, 48 or 61");
    return LabelSet::make(static_cast<int>(timit));
  }
  data::PhoneSetSpec spec;
  try {
    spec = data::PhoneSetSpec::from_json(nlohmann::json::parse(it->second), "phone set");
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": bad checkpoint metadata 'phone_set': " + e.what());
  }
  const auto d = m.find("phone_set_sha256");
  if (d == m.end() || d->second != spec.digest())
    throw std::runtime_error(path + ": checkpoint metadata 'phone_set_sha256' " +
                             (d == m.end() ? std::string("is missing") : "'" + d->second + "'") +
                             ", the phone set's digest is " + spec.digest() + " (the metadata was edited)");
  return LabelSet::make(spec);
}

void save_checkpoint(const std::string& path, const ModelState& s, bool with_optimizer) {
  const ParamLayout layout(s.dims);
  if (s.params.size() != layout.total()) throw std::invalid_argument(path + ": parameter buffer has the wrong size");
  st::File f;
  for (const ParamInfo& p : layout.params()) {
    f.tensors[p.name] = st::Tensor::from<float>(p.shape, s.params.data() + p.offset);
    if (with_optimizer && s.optimizer.m.size() == layout.total()) {
      f.tensors["optimizer.exp_avg." + p.name] = st::Tensor::from<float>(p.shape, s.optimizer.m.data() + p.offset);
      f.tensors["optimizer.exp_avg_sq." + p.name] = st::Tensor::from<float>(p.shape, s.optimizer.v.data() + p.offset);
    }
  }
  if (s.has_cmvn) {
    f.tensors["cmvn.mean"] = st::Tensor::from<double>({int64_t(s.cmvn.mean.size())}, s.cmvn.mean);
    f.tensors["cmvn.var"] = st::Tensor::from<double>({int64_t(s.cmvn.var.size())}, s.cmvn.var);
  }
  auto& m = f.metadata;
  m["format"] = "timitseg-checkpoint-1";
  m["config"] = s.config.to_json().dump();
  m["dims"] = dims_json(s.dims);
  write_phone_set_metadata(s.labels, m);
  m["label_names"] = nlohmann::json(s.labels.names).dump();
  m["feature_options"] = data::feature_options_to_json(s.features).dump();
  m["epoch"] = std::to_string(s.epoch);
  m["optimizer_step"] = std::to_string(s.optimizer.step);
  m["rng_state"] = s.rng_state;
  m["best_dev_per"] = num(s.best_dev_per);
  m["best_epoch"] = std::to_string(s.best_epoch);
  m["dev_per"] = num(s.dev_per);
  m["transcript_trained"] = nlohmann::json(s.transcript_trained).dump();  // a JSON boolean
  m["tensor_sha256"] = checkpoint_tensor_sha256(f);
  st::save(path, f);
}

namespace {

// The parameters, the optimizer moments (when present) and the CMVN of
// checkpoint f into s (its dims already read), each checked when check_values.
void read_tensors(const st::File& f, const std::string& path, bool check_values, ModelState& s) {
  const ParamLayout layout(s.dims);
  s.params.assign(layout.total(), 0.f);
  bool has_opt = f.has("optimizer.exp_avg." + layout.params()[0].name);
  if (has_opt) {
    s.optimizer.m.assign(layout.total(), 0.f);
    s.optimizer.v.assign(layout.total(), 0.f);
  }
  const auto finite = [](auto x) { return std::isfinite(x); };
  const auto check = [&](const std::string& file, const std::string& name, const std::vector<int64_t>& shape,
                         const auto* data, size_t n, auto ok, const char* why) {
    if (check_values) check_range(file, name, shape, data, n, ok, why);
  };
  for (const ParamInfo& p : layout.params()) {
    std::vector<float> v = f.get(p.name, st::DType::F32, p.shape).to<float>();
    if (allows_neg_inf(layout, p))
      check(path, p.name, p.shape, v.data(), v.size(),
            [](float x) { return std::isfinite(x) || x == -std::numeric_limits<float>::infinity(); },
            "not finite (only -inf, a forbidden entry, is allowed here)");
    else
      check(path, p.name, p.shape, v.data(), v.size(), finite, "not finite");
    std::copy(v.begin(), v.end(), s.params.begin() + p.offset);
    if (has_opt) {
      const std::string m_name = "optimizer.exp_avg." + p.name, v_name = "optimizer.exp_avg_sq." + p.name;
      v = f.get(m_name, st::DType::F32, p.shape).to<float>();
      check(path, m_name, p.shape, v.data(), v.size(), finite, "not finite");
      std::copy(v.begin(), v.end(), s.optimizer.m.begin() + p.offset);
      v = f.get(v_name, st::DType::F32, p.shape).to<float>();
      check(path, v_name, p.shape, v.data(), v.size(), [](float x) { return std::isfinite(x) && x >= 0.f; },
            "not finite and >= 0");
      std::copy(v.begin(), v.end(), s.optimizer.v.begin() + p.offset);
    }
  }
  if (f.has("cmvn.mean")) {
    s.has_cmvn = true;
    s.cmvn.per_utterance = s.config.data_cmvn == config::CmvnMode::utterance;  // the run's data.cmvn
    s.cmvn.per_speaker = s.config.data_cmvn == config::CmvnMode::speaker;  // statistics added per split read (Cmvn::with_speakers)
    const std::vector<int64_t> shape{s.dims.input_dim};
    s.cmvn.mean = f.get("cmvn.mean", st::DType::F64, shape).to<double>();
    s.cmvn.var = f.get("cmvn.var", st::DType::F64, shape).to<double>();
    check(path, "cmvn.mean", shape, s.cmvn.mean.data(), s.cmvn.mean.size(), finite, "not finite");
    check(path, "cmvn.var", shape, s.cmvn.var.data(), s.cmvn.var.size(),
          [](double x) { return std::isfinite(x) && x > 0.0; }, "a variance must be finite and > 0");
  }
}

}  // namespace

ModelState load_checkpoint(const std::string& path, bool check_values) {
  const st::File f = st::load(path);
  auto meta = [&](const std::string& k) -> const std::string& {
    auto it = f.metadata.find(k);
    if (it == f.metadata.end()) throw std::runtime_error(path + ": not a timitseg checkpoint (no metadata '" + k + "')");
    return it->second;
  };
  if (meta("format") != "timitseg-checkpoint-1")
    throw std::runtime_error(path + ": unsupported checkpoint format '" + meta("format") + "'");
  // Checksum first: a corrupted tensor is reported as such, not as the bad
  // value it happens to produce. Checkpoints older than the key are not checked.
  if (auto it = f.metadata.find("tensor_sha256"); it != f.metadata.end()) {
    const std::string actual = checkpoint_tensor_sha256(f);
    if (actual != it->second)
      throw std::runtime_error(path + ": tensor data does not match its checksum (metadata tensor_sha256 " +
                               it->second + ", computed " + actual +
                               "): the file is corrupted; use another checkpoint (e.g. an earlier epoch-N)");
  }
  ModelState s;
  // Each metadata value parsed on its own, so that an error names the file and the key.
  auto parse = [&](const std::string& key, const auto& fn) {
    const std::string& text = meta(key);
    try {
      fn(text);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": bad checkpoint metadata '" + key + "': " + e.what());
    }
  };
  auto to_int64 = [](const std::string& t) -> int64_t {
    size_t pos = 0;
    const long long v = std::stoll(t, &pos);
    if (pos != t.size()) throw std::invalid_argument("'" + t + "' is not an integer");
    return v;
  };
  auto to_int = [&](const std::string& t) {
    const int64_t v = to_int64(t);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      throw std::out_of_range("'" + t + "' is out of the int range");
    return static_cast<int>(v);
  };
  auto to_double = [](const std::string& t) {
    size_t pos = 0;
    const double v = std::stod(t, &pos);
    if (pos != t.size()) throw std::invalid_argument("'" + t + "' is not a number");
    return v;
  };
  parse("config", [&](const std::string& t) {
    s.config = config::Config::from_json(nlohmann::json::parse(t), path + " (config metadata)");
  });
  parse("dims", [&](const std::string& t) {
    const nlohmann::json d = nlohmann::json::parse(t);
    s.dims.input_dim = d.at("input_dim");
    s.dims.hidden_dim = d.at("hidden_dim");
    s.dims.num_layers = d.at("num_layers");
    s.dims.num_classes = d.at("num_classes");
    s.dims.max_duration = d.at("max_duration");
    s.dims.onset = d.value("onset_features", false);
    s.dims.end = d.value("end_features", false);
    s.dims.gaussian = d.value("gaussian_head", false);
    const std::string dm = d.value("duration_model", std::string("table"));
    config::DurationModel model = config::DurationModel::table;  // crf.duration_model's words (config/config_enums.h)
    if (!config::parse_enum(dm, &model))
      throw std::runtime_error(path + ": dims metadata: duration_model '" + dm + "' is not table or lognormal");
    s.dims.duration_lognormal = model == config::DurationModel::lognormal;
  });
  s.labels = read_phone_set_metadata(f.metadata, path);
  parse("feature_options",
        [&](const std::string& t) { s.features = data::feature_options_from_json(nlohmann::json::parse(t)); });
  parse("epoch", [&](const std::string& t) { s.epoch = to_int(t); });
  parse("optimizer_step", [&](const std::string& t) { s.optimizer.step = to_int64(t); });
  s.rng_state = meta("rng_state");
  parse("best_dev_per", [&](const std::string& t) { s.best_dev_per = to_double(t); });
  parse("best_epoch", [&](const std::string& t) { s.best_epoch = to_int(t); });
  parse("dev_per", [&](const std::string& t) { s.dev_per = to_double(t); });
  if (f.metadata.count("transcript_trained")) {  // a JSON boolean
    parse("transcript_trained", [&](const std::string& t) {
      const nlohmann::json v = nlohmann::json::parse(t, nullptr, /*allow_exceptions=*/false);
      if (!v.is_boolean()) throw std::invalid_argument("'" + t + "' is not true or false");
      s.transcript_trained = v.get<bool>();
    });
  } else {  // written before the key: what its configuration says
    s.transcript_trained = s.config.crf_supervision == config::Supervision::transcript;
  }
  if (s.labels.size() != s.dims.num_classes)
    throw std::runtime_error(path + ": label set size " + std::to_string(s.labels.size()) + " != num_classes " +
                             std::to_string(s.dims.num_classes));
  read_tensors(f, path, check_values, s);
  return s;
}

}  // namespace timitseg::model
