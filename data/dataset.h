// The contract between `timitseg prepare` (data layer) and training /
// evaluation / decoding (model layer): what a prepared WORKDIR holds and how
// it is loaded. Implemented in data/dataset.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/corpus_format.h"
#include "data/features.h"
#include "data/phones.h"
#include "data/split_name.h"
#include "data/transcripts.h"

namespace timitseg::data {

// A frame-level segment: a maximal run of equal frame labels (61 set).
struct Segment {
  int32_t start = 0;   // first frame
  int32_t length = 0;  // number of frames (>= 1)
  int32_t label = 0;   // index into PhoneSet::names61()
};

// One utterance of a prepared split.
struct Utterance {
  std::string id;       // unique, e.g. "train/dr1/fcjf0/si1027" (lower case)
  std::string speaker;  // e.g. "fcjf0"
  int32_t num_frames = 0;
  int32_t dim = 0;
  std::vector<float> features;  // [num_frames][dim], raw (CMVN NOT applied)
  std::vector<int32_t> labels;  // [num_frames], index into PhoneSet::names61() (never q)
  int64_t num_samples = 0;      // audio length in samples
  std::string audio_path;       // absolute path of the source .WAV
  std::vector<Segment> segments;  // maximal runs of `labels` (61 set), in order (added by the data layer)
  // The sample-accurate reference of an utterance prepared by `prepare --corpus`
  // (its label intervals after the phone set's map and merge, as the frame
  // labels were made from): [start, end) in samples of the audio at
  // reference_rate (the file's own rate), counted from the utterance's first
  // sample (a Kaldi segment's start), label as in `labels`. Empty for TIMIT's
  // path, whose reference is the .PHN beside the audio.
  struct RefInterval {
    int64_t start = 0, end = 0;
    int32_t label = 0;
  };
  std::vector<RefInterval> reference;
  int32_t reference_rate = 0;
  // Transcript supervision: the phone sequence [N] (indices into the WORKDIR's phone set, as `labels`;
  // consecutive equal phones merged), and transcript_optional [N] (1 = the phone may take 0 frames: the
  // optional silence between words and at both ends; never two optional in a row, never all optional).
  // For an utterance prepared from times, both empty. For an utterance with only a transcript,
  // `labels` and `segments` and `reference` are EMPTY and num_frames is still set.
  std::vector<int32_t> transcript;
  std::vector<uint8_t> transcript_optional;
  // Alternative pronunciations (docs/data.md "Several pronunciations of a word"):
  // transcript_slot [N] = (slot << 8) | k for the phones of alternative k of
  // slot `slot` (a word, or an optional silence), the alternatives of a slot laid
  // one after another, k = 0 the most probable; the training graph is built
  // from it (crf::PhoneGraphBuilder). Empty: no word has several, every phone is
  // its own slot (the chain of transcript_optional).
  std::vector<int32_t> transcript_slot;
  bool has_times() const { return !labels.empty(); }
};

struct Split {
  std::string name;  // train | dev | core-test | test
  std::vector<Utterance> utterances;
};

// Per-dimension mean and population variance of a set of frames.
struct CmvnStats {
  std::vector<double> mean;  // [dim]
  std::vector<double> var;   // [dim]
};

// data.cmvn speaker: the statistics of each speaker of the splits read
// (stats), and which of them each utterance id uses (of_utterance).
struct SpeakerCmvn {
  std::vector<CmvnStats> stats;                  // [speakers]
  std::map<std::string, size_t> of_utterance;    // utterance id -> index into stats
};

// Per-dimension normalization estimated on the train split only.
struct Cmvn {
  std::vector<double> mean;  // [dim]
  std::vector<double> var;   // [dim] (population variance)
  // data.cmvn utterance: apply() normalizes with the statistics of the frames it is given instead (mean, var unused)
  bool per_utterance = false;
  // data.cmvn speaker: apply() normalizes with the statistics of the utterance's speaker over all of
  // that speaker's utterances in the split read (speakers, set by with_speakers; mean, var unused).
  // An utterance id they do not hold, or no speakers, is an error.
  bool per_speaker = false;
  std::shared_ptr<const SpeakerCmvn> speakers;
  // x[t][d] = (x[t][d] - mean[d]) / sqrt(max(var[d], kCmvnVarFloor = 1e-10)) (docs/data.md);
  // utterance_id: the utterance the frames are the first num_frames of (per_speaker).
  void apply(float* feats /*[T][dim]*/, int64_t num_frames, const std::string& utterance_id = "") const;
  // A copy with the speakers of utts added (per_speaker; otherwise a plain copy): each speaker's mean and
  // variance over all its utterances in utts (Kaldi's compute-cmvn-stats --spk2utt). Call it once per
  // split: a speaker in two splits has each split's statistics. Throws on an utterance id already held.
  Cmvn with_speakers(const std::vector<const Utterance*>& utts) const;
  // A copy for utterances read alone (files decoded or aligned one by one, no speaker list): per_speaker
  // becomes per_utterance, each utterance its own speaker; any other mode unchanged.
  Cmvn each_utterance_alone() const;
};

// The per-dimension statistics (two passes, float64) of all frames of utts, in order; T of them >= 1.
CmvnStats frame_stats(const std::vector<const Utterance*>& utts);

// Names of the splits prepare writes (SplitName's words, in its order).
const std::vector<std::string>& split_names();

// Loads a split of a prepared WORKDIR, verifying the checksums in
// WORKDIR/manifest.json; a missing, truncated or edited file gives one error
// naming the file and telling the user to re-run `timitseg prepare`.
// Throws the one-line error for a WORKDIR that does not exist (never prepared,
// or moved since a run recorded it): how to make one, and `option`, the way
// the calling command points at another ("--set data.workdir=DIR" for train,
// "--workdir DIR" for evaluate and report). load_split and the other loaders
// check it with train's option.
void require_workdir(const std::string& workdir, const std::string& option);
// The split named by text (unknown text: the error listing the names), or by its enum.
Split load_split(const std::string& workdir, const std::string& split);
Split load_split(const std::string& workdir, SplitName split);
Cmvn load_cmvn(const std::string& workdir);
FeatureOptions load_feature_options(const std::string& workdir);

// ---- additions of the data layer (not part of the original contract) ----
// Floor of the variance in Cmvn::apply.
constexpr double kCmvnVarFloor = 1e-10;
// Maximal runs of equal labels: [start, length, label] per run.
std::vector<Segment> frame_segments(const std::vector<int32_t>& labels);
// Version of the WORKDIR layout written by prepare (manifest.json "format_version").
constexpr int kPreparedFormatVersion = 1;
// The stored frame label of an utterance prepared from a transcript only (its
// frames in the split's 'labels' tensor; Utterance::labels is empty for it).
constexpr int32_t kNoTimesLabel = -1;

// `timitseg prepare` (data/prepare.cpp).
struct PrepareOptions {
  std::string timit_dir;  // TIMIT root (holds TRAIN and/or TEST, either case)
  std::string workdir;    // output folder (created)
  FeatureOptions features;
  int threads = 0;        // <= 0: all cores (resolve_threads, common/parallel.h)
  bool strict = false;    // stop at the first bad utterance (non-zero exit)
  bool force = false;     // recompute even if WORKDIR is up to date
  bool progress = true;   // progress bar on stderr
  // Own corpora (TIMIT layout, other speakers): when no TEST speaker is on the
  // standard dev list, dev is taken from the TRAIN speakers (and removed from
  // train): dev_speakers of them (<= 0: kDefaultDevFraction of them, at least
  // one), chosen by choose_dev_speakers(..., dev_seed). Must stay below the
  // number of usable TRAIN speakers. A dev_speakers > 0 on a corpus that has
  // standard dev speakers is an error (it would be ignored).
  int dev_speakers = 0;
  uint64_t dev_seed = kDefaultDevSeed;
  static constexpr uint64_t kDefaultDevSeed = 13;
  static constexpr double kDefaultDevFraction = 0.10;
  // Other corpora (data/corpus_formats.h, docs/data.md "Other corpora"): when
  // corpus_dir is set it is read instead of timit_dir, in corpus_format
  // (none = detected; timit = the TIMIT path above, unchanged).
  std::string corpus_dir;
  std::optional<CorpusFormat> corpus_format;
  std::string phone_set;   // phone-set YAML file ("" = the format's shipped one, else derived from train)
  std::string split_file;  // lines "SPEAKER train|dev|test" ("" = the corpus's splits, else by speaker)
  std::string tier = "phones";  // TextGrid tier of the phones
  // Labels without times (a transcript: docs/data.md "Transcripts"): words become phones
  // through dict (a pronunciation dictionary, dict_format timit|cmudict|mfa|auto) and/or
  // g2p "espeak" in `language` (words missing from dict); their phones name the phone set
  // unless phone_set does.
  std::string dict, language;
  std::optional<G2pEngine> g2p;
  DictFormatSetting dict_format = DictFormatSetting::automatic;
  // Splits by speaker (corpus without splits, no split_file): fractions of the
  // speakers for dev and test (at least one each from 3 speakers), seeded shuffle.
  double dev_fraction = 0.10, test_fraction = 0.10;
};
struct PrepareSummary {
  bool up_to_date = false;  // nothing was done (same corpus and options)
  int64_t utterances_found = 0, sa_excluded = 0, skipped = 0, warnings = 0;
  std::vector<std::string> problems;  // every problem line, "FILE:LINE: message"
  // skipped utterances by the kind of their first error ("truncated audio",
  // "unknown phone", ...) and warnings by kind; also in manifest.json
  std::map<std::string, int64_t> skipped_by_kind, warnings_by_kind;
  struct SplitCount { std::string name; int64_t utterances = 0, frames = 0, speakers = 0; double seconds = 0; };
  std::vector<SplitCount> splits;
  // How dev and core-test were chosen: "standard list" or, for own corpora,
  // dev "from train" (dev_speaker_ids: the TRAIN speakers taken) and core-test
  // "empty"; recorded in manifest.json "split_rule".
  std::string dev_rule = "standard list", core_test_rule = "standard list";
  std::vector<std::string> dev_speaker_ids;  // only when dev_rule == "from train"
  double audio_seconds = 0.0;  // audio processed (unique utterances)
  // prepare --corpus: utterances prepared from a transcript only (no times), over all splits
  int64_t transcript_only = 0;
  double wall_seconds = 0.0;
};
PrepareSummary prepare(const PrepareOptions& opts);

// WORKDIR/NAME after checking its size and SHA-256 against manifest.json;
// throws naming the file and telling the user to re-run prepare.
std::string verified_file(const std::string& workdir, const std::string& name);

}  // namespace timitseg::data
