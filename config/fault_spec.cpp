// The fault spec of debug.inject_fault / --inject-fault and the per-layer tap
// names it names (docs/debugging.md): plain config values, parsed here so that
// the config's validation (config/config_validate.cpp) and the executors'
// taps (model/numerics.h) read one form.
#include "config/fault_spec.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace timitseg::config {

const char* pass_name(Pass p) { return common::to_string(p); }

std::vector<std::string> numerics_layers(int num_layers, bool onset) {
  std::vector<std::string> v{"input", "input_proj"};
  for (int k = 0; k < num_layers; ++k) {
    v.push_back("lstm." + std::to_string(k) + ".fwd");
    v.push_back("lstm." + std::to_string(k) + ".bwd");
  }
  v.push_back("projection");
  if (onset) v.push_back("onset_projection");  // crf.onset_features only
  for (const char* n : {"center", "cumsum", "crf", "penalty", "optimizer"}) v.push_back(n);
  return v;
}

FaultSpec FaultSpec::parse(const std::string& text, int num_layers, bool onset) {
  FaultSpec f;
  if (text.empty()) return f;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--inject-fault '" + text + "': " + why +
                                 " (expected layer=NAME,pass=forward|backward,step=N,value=nan|inf)");
  };
  bool has[4] = {false, false, false, false};
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw bad("'" + item + "' is not KEY=VALUE");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "layer") {
      const auto layers = numerics_layers(num_layers, onset);
      bool known = false;
      for (const auto& l : layers) known = known || l == v;
      if (!known) {
        std::string list;
        for (const auto& l : layers) list += (list.empty() ? "" : ", ") + l;
        throw bad("unknown layer '" + v + "' (layers: " + list + ")");
      }
      f.layer = v;
      has[0] = true;
    } else if (k == "pass") {
      if (!common::parse_enum(v, &f.pass)) throw bad("pass must be forward or backward, got '" + v + "'");
      has[1] = true;
    } else if (k == "step") {
      size_t pos = 0;
      long long s = 0;
      try {
        s = std::stoll(v, &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
      if (pos != v.size() || v.empty() || s < 1) throw bad("step must be an integer >= 1, got '" + v + "'");
      f.step = s;
      has[2] = true;
    } else if (k == "value") {
      FaultValue fv{};
      if (!common::parse_enum(v, &fv)) throw bad("value must be nan or inf, got '" + v + "'");
      f.value = fv == FaultValue::nan ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
      has[3] = true;
    } else {
      throw bad("unknown key '" + k + "'");
    }
  }
  const char* names[4] = {"layer", "pass", "step", "value"};
  for (int i = 0; i < 4; ++i)
    if (!has[i]) throw bad(std::string("missing ") + names[i]);
  return f;
}

std::string FaultSpec::to_string() const {
  if (empty()) return "";
  return "layer=" + layer + ",pass=" + pass_name(pass) + ",step=" + std::to_string(step) +
         ",value=" + common::to_string(std::isnan(value) ? FaultValue::nan : FaultValue::inf);
}

}  // namespace timitseg::config
