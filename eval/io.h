// The inputs and outputs of `timitseg decode` and `timitseg align`: the audio
// files of the arguments, the --out folder made safe before any work, and the
// lines that report a failed input and an interrupted run.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/walk.h"

namespace timitseg::eval {

// The audio inputs of decode/align: each argument a file, or a folder searched
// at any depth for *.wav / *.WAV (sorted), links to files and folders followed
// (common/walk.h: a cycle or a dangling link is one warning line, the other
// files go on); (audio path, output stem: the path relative to the folder as
// given, through the links' names, never their targets, or the file name,
// without extension). Throws one line for a missing path or a folder without
// audio. The folder OUT_DIR, when inside an input folder, is not searched.
// *inputs (when given) receives what the command must never write: every file
// and folder found under the input folders, each input file and the files
// beside it with its name (its .PHN, .WRD, .TXT). *bad (when given) receives
// the one-line problem of each input that gives no audio (missing, a folder
// without audio) instead of the throw: decode and align report it as a failed
// input and go on with the others.
std::vector<std::pair<std::string, std::filesystem::path>> audio_inputs(
    const std::vector<std::string>& inputs, const std::string& out_dir = "", InputSet* protect = nullptr,
    std::vector<std::pair<std::string, std::string>>* bad = nullptr);

// One failed input of decode / align: "error: MESSAGE" on stderr (docs/cli.md's
// error line; not at --log-level critical or off, nor in the C API unless its
// log level allows errors: the command's last line names the failed inputs,
// the C API returns the message), MESSAGE prefixed with `src` unless it starts
// with it or names_file.
void report_failed_input(const std::string& src, const std::string& message, bool names_file = false);
// The failed inputs of the summary line: "a.wav, b.wav" (the first 5, then "and N more").
std::string failed_names(const std::vector<std::string>& names);
// What an interrupted decode / align did: "D of T input file(s) VERB into OUT, R not VERB[, F failed]".
std::string stop_text(size_t done, size_t total, size_t failed, const std::string& verb, const std::string& out_dir);

// Before any work: refuses (one line naming both) an --out folder that is an
// input folder or one of its folders, and any OUT/stem.PHN or .TextGrid that is
// (through links) one of the inputs; then creates OUT (with its missing
// parents, recorded in *made so that a failed command leaves no folder) and
// checks that it is writable.
void prepare_out_dir(const std::string& out_dir, const std::vector<std::filesystem::path>& stems,
                     const InputSet& protect, CreatedFolders* made);

}  // namespace timitseg::eval
