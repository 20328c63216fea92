// Config keys, reading (YAML, JSON, --set), overrides and writing
// (docs/config.md); their validation: config/config_validate.cpp.
#include "config/config.h"
#include "common/levenshtein.h"
#include "common/text.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <variant>

namespace timitseg::config {
namespace {

template <class... T>
using MemberOf = std::variant<T Config::*...>;
using Member = MemberOf<std::string, int, int64_t, uint64_t, double, bool, CrfBackendSetting, LossNormalization,
                        DurationInit, OnsetFeatures, DurationModel, DecodeMode, Supervision, LrSchedule, DeviceSetting, RnnAlgo,
                        CmvnMode>;
struct Entry {
  const char* key;
  Member member;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> e = {
      {"data.workdir", &Config::data_workdir},
      {"data.label_set", &Config::data_label_set},
      {"data.phone_set", &Config::data_phone_set},
      {"data.max_train_utterances", &Config::data_max_train_utterances},
      {"data.max_dev_utterances", &Config::data_max_dev_utterances},
      {"data.cmvn", &Config::data_cmvn},
      {"features.cmvn", &Config::features_cmvn},
      {"augment.speed", &Config::augment_speed},
      {"augment.noise", &Config::augment_noise},
      {"augment.time_masks", &Config::augment_time_masks},
      {"augment.time_mask_width", &Config::augment_time_mask_width},
      {"augment.freq_masks", &Config::augment_freq_masks},
      {"augment.freq_mask_width", &Config::augment_freq_mask_width},
      {"model.hidden_dim", &Config::model_hidden_dim},
      {"model.num_layers", &Config::model_num_layers},
      {"model.dropout", &Config::model_dropout},
      {"crf.max_duration", &Config::crf_max_duration},
      {"crf.reg", &Config::crf_reg},
      {"crf.backend", &Config::crf_backend},
      {"crf.loss_normalization", &Config::crf_loss_normalization},
      {"crf.init_scale", &Config::crf_init_scale},
      {"crf.duration_init", &Config::crf_duration_init},
      {"crf.flat_start", &Config::crf_flat_start},
      {"crf.lr_scale", &Config::crf_lr_scale},
      {"crf.phone_bonus", &Config::crf_phone_bonus},
      {"crf.frame_ce_weight", &Config::crf_frame_ce_weight},
      {"crf.gaussian_head", &Config::crf_gaussian_head},
      {"crf.gaussian_weight", &Config::crf_gaussian_weight},
      {"crf.decode", &Config::crf_decode},
      {"crf.onset_features", &Config::crf_onset_features},
      {"crf.end_features", &Config::crf_end_features},
      {"crf.duration_model", &Config::crf_duration_model},
      {"crf.supervision", &Config::crf_supervision},
      {"train.run_dir", &Config::train_run_dir},
      {"train.epochs", &Config::train_epochs},
      {"train.batch_size", &Config::train_batch_size},
      {"train.lr", &Config::train_lr},
      {"train.min_lr", &Config::train_min_lr},
      {"train.lr_schedule", &Config::train_lr_schedule},
      {"train.weight_decay", &Config::train_weight_decay},
      {"train.beta1", &Config::train_beta1},
      {"train.beta2", &Config::train_beta2},
      {"train.eps", &Config::train_eps},
      {"train.clip_norm", &Config::train_clip_norm},
      {"train.seed", &Config::train_seed},
      {"train.device", &Config::train_device},
      {"train.threads", &Config::train_threads},
      {"train.rnn_algo", &Config::train_rnn_algo},
      {"train.bucketing", &Config::train_bucketing},
      {"train.bucket_batches", &Config::train_bucket_batches},
      {"train.log_every", &Config::train_log_every},
      {"train.keep_checkpoints", &Config::train_keep_checkpoints},
      {"train.dist_timeout", &Config::train_dist_timeout},
      {"debug.fixed_length", &Config::debug_fixed_length},
      {"debug.drift_threshold", &Config::debug_drift_threshold},
      {"debug.check_numerics", &Config::debug_check_numerics},
      {"debug.inject_nonfinite", &Config::debug_inject_nonfinite},
      {"debug.inject_fault", &Config::debug_inject_fault},
      {"debug.deterministic", &Config::debug_deterministic},
      {"debug.step_log", &Config::debug_step_log},
      {"debug.fault_rank", &Config::debug_fault_rank},
      {"debug.inject_exit", &Config::debug_inject_exit},
  };
  return e;
}

const Entry* find_entry(const std::string& key) {
  for (const Entry& e : entries())
    if (key == e.key) return &e;
  return nullptr;
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const Entry& e : entries()) {
    const std::string k = e.key, sec = k.substr(0, k.find('.'));
    if (std::find(out.begin(), out.end(), sec) == out.end()) out.push_back(sec);
  }
  return out;
}

// Valid keys whose name within the section is `leaf` ("lr" -> "train.lr").
std::vector<std::string> keys_with_leaf(const std::string& leaf) {
  std::vector<std::string> out;
  for (const Entry& e : entries()) {
    const std::string k = e.key;
    if (k.substr(k.find('.') + 1) == leaf) out.push_back(k);
  }
  return out;
}

// The hint for a name without a dot: a section, a key's leaf, or the closest section.
std::string dot_free_hint(const std::string& name, bool in_yaml) {
  const std::vector<std::string> secs = section_names();
  if (std::find(secs.begin(), secs.end(), name) != secs.end())
    return "'" + name + "' is a section; set one of its keys, e.g. '" + name + "." +
           [&] {
             for (const Entry& e : entries())
               if (std::string(e.key).rfind(name + ".", 0) == 0) return std::string(e.key).substr(name.size() + 1);
             return std::string();
           }() +
           "'";
  const std::vector<std::string> leaf = keys_with_leaf(name);
  if (leaf.size() == 1) {
    const std::string sec = leaf[0].substr(0, leaf[0].find('.'));
    return in_yaml ? "did you mean '" + leaf[0] + "'? write it inside its section: '" + sec + ":' then '  " + name +
                         ": VALUE'"
                   : "did you mean '" + leaf[0] + "'?";
  }
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const std::string& sec : secs) {
    const int d = levenshtein(name, sec);
    if (d < best_d) best_d = d, best = sec;
  }
  std::string all;
  for (const std::string& sec : secs) all += (all.empty() ? "" : ", ") + sec;
  return "did you mean section '" + best + "'? sections: " + all;
}

