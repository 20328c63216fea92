// Phone inventories as data (docs/phone_sets.md): a phone-set file
// (YAML) names the phones, the silence label(s), the corpus labels merged,
// mapped or dropped at prepare, the fold onto the scoring set (TIMIT's
// 61 -> 39) and the broad classes of `evaluate --align`. TIMIT's 61, 48 and 39
// sets are shipped files (data/phone_sets/*.yaml), embedded in the binary
// (PhoneSetSpec::builtin); `data.label_set: 39|48|61` is their alias.
//
// A prepared WORKDIR records the inventory its frame labels index
// (WorkdirPhoneSet: phone_set.yaml beside manifest.json); a checkpoint records
// the inventory it was trained on. Implemented in data/phone_set.cpp (parsing,
// checks, digest) and data/phone_set_workdir.cpp (WORKDIR record, derivation,
// the unseen-labels line).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/enum_names.h"

namespace timitseg::data {

// The shipped TIMIT label sets by their number, the words of data.label_set
// (a number in the config) and of a checkpoint's `label_set` metadata: the
// shipped phone sets timit39, timit48 and timit61. The value is the number.
enum class TimitLabelSet { timit39 = 39, timit48 = 48, timit61 = 61 };
TIMITSEG_ENUM_NAMES(TimitLabelSet, 3, {TimitLabelSet::timit39, "39"}, {TimitLabelSet::timit48, "48"},
                    {TimitLabelSet::timit61, "61"});

// What a corpus label becomes at prepare (PhoneSetSpec::resolve).
enum class LabelKind {
  phone,    // a phone of the set (directly or through `map`): index is its class index
  merge,    // its frames take the label of the preceding phone (of the following one at the start)
  drop,     // the utterance holding it is skipped at prepare (counted; a reader may split around it instead)
  unknown,  // not in the set: a problem line naming the label and nearest_phones()
};
struct LabelResolution {
  LabelKind kind = LabelKind::unknown;
  int index = -1;  // class index (kind == phone), else -1
};

// A phone inventory. Labels are UTF-8 strings compared byte for byte (IPA
// welcome); none is empty or holds whitespace.
struct PhoneSetSpec {
  std::string name;                        // "timit61", "timit48", "timit39", "buckeye", a file's stem, or "derived"
  std::vector<std::string> phones;         // the classes, index order = class index
  std::vector<std::string> silence;        // subset of phones; silence[0] labels empty intervals and uncovered audio
  std::vector<std::string> merge;          // corpus labels merged into the neighbouring phone at prepare (TIMIT's q)
  std::map<std::string, std::string> map;  // corpus label -> phone (aliases: TIMIT 61 -> 39, Buckeye's `aan` -> `aa`)
  std::vector<std::string> drop;           // corpus labels whose utterance is skipped at prepare
  std::map<std::string, std::string> fold; // phone -> scoring label (TIMIT 61 -> 39); identity for a phone absent
  std::vector<std::string> extra_scoring_labels;  // fold targets that are no phone (timit61's sil); none otherwise
  // Broad classes of `evaluate --align`: name -> members. A member is a phone or
  // a scoring label; a phone's class is the class naming it, else the class
  // naming its fold target (broad_class()). Empty: those scores are omitted.
  std::vector<std::pair<std::string, std::vector<std::string>>> broad_classes;

  // A phone-set file. Throws one line "FILE: problem" (the YAML's line where
  // known): not YAML, an unknown key, no phones, a duplicate phone, an empty
  // label, one with whitespace or not UTF-8, a silence label / map target /
  // fold key / broad-class member that is not a phone (or scoring label), a
  // fold target that is not a phone nor in extra_scoring_labels, a label both
  // a phone and merged or dropped. Messages of unknown labels add the nearest
  // phones by spelling.
  static PhoneSetSpec load(const std::string& yaml_path);
  // The same from text; `origin` names it in errors (a file path, "<builtin timit39>").
  static PhoneSetSpec parse(const std::string& yaml_text, const std::string& origin);
  // timit61, timit48, timit39, buckeye (the embedded data/phone_sets/NAME.yaml);
  // throws naming the known names otherwise.
  static PhoneSetSpec builtin(const std::string& name);
  static const std::vector<std::string>& builtin_names();
  // The embedded YAML text of a builtin (what `builtin` parses).
  static const std::string& builtin_text(const std::string& name);
  // A TimitLabelSet word ("39", "48", "61") -> builtin timitN; a builtin name -> that; else a file loaded.
  static PhoneSetSpec from_setting(const std::string& label_set_or_file);

