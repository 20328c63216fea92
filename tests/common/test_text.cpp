// common/text.h's two escapers for one-line messages, on inputs whose output
// is written out by hand: one_line (names read from text files: control
// characters escaped, UTF-8 kept) and printable_ascii (bytes of binary
// headers: everything outside printable ASCII, and the backslash, as \xNN).
#include <gtest/gtest.h>

#include <string>

#include "common/text.h"

using timitseg::one_line;
using timitseg::printable_ascii;

TEST(Text, OneLineEscapesControlCharactersAndKeepsUtf8) {
  EXPECT_EQ(one_line("plain name"), "plain name");
  EXPECT_EQ(one_line("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(one_line(std::string("x\0y", 3)), "x\\x00y");
  EXPECT_EQ(one_line("\x1b[0m\x7f"), "\\x1B[0m\\x7F");
  EXPECT_EQ(one_line("d\xC3\xA9j\xC3\xA0 \\ vu"), "d\xC3\xA9j\xC3\xA0 \\ vu");  // UTF-8 and backslash as is
}

TEST(Text, PrintableAsciiEscapesEveryOtherByte) {
  EXPECT_EQ(printable_ascii("WAVE"), "WAVE");
  EXPECT_EQ(printable_ascii("WA\nE"), "WA\\x0AE");
  EXPECT_EQ(printable_ascii(std::string("\0\xff\\z", 4)), "\\x00\\xFF\\x5Cz");
  EXPECT_EQ(printable_ascii("d\xC3\xA9"), "d\\xC3\\xA9");
}

// Terminal columns of table labels, counted by hand: IPA with a combining tilde or a
// length mark, CJK (two columns each), ASCII, a stray byte.
TEST(Text, DisplayWidthCountsColumnsNotBytes) {
  using timitseg::display_width;
  EXPECT_EQ(display_width("aa"), 2);
  EXPECT_EQ(display_width("ɔ̃"), 1);   // o-open + U+0303: 4 bytes
  EXPECT_EQ(display_width("øː"), 2);  // 4 bytes
  EXPECT_EQ(display_width("tʃ"), 2);
  EXPECT_EQ(display_width("中国"), 4);
  EXPECT_EQ(display_width("\xff" "a"), 2);
  EXPECT_EQ(timitseg::pad_right("ɔ̃", 4), "ɔ̃   ");
  EXPECT_EQ(timitseg::pad_right("abcdef", 4), "abcdef");
}
