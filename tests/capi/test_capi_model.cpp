// The checkpoint calls of the C API: decode of a file and of samples equals
// what `timitseg decode` (eval::decode) writes to the .PHN; align places the
// given phones in order and equals what `timitseg align --phones`
// (eval::align) writes; the device and backend as enums or as version 1's
// strings, a disagreeing pair refused; bad inputs are statuses with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "eval/align.h"
#include "eval/infer.h"
#include "model/checkpoint.h"
#include "tests/support/cli.h"
#include "tests/support/model_problems.h"
#include "timitseg.h"

namespace fs = std::filesystem;
using namespace timitseg;
using Rows = std::vector<std::tuple<int64_t, int64_t, std::string>>;

namespace {

// 16-bit mono RIFF WAV of `pcm` at `rate` Hz.
void write_wav(const fs::path& p, const std::vector<int16_t>& pcm, int rate) {
  std::ofstream f(p, std::ios::binary);
  auto u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [&](uint16_t v) { f.write(reinterpret_cast<const char*>(&v), 2); };
  const uint32_t bytes = static_cast<uint32_t>(pcm.size() * 2);
  f.write("RIFF", 4), u32(36 + bytes), f.write("WAVEfmt ", 8), u32(16), u16(1), u16(1), u32(rate), u32(rate * 2);
  u16(2), u16(16), f.write("data", 4), u32(bytes);
  f.write(reinterpret_cast<const char*>(pcm.data()), bytes);
}

Rows rows_of(timitseg_segments* s) {
  Rows out;
  for (int64_t i = 0; i < timitseg_segments_count(s); ++i) {
    int64_t b = 0, e = 0;
    const char* name = nullptr;
    EXPECT_EQ(timitseg_segments_get(s, i, &b, &e, &name), TIMITSEG_OK);
    out.emplace_back(b, e, name);
  }
  return out;
}

class CapiModel : public ::testing::Test {
 protected:
  static fs::path dir_;
  static std::vector<int16_t> pcm_;
  // The checkpoint on the CPU (nullptr: the load failed, timitseg_last_error says why).
  static timitseg_model* load_on_cpu(const std::string& ckpt) {
    timitseg_model_params p = timitseg_model_default_params();
    p.device_kind = TIMITSEG_MODEL_DEVICE_CPU;
    timitseg_model* m = nullptr;
    return timitseg_model_load(ckpt.c_str(), &p, &m) == TIMITSEG_OK ? m : nullptr;
  }
  // a.wav aligned on `phones` by the handle, as rows.
  static Rows align_rows(timitseg_model* m, const std::string& phones) {
    timitseg_segments* s = nullptr;
    EXPECT_EQ(timitseg_model_align_file(m, (dir_ / "a.wav").c_str(), phones.c_str(), &s), TIMITSEG_OK)
        << timitseg_last_error();
    const Rows r = rows_of(s);
    timitseg_segments_free(s);
    return r;
  }
  // `timitseg align --phones` of a.wav on `phones` with this suite's checkpoint on the CPU, into
  // dir_/aligned_NAME (the caller sets the option under test, then calls eval::align).
  static eval::AlignOptions align_command(const std::string& name, const std::string& phones) {
    eval::AlignOptions o;
    o.checkpoint = (dir_ / "m.safetensors").string();
    o.phones_file = (dir_ / ("phones_" + name + ".txt")).string();
    std::ofstream(o.phones_file) << (dir_ / "a.wav").string() << " " << phones << "\n";
    o.out_dir = (dir_ / ("aligned_" + name)).string();
    o.device = timitseg::config::DeviceSetting::cpu;
    return o;
  }
  static void SetUpTestSuite() {
    dir_ = ::testsupport::fresh_temp_dir("timitseg_capi_model");
    model::ModelState s;
    s.dims.input_dim = s.features.dim();
    s.dims.hidden_dim = 8;
    s.dims.num_layers = 1;
    s.dims.num_classes = 39;
    s.dims.max_duration = 6;
    s.config.crf_max_duration = 6;
    s.config.crf_backend = config::CrfBackendSetting::cpu;
    s.labels = model::LabelSet::make(39);
    s.params = testsupport_params(s.dims);
    s.optimizer.reset(s.params.size());
    s.rng_state = "x";
    model::save_checkpoint((dir_ / "m.safetensors").string(), s, false);
    for (int n = 0; n < 8000; ++n)  // 0.5 s of two tones and a pause
      pcm_.push_back(static_cast<int16_t>(n % 4000 < 3000 ? 6000 * std::sin(0.05 * n * (1 + n / 4000)) : 0));
    write_wav(dir_ / "a.wav", pcm_, 16000);
  }
  static std::vector<float> testsupport_params(const model::ModelDims& d) {
    return timitseg::testsupport::random_model_params(d, 5, 0.5f);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
};
fs::path CapiModel::dir_;
std::vector<int16_t> CapiModel::pcm_;

}  // namespace

TEST_F(CapiModel, DecodeEqualsTheDecodeCommandsPhn) {
  eval::DecodeOptions o;
  o.checkpoint = (dir_ / "m.safetensors").string();
  o.inputs = {(dir_ / "a.wav").string()};
  o.out_dir = (dir_ / "out").string();
  o.device = timitseg::config::DeviceSetting::cpu;
  ASSERT_EQ(eval::decode(o), 1);
  Rows want;
  std::istringstream in(read_file((dir_ / "out" / "a.PHN").string()));
  int64_t b, e;
  std::string name;
  while (in >> b >> e >> name) want.emplace_back(b, e, name);
  ASSERT_FALSE(want.empty());

  timitseg_model_params p = timitseg_model_default_params();
  p.device = "cpu";
  timitseg_model* m = nullptr;
  ASSERT_EQ(timitseg_model_load(o.checkpoint.c_str(), &p, &m), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_model_sample_rate(m), 16000);
  EXPECT_EQ(timitseg_model_num_labels(m), 39);
  timitseg_segments* s = nullptr;
  ASSERT_EQ(timitseg_model_decode_file(m, (dir_ / "a.wav").c_str(), &s), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(rows_of(s), want);
  timitseg_segments_free(s);
  std::vector<float> x;
  for (int16_t v : pcm_) x.push_back(v / 32768.0f);
  ASSERT_EQ(timitseg_model_decode_samples(m, x.data(), static_cast<int64_t>(x.size()), 16000, &s), TIMITSEG_OK)
      << timitseg_last_error();
  EXPECT_EQ(rows_of(s), want);
  timitseg_segments_free(s);

  // align: the given phones, in order, tiling the audio
  ASSERT_EQ(timitseg_model_align_file(m, (dir_ / "a.wav").c_str(), "h# aa s iy h#", &s), TIMITSEG_OK)
      << timitseg_last_error();
  const Rows al = rows_of(s);
  timitseg_segments_free(s);
  ASSERT_EQ(al.size(), 5u);
  const std::vector<std::string> names{"sil", "aa", "s", "iy", "sil"};  // h# is sil in the 39-phone set
  for (size_t i = 0; i < al.size(); ++i) {
    EXPECT_EQ(std::get<2>(al[i]), names[i]);
    if (i > 0) EXPECT_EQ(std::get<0>(al[i]), std::get<1>(al[i - 1]));
  }
  EXPECT_EQ(std::get<0>(al.front()), 0);
  EXPECT_EQ(std::get<1>(al.back()), static_cast<int64_t>(pcm_.size()));

  EXPECT_EQ(timitseg_model_align_file(m, (dir_ / "a.wav").c_str(), "h# zz h#", &s), TIMITSEG_ERR_RUNTIME);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(timitseg_last_error()).find("zz"), std::string::npos) << timitseg_last_error();
  EXPECT_EQ(timitseg_model_decode_file(m, (dir_ / "missing.wav").c_str(), &s), TIMITSEG_ERR_RUNTIME);
  EXPECT_NE(std::string(timitseg_last_error()).find("missing.wav"), std::string::npos) << timitseg_last_error();
  EXPECT_EQ(timitseg_model_decode_samples(m, x.data(), 10, 16000, &s), TIMITSEG_ERR_RUNTIME);
  EXPECT_NE(std::string(timitseg_last_error()).find("too short"), std::string::npos) << timitseg_last_error();
  timitseg_model_free(m);
  EXPECT_EQ(timitseg_model_load((dir_ / "nope.safetensors").c_str(), nullptr, &m), TIMITSEG_ERR_RUNTIME);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(timitseg_last_error()).find("nope.safetensors"), std::string::npos) << timitseg_last_error();
}

