// The inventory of a prepared WORKDIR (phone_set.yaml and manifest.json's
// "phone_set"), nearest phones by spelling and sound, the inventory derived from a
// train split and the line naming labels of dev/test never seen in train.
#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/files.h"
#include "common/levenshtein.h"
#include "data/dataset.h"
#include "data/phone_set.h"
#include "data/phones.h"

namespace timitseg::data {

namespace fs = std::filesystem;

namespace {

// The sound of a phone name in the spellings corpora use for it (IPA, TIMIT's and
// ARPAbet's letters, espeak's): names of one sound share a key; 0 for a name not listed.
int sound_key(const std::string& name) {
  static const std::vector<std::vector<std::string>> kSounds = {
      {"r", "ɾ", "ɹ", "ʁ", "ʀ", "ɻ", "ɽ", "rr", "dx"}, {"ʃ", "sh", "ɕ", "ʂ", "s."}, {"ʒ", "zh", "ʑ", "ʐ"},
      {"ŋ", "ng", "eng"}, {"θ", "th"}, {"ð", "dh"}, {"tʃ", "ch", "ts.", "tɕ"}, {"dʒ", "jh", "dʑ"},
      {"j", "y", "ʝ"}, {"h", "hh", "hv", "ɦ", "x", "χ"}, {"ɡ", "g"}, {"ɲ", "ny", "nj"}, {"ʎ", "ly", "lj"},
      {"l", "ɫ", "el"}, {"m", "em"}, {"n", "en", "nx"}, {"ʔ", "q"}, {"ɑ", "ɑː", "aa"}, {"æ", "ae"},
      {"ə", "ax", "ah", "ʌ", "ɐ"}, {"ɚ", "axr", "er", "ɝ", "ɜː"}, {"ɛ", "eh"}, {"ɪ", "ih", "ix"},
      {"ʊ", "uh"}, {"i", "iː", "iy"}, {"u", "uː", "uw", "ux"}, {"e", "eː", "eɪ", "ey"}, {"o", "oː", "oʊ", "ow"},
      {"ɔ", "ɔː", "ao"}, {"aɪ", "ay"}, {"aʊ", "aw"}, {"ɔɪ", "oy"}, {"sil", "h#", "pau", "SIL", "sp", "<sil>"}};
  for (size_t k = 0; k < kSounds.size(); ++k)
    for (const std::string& n : kSounds[k])
      if (n == name) return static_cast<int>(k) + 1;
  return 0;
}

}  // namespace

std::vector<std::string> nearest_phones(const PhoneSetSpec& set, const std::string& label, int n) {
  // (2 x spelling distance, or 1 for another spelling of the label's sound; phone index)
  std::vector<std::pair<int, int>> d;
  const int key = sound_key(label);
  for (int i = 0; i < set.size(); ++i) {
    const std::string& p = set.phones[static_cast<size_t>(i)];
    const int spelling = 2 * static_cast<int>(levenshtein(p, label));
    d.emplace_back(key != 0 && sound_key(p) == key ? std::min(spelling, 1) : spelling, i);
  }
  std::stable_sort(d.begin(), d.end());
  std::vector<std::string> out;
  for (size_t k = 0; k < d.size() && static_cast<int>(out.size()) < n; ++k)
    out.push_back(set.phones[static_cast<size_t>(d[k].second)]);
  return out;
}

bool WorkdirPhoneSet::is_timit() const {
  return spec.name == "timit61" && labels == PhoneSet::timit().names61() &&
         spec.canonical() == PhoneSetSpec::builtin("timit61").canonical();
}

std::string WorkdirPhoneSet::digest() const { return spec.digest(); }

WorkdirPhoneSet timit_workdir_phone_set() { return {PhoneSetSpec::builtin("timit61"), PhoneSet::timit().names61()}; }

WorkdirPhoneSet workdir_phone_set(const PhoneSetSpec& spec) { return {spec, spec.phones}; }

nlohmann::ordered_json write_workdir_phone_set(const std::string& stage_dir, const WorkdirPhoneSet& ps) {
  std::string text = "# The phone inventory of this WORKDIR (a timitseg phone-set file, docs/phone_sets.md).\n";
  text += ps.is_timit() ? "# Its frame labels index the 61 TIMIT .PHN labels (manifest.json phone_set.labels).\n"
                        : "# Its frame labels index `phones`.\n";
  text += ps.spec.to_yaml();
  write_file_atomic((fs::path(stage_dir) / "phone_set.yaml").string(), text);
  nlohmann::ordered_json j;
  j["name"] = ps.spec.name;
  j["sha256"] = ps.digest();
  j["file"] = "phone_set.yaml";
  j["labels"] = ps.labels;
  return j;
}

WorkdirPhoneSet load_workdir_phone_set(const std::string& workdir) {
  const std::string mpath = (fs::path(workdir) / "manifest.json").string();
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_file(mpath));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(mpath + ": corrupt (" + e.what() + "); re-run `timitseg prepare`");
  }
  if (!m.is_object() || !m.contains("phone_set")) return timit_workdir_phone_set();  // prepared before phone sets were data
  const std::string path = verified_file(workdir, "phone_set.yaml");
  WorkdirPhoneSet ps;
  ps.spec = PhoneSetSpec::load(path);
  try {
    const auto& e = m.at("phone_set");
    ps.spec.name = e.at("name").get<std::string>();
    ps.labels = e.at("labels").get<std::vector<std::string>>();
    if (e.at("sha256").get<std::string>() != ps.spec.digest())
      throw std::runtime_error("phone_set.sha256 is not the digest of " + path);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(mpath + ": entry \"phone_set\" is malformed (" + e.what() + "); re-run `timitseg prepare`");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(mpath + ": " + e.what() + "; re-run `timitseg prepare`");
  }
  if (ps.labels.empty()) throw std::runtime_error(mpath + ": phone_set.labels is empty; re-run `timitseg prepare`");
  return ps;
}

