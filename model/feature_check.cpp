// A checkpoint on the features it was trained on (model/feature_check.h).
#include "model/feature_check.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/dataset.h"

namespace timitseg::model {
namespace {

// feature_options_to_json without the options that do not change the features.
nlohmann::ordered_json feature_json(const data::FeatureOptions& o) {
  nlohmann::ordered_json j = data::feature_options_to_json(o);
  j.erase("allow_resample");
  return j;
}

std::string value_text(const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

}  // namespace

std::vector<std::string> feature_option_differences(const data::FeatureOptions& a, const data::FeatureOptions& b) {
  const nlohmann::ordered_json ja = feature_json(a), jb = feature_json(b);
  std::vector<std::string> keys;
  for (auto it = ja.begin(); it != ja.end(); ++it)
    if (!jb.contains(it.key()) || jb[it.key()] != it.value()) keys.push_back(it.key());
  return keys;
}

std::string describe_feature_options(const data::FeatureOptions& o, const std::vector<std::string>& keys) {
  const nlohmann::ordered_json j = feature_json(o);
  std::vector<std::string> parts;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "type") continue;
    bool wanted = keys.empty();
    for (const std::string& k : keys) wanted = wanted || k == it.key();
    if (wanted) parts.push_back(it.key() + " " + value_text(it.value()));
  }
  return std::string(common::to_string(o.type)) + " features (" + std::to_string(o.dim()) + " dims" + (parts.empty() ? "" : "; " + join(parts, ", ")) +
         ")";
}

void check_feature_options(const ModelState& s, const std::string& checkpoint, const data::FeatureOptions& given,
                           const std::string& given_source) {
  const std::vector<std::string> diff = feature_option_differences(s.features, given);
  if (diff.empty()) return;
  std::vector<std::string> shown;  // the differing options other than the type (named by the description)
  for (const std::string& k : diff)
    if (k != "type") shown.push_back(k);
  if (shown.empty()) shown.push_back("num_mel_bins");
  throw std::runtime_error(checkpoint + " was trained on " + describe_feature_options(s.features, shown) + ", " +
                           given_source + " holds " + describe_feature_options(given, shown) +
                           ": the feature options differ (" + join(diff, ", ") +
                           "); use a WORKDIR prepared with the checkpoint's feature options (`timitseg prepare`, "
                           "docs/features.md)");
}

void check_workdir_features(const ModelState& s, const std::string& checkpoint, const std::string& workdir) {
  const data::FeatureOptions given = data::load_feature_options(workdir);
  check_feature_options(s, checkpoint, given, (std::filesystem::path(workdir) / "manifest.json").string());
}

void check_checkpoint_features(const ModelState& s, const std::string& checkpoint) {
  if (s.features.dim() == s.dims.input_dim) return;
  throw std::runtime_error(checkpoint + ": the checkpoint's feature options give " +
                           describe_feature_options(s.features, {"num_mel_bins"}) + ", its model takes " +
                           std::to_string(s.dims.input_dim) +
                           " dims (metadata feature_options and dims disagree): the file was not written by "
                           "`timitseg train`; use another checkpoint");
}

}  // namespace timitseg::model
