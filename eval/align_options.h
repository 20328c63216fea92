// The options of `timitseg align` (eval/align.h, docs/align.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "config/config_enums.h"
#include "crf/backend_kind.h"
#include "data/transcripts.h"
#include "eval/formats.h"
#include "eval/posterior_boundaries.h"
#include "eval/silence_edges.h"

namespace timitseg::eval {

// --transcript: the file beside each audio file: .PHN, .WRD, .TXT, or auto
// (.WRD then .TXT with --dict, else .PHN).
enum class TranscriptSource { phn, wrd, txt, automatic };
TIMITSEG_ENUM_NAMES(TranscriptSource, 4, {TranscriptSource::automatic, "auto"}, {TranscriptSource::phn, "phn"},
                    {TranscriptSource::wrd, "wrd"}, {TranscriptSource::txt, "txt"});

struct AlignOptions {
  std::string checkpoint;
  std::vector<std::string> inputs;  // audio files or folders (searched for *.wav); --timit TREE is one more folder
  std::string phones_file;          // --phones FILE: "AUDIO phone phone ..." per line
  std::string words_file;           // --words FILE: "AUDIO word word ..." per line (needs --dict)
  std::string dict;                 // --dict FILE (TIMITDIC.TXT or CMUdict format)
  data::DictFormatSetting dict_format = data::DictFormatSetting::automatic;  // timit | cmudict | mfa | auto
  TranscriptSource transcript = TranscriptSource::automatic;  // --transcript: beside the audio: phn | wrd | txt | auto (wrd, then txt with --dict; else phn)
  data::WordOptions words;          // closures, edge silence, silence between words
  std::optional<data::G2pEngine> g2p;  // --g2p: none (a missing word is an error) or espeak (align_dictionary.h)
  std::string language;             // --language: espeak-ng's language of --g2p espeak (es, de, cmn, en-us, ...)
  std::string wav_scp;               // --wav-scp FILE: "UTTID AUDIO" per line; list lines then start with UTTID (Kaldi)
  std::vector<OutputFormat> formats = {OutputFormat::phn, OutputFormat::textgrid};  // --format: phn textgrid csv json ctm (eval/formats.h)
  std::string shifts;                // --shifts FILE: per-phone boundary shifts (evaluate --align --fit-shifts; eval/boundary_shifts.h)
  // --silence-edges auto|on|off, --silence-margin-db, --silence-max-move-ms: silence edges at the
  // energy change (eval/silence_edges.h; auto: on for a checkpoint trained on transcripts)
  SilenceEdgesSetting silence_edges = SilenceEdgesSetting::automatic;
  SilenceEdgeOptions silence_edge_options;
  // --boundaries auto|viterbi|posterior: the constrained Viterbi's boundaries or those of the posteriors
  // (eval/posterior_boundaries.h; auto: posterior, for every checkpoint)
  BoundariesSetting boundaries = BoundariesSetting::automatic;
  std::string out_dir;
  std::optional<crf::BackendKind> backend;  // unset = cuda on the GPU, else the checkpoint's crf.backend (cpu for cuda)
  config::DeviceSetting device = config::DeviceSetting::automatic;  // --device
  int threads = 0;
  int batch_size = 32;
  int64_t centre_frames = 200;  // --centre-frames: a long recording's centring (0 = the whole recording)
};

}  // namespace timitseg::eval