const std::vector<std::string>& default_silence_candidates() {
  static const std::vector<std::string> v = {"sil", "SIL", "<sil>", "<SIL>", "h#", "pau", "sp", "silence"};
  return v;
}

PhoneSetSpec derive_phone_set(const std::map<std::string, int64_t>& counts,
                              const std::vector<std::string>& silence_candidates) {
  if (counts.empty()) throw std::runtime_error("no labels in the train split to derive a phone set from");
  std::vector<std::pair<std::string, int64_t>> v(counts.begin(), counts.end());  // sorted by bytes
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  PhoneSetSpec s;
  s.name = "derived";
  for (const auto& [label, n] : v) s.phones.push_back(label);
  for (const std::string& c : silence_candidates)
    if (counts.count(c)) s.silence.push_back(c);
  if (s.silence.empty()) {  // uncovered audio needs a label
    std::string sil = "sil";
    while (counts.count(sil)) sil = "<" + sil + ">";
    s.phones.push_back(sil);
    s.silence.push_back(sil);
  }
  s.validate("the phone set derived from the train split");
  return s;
}

std::string unseen_labels_line(const std::map<std::string, std::map<std::string, UnseenLabel>>& unseen,
                               int max_per_split) {
  std::string out;
  for (const auto& [split, labels] : unseen) {
    if (labels.empty()) continue;
    std::vector<std::pair<std::string, UnseenLabel>> v(labels.begin(), labels.end());
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
    out += (out.empty() ? "" : "; ") + split + ": ";
    for (size_t i = 0; i < v.size() && static_cast<int>(i) < max_per_split; ++i)
      out += (i ? ", '" : "'") + v[i].first + "' x" + std::to_string(v[i].second.count) + " (" + v[i].second.example + ")";
    if (static_cast<int>(v.size()) > max_per_split) out += " and " + std::to_string(v.size() - max_per_split) + " more";
  }
  return out.empty() ? out : "labels never seen in the train split: " + out;
}

}  // namespace timitseg::data
