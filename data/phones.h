// TIMIT phone sets: the 61 labels of the .PHN files, and the standard
// 61 -> 48 -> 39 map (Lee & Hon 1989, the table of Kaldi's
// egs/timit/s5/conf/phones.60-48-39.map; embedded in data/timit_lists.cpp). `q` (glottal stop) has no target in 48/39; see docs/data.md for
// how its frames are handled.
#pragma once

#include <string>
#include <vector>

namespace timitseg::data {

class PhoneSet {
 public:
  static const PhoneSet& timit();
  const std::vector<std::string>& names61() const;  // 61 labels, index order is stable
  // Label set names for a training label set of size 61, 48 or 39.
  const std::vector<std::string>& names(int set) const;
  // Map an index of names61() into set 61 (identity), 48 or 39; -1 for q.
  int map(int idx61, int set) const;
  int index61(const std::string& phone) const;  // -1 if unknown
  // Broad phonetic class (index into broad_class_names()) of a phone named in
  // the 61, 48 or 39 set: the class of its 39-set target (table in
  // docs/align.md); -1 for q and unknown names.
  int broad_class(const std::string& phone) const;
 private:
  PhoneSet();
  std::vector<std::string> n61_, n48_, n39_;
  std::vector<int> to48_, to39_;
};

// The six broad classes of `evaluate --align`'s scores, defined once on the 39
// set: vowels (aa ae ah aw ay eh er ey ih iy ow oy uh uw), stops (b d g p t k,
// the flap dx, the affricates ch jh), fricatives (dh f hh s sh th v z), nasals
// (m n ng), liquids and glides (l r w y), silence (sil: h# pau epi and the
// closures). JSON keys: vowels, stops, fricatives, nasals, liquids_glides, silence.
const std::vector<std::string>& broad_class_names();

}  // namespace timitseg::data
