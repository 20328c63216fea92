// Label set, batch collation, loss step, decoding and checkpoints.
#include "model/model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "crf/cumsum.h"
#include "data/phones.h"
#include "common/safetensors.h"

namespace timitseg::model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const float* param_ptr(const ParamLayout& layout, const std::vector<float>& params, const std::string& name) {
  return params.data() + layout.get(name).offset;
}

template <class T>
const char* first_nonfinite(const std::vector<T>& v) {
  for (const T& x : v)
    if (!std::isfinite(x)) return "x";
  return nullptr;
}

}  // namespace

LabelSet LabelSet::make(int set) {
  if (set != 39 && set != 48 && set != 61)
    throw std::invalid_argument("label set must be 39, 48 or 61, got " + std::to_string(set));
  const data::PhoneSet& ps = data::PhoneSet::timit();
  LabelSet ls;
  ls.set = set;
  ls.names39 = ps.names(39);
  const int n61 = static_cast<int>(ps.names61().size());
  ls.idx61_to_class.assign(n61, -1);
  if (set == 61) {
    // q has no frames in prepared labels and no 39-phone target: the 61 set trains C = 60 classes.
    for (int i = 0; i < n61; ++i) {
      if (ps.map(i, 39) < 0) continue;
      ls.idx61_to_class[i] = static_cast<int>(ls.names.size());
      ls.names.push_back(ps.names61()[i]);
    }
  } else {
    ls.names = ps.names(set);
    for (int i = 0; i < n61; ++i) ls.idx61_to_class[i] = ps.map(i, set);
  }
  ls.to39.assign(ls.names.size(), -1);
  for (int i = 0; i < n61; ++i) {
    const int a = ls.idx61_to_class[i], b = ps.map(i, 39);
    if (a >= 0) ls.to39[a] = b;
  }
  for (size_t c = 0; c < ls.to39.size(); ++c)
    if (ls.to39[c] < 0) throw std::logic_error("label set " + std::to_string(set) + ": no 39-phone map for " + ls.names[c]);
  return ls;
}

int LabelSet::from61(int idx61) const {
  if (idx61 < 0 || idx61 >= static_cast<int>(idx61_to_class.size()))
    throw std::out_of_range("phone index " + std::to_string(idx61) + " outside [0, 61)");
  return idx61_to_class[idx61];
}

Batch make_batch(const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn, const LabelSet& ls,
                 int fixed_length) {
  if (utts.empty()) throw std::invalid_argument("make_batch: empty batch");
  Batch batch;
  const int B = static_cast<int>(utts.size());
  const int D = utts[0]->dim;
  int T = 0;
  for (const data::Utterance* u : utts) {
    if (u->dim != D)
      throw std::invalid_argument("utterance " + u->id + " has feature dim " + std::to_string(u->dim) + ", expected " +
                                  std::to_string(D));
    if (u->num_frames < 1) throw std::invalid_argument("utterance " + u->id + " has no frames");
    T = std::max(T, fixed_length > 0 ? fixed_length : u->num_frames);
  }
  batch.input.B = B;
  batch.input.T = T;
  batch.input.features.assign(static_cast<size_t>(B) * T * D, 0.f);
  batch.input.lengths.assign(B, 0);
  batch.labels.assign(static_cast<size_t>(B) * T, 0);
  for (int b = 0; b < B; ++b) {
    const data::Utterance& u = *utts[b];
    batch.ids.push_back(u.id);
    batch.source_frames.push_back(u.num_frames);
    const int L = fixed_length > 0 ? fixed_length : u.num_frames;
    const int copy = std::min(L, u.num_frames);
    float* f = batch.input.features.data() + static_cast<size_t>(b) * T * D;
    std::copy(u.features.begin(), u.features.begin() + static_cast<size_t>(copy) * D, f);
    if (cmvn) cmvn->apply(f, copy);
    int32_t* lab = batch.labels.data() + static_cast<size_t>(b) * T;
    for (int t = 0; t < copy; ++t) {
      const int l = ls.from61(u.labels[t]);
      if (l < 0)
        throw std::invalid_argument("utterance " + u.id + " frame " + std::to_string(t) + ": label index " +
                                    std::to_string(u.labels[t]) + " has no class in the " + std::to_string(ls.set) +
                                    "-phone set");
      lab[t] = l;
    }
    for (int t = copy; t < T; ++t) lab[t] = lab[copy - 1];  // padding (and --fixed-length) repeats the last label
    batch.input.lengths[b] = L;
    batch.frames += L;
  }
  return batch;
}