namespace {

Rows read_phn_rows(const fs::path& p) {
  Rows rows;
  std::istringstream in(read_file(p.string()));
  int64_t b, e;
  std::string name;
  while (in >> b >> e >> name) rows.emplace_back(b, e, name);
  return rows;
}

}  // namespace

// timitseg_model_set_shifts: the handle's alignments move each boundary by its phone's
// shift in samples (as `align --shifts` writes them, the command's .PHN compared), a bad
// file is refused naming itself and leaves the shifts in place, NULL removes them.
TEST_F(CapiModel, SetShiftsMovesAlignmentsAsTheAlignCommand) {
  const std::string ckpt = (dir_ / "m.safetensors").string(), phones = "h# aa s iy h#";
  const fs::path shifts = dir_ / "shifts.json", bad = dir_ / "shifts_bad.json";
  nlohmann::json j = {{"format", "timitseg-boundary-shifts"}, {"version", 1},
                      {"phone_set", model::load_checkpoint(ckpt).labels.spec.name},
                      {"shift_ms", {{"s", 10.0}, {"iy", -5.0}}}};
  std::ofstream(shifts) << j.dump();
  j["shift_ms"]["zz"] = 1.0;
  std::ofstream(bad) << j.dump();
  timitseg_model* m = load_on_cpu(ckpt);
  ASSERT_NE(m, nullptr) << timitseg_last_error();
  auto align = [&] { return align_rows(m, phones); };
  const Rows plain = align();
  ASSERT_EQ(plain.size(), 5u);
  ASSERT_EQ(timitseg_model_set_shifts(m, shifts.c_str()), TIMITSEG_OK) << timitseg_last_error();
  const Rows moved = align();
  ASSERT_EQ(moved.size(), 5u);
  // s starts 10 ms (160 samples) earlier, iy 5 ms (80 samples) later, where the phones keep a sample
  Rows want = plain;
  std::get<0>(want[2]) = std::max(std::get<0>(plain[2]) - 160, std::get<0>(plain[1]) + 1);
  std::get<0>(want[3]) = std::min(std::get<0>(plain[3]) + 80, std::get<1>(plain[3]) - 1);
  for (size_t i = 0; i + 1 < want.size(); ++i) std::get<1>(want[i]) = std::get<0>(want[i + 1]);
  EXPECT_EQ(moved, want);
  EXPECT_NE(moved, plain);
  eval::AlignOptions o = align_command("shift", phones);  // the command with the same file
  o.shifts = shifts.string();
  ASSERT_EQ(eval::align(o), 1);
  EXPECT_EQ(read_phn_rows(dir_ / "aligned_shift" / "a.PHN"), moved);
  EXPECT_EQ(timitseg_model_set_shifts(m, bad.c_str()), TIMITSEG_ERR_RUNTIME);
  EXPECT_NE(std::string(timitseg_last_error()).find(bad.string() + ": phone 'zz' is not in"), std::string::npos)
      << timitseg_last_error();
  EXPECT_EQ(align(), moved);  // the shifts set before stay
  ASSERT_EQ(timitseg_model_set_shifts(m, nullptr), TIMITSEG_OK);
  EXPECT_EQ(align(), plain);
  EXPECT_EQ(timitseg_model_set_shifts(nullptr, shifts.c_str()), TIMITSEG_ERR_ARGUMENT);
  timitseg_model_free(m);
}