  int size() const { return static_cast<int>(phones.size()); }
  int index(const std::string& phone) const;                   // class index of a phone; -1 when not a phone
  LabelResolution resolve(const std::string& corpus_label) const;  // phone, map, merge, drop, else unknown
  int silence_index() const;                                   // index(silence[0]); -1 when there is no silence
  bool is_silence(int phone_index) const;
  std::string fold_label(const std::string& phone) const;  // fold[phone], or phone itself
  // The scoring set: the fold targets (identity for phones without one), in
  // the order of their first appearance along `phones`.
  std::vector<std::string> scoring_labels() const;
  std::vector<int> fold_indices() const;  // [size()] index of each phone's scoring label in scoring_labels()
  std::vector<std::string> broad_class_names() const;
  int broad_class(const std::string& phone_or_scoring_label) const;  // index into broad_classes; -1 none

  // Throws "ORIGIN: problem" (one line) for a spec that breaks the rules of load().
  void validate(const std::string& origin) const;
  // Canonical JSON text (keys sorted, lists in order; name excluded) and its SHA-256 (hex):
  // two files with the same content give the same digest.
  std::string canonical() const;
  std::string digest() const;
  nlohmann::json to_json() const;  // every field, name included
  static PhoneSetSpec from_json(const nlohmann::json& j, const std::string& origin);  // validated
  std::string to_yaml() const;     // a phone-set file load() reads back to an equal spec
  bool operator==(const PhoneSetSpec& o) const;
};

// Up to n phones closest to `label`: another spelling of its sound first (IPA,
// TIMIT, ARPAbet and espeak names of one sound: `r` -> `ʁ` `ɾ` `ɹ`, `sh` -> `ʃ`,
// `g` -> `ɡ`, `aa` -> `ɑ`, `h#` -> `sil` ...; the list in phone_set_workdir.cpp),
// then by spelling (Levenshtein distance over bytes; ties in phone order), for
// "unknown label 'aan' (nearest: aa, an, ae)".
std::vector<std::string> nearest_phones(const PhoneSetSpec& set, const std::string& label, int n = 3);

// ---- the inventory of a prepared WORKDIR ----
// The frame labels of a WORKDIR index `labels`: for WORKDIRs prepared by the
// other readers spec.phones itself, for TIMIT (`prepare --timit`) the 61 .PHN
// labels in their historical order (q included though never a frame label),
// so WORKDIRs prepared before phone sets were data load unchanged.
struct WorkdirPhoneSet {
  PhoneSetSpec spec;
  std::vector<std::string> labels;  // [L] the label table the label tensors index
  bool is_timit() const;            // spec is the builtin timit61 and labels the .PHN table
  std::string digest() const;       // spec.digest()
};
// TIMIT's: builtin timit61 over the 61 .PHN labels.
WorkdirPhoneSet timit_workdir_phone_set();
// A WORKDIR of another corpus: labels = spec.phones.
WorkdirPhoneSet workdir_phone_set(const PhoneSetSpec& spec);
// Writes STAGE/phone_set.yaml (the spec) and returns the manifest.json entry
// "phone_set": {"name", "sha256", "file": "phone_set.yaml", "labels": [...]}.
// The caller records the file's checksum like the others (prepare's record()).
nlohmann::ordered_json write_workdir_phone_set(const std::string& stage_dir, const WorkdirPhoneSet& ps);
// The inventory of a prepared WORKDIR: from manifest.json's "phone_set" and
// WORKDIR/phone_set.yaml (checksummed); a WORKDIR without them (prepared
// before phone sets were data) is TIMIT's. Throws one line naming the file.
WorkdirPhoneSet load_workdir_phone_set(const std::string& workdir);

// ---- a corpus without a phone set ----
// Silence labels looked for when deriving: sil SIL <sil> <SIL> h# pau sp silence.
const std::vector<std::string>& default_silence_candidates();
// The inventory of the labels seen in the train split (label -> frame or
// segment count): phones sorted by count (descending, then by bytes);
// silence = the candidates present, in the candidates' order (none present:
// "sil" is added as the last phone, for uncovered audio). name "derived"; no
// map, fold or broad classes. Throws when train_label_counts is empty.
PhoneSetSpec derive_phone_set(const std::map<std::string, int64_t>& train_label_counts,
                              const std::vector<std::string>& silence_candidates = default_silence_candidates());
// The one line naming labels of dev/test never seen in train, e.g.
// "labels not in the train split's inventory: dev: 'zh' x3 (dr1/f/u1), 'oy' x1 (...); test: ...";
// empty when there are none. unseen: split -> label -> {count, example utterance id}.
struct UnseenLabel {
  int64_t count = 0;
  std::string example;  // an utterance id holding it
};
std::string unseen_labels_line(const std::map<std::string, std::map<std::string, UnseenLabel>>& unseen,
                               int max_per_split = 8);

}  // namespace timitseg::data
