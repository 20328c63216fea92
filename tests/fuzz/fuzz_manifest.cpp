// libFuzzer target: WORKDIR/manifest.json as the loaders read it
// (data::load_feature_options, and the checksum lookup of data::load_split and
// data::load_cmvn). Input: the text of a manifest.json. The scratch WORKDIR
// holds a small valid train.safetensors and cmvn.safetensors; the placeholders
// @TRAIN_SHA256@, @TRAIN_BYTES@, @CMVN_SHA256@ and @CMVN_BYTES@ in the input are
// replaced by their true checksums and sizes, so inputs can reach the loaders.
// Invariants: a rejected manifest or file gets an error naming the file
// (manifest.json or the split file); accepted feature options validate or are
// rejected by validate() with std::invalid_argument.
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

using namespace timitseg;

namespace {

struct Fixture {
  std::string train_sum, train_bytes, cmvn_sum, cmvn_bytes;
  Fixture() {
    // One utterance of 3 frames of dim 2: labels 0 0 5, segments [0,2,0] [2,1,5].
    st::File split;
    split.metadata["utterances"] = R"([{"id":"train/dr1/fcjf0/si1","speaker":"fcjf0","audio":"/x/SI1.WAV"}])";
    const std::vector<float> feats{0, 1, 2, 3, 4, 5};
    split.tensors["features"] = st::Tensor::from<float>({3, 2}, feats);
    split.tensors["labels"] = st::Tensor::from<int32_t>({3}, std::vector<int32_t>{0, 0, 5});
    split.tensors["num_samples"] = st::Tensor::from<int64_t>({1}, std::vector<int64_t>{720});
    split.tensors["segments"] = st::Tensor::from<int32_t>({2, 3}, std::vector<int32_t>{0, 2, 0, 2, 1, 5});
    split.tensors["utt_frame_offsets"] = st::Tensor::from<int64_t>({2}, std::vector<int64_t>{0, 3});
    split.tensors["utt_segment_offsets"] = st::Tensor::from<int64_t>({2}, std::vector<int64_t>{0, 2});
    st::File cmvn;
    cmvn.tensors["mean"] = st::Tensor::from<double>({2}, std::vector<double>{0.5, 1.5});
    cmvn.tensors["var"] = st::Tensor::from<double>({2}, std::vector<double>{1.0, 2.0});
    const std::string dir = fuzz::scratch_dir();
    st::save(dir + "/train.safetensors", split);
    st::save(dir + "/cmvn.safetensors", cmvn);
    uint64_t n = 0;
    train_sum = sha256_file(dir + "/train.safetensors", &n);
    train_bytes = std::to_string(n);
    cmvn_sum = sha256_file(dir + "/cmvn.safetensors", &n);
    cmvn_bytes = std::to_string(n);
  }
};

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t p = s->find(from); p != std::string::npos; p = s->find(from, p + to.size())) s->replace(p, from.size(), to);
}

bool names_a_file(const std::exception& e, const std::string& dir) {
  const std::string what = e.what();
  return what.find(dir + "/manifest.json") != std::string::npos ||
         what.find(dir + "/train.safetensors") != std::string::npos ||
         what.find(dir + "/cmvn.safetensors") != std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fx;
  std::string text(reinterpret_cast<const char*>(data), size);
  replace_all(&text, "@TRAIN_SHA256@", fx.train_sum);
  replace_all(&text, "@TRAIN_BYTES@", fx.train_bytes);
  replace_all(&text, "@CMVN_SHA256@", fx.cmvn_sum);
  replace_all(&text, "@CMVN_BYTES@", fx.cmvn_bytes);
  fuzz::write_scratch("manifest.json", reinterpret_cast<const uint8_t*>(text.data()), text.size());
  const std::string dir = fuzz::scratch_dir();

  try {
    const data::FeatureOptions o = data::load_feature_options(dir);
    try {
      data::validate(o);
    } catch (const std::invalid_argument&) {
    }
  } catch (const std::exception& e) {
    if (!names_a_file(e, dir)) fuzz::fail(std::string("load_feature_options error names no file: ") + e.what());
  }
  try {
    const data::Split s = data::load_split(dir, "train");
    fuzz::check(s.utterances.size() == 1 && s.utterances[0].num_frames == 3, "the fixture split loaded differently");
  } catch (const std::exception& e) {
    if (!names_a_file(e, dir)) fuzz::fail(std::string("load_split error names no file: ") + e.what());
  }
  try {
    const data::Cmvn c = data::load_cmvn(dir);
    fuzz::check(c.mean.size() == 2 && c.var.size() == 2, "the fixture cmvn loaded differently");
  } catch (const std::exception& e) {
    if (!names_a_file(e, dir)) fuzz::fail(std::string("load_cmvn error names no file: ") + e.what());
  }
  return 0;
}