// timitseg_model_set_silence_edges: on, the handle's alignment equals `align --silence-edges on` with the
// same margin and bound; a bad mode or value is refused and the setting kept; off and auto (this
// checkpoint trained on times) give the plain alignment.
TEST_F(CapiModel, SetSilenceEdgesAlignsAsTheAlignCommand) {
  const std::string ckpt = (dir_ / "m.safetensors").string(), phones = "h# aa s iy h#";
  timitseg_model* m = load_on_cpu(ckpt);
  ASSERT_NE(m, nullptr) << timitseg_last_error();
  auto align = [&] { return align_rows(m, phones); };
  const Rows plain = align();
  ASSERT_EQ(timitseg_model_set_silence_edges(m, TIMITSEG_SILENCE_EDGES_ON, 6.0, 40.0, 50.0), TIMITSEG_OK)
      << timitseg_last_error();
  const Rows edged = align();
  eval::AlignOptions o = align_command("edges", phones);  // the command with the same setting
  o.silence_edges = eval::SilenceEdgesSetting::on;
  o.silence_edge_options.margin_db = 6.0;
  o.silence_edge_options.max_move_ms = 40.0;
  ASSERT_EQ(eval::align(o), 1);
  EXPECT_EQ(read_phn_rows(dir_ / "aligned_edges" / "a.PHN"), edged);
  for (size_t i = 1; i < edged.size(); ++i)  // only the silences' edges (h# at both ends) may move
    if (i != 1 && i + 1 != edged.size()) EXPECT_EQ(std::get<0>(edged[i]), std::get<0>(plain[i])) << i;
  EXPECT_EQ(timitseg_model_set_silence_edges(m, 7, 6.0, 40.0, 50.0), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("mode must be"), std::string::npos) << timitseg_last_error();
  EXPECT_EQ(timitseg_model_set_silence_edges(m, TIMITSEG_SILENCE_EDGES_ON, 0.0, 40.0, 50.0), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("--silence-margin-db must be a number > 0"), std::string::npos)
      << timitseg_last_error();
  EXPECT_EQ(timitseg_model_set_silence_edges(m, TIMITSEG_SILENCE_EDGES_ON, 6.0, 40.0, 0.0), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("--silence-min-quiet must be a percentage"), std::string::npos)
      << timitseg_last_error();
  EXPECT_EQ(align(), edged);  // kept
  ASSERT_EQ(timitseg_model_set_silence_edges(m, TIMITSEG_SILENCE_EDGES_OFF, 6.0, 50.0, 50.0), TIMITSEG_OK);
  EXPECT_EQ(align(), plain);
  ASSERT_EQ(timitseg_model_set_silence_edges(m, TIMITSEG_SILENCE_EDGES_AUTO, 6.0, 50.0, 50.0), TIMITSEG_OK);
  EXPECT_EQ(align(), plain);  // trained on times: auto is off
  EXPECT_EQ(timitseg_model_set_silence_edges(nullptr, 0, 6.0, 50.0, 50.0), TIMITSEG_ERR_ARGUMENT);
  timitseg_model_free(m);
}