// An unknown key of --set or a checkpoint ("section.key", or a name without a dot),
// shown with control characters escaped (one_line, common/text.h).
[[noreturn]] void unknown_key(const std::string& raw_key, const std::string& origin) {
  const std::string key = one_line(raw_key);
  if (key.find('.') == std::string::npos)
    throw std::invalid_argument(origin + ": unknown config key '" + key + "' (keys are SECTION.KEY; " +
                                dot_free_hint(key, false) + ")");
  throw std::invalid_argument(origin + ": unknown config key '" + key + "' (did you mean '" +
                              Config::closest_key(key) + "'?)");
}

// An unknown top-level name of a YAML config file (only sections live there).
[[noreturn]] void unknown_section(const std::string& raw_name, const std::string& path) {
  const std::string name = one_line(raw_name);
  if (name.find('.') != std::string::npos) {
    const bool valid = find_entry(raw_name) != nullptr;
    const std::string key = valid ? name : Config::closest_key(name);
    const std::string sec = key.substr(0, key.find('.')), leaf = key.substr(key.find('.') + 1);
    throw std::invalid_argument(path + ": top-level key '" + name + "': " +
                                (valid ? std::string() : "no such key (did you mean '" + key + "'?); ") +
                                "YAML config keys are nested, write '" + sec + ":' then '  " + leaf +
                                ": VALUE' (dotted keys are for --set)");
  }
  throw std::invalid_argument(path + ": unknown config section '" + name + "' (" + dot_free_hint(name, true) + ")");
}

// "FILE:LINE" of a node read from FILE (yaml-cpp lines count from 0), or
// FILE alone for a node without a position (e.g. built from --set text).
std::string at(const std::string& path, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  return m.is_null() ? path : path + ":" + std::to_string(m.line + 1);
}

