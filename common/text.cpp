#include "common/text.h"

#include <cstdio>

namespace timitseg {

namespace {
std::string hex_cp(unsigned cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}
}  // namespace

bool find_invisible(const std::string& text, InvisibleChar* found) {
  int line = 1, column = 1;
  const size_t n = text.size();
  auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  for (size_t i = 0; i < n;) {
    const unsigned char c = at(i);
    std::string name;
    size_t len = 1;
    if (c == '\n') {
      ++line;
      column = 1;
      ++i;
      continue;
    }
    if (c == '\t' || (c >= 0x20 && c < 0x7f)) {
      ++column;
      ++i;
      continue;
    }
    if (c == '\r') {
      if (i + 1 == n || at(i + 1) == '\n') {  // CR LF line end (or a final CR)
        ++i;
        continue;
      }
      name = "carriage return (U+000D) inside a line";
    } else if (c < 0x20 || c == 0x7f) {
      name = "control character " + hex_cp(c);
    } else {
      // UTF-8 decoding; an invalid sequence is reported as such
      unsigned cp = 0;
      if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f;
      else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f;
      else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07;
      else len = 0;
      bool valid = len > 0 && i + len <= n;
      for (size_t k = 1; valid && k < len; ++k) {
        if ((at(i + k) & 0xc0) != 0x80) valid = false;
        else cp = (cp << 6) | (at(i + k) & 0x3f);
      }
      // overlong forms (0xC0 0xAF for '/'), UTF-16 surrogates and code points
      // past U+10FFFF are not UTF-8 either (yaml-cpp would rewrite them)
      static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
      if (valid && (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))) valid = false;
      if (!valid) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "byte 0x%02X that is not UTF-8 text", c);
        name = buf;
        len = 1;
      } else if (cp == 0xfeff) {
        name = "byte-order mark (U+FEFF)";
      } else if (cp >= 0x200b && cp <= 0x200d) {
        name = cp == 0x200b ? "zero-width space (U+200B)" : "zero-width joiner/non-joiner (" + hex_cp(cp) + ")";
      } else if (cp == 0x2060) {
        name = "word joiner (U+2060)";
      } else if (cp == 0x00a0 || cp == 0x202f) {
        name = "no-break space (" + hex_cp(cp) + ")";
      } else if (cp == 0x2028 || cp == 0x2029) {
        name = "Unicode line/paragraph separator (" + hex_cp(cp) + ")";
      } else if (cp >= 0x80 && cp < 0xa0) {
        name = "control character " + hex_cp(cp);
      }
    }
    if (!name.empty()) {
      if (found) *found = {line, column, name};
      return true;
    }
    ++column;
    i += len;
  }
  return false;
}

std::string invisible_message(const std::string& file, const InvisibleChar& c) {
  return file + ":" + std::to_string(c.line) + ":" + std::to_string(c.column) + ": " + c.name +
         ": an invisible character; delete it (or save the file as plain UTF-8 without a byte-order mark)";
}

namespace {
void append_hex_escape(std::string& out, unsigned char c) {
  const char* hex = "0123456789ABCDEF";
  out += "\\x";
  out += hex[c >> 4];
  out += hex[c & 15];
}
}  // namespace

std::string one_line(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) append_hex_escape(out, c);
    else out += static_cast<char>(c);
  }
  return out;
}

std::string printable_ascii(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
    else append_hex_escape(out, c);
  }
  return out;
}

namespace {

// The code point at text[i] and its byte length (1 for a byte that does not start valid UTF-8).
char32_t code_point(const std::string& text, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) {
    *len = 1;
    return c;
  }
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  *len = n;
  return cp;
}

int columns_of(char32_t c) {
  const auto in = [c](char32_t a, char32_t b) { return c >= a && c <= b; };
  if (in(0x300, 0x36F) || in(0x1AB0, 0x1AFF) || in(0x1DC0, 0x1DFF) || in(0x20D0, 0x20FF) || in(0xFE20, 0xFE2F) ||
      in(0x200B, 0x200F) || c == 0x2060 || c == 0xFEFF)
    return 0;
  if (in(0x1100, 0x115F) || in(0x2E80, 0x303E) || in(0x3041, 0x33FF) || in(0x3400, 0x4DBF) || in(0x4E00, 0x9FFF) ||
      in(0xA000, 0xA4CF) || in(0xAC00, 0xD7A3) || in(0xF900, 0xFAFF) || in(0xFE30, 0xFE4F) || in(0xFF00, 0xFF60) ||
      in(0xFFE0, 0xFFE6) || in(0x20000, 0x3FFFD))
    return 2;
  return 1;
}

}  // namespace

int display_width(const std::string& text) {
  int w = 0;
  for (size_t i = 0, len = 0; i < text.size(); i += len) w += columns_of(code_point(text, i, &len));
  return w;
}

std::string pad_right(const std::string& text, int width) {
  const int w = display_width(text);
  return w >= width ? text : text + std::string(static_cast<size_t>(width - w), ' ');
}

}  // namespace timitseg