// timitseg_model_set_boundaries: a new handle (auto) aligns as `align` does by default, with the
// posteriors' boundaries; posterior gives the same, viterbi the boundaries of `align --boundaries
// viterbi`, which differ; a bad mode is refused and the setting kept.
TEST_F(CapiModel, SetBoundariesAlignsAsTheAlignCommand) {
  const std::string ckpt = (dir_ / "m.safetensors").string(), phones = "h# aa s iy h#";
  timitseg_model* m = load_on_cpu(ckpt);
  ASSERT_NE(m, nullptr) << timitseg_last_error();
  auto align = [&] { return align_rows(m, phones); };
  const Rows automatic = align();
  ASSERT_EQ(timitseg_model_set_boundaries(m, TIMITSEG_BOUNDARIES_VITERBI), TIMITSEG_OK) << timitseg_last_error();
  const Rows viterbi = align();
  eval::AlignOptions o = align_command("boundaries", phones);  // the command with the same setting
  o.boundaries = eval::BoundariesSetting::viterbi;
  ASSERT_EQ(eval::align(o), 1);
  EXPECT_EQ(read_phn_rows(dir_ / "aligned_boundaries" / "a.PHN"), viterbi);
  eval::AlignOptions d = align_command("boundaries_default", phones);  // and with its default
  ASSERT_EQ(eval::align(d), 1);
  EXPECT_EQ(read_phn_rows(dir_ / "aligned_boundaries_default" / "a.PHN"), automatic);
  ASSERT_EQ(viterbi.size(), automatic.size());
  EXPECT_NE(viterbi, automatic) << "no boundary moved: the test would show nothing";
  EXPECT_EQ(timitseg_model_set_boundaries(m, 7), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("mode must be TIMITSEG_BOUNDARIES_AUTO"), std::string::npos)
      << timitseg_last_error();
  EXPECT_EQ(align(), viterbi);  // kept
  ASSERT_EQ(timitseg_model_set_boundaries(m, TIMITSEG_BOUNDARIES_POSTERIOR), TIMITSEG_OK);
  EXPECT_EQ(align(), automatic);
  // on the frames: the command's posterior-frames, the same phones, each boundary within half a frame of auto's
  ASSERT_EQ(timitseg_model_set_boundaries(m, TIMITSEG_BOUNDARIES_POSTERIOR_FRAMES), TIMITSEG_OK);
  const Rows on_frames = align();
  eval::AlignOptions f = align_command("boundaries_frames", phones);
  f.boundaries = eval::BoundariesSetting::posterior_frames;
  ASSERT_EQ(eval::align(f), 1);
  EXPECT_EQ(read_phn_rows(dir_ / "aligned_boundaries_frames" / "a.PHN"), on_frames);
  ASSERT_EQ(on_frames.size(), automatic.size());
  for (size_t i = 0; i < on_frames.size(); ++i) {
    EXPECT_EQ(std::get<2>(on_frames[i]), std::get<2>(automatic[i]));
    EXPECT_LE(std::llabs(std::get<0>(on_frames[i]) - std::get<0>(automatic[i])), 81) << "phone " << i;
  }
  ASSERT_EQ(timitseg_model_set_boundaries(m, TIMITSEG_BOUNDARIES_AUTO), TIMITSEG_OK);
  EXPECT_EQ(align(), automatic);
  EXPECT_EQ(timitseg_model_set_boundaries(nullptr, 0), TIMITSEG_ERR_ARGUMENT);
  timitseg_model_free(m);
}