std::pair<double, double> crf_param_maxima(const ParamLayout& layout, const std::vector<float>& params) {
  auto maxabs = [&](const std::string& n) {
    const ParamInfo& p = layout.get(n);
    double m = 0;
    for (size_t i = 0; i < p.size; ++i) m = std::max(m, std::abs(double(params[p.offset + i])));
    return m;
  };
  return {maxabs("crf.transition"), maxabs("crf.duration_bias")};
}

static crf::Params crf_params(const Network<float>& net, const std::vector<float>& params,
                              const std::vector<float>& cum, const Batch& batch) {
  crf::Params p;
  p.cum_scores = cum.data();
  p.transition = param_ptr(net.layout(), params, "crf.transition");
  p.duration_bias = param_ptr(net.layout(), params, "crf.duration_bias");
  p.start = param_ptr(net.layout(), params, "crf.start");
  p.end = param_ptr(net.layout(), params, "crf.end");
  p.lengths = batch.input.lengths.data();
  return p;
}

StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Backend& backend, const Config& cfg, double dropout, std::mt19937_64* rng,
                         std::vector<float>& grad, Activations<float>& act, StepTimes* times) {
  const ModelDims& d = net.layout().dims();
  const int B = batch.input.B, T = batch.input.T, C = d.num_classes, K = d.max_duration;
  auto t0 = std::chrono::steady_clock::now();
  TensorCheck check;
  net.forward(params, batch.input, dropout, rng, act, cfg.debug_check_numerics ? &check : nullptr);
  if (!check.first_nonfinite.empty())
    throw NonFiniteError(check.first_nonfinite, "non-finite value in " + check.first_nonfinite + " (forward)");
  if (times) times->encoder_forward += seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  const crf::Dims dims{B, T, K, C};
  crf::HostRunOptions opt;
  opt.gradients = true;
  opt.viterbi = false;
  const double norm = cfg.crf_loss_normalization == "frame" ? static_cast<double>(batch.frames) : double(B);
  opt.scale = 1.0 / norm;
  crf::HostResult r;
  try {
    r = crf::run_host(backend, dims, crf_params(net, params, act.cum, batch), batch.labels.data(), opt);
  } catch (const std::invalid_argument& e) {
    // validate_host names the tensor (e.g. a non-finite cum_scores entry)
    throw NonFiniteError("CRF input", e.what());
  }
  StepResult res;
  for (int b = 0; b < B; ++b) {
    if (!std::isfinite(r.log_z[b]))
      throw NonFiniteError("log_partition", "non-finite log partition for batch row " + std::to_string(b));
    if (!std::isfinite(r.gold[b]))
      throw NonFiniteError("gold_score", "non-finite gold score for batch row " + std::to_string(b));
    res.nll_sum += r.log_z[b] - r.gold[b];
  }
  const std::pair<const char*, const std::vector<float>*> crf_grads[] = {
      {"grad_cum_scores", &r.grad_cum_scores}, {"grad_transition", &r.grad_transition},
      {"grad_duration_bias", &r.grad_duration_bias}, {"grad_start", &r.grad_start}, {"grad_end", &r.grad_end}};
  for (auto& [name, v] : crf_grads)
    if (first_nonfinite(*v)) throw NonFiniteError(name, std::string("non-finite value in CRF backward ") + name);
  if (times) times->crf += seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  net.backward(params, act, r.grad_cum_scores, grad, nullptr);
  const ParamLayout& lay = net.layout();
  auto add = [&](const std::string& name, const std::vector<float>& g) {
    const ParamInfo& p = lay.get(name);
    std::copy(g.begin(), g.end(), grad.begin() + p.offset);
  };
  add("crf.transition", r.grad_transition);
  add("crf.duration_bias", r.grad_duration_bias);
  add("crf.start", r.grad_start);
  add("crf.end", r.grad_end);
  res.penalty = crf::l2_penalty<float>(cfg.crf_reg, C, K, param_ptr(lay, params, "crf.transition"),
                                       param_ptr(lay, params, "crf.duration_bias"),
                                       grad.data() + lay.get("crf.transition").offset,
                                       grad.data() + lay.get("crf.duration_bias").offset);
  res.loss = res.nll_sum / norm + res.penalty;
  if (times) times->encoder_backward += seconds_since(t0);
  if (!std::isfinite(res.loss)) throw NonFiniteError("loss", "non-finite loss");
  for (const ParamInfo& p : lay.params())
    for (size_t i = 0; i < p.size; ++i)
      if (!std::isfinite(grad[p.offset + i]))
        throw NonFiniteError("gradient of " + p.name, "non-finite gradient of " + p.name + " at flat index " +
                                                          std::to_string(i));
  return res;
}

