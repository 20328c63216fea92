// The inputs of `timitseg align` (eval/align.cpp): one job per utterance, its
// audio, output stem and transcript reader, from a list file (--phones,
// --words, with --wav-scp) or the files beside the audio (--transcript);
// then read in parallel into AlignInputs. Internal to eval/.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/walk.h"
#include "data/transcripts.h"
#include "eval/align_input.h"
#include "eval/align_options.h"
#include "model/checkpoint.h"

namespace timitseg::eval {

struct AlignJob {
  std::string audio;
  std::filesystem::path stem;                // output stem relative to --out
  std::function<data::Transcript()> script;  // reads the transcript (throws naming its file)
};

// The jobs of o's inputs, in order; the files they read are added to
// `protect` (never written); inputs that give no audio go to `bad` (path,
// problem). dict: the dictionary of --dict (nullptr: none).
std::vector<AlignJob> collect_jobs(const AlignOptions& o, const std::shared_ptr<data::Dictionary>& dict,
                                   InputSet& protect, std::vector<std::pair<std::string, std::string>>& bad);

// The output stems of the jobs; two jobs that would write one file are refused.
std::vector<std::filesystem::path> distinct_stems(const std::vector<AlignJob>& jobs);

// Jobs [at, at + ready.size()) read in parallel (one job per index: the
// results and the order of the error lines do not depend on the thread
// count; each job's features on `threads` workers): ready[i], or error[i]
// (names_file[i] = 1: a transcript error naming its file and line; missing[i]:
// the words of its transcript not in the dictionary, when that is its error).
// keep_samples: each input's samples kept (silence edges, eval/silence_edges.h).
void read_jobs(const std::vector<AlignJob>& jobs, size_t at, const model::ModelState& s, int threads,
               std::vector<AlignInput>& ready, std::vector<std::string>& error, std::vector<char>& names_file,
               std::vector<std::vector<std::string>>& missing, bool keep_samples = false);

}  // namespace timitseg::eval
