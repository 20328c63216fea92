// PhoneSet and the embedded TIMIT lists vs the plain-text copies shipped in
// tests/data/fixtures/timit/ (the oracle), and vs known entries of the standard map.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/files.h"
#include "data/phones.h"
#include "data/timit_lists.h"

using namespace timitseg::data;

TEST(Phones, SizesAndKnownMappings) {
  const PhoneSet& p = PhoneSet::timit();
  EXPECT_EQ(p.names61().size(), 61u);
  EXPECT_EQ(p.names(48).size(), 48u);
  EXPECT_EQ(p.names(39).size(), 39u);
  auto m39 = [&](const std::string& a) { return p.names(39)[p.map(p.index61(a), 39)]; };
  auto m48 = [&](const std::string& a) { return p.names(48)[p.map(p.index61(a), 48)]; };
  EXPECT_EQ(m39("ao"), "aa");
  EXPECT_EQ(m39("zh"), "sh");
  EXPECT_EQ(m39("h#"), "sil");
  EXPECT_EQ(m39("pcl"), "sil");
  EXPECT_EQ(m48("pcl"), "cl");
  EXPECT_EQ(m48("bcl"), "vcl");
  EXPECT_EQ(m39("ax-h"), "ah");
  EXPECT_EQ(m39("ix"), "ih");
  EXPECT_EQ(m39("em"), "m");
  EXPECT_EQ(m39("hv"), "hh");
  EXPECT_EQ(m39("ux"), "uw");
  EXPECT_EQ(m39("axr"), "er");
  EXPECT_EQ(m48("el"), "el");
  EXPECT_EQ(m39("el"), "l");
  const int q = p.index61("q");
  ASSERT_GE(q, 0);
  EXPECT_EQ(p.map(q, 48), -1);
  EXPECT_EQ(p.map(q, 39), -1);
  EXPECT_EQ(p.map(q, 61), q);
  EXPECT_EQ(p.index61("xyz"), -1);
  EXPECT_THROW(p.names(40), std::invalid_argument);
  EXPECT_THROW(p.map(61, 39), std::out_of_range);
  for (int i = 0; i < 61; ++i) EXPECT_EQ(p.index61(p.names61()[i]), i);
}

TEST(Phones, EmbeddedListsMatchFixtureFiles) {
  const std::filesystem::path dir = std::filesystem::path(TIMITSEG_SOURCE_DIR) / "tests" / "data" / "fixtures" / "timit";
  EXPECT_EQ(dev_speakers().size(), 50u);
  EXPECT_EQ(core_test_speakers().size(), 24u);
  for (const auto& s : core_test_speakers()) EXPECT_EQ(dev_speakers().count(s), 0u) << s;
  EXPECT_EQ(core_test_speakers().count("mdab0"), 1u);
  EXPECT_EQ(dev_speakers().count("faks0"), 1u);
  auto read_set = [](const std::filesystem::path& f) {
    std::istringstream in(timitseg::read_file(f.string()));
    std::set<std::string> s;
    std::string w;
    while (in >> w) s.insert(w);
    return s;
  };
  EXPECT_EQ(read_set(dir / "dev_speakers.txt"), dev_speakers());
  EXPECT_EQ(read_set(dir / "core_test_speakers.txt"), core_test_speakers());
  std::istringstream in(timitseg::read_file((dir / "phones.60-48-39.map").string()));
  std::string line;
  const PhoneSet& p = PhoneSet::timit();
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string a, b, c;
    if (!(ls >> a)) continue;
    ls >> b >> c;
    const int i = p.index61(a);
    ASSERT_GE(i, 0) << a;
    if (b.empty()) {
      EXPECT_EQ(p.map(i, 39), -1);
    } else {
      EXPECT_EQ(p.names(48)[p.map(i, 48)], b) << a;
      EXPECT_EQ(p.names(39)[p.map(i, 39)], c) << a;
    }
    ++n;
  }
  EXPECT_EQ(n, 61);
}
