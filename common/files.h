// Whole-file reading for the whole project (text and binary alike). Writes go
// through common/atomic_file.h (write_file_atomic) so nothing is half-written.
#pragma once

#include <string>

namespace timitseg {

// The whole contents of the file at PATH, byte for byte. Throws
// std::runtime_error naming the path and the reason:
//   "PATH: cannot open for reading (No such file or directory)",
//   "PATH: is a folder, not a file", "PATH: read error (...)".
std::string read_file(const std::string& path);

// Throws std::runtime_error "PATH: missing", "PATH: is a folder, not a file" or
// "PATH: not a regular file" (each followed by `hint`) unless PATH is a regular
// file or a link to one.
// For the places that must name a missing input before doing any work.
void require_file(const std::string& path, const std::string& hint = "");

}  // namespace timitseg
