// LabelSet: a phone set (data/phone_set.h) over a WORKDIR's label table, and
// the checks that a checkpoint and a WORKDIR speak the same inventory.
#include "model/labels.h"

#include <stdexcept>

#include "data/phones.h"
#include "config/config.h"

namespace timitseg::model {

namespace {

std::string short_digest(const data::PhoneSetSpec& s) { return s.digest().substr(0, 12); }

// The labels of `table` that `spec` does not know: "'a', 'b' (2 of 40 labels)"; "" when none.
std::string unknown_labels(const data::PhoneSetSpec& spec, const std::vector<std::string>& table) {
  std::vector<std::string> bad;
  for (const std::string& l : table)
    if (spec.resolve(l).kind == data::LabelKind::unknown) bad.push_back(l);
  if (bad.empty()) return "";
  std::string out;
  for (size_t i = 0; i < bad.size() && i < 5; ++i) out += (i ? ", '" : "'") + bad[i] + "'";
  if (bad.size() > 5) out += ", ...";
  return out + " (" + std::to_string(bad.size()) + " of " + std::to_string(table.size()) + " labels)";
}

}  // namespace

LabelSet LabelSet::make(int set) {
  if (set != 39 && set != 48 && set != 61)
    throw std::invalid_argument("label set must be 39, 48 or 61, got " + std::to_string(set));
  return make(data::PhoneSetSpec::builtin("timit" + std::to_string(set)), data::PhoneSet::timit().names61());
}

LabelSet LabelSet::make(const data::PhoneSetSpec& spec, const std::vector<std::string>& label_table) {
  LabelSet ls;
  ls.set = 0;
  for (int n : {39, 48, 61}) {
    const data::PhoneSetSpec& t = data::PhoneSetSpec::builtin("timit" + std::to_string(n));
    if (spec.name == t.name && spec.canonical() == t.canonical()) ls.set = n;
  }
  ls.spec = spec;
  ls.names = spec.phones;
  ls.scoring_names = spec.scoring_labels();
  ls.scoring_index = spec.fold_indices();
  if (const std::string bad = unknown_labels(spec, label_table); !bad.empty())
    throw std::invalid_argument("labels " + bad + " are not in phone set '" + spec.name + "'");
  ls.label_table = label_table;
  for (const std::string& l : label_table) {
    const data::LabelResolution r = spec.resolve(l);
    ls.label_to_class.push_back(r.kind == data::LabelKind::phone ? r.index : -1);
  }
  return ls;
}

int LabelSet::class_of_label(int label_index) const {
  if (label_index < 0 || label_index >= static_cast<int>(label_to_class.size()))
    throw std::out_of_range("phone index " + std::to_string(label_index) + " outside [0, " +
                            std::to_string(label_to_class.size()) + ")");
  return label_to_class[static_cast<size_t>(label_index)];
}

LabelSet training_label_set(const config::Config& cfg, const data::WorkdirPhoneSet& w, const std::string& workdir) {
  data::PhoneSetSpec spec;
  if (!cfg.data_phone_set.empty()) spec = data::PhoneSetSpec::from_setting(cfg.data_phone_set);
  else if (w.is_timit()) spec = data::PhoneSetSpec::builtin("timit" + std::to_string(cfg.data_label_set));
  else spec = w.spec;
  try {
    return LabelSet::make(spec, w.labels);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(workdir + ": WORKDIR of phone set '" + w.spec.name + "' (sha256 " + short_digest(w.spec) +
                                ") does not fit the phone set trained on, '" + spec.name + "' (sha256 " +
                                short_digest(spec) + ", " +
                                (cfg.data_phone_set.empty() ? "data.label_set" : "data.phone_set") +
                                "): its " + e.what());
  }
}

void bind_workdir(LabelSet& ls, const data::WorkdirPhoneSet& w, const std::string& workdir,
                  const std::string& checkpoint) {
  if (w.labels == ls.label_table) return;
  if (const std::string bad = unknown_labels(ls.spec, w.labels); !bad.empty())
    throw std::invalid_argument(checkpoint + " (phone set '" + ls.spec.name + "', sha256 " + short_digest(ls.spec) +
                                ") does not fit WORKDIR " + workdir + " (phone set '" + w.spec.name + "', sha256 " +
                                short_digest(w.spec) + "): its labels " + bad + " are not in the checkpoint's set");
  ls = LabelSet::make(ls.spec, w.labels);
}

void bind_workdir(LabelSet& ls, const std::string& workdir, const std::string& checkpoint) {
  bind_workdir(ls, data::load_workdir_phone_set(workdir), workdir, checkpoint);
}

}  // namespace timitseg::model
