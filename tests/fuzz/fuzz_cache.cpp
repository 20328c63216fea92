// libFuzzer target: the prepared cache loader (data::load_split and
// data::load_cmvn of data/dataset.cpp). Input: the bytes of a SPLIT.safetensors
// (or cmvn.safetensors) file. The harness writes it into a scratch WORKDIR
// with a manifest.json that lists its true size and SHA-256, so the input gets
// past the checksum to the parser (a corrupted cache is caught by the checksum;
// this fuzzes what is behind it).
// Invariants: a rejected file gets an error naming it; an accepted split's
// utterances have [num_frames][dim] features, num_frames labels that are 61-set
// indices, and segments that are the maximal runs of their labels; or, prepared
// from a transcript only, no labels, segments or reference and a transcript of
// 61-set indices with 0/1 optional flags, never two optional in a row nor all.
#include <cstdint>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "data/dataset.h"
#include "data/phones.h"
#include "tests/fuzz/fuzz_util.h"

using namespace timitseg;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string sum = sha256_hex(bytes);
  const std::string split_path = fuzz::write_scratch("train.safetensors", data, size);
  const std::string cmvn_path = fuzz::write_scratch("cmvn.safetensors", data, size);
  nlohmann::json m;
  m["format_version"] = data::kPreparedFormatVersion;
  m["files"]["train.safetensors"] = {{"bytes", size}, {"sha256", sum}};
  m["files"]["cmvn.safetensors"] = {{"bytes", size}, {"sha256", sum}};
  const std::string mtext = m.dump();
  fuzz::write_scratch("manifest.json", reinterpret_cast<const uint8_t*>(mtext.data()), mtext.size());

  try {
    const data::Split s = data::load_split(fuzz::scratch_dir(), "train");
    const int32_t n61 = static_cast<int32_t>(data::PhoneSet::timit().names61().size());
    for (const auto& u : s.utterances) {
      fuzz::check(u.num_frames >= 0 && u.dim >= 0, "negative num_frames or dim");
      fuzz::check(u.features.size() == static_cast<size_t>(u.num_frames) * static_cast<size_t>(u.dim),
                  "features are not [num_frames][dim]");
      if (!u.has_times()) {
        fuzz::check(u.segments.empty() && u.reference.empty(), "segments or reference without times");
        fuzz::check(!u.transcript.empty() && u.transcript.size() == u.transcript_optional.size(),
                    "no transcript, or flags of another size, without times");
        bool obligatory = false;
        for (size_t k = 0; k < u.transcript.size(); ++k) {
          fuzz::check(u.transcript[k] >= 0 && u.transcript[k] < n61, "accepted transcript phone");
          fuzz::check(u.transcript_optional[k] <= 1 && !(k && u.transcript_optional[k] && u.transcript_optional[k - 1]),
                      "accepted optional flags");
          obligatory = obligatory || !u.transcript_optional[k];
        }
        fuzz::check(obligatory, "accepted a transcript of optional phones only");
        continue;
      }
      fuzz::check(u.transcript.empty(), "a transcript beside times");
      fuzz::check(u.labels.size() == static_cast<size_t>(u.num_frames), "labels are not [num_frames]");
      for (int32_t l : u.labels) fuzz::check(l >= 0 && l < n61, "accepted label " + std::to_string(l));
      const auto runs = data::frame_segments(u.labels);
      bool same = runs.size() == u.segments.size();
      for (size_t i = 0; same && i < runs.size(); ++i)
        same = runs[i].start == u.segments[i].start && runs[i].length == u.segments[i].length &&
               runs[i].label == u.segments[i].label;
      fuzz::check(same, "accepted segments that are not the runs of the labels of " + u.id);
    }
  } catch (const std::exception& e) {
    fuzz::expect_error_names(e, split_path);
  }
  try {
    const data::Cmvn c = data::load_cmvn(fuzz::scratch_dir());
    fuzz::check(c.mean.size() == c.var.size(), "cmvn mean and var sizes differ");
  } catch (const std::exception& e) {
    fuzz::expect_error_names(e, cmvn_path);
  }
  return 0;
}