std::vector<std::vector<crf::Segment>> decode_batch(const Network<float>& net, const std::vector<float>& params,
                                                    const Batch& batch, crf::Backend& backend,
                                                    Activations<float>& act) {
  const ModelDims& d = net.layout().dims();
  const int B = batch.input.B, T = batch.input.T;
  TensorCheck check;
  net.forward(params, batch.input, 0.0, nullptr, act, &check);
  if (!check.first_nonfinite.empty())
    throw std::runtime_error("decode: non-finite value in " + check.first_nonfinite + " (batch starting with " +
                             batch.ids[0] + ")");
  crf::HostRunOptions opt;
  opt.gradients = false;
  opt.viterbi = true;
  const crf::Dims dims{B, T, d.max_duration, d.num_classes};
  crf::HostResult r = crf::run_host(backend, dims, crf_params(net, params, act.cum, batch), nullptr, opt);
  std::vector<std::vector<crf::Segment>> out(B);
  for (const crf::Segment& s : r.segments) out.at(s.batch).push_back(s);
  return out;
}

void write_replay(const std::string& path, const Network<float>& net, const std::vector<float>& params,
                  const Batch& batch, const std::vector<float>& cum) {
  const ModelDims& d = net.layout().dims();
  const int64_t B = batch.input.B, T = batch.input.T, C = d.num_classes, K = d.max_duration;
  st::File f;
  f.tensors["cum_scores"] = st::Tensor::from<float>({B, T + 1, C}, cum);
  f.tensors["transition"] = st::Tensor::from<float>({C, C}, param_ptr(net.layout(), params, "crf.transition"));
  f.tensors["duration_bias"] =
      st::Tensor::from<float>({K, C}, param_ptr(net.layout(), params, "crf.duration_bias"));
  f.tensors["start"] = st::Tensor::from<float>({C}, param_ptr(net.layout(), params, "crf.start"));
  f.tensors["end"] = st::Tensor::from<float>({C}, param_ptr(net.layout(), params, "crf.end"));
  f.tensors["lengths"] = st::Tensor::from<int32_t>({B}, batch.input.lengths);
  f.tensors["labels"] = st::Tensor::from<int32_t>({B, T}, batch.labels);
  std::string ids;
  for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : " ") + id;
  f.metadata["utterance_ids"] = ids;
  st::save(path, f);
}

nlohmann::json feature_options_to_json(const data::FeatureOptions& o) {
  return {{"type", o.type},
          {"sample_rate", o.sample_rate},
          {"frame_length_ms", o.frame_length_ms},
          {"frame_shift_ms", o.frame_shift_ms},
          {"snip_edges", o.snip_edges},
          {"remove_dc_offset", o.remove_dc_offset},
          {"preemph_coeff", o.preemph_coeff},
          {"window_type", o.window_type},
          {"num_mel_bins", o.num_mel_bins},
          {"low_freq", o.low_freq},
          {"high_freq", o.high_freq},
          {"num_ceps", o.num_ceps},
          {"cepstral_lifter", o.cepstral_lifter},
          {"use_energy", o.use_energy},
          {"deltas", o.deltas},
          {"allow_resample", o.allow_resample}};
}

data::FeatureOptions feature_options_from_json(const nlohmann::json& j) {
  data::FeatureOptions o;
  o.type = j.at("type").get<std::string>();
  o.sample_rate = j.at("sample_rate").get<int>();
  o.frame_length_ms = j.at("frame_length_ms").get<double>();
  o.frame_shift_ms = j.at("frame_shift_ms").get<double>();
  o.snip_edges = j.at("snip_edges").get<bool>();
  o.remove_dc_offset = j.at("remove_dc_offset").get<bool>();
  o.preemph_coeff = j.at("preemph_coeff").get<double>();
  o.window_type = j.at("window_type").get<std::string>();
  o.num_mel_bins = j.at("num_mel_bins").get<int>();
  o.low_freq = j.at("low_freq").get<double>();
  o.high_freq = j.at("high_freq").get<double>();
  o.num_ceps = j.at("num_ceps").get<int>();
  o.cepstral_lifter = j.at("cepstral_lifter").get<double>();
  o.use_energy = j.at("use_energy").get<bool>();
  o.deltas = j.at("deltas").get<bool>();
  o.allow_resample = j.at("allow_resample").get<bool>();
  return o;
}

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
  m["feature_options"] = model::feature_options_to_json(s.features).dump();
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
        [&](const std::string& t) { s.features = feature_options_from_json(nlohmann::json::parse(t)); });
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
