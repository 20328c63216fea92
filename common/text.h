// Invisible characters in text files a user edits (.PHN, YAML configs): a
// byte-order mark, a zero-width space or a no-break space looks like nothing
// (or like a plain space) in an editor, but breaks parsing in ways whose
// message would not point at it. Checked before parsing, so the error names
// the character, its line and its column.
#pragma once

#include <string>

namespace timitseg {

struct InvisibleChar {
  int line = 0;       // 1-based
  int column = 0;     // 1-based, in characters (a UTF-8 sequence counts as one)
  std::string name;   // "byte-order mark (U+FEFF)", "zero-width space (U+200B)", ...
};

// The first invisible or unexpected character of TEXT, if any: U+FEFF
// (byte-order mark, at the start or anywhere), U+200B..U+200D, U+2060 (zero
// width), U+00A0 and U+202F (no-break spaces), U+2028/U+2029, control
// characters other than tab, LF and a CR right before LF or at the end (CR LF
// line ends are fine), and bytes that are not UTF-8. Returns false when there
// is none.
bool find_invisible(const std::string& text, InvisibleChar* found);

// "FILE:LINE:COLUMN: <name>: an invisible character; delete it (or save the
// file as plain UTF-8 without a byte-order mark)".
std::string invisible_message(const std::string& file, const InvisibleChar& c);

// TEXT (a name read from a file) as quoted inside a one-line message: tab,
// LF and CR as \t \n \r, other control characters and DEL as \xNN, the
// rest (UTF-8 included) as is. Found by fuzzing: a YAML key or a safetensors
// tensor name may hold a newline, and an error quoting it took two lines.
std::string one_line(const std::string& text);

// RAW (bytes of a binary file header) as quoted inside a one-line message:
// printable ASCII as is; every other byte (control characters, bytes >= 0x80,
// which a header does not hold as UTF-8) and the backslash as \xNN.
std::string printable_ascii(const std::string& raw);

// The columns UTF-8 TEXT takes on a terminal: combining marks (U+0300..U+036F,
// U+1AB0..U+1AFF, U+1DC0..U+1DFF, U+20D0..U+20FF, U+FE20..U+FE2F) and
// zero-width characters take none, East Asian wide characters (Hangul, CJK,
// full-width forms) two, every other code point (and a byte that is not
// UTF-8) one. For tables whose labels are IPA ("ɔ̃" is one column) or CJK.
int display_width(const std::string& text);
// TEXT followed by spaces up to `width` columns (display_width; never cut).
std::string pad_right(const std::string& text, int width);

}  // namespace timitseg