// Sets one entry from a YAML scalar. `origin` (FILE, "--set K=V", a checkpoint)
// is recorded for range errors; `loc` ("FILE:LINE" or the origin) starts type
// errors: "configs/x.yaml:12: train.epochs: expected an integer, got 'abc'".
void assign(Config& cfg, const Entry& e, const YAML::Node& value, const std::string& origin, const std::string& loc) {
  const std::string key = e.key;
  if (!value.IsScalar())
    throw std::invalid_argument(loc + ": " + key + ": expected a single value, got a " +
                                (value.IsMap() ? "mapping" : value.IsSequence() ? "list" : "null"));
  const std::string text = value.Scalar();
  auto bad = [&](const std::string& type) {
    return std::invalid_argument(loc + ": " + key + ": expected " + type + ", got '" + one_line(text) + "'");
  };
  std::visit(
      [&](auto ptr) {
        using T = std::decay_t<decltype(cfg.*ptr)>;
        if constexpr (std::is_same_v<T, std::string>) {
          cfg.*ptr = text;
        } else if constexpr (std::is_enum_v<T>) {
          if (parse_enum(text, &(cfg.*ptr))) cfg.bad_words.erase(key);  // a word (config/config_enums.h)
          else cfg.bad_words[key] = text;                               // other text: validate() reports it
        } else if constexpr (std::is_same_v<T, bool>) {
          // Only YAML 1.2's true/false: yaml-cpp would also read the YAML 1.1
          // forms yes/no/on/off/y/n, which are easy to write by mistake.
          if (text == "true") cfg.*ptr = true;
          else if (text == "false") cfg.*ptr = false;
          else throw bad("true or false (yes/no/on/off are not booleans here)");
        } else if constexpr (std::is_same_v<T, double>) {
          // YAML 1.2 number syntax (".inf" and ".nan" are rejected: values must be finite).
          size_t pos = 0;
          double d = 0;
          try {
            d = std::stod(text, &pos);
          } catch (...) {
            throw bad("a number");
          }
          if (pos != text.size() || !std::isfinite(d)) throw bad("a finite number");
          cfg.*ptr = d;
        } else {
          // integers: no fraction, no exponent
          const std::string range =
              "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
              std::to_string(std::numeric_limits<T>::max()) + "]";
          if (text.empty() || text.find_first_not_of("+-0123456789") != std::string::npos) throw bad("an integer");
          size_t pos = 0;
          long long v = 0;
          try {
            v = std::stoll(text, &pos);
          } catch (const std::out_of_range&) {
            throw bad(range);
          } catch (...) {
            throw bad("an integer");
          }
          if (pos != text.size()) throw bad("an integer");
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (v < 0) throw bad("a non-negative integer");
          }
          if constexpr (std::is_same_v<T, int>) {
            if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) throw bad(range);
          }
          cfg.*ptr = static_cast<T>(v);
        }
      },
      e.member);
  cfg.origins[key] = origin;
}

// yaml-cpp keeps every key of a mapping, repeats included (a lookup returns
// the first, iteration yields all): refuse a key that appears twice in one
// mapping anywhere in the document, naming both lines. `prefix`: the dotted
// path of `node` ("" at the top, "train" in a section).
void check_duplicates(const YAML::Node& node, const std::string& path, const std::string& prefix) {
  if (node.IsMap()) {
    std::map<std::string, int> first_line;  // key text -> line (from 1)
    for (auto kv : node) {
      const int line = kv.first.Mark().is_null() ? 0 : kv.first.Mark().line + 1;
      // A YAML complex key ("? a: 1", a list or an empty key) names nothing
      // (found by fuzzing: it escaped as yaml-cpp's "bad conversion").
      if (!kv.first.IsScalar())
        throw std::invalid_argument(path + ":" + std::to_string(line) + ": " +
                                    (kv.first.IsMap() ? "a mapping" : kv.first.IsSequence() ? "a list" : "an empty name") +
                                    " used as a " + (prefix.empty() ? "section" : "key") +
                                    " name; names are plain words");
      const std::string name = kv.first.Scalar();
      const std::string full = prefix.empty() ? name : prefix + "." + name;
      const auto [it, fresh] = first_line.emplace(name, line);
      if (!fresh)
        throw std::invalid_argument(path + ":" + std::to_string(line) + ": duplicate " +
                                    (prefix.empty() ? "section" : "key") + " '" + one_line(full) + "' (first at line " +
                                    std::to_string(it->second) + ", again at line " + std::to_string(line) +
                                    "); each key may appear only once");
      check_duplicates(kv.second, path, full);
    }
  } else if (node.IsSequence()) {
    for (const YAML::Node& item : node) check_duplicates(item, path, prefix);
  }
}

