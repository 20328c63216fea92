// The layouts prepare reads (docs/data.md "Other corpora"): prepare --format's
// words, the manifest's corpus_format. The readers are data/corpus_formats.h's.
#pragma once

#include "common/enum_names.h"

namespace timitseg::data {

enum class CorpusFormat { timit, textgrid, buckeye, kaldi, manifest, librispeech };
TIMITSEG_ENUM_NAMES(CorpusFormat, 6, {CorpusFormat::timit, "timit"}, {CorpusFormat::textgrid, "textgrid"},
                    {CorpusFormat::buckeye, "buckeye"}, {CorpusFormat::kaldi, "kaldi"},
                    {CorpusFormat::manifest, "manifest"}, {CorpusFormat::librispeech, "librispeech"});

}  // namespace timitseg::data
