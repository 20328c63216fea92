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

// Checks an output FILE path given as `flag` (e.g. "--json") before any work is
// done (docs/cli.md "Output paths"); throws std::invalid_argument, one line:
//   "--json out/: names a folder (it ends with '/'); give a file path, e.g. --json out/metrics.json",
//   "--json out: is an existing folder; give a file path, e.g. --json out/metrics.json",
//   "--json a/b.json: folder a does not exist", "--json a/b.json: folder a is not writable".
// example_name: the file name suggested inside the folder ("metrics.json").
void check_output_file(const std::string& flag, const std::string& path, const std::string& example_name);

}  // namespace timitseg