nlohmann::json entry_json(const Config& cfg, const Entry& e) {
  return std::visit([&](auto ptr) {  // an enum-like key as its word
    if constexpr (std::is_enum_v<std::decay_t<decltype(cfg.*ptr)>>) return nlohmann::json(to_string(cfg.*ptr));
    else return nlohmann::json(cfg.*ptr);
  }, e.member);
}

// data.workdir from here on is the absolute path it names from the current
// folder (docs/config.md): config.yaml, run.json and the checkpoints record
// it, so that evaluate, report and train --resume work from any folder.
void make_workdir_absolute(Config& cfg) {
  if (cfg.data_workdir.empty()) return;
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(cfg.data_workdir, ec).lexically_normal();
  if (ec) return;  // no current folder: left as given
  if (abs.has_relative_path() && !abs.has_filename()) abs = abs.parent_path();  // "work/prep/": no trailing '/'
  cfg.data_workdir = abs.string();
}

}  // namespace

std::string format_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

int edit_distance(const std::string& a, const std::string& b) { return levenshtein(a, b); }

std::vector<std::string> Config::keys() {
  std::vector<std::string> k;
  for (const Entry& e : entries()) k.push_back(e.key);
  return k;
}

std::string Config::closest_key(const std::string& key) {
  // Edit distance of the key name within its section (a different section
  // costs 3 more); a valid name that is an abbreviation of the given one
  // (same first letter, a subsequence: "learning_rate" -> "lr") scores 2.
  const size_t dot = key.find('.');
  const std::string section = dot == std::string::npos ? "" : key.substr(0, dot);
  const std::string leaf = dot == std::string::npos ? key : key.substr(dot + 1);
  auto subsequence = [](const std::string& small, const std::string& big) {
    size_t i = 0;
    for (char ch : big)
      if (i < small.size() && small[i] == ch) ++i;
    return i == small.size();
  };
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const Entry& e : entries()) {
    const std::string k = e.key;
    const std::string ksec = k.substr(0, k.find('.')), kleaf = k.substr(k.find('.') + 1);
    const int pen = ksec == section ? 0 : 3;
    int d = std::min(edit_distance(leaf, kleaf) + pen, edit_distance(key, k));
    if (!leaf.empty() && kleaf[0] == leaf[0] && subsequence(kleaf, leaf)) d = std::min(d, 2 + pen);
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

void Config::set(const std::string& assignment, const std::string& origin) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument(origin + ": expected key=value, got '" + assignment + "'");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const Entry* e = find_entry(key);
  if (!e) unknown_key(key, origin);
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& ex) {
    throw std::invalid_argument(origin + ": cannot parse value of '" + key + "': " + ex.what());
  }
  if (node.IsNull()) node = YAML::Node(std::string());  // "key=" sets an empty string
  assign(*this, *e, node, origin, origin);
}

const std::vector<std::string>& Config::resumable_keys() {
  static const std::vector<std::string> k = {"train.epochs",          "train.log_every", "train.threads",
                                             "debug.check_numerics",  "debug.drift_threshold",
                                             "train.device",          "crf.backend",     "train.rnn_algo",
                                             "train.keep_checkpoints", "train.dist_timeout",
                                             "data.workdir"};
  return k;
}

