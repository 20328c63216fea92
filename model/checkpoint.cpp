#include "model/checkpoint.h"

#include <sstream>
#include <stdexcept>

#include "common/safetensors.h"
#include "data/features.h"

namespace timitseg::model {

static std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
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
  m["dims"] = nlohmann::json{{"input_dim", s.dims.input_dim},
                             {"hidden_dim", s.dims.hidden_dim},
                             {"num_layers", s.dims.num_layers},
                             {"num_classes", s.dims.num_classes},
                             {"max_duration", s.dims.max_duration}}
                  .dump();
  m["label_set"] = std::to_string(s.labels.set);
  m["label_names"] = nlohmann::json(s.labels.names).dump();
  m["feature_options"] = data::feature_options_to_json(s.features).dump();
  m["epoch"] = std::to_string(s.epoch);
  m["optimizer_step"] = std::to_string(s.optimizer.step);
  m["rng_state"] = s.rng_state;
  m["best_dev_per"] = num(s.best_dev_per);
  m["best_epoch"] = std::to_string(s.best_epoch);
  m["dev_per"] = num(s.dev_per);
  st::save(path, f);
}

ModelState load_checkpoint(const std::string& path) {
  const st::File f = st::load(path);
  auto meta = [&](const std::string& k) -> const std::string& {
    auto it = f.metadata.find(k);
    if (it == f.metadata.end()) throw std::runtime_error(path + ": not a timitseg checkpoint (no metadata '" + k + "')");
    return it->second;
  };
  if (meta("format") != "timitseg-checkpoint-1")
    throw std::runtime_error(path + ": unsupported checkpoint format '" + meta("format") + "'");
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
    s.config = Config::from_json(nlohmann::json::parse(t), path + " (config metadata)");
  });
  parse("dims", [&](const std::string& t) {
    const nlohmann::json d = nlohmann::json::parse(t);
    s.dims.input_dim = d.at("input_dim");
    s.dims.hidden_dim = d.at("hidden_dim");
    s.dims.num_layers = d.at("num_layers");
    s.dims.num_classes = d.at("num_classes");
    s.dims.max_duration = d.at("max_duration");
  });
  parse("label_set", [&](const std::string& t) { s.labels = LabelSet::make(to_int(t)); });
  parse("feature_options",
        [&](const std::string& t) { s.features = data::feature_options_from_json(nlohmann::json::parse(t)); });
  parse("epoch", [&](const std::string& t) { s.epoch = to_int(t); });
  parse("optimizer_step", [&](const std::string& t) { s.optimizer.step = to_int64(t); });
  s.rng_state = meta("rng_state");
  parse("best_dev_per", [&](const std::string& t) { s.best_dev_per = to_double(t); });
  parse("best_epoch", [&](const std::string& t) { s.best_epoch = to_int(t); });
  parse("dev_per", [&](const std::string& t) { s.dev_per = to_double(t); });
  if (s.labels.size() != s.dims.num_classes)
    throw std::runtime_error(path + ": label set size " + std::to_string(s.labels.size()) + " != num_classes " +
                             std::to_string(s.dims.num_classes));
  const ParamLayout layout(s.dims);
  s.params.assign(layout.total(), 0.f);
  bool has_opt = f.has("optimizer.exp_avg." + layout.params()[0].name);
  if (has_opt) {
    s.optimizer.m.assign(layout.total(), 0.f);
    s.optimizer.v.assign(layout.total(), 0.f);
  }
  for (const ParamInfo& p : layout.params()) {
    std::vector<float> v = f.get(p.name, st::DType::F32, p.shape).to<float>();
    std::copy(v.begin(), v.end(), s.params.begin() + p.offset);
    if (has_opt) {
      v = f.get("optimizer.exp_avg." + p.name, st::DType::F32, p.shape).to<float>();
      std::copy(v.begin(), v.end(), s.optimizer.m.begin() + p.offset);
      v = f.get("optimizer.exp_avg_sq." + p.name, st::DType::F32, p.shape).to<float>();
      std::copy(v.begin(), v.end(), s.optimizer.v.begin() + p.offset);
    }
  }
  if (f.has("cmvn.mean")) {
    s.has_cmvn = true;
    s.cmvn.mean = f.get("cmvn.mean", st::DType::F64, {s.dims.input_dim}).to<double>();
    s.cmvn.var = f.get("cmvn.var", st::DType::F64, {s.dims.input_dim}).to<double>();
  }
  return s;
}

}  // namespace timitseg::model