TEST_F(CapiModel, AlignFileEqualsTheAlignCommandsPhn) {
  const std::string phones = "h# aa s iy h#";
  eval::AlignOptions o = align_command("plain", phones);
  ASSERT_EQ(eval::align(o), 1);
  const Rows want = read_phn_rows(dir_ / "aligned_plain" / "a.PHN");
  ASSERT_EQ(want.size(), 5u);

  timitseg_model_params p = timitseg_model_default_params();
  p.device_kind = TIMITSEG_MODEL_DEVICE_CPU;
  timitseg_model* m = nullptr;
  ASSERT_EQ(timitseg_model_load(o.checkpoint.c_str(), &p, &m), TIMITSEG_OK) << timitseg_last_error();
  timitseg_segments* s = nullptr;
  ASSERT_EQ(timitseg_model_align_file(m, (dir_ / "a.wav").c_str(), phones.c_str(), &s), TIMITSEG_OK)
      << timitseg_last_error();
  EXPECT_EQ(rows_of(s), want);
  timitseg_segments_free(s);
  timitseg_model_free(m);
}

TEST_F(CapiModel, DeviceAndBackendAsEnumsOrWordsAndADisagreeingPairRefused) {
  const std::string ckpt = (dir_ / "m.safetensors").string();
  auto load = [&](const timitseg_model_params& p) {
    timitseg_model* m = nullptr;
    const int rc = timitseg_model_load(ckpt.c_str(), &p, &m);
    EXPECT_EQ(rc == TIMITSEG_OK, m != nullptr);
    timitseg_model_free(m);
    return rc;
  };
  timitseg_model_params p = timitseg_model_default_params();
  EXPECT_EQ(p.device_kind, TIMITSEG_MODEL_DEVICE_AUTO);
  EXPECT_EQ(p.backend_kind, TIMITSEG_BACKEND_AUTO);
  p.device_kind = TIMITSEG_MODEL_DEVICE_CPU;
  p.backend_kind = TIMITSEG_BACKEND_REFERENCE;
  EXPECT_EQ(load(p), TIMITSEG_OK) << timitseg_last_error();
  p.device = "cpu";  // the same in words: accepted
  p.backend = "reference";
  EXPECT_EQ(load(p), TIMITSEG_OK) << timitseg_last_error();
  p.device = "cuda";  // another device in words: refused before any device is touched
  EXPECT_EQ(load(p), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()),
            "timitseg_model_load: device 'cuda' and device_kind (cpu) disagree; set one of them");
  p.device = "cpu";
  p.backend = "cpu";
  EXPECT_EQ(load(p), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()),
            "timitseg_model_load: backend 'cpu' and backend_kind (reference) disagree; set one of them");
  p.backend_kind = TIMITSEG_BACKEND_AUTO;  // AUTO: the words decide
  EXPECT_EQ(load(p), TIMITSEG_OK) << timitseg_last_error();
  p.device_kind = 7;
  EXPECT_EQ(load(p), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("device_kind must be"), std::string::npos) << timitseg_last_error();
  p.device_kind = TIMITSEG_MODEL_DEVICE_CPU;
  p.backend_kind = -1;
  EXPECT_EQ(load(p), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("backend_kind must be"), std::string::npos) << timitseg_last_error();
}
