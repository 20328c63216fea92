// PhoneSet: the 61 TIMIT labels and the standard 61 -> 48 -> 39 map, parsed from
// the embedded copy of phones.60-48-39.map (data/timit_lists.cpp).
#include "data/phones.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "data/timit_lists.h"

namespace timitseg::data {

namespace {

std::set<std::string> parse_list(const char* text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string id;
    std::istringstream ls(line);
    if (ls >> id) out.insert(id);
  }
  return out;
}

int index_of(std::vector<std::string>& names, const std::string& n) {
  auto it = std::find(names.begin(), names.end(), n);
  if (it != names.end()) return static_cast<int>(it - names.begin());
  names.push_back(n);
  return static_cast<int>(names.size()) - 1;
}

}  // namespace

const std::set<std::string>& dev_speakers() {
  static const std::set<std::string> s = parse_list(kDevSpeakersTxt);
  return s;
}
const std::set<std::string>& core_test_speakers() {
  static const std::set<std::string> s = parse_list(kCoreTestSpeakersTxt);
  return s;
}

PhoneSet::PhoneSet() {
  std::istringstream in(kPhoneMapTxt);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::istringstream ls(line);
    std::string p61, p48, p39;
    if (!(ls >> p61)) continue;
    ls >> p48 >> p39;
    n61_.push_back(p61);
    if (p48.empty()) {  // q: no target in 48 / 39
      to48_.push_back(-1);
      to39_.push_back(-1);
      continue;
    }
    if (p39.empty())
      throw std::logic_error("embedded phones.60-48-39.map line " + std::to_string(lineno) + ": missing 39 label");
    to48_.push_back(index_of(n48_, p48));
    to39_.push_back(index_of(n39_, p39));
  }
  if (n61_.size() != 61 || n48_.size() != 48 || n39_.size() != 39)
    throw std::logic_error("embedded phone map has " + std::to_string(n61_.size()) + "/" + std::to_string(n48_.size()) +
                           "/" + std::to_string(n39_.size()) + " labels, expected 61/48/39");
}

const PhoneSet& PhoneSet::timit() {
  static const PhoneSet s;
  return s;
}

const std::vector<std::string>& PhoneSet::names61() const { return n61_; }

const std::vector<std::string>& PhoneSet::names(int set) const {
  if (set == 61) return n61_;
  if (set == 48) return n48_;
  if (set == 39) return n39_;
  throw std::invalid_argument("phone set must be 61, 48 or 39, got " + std::to_string(set));
}

int PhoneSet::map(int idx61, int set) const {
  if (idx61 < 0 || idx61 >= static_cast<int>(n61_.size()))
    throw std::out_of_range("phone index " + std::to_string(idx61) + " outside [0, 61)");
  if (set == 61) return idx61;
  if (set == 48) return to48_[idx61];
  if (set == 39) return to39_[idx61];
  throw std::invalid_argument("phone set must be 61, 48 or 39, got " + std::to_string(set));
}

int PhoneSet::index61(const std::string& phone) const {
  auto it = std::find(n61_.begin(), n61_.end(), phone);
  return it == n61_.end() ? -1 : static_cast<int>(it - n61_.begin());
}

const std::vector<std::string>& broad_class_names() {
  static const std::vector<std::string> n = {"vowels", "stops", "fricatives", "nasals", "liquids_glides", "silence"};
  return n;
}

int PhoneSet::broad_class(const std::string& phone) const {
  // per broad class (broad_class_names() order), its 39-set members
  static const char* const members[] = {
      "aa ae ah aw ay eh er ey ih iy ow oy uh uw", "b d g p t k dx ch jh", "dh f hh s sh th v z", "m n ng",
      "l r w y", "sil"};
  std::string p39;
  if (std::find(n39_.begin(), n39_.end(), phone) != n39_.end()) {
    p39 = phone;
  } else if (const int i61 = index61(phone); i61 >= 0) {
    if (to39_[i61] < 0) return -1;  // q
    p39 = n39_[to39_[i61]];
  } else {  // a 48-set name that is not a 61 name (cl, vcl, sil): the 39 target of a 61 phone mapped to it
    const auto it = std::find(n48_.begin(), n48_.end(), phone);
    if (it == n48_.end()) return -1;
    const int i48 = static_cast<int>(it - n48_.begin());
    for (size_t i = 0; i < to48_.size(); ++i)
      if (to48_[i] == i48) p39 = n39_[to39_[i]];
  }
  for (int k = 0; k < 6; ++k) {
    std::istringstream in(members[k]);
    for (std::string m; in >> m;)
      if (m == p39) return k;
  }
  return -1;
}

}  // namespace timitseg::data