void Config::set_on_resume(const std::string& assignment, const std::string& origin) {
  const size_t eq = assignment.find('=');
  const std::string key = eq == std::string::npos ? assignment : assignment.substr(0, eq);
  const std::vector<std::string>& ok = resumable_keys();
  if (find_entry(key) && std::find(ok.begin(), ok.end(), key) == ok.end()) {
    std::string list;
    for (const std::string& k : ok) list += (list.empty() ? "" : ", ") + k;
    throw std::invalid_argument(origin + ": '" + key + "' cannot be changed on --resume (the run keeps the "
                                "configuration it was started with; start a new run to change it); keys that may "
                                "change on resume: " + list);
  }
  set(assignment, origin);  // unknown keys and bad values: the usual errors
  if (key == "data.workdir") make_workdir_absolute(*this);  // a WORKDIR moved since the run started
}

Config Config::load(const std::string& path, const std::vector<std::string>& overrides) {
  Config cfg;
  if (!path.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw std::invalid_argument(path + ": is a folder, not a config file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument(path + ": cannot open config file");
    std::ostringstream text;
    text << in.rdbuf();
    // A byte-order mark or a no-break space is invisible in an editor and would
    // otherwise surface as a puzzling YAML or key error.
    InvisibleChar invisible;
    if (find_invisible(text.str(), &invisible)) throw std::invalid_argument(invisible_message(path, invisible));
    YAML::Node root;
    try {
      root = YAML::Load(text.str());
    } catch (const YAML::Exception& ex) {
      throw std::invalid_argument(path + ": YAML syntax error: " + ex.what());
    }
    if (!root.IsNull()) {
      if (!root.IsMap()) throw std::invalid_argument(path + ": top level must be a mapping of sections");
      check_duplicates(root, path, "");
      for (auto sec : root) {
        const std::string section = sec.first.as<std::string>();
        const bool known_section = std::any_of(entries().begin(), entries().end(), [&](const Entry& e) {
          return std::string(e.key).rfind(section + ".", 0) == 0;
        });
        if (!known_section) unknown_section(section, at(path, sec.first));  // "lr: 1e-3", "train.lr: 1e-3", "modle:"
        if (!sec.second.IsMap()) {
          if (sec.second.IsNull()) continue;  // empty section
          throw std::invalid_argument(at(path, sec.second) + ": section '" + section + "' must be a mapping of keys");
        }
        for (auto kv : sec.second) {
          const std::string key = section + "." + kv.first.as<std::string>();
          const Entry* e = find_entry(key);
          if (!e) unknown_key(key, at(path, kv.first));
          assign(cfg, *e, kv.second, path, at(path, kv.second));
        }
      }
    }
  }
  for (const std::string& o : overrides) cfg.set(o, "--set " + o);
  make_workdir_absolute(cfg);
  cfg.validate();
  return cfg;
}

Config Config::from_json(const nlohmann::json& j, const std::string& origin) {
  Config cfg;
  if (!j.is_object()) throw std::invalid_argument(origin + ": config is not a JSON object");
  for (auto& [section, body] : j.items()) {
    if (!body.is_object()) throw std::invalid_argument(origin + ": config section '" + section + "' is not an object");
    for (auto& [k, v] : body.items()) {
      const std::string key = section + "." + k;
      const Entry* e = find_entry(key);
      if (!e) unknown_key(key, origin);
      std::string text = v.is_string() ? v.get<std::string>() : v.dump();
      YAML::Node node(text);
      if (v.is_number_float()) node = YAML::Node(format_double(v.get<double>()));
      assign(cfg, *e, node, origin, origin);
    }
  }
  cfg.validate();
  return cfg;
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Entry& e : entries()) {
    std::string k = e.key;
    const size_t dot = k.find('.');
    j[k.substr(0, dot)][k.substr(dot + 1)] = entry_json(*this, e);
  }
  return j;
}

std::string Config::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  const nlohmann::json j = to_json();
  for (auto& [section, body] : j.items()) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    for (auto& [k, v] : body.items()) {
      out << YAML::Key << k << YAML::Value;
      if (v.is_string()) out << YAML::DoubleQuoted << v.get<std::string>();
      else if (v.is_boolean()) out << v.get<bool>();
      else if (v.is_number_float()) {
        std::string t = format_double(v.get<double>());
        if (t.find_first_of(".eEn") == std::string::npos) t += ".0";  // keep it a float in YAML
        out << t;
      } else out << v.dump();
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace timitseg::config
