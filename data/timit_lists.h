// The TIMIT lists the project needs, embedded as text in data/timit_lists.cpp:
// the standard 50 dev speakers and 24 core-test speakers (both from TEST; the
// lists of Kaldi's egs/timit/s5/conf/dev_spk.list and test_spk.list), and the
// standard 61 -> 48 -> 39 phone map (one line per 61-label phone:
// "p61<TAB>p48<TAB>p39", or just "q"). tests/data/fixtures/timit/ holds the
// same three lists as plain files; tests/data/test_phones.cpp checks that they agree.
#pragma once

#include <set>
#include <string>

namespace timitseg::data {

extern const char* const kDevSpeakersTxt;
extern const char* const kCoreTestSpeakersTxt;
extern const char* const kPhoneMapTxt;

// Lower-case speaker ids (e.g. "faks0") of the embedded lists.
const std::set<std::string>& dev_speakers();        // 50
const std::set<std::string>& core_test_speakers();  // 24

}  // namespace timitseg::data
