// `timitseg crf replay` through the built binary: round trip against the
// library (host runner), labels optional, and error cases that leave no OUT.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/safetensors.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "timitseg_replay_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

// Runs the binary; returns the exit status and fills `err` with stderr.
int run_cli(const std::string& args, std::string* err) {
  const std::string errfile = (fs::temp_directory_path() / ("timitseg_replay_err_" + std::to_string(::getpid()))).string();
  const std::string cmd = std::string("\"") + TIMITSEG_BINARY + "\" " + args + " > /dev/null 2> \"" + errfile + "\"";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(errfile);
  std::stringstream ss;
  ss << in.rdbuf();
  *err = ss.str();
  fs::remove(errfile);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

st::File problem_file(const Problem& pb, bool labels, bool lengths_i64) {
  const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
  st::File f;
  f.tensors["cum_scores"] = st::Tensor::from<float>({B, T + 1, C}, pb.cum);
  f.tensors["transition"] = st::Tensor::from<float>({C, C}, pb.A);
  f.tensors["duration_bias"] = st::Tensor::from<float>({K, C}, pb.D);
  f.tensors["start"] = st::Tensor::from<float>({C}, pb.s);
  f.tensors["end"] = st::Tensor::from<float>({C}, pb.e);
  if (lengths_i64) {
    std::vector<int64_t> l(pb.lengths.begin(), pb.lengths.end());
    f.tensors["lengths"] = st::Tensor::from<int64_t>({B}, l);
  } else {
    f.tensors["lengths"] = st::Tensor::from<int32_t>({B}, pb.lengths);
  }
  if (labels) f.tensors["labels"] = st::Tensor::from<int32_t>({B, T}, pb.labels);
  return f;
}

TEST(ReplayCli, RoundTripMatchesLibraryOnEveryHostBackend) {
  TempDir dir;
  const Problem pb = random_problem(Dims{3, 20, 5, 4}, 17, {20, 9, 1});
  const std::string in = (dir.path / "in.safetensors").string();
  st::save(in, problem_file(pb, true, true));
  for (const std::string name : {"reference", "cpu"}) {
    SCOPED_TRACE(name);
    const std::string out = (dir.path / (name + ".safetensors")).string();
    std::string err;
    ASSERT_EQ(run_cli("crf replay " + in + " --backend " + name + " --out " + out, &err), 0) << err;
    const st::File f = st::load(out);
    auto be = make_backend(backend_kind(name));
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    const HostResult r = run_host(*be, pb.dims, pb.params(), pb.labels.data(), opt);
    // Same backend, same inputs: bitwise identical results.
    EXPECT_EQ(f.get("log_partition", st::DType::F64, {3}).to<double>(), r.log_z);
    EXPECT_EQ(f.get("gold_score", st::DType::F64, {3}).to<double>(), r.gold);
    EXPECT_EQ(f.get("viterbi_score", st::DType::F64, {3}).to<double>(), r.viterbi_score);
    const std::vector<double> nll = f.get("nll", st::DType::F64, {3}).to<double>();
    for (int b = 0; b < 3; ++b) {
      EXPECT_EQ(nll[b], r.log_z[b] - r.gold[b]);
      EXPECT_GE(nll[b], 0.0);
    }
    EXPECT_EQ(f.get("grad_cum_scores", st::DType::F32, {3, 21, 4}).to<float>(), r.grad_cum_scores);
    EXPECT_EQ(f.get("grad_transition", st::DType::F32, {4, 4}).to<float>(), r.grad_transition);
    EXPECT_EQ(f.get("grad_duration_bias", st::DType::F32, {5, 4}).to<float>(), r.grad_duration_bias);
    EXPECT_EQ(f.get("grad_start", st::DType::F32, {4}).to<float>(), r.grad_start);
    EXPECT_EQ(f.get("grad_end", st::DType::F32, {4}).to<float>(), r.grad_end);
    EXPECT_EQ(f.get("boundary_posteriors", st::DType::F64, {3, 21}).to<double>(), r.boundary_posteriors);
    const st::Tensor& segs = f.get("viterbi_segments", st::DType::I32, {-1, 4});
    const std::vector<int32_t> rows = segs.to<int32_t>();
    ASSERT_EQ(rows.size(), r.segments.size() * 4);
    for (size_t i = 0; i < r.segments.size(); ++i) {
      const Segment& s = r.segments[i];
      EXPECT_EQ((std::vector<int32_t>(rows.begin() + 4 * i, rows.begin() + 4 * i + 4)),
                (std::vector<int32_t>{s.batch, s.start, s.duration, s.label}));
    }
    // Segments of each utterance tile [0, length).
    std::vector<int32_t> next(3, 0);
    for (const Segment& s : r.segments) {
      EXPECT_EQ(s.start, next[s.batch]);
      next[s.batch] += s.duration;
    }
    EXPECT_EQ(next, pb.lengths);
  }
}

TEST(ReplayCli, OnsetInputGivesGradOnsetLikeTheLibrary) {
  TempDir dir;
  Problem pb = random_problem(Dims{2, 15, 4, 3}, 18, {15, 6});
  add_onset(pb, 18, 1.0);
  const std::string in = (dir.path / "in.safetensors").string();
  st::File file = problem_file(pb, true, false);
  file.tensors["onset"] = st::Tensor::from<float>({2, 15, 3}, pb.o);
  st::save(in, file);
  for (const std::string name : {"reference", "cpu"}) {
    SCOPED_TRACE(name);
    const std::string out = (dir.path / (name + ".safetensors")).string();
    std::string err;
    ASSERT_EQ(run_cli("crf replay " + in + " --backend " + name + " --out " + out, &err), 0) << err;
    const st::File f = st::load(out);
    auto be = make_backend(backend_kind(name));
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    const HostResult r = run_host(*be, pb.dims, pb.params(), pb.labels.data(), opt);
    EXPECT_EQ(f.get("log_partition", st::DType::F64, {2}).to<double>(), r.log_z);
    EXPECT_EQ(f.get("gold_score", st::DType::F64, {2}).to<double>(), r.gold);
    EXPECT_EQ(f.get("grad_onset", st::DType::F32, {2, 15, 3}).to<float>(), r.grad_onset);
    // The onset changes the result (it is read at all).
    Problem no_onset = pb;
    no_onset.o.clear();
    const HostResult plain = run_host(*be, pb.dims, no_onset.params(), pb.labels.data(), opt);
    EXPECT_NE(plain.log_z[0], r.log_z[0]);
  }
  // A wrong shape is one error line and no output.
  file.tensors["onset"] = st::Tensor::from<float>({2, 14, 3}, std::vector<float>(2 * 14 * 3, 0.f));
  st::save(in, file);
  const std::string out = (dir.path / "bad.safetensors").string();
  std::string err;
  EXPECT_EQ(run_cli("crf replay " + in + " --backend cpu --out " + out, &err), 1);
  EXPECT_NE(err.find("onset"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));
}

TEST(ReplayCli, WithoutLabelsWritesNoGoldOrGradients) {
  TempDir dir;
  const Problem pb = random_problem(Dims{2, 12, 4, 3}, 5, {12, 7});
  const std::string in = (dir.path / "in.safetensors").string(), out = (dir.path / "out.safetensors").string();
  st::save(in, problem_file(pb, false, false));
  std::string err;
  ASSERT_EQ(run_cli("crf replay " + in + " --backend cpu --out " + out, &err), 0) << err;
  const st::File f = st::load(out);
  EXPECT_TRUE(f.has("log_partition"));
  EXPECT_TRUE(f.has("viterbi_segments"));
  EXPECT_FALSE(f.has("nll"));
  EXPECT_FALSE(f.has("grad_cum_scores"));
  auto be = make_backend(BackendKind::reference);
  HostRunOptions opt;
  opt.gradients = false;
  const HostResult r = run_host(*be, pb.dims, pb.params(), nullptr, opt);
  expect_close(f.get("log_partition").to<double>(), r.log_z, 1e-9, 0.0, "log_partition");
}

TEST(ReplayCli, ErrorsLeaveNoOutput) {
  TempDir dir;
  Problem pb = random_problem(Dims{2, 10, 4, 3}, 9, {10, 6});
  pb.labels[1 * 10 + 3] = 7;
  const std::string in = (dir.path / "bad_label.safetensors").string(), out = (dir.path / "out.safetensors").string();
  st::save(in, problem_file(pb, true, false));
  std::string err;
  EXPECT_EQ(run_cli("crf replay " + in + " --backend cpu --out " + out, &err), 1);
  EXPECT_NE(err.find("error: " + in + ": crf: labels[1][3] = 7 is outside [0, C=3)"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));

  // Missing tensor: the message names the file and the tensor.
  st::File f = problem_file(pb, false, false);
  f.tensors.erase("transition");
  const std::string in2 = (dir.path / "no_transition.safetensors").string();
  st::save(in2, f);
  EXPECT_EQ(run_cli("crf replay " + in2 + " --backend reference --out " + out, &err), 1);
  EXPECT_NE(err.find(in2), std::string::npos) << err;
  EXPECT_NE(err.find("transition"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));

  // Wrong dtype of lengths.
  st::File g = problem_file(pb, false, false);
  g.tensors["lengths"] = st::Tensor::from<float>({2}, std::vector<float>{10, 6});
  const std::string in3 = (dir.path / "float_lengths.safetensors").string();
  st::save(in3, g);
  EXPECT_EQ(run_cli("crf replay " + in3 + " --out " + out, &err), 1);
  EXPECT_NE(err.find("tensor 'lengths' has dtype F32, expected I32 or I64"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));

  // Length outside [1, T].
  st::File h = problem_file(pb, false, false);
  h.tensors["lengths"] = st::Tensor::from<int32_t>({2}, std::vector<int32_t>{10, 11});
  const std::string in4 = (dir.path / "long.safetensors").string();
  st::save(in4, h);
  EXPECT_EQ(run_cli("crf replay " + in4 + " --out " + out, &err), 1);
  EXPECT_NE(err.find("lengths[1] = 11 is outside [1, T=10]"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));

  // Length 0 (below [1, T]).
  st::File h0 = problem_file(pb, false, false);
  h0.tensors["lengths"] = st::Tensor::from<int32_t>({2}, std::vector<int32_t>{0, 6});
  const std::string in5 = (dir.path / "empty.safetensors").string();
  st::save(in5, h0);
  EXPECT_EQ(run_cli("crf replay " + in5 + " --out " + out, &err), 1);
  EXPECT_NE(err.find("error: " + in5 + ": crf: lengths[0] = 0 is outside [1, T=10]"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));

  // Non-finite values: a NaN in cum_scores inside utterance 1, +inf in transition.
  {
    Problem q = pb;
    q.cum[(1 * 11 + 4) * 3 + 2] = std::numeric_limits<float>::quiet_NaN();  // [b=1][t=4][c=2], t <= length 6
    const std::string in6 = (dir.path / "nan_scores.safetensors").string();
    st::save(in6, problem_file(q, false, false));
    EXPECT_EQ(run_cli("crf replay " + in6 + " --backend cpu --out " + out, &err), 1);
    EXPECT_NE(err.find("error: " + in6 + ": crf: cum_scores[1][4][2] = nan is not finite"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out));
    q = pb;
    q.A[0 * 3 + 1] = std::numeric_limits<float>::infinity();
    const std::string in7 = (dir.path / "inf_transition.safetensors").string();
    st::save(in7, problem_file(q, false, false));
    EXPECT_EQ(run_cli("crf replay " + in7 + " --backend reference --out " + out, &err), 1);
    EXPECT_NE(err.find("error: " + in7 + ": crf: transition[0][1] = inf is NaN or +inf"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out));
  }

  // An existing OUT is left untouched by a failing run.
  { std::ofstream(out) << "previous"; }
  EXPECT_EQ(run_cli("crf replay " + in + " --out " + out, &err), 1);
  std::ifstream prev(out);
  std::string content;
  prev >> content;
  EXPECT_EQ(content, "previous");
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ReplayCli, MinusInfParametersGoThroughAndForbiddenGoldIsAnError) {
  TempDir dir;
  const float ninf = -std::numeric_limits<float>::infinity();
  Problem pb = random_problem(Dims{2, 8, 3, 3}, 21, {8, 5});
  // Only transitions 0 -> 1, 1 -> 2, 2 -> 0 allowed; label 2 may not start, label 0 may not end.
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 3; ++c)
      if (c != (a + 1) % 3) pb.A[a * 3 + c] = ninf;
  pb.s[2] = ninf;
  pb.e[0] = ninf;
  pb.labels = {0, 0, 1, 1, 1, 2, 2, 2, /**/ 1, 1, 2, 2, 2, 0, 0, 0};
  const std::string in = (dir.path / "forbidden.safetensors").string(), out = (dir.path / "out.safetensors").string();
  st::save(in, problem_file(pb, true, false));
  for (const std::string name : {"reference", "cpu"}) {
    SCOPED_TRACE(name);
    std::string err;
    ASSERT_EQ(run_cli("crf replay " + in + " --backend " + name + " --out " + out, &err), 0) << err;
    const st::File f = st::load(out);
    auto be = make_backend(backend_kind(name));
    const HostResult r = run_host(*be, pb.dims, pb.params(), pb.labels.data());
    EXPECT_EQ(f.get("log_partition").to<double>(), r.log_z);
    const std::vector<float> gA = f.get("grad_transition").to<float>();
    for (int i = 0; i < 9; ++i)
      if (pb.A[i] == ninf) EXPECT_EQ(gA[i], 0.0f) << "grad_transition[" << i << "]";
    EXPECT_EQ(f.get("grad_start").to<float>()[2], 0.0f);
    EXPECT_EQ(f.get("grad_end").to<float>()[0], 0.0f);
    for (double v : f.get("nll").to<double>()) EXPECT_TRUE(std::isfinite(v) && v >= 0.0) << v;
    fs::remove(out);
  }
  // Utterance 1's gold ends with label 0 (end[0] = -inf): one error line, no OUT.
  pb.labels = {0, 0, 1, 1, 1, 2, 2, 2, /**/ 1, 1, 2, 2, 0, 0, 0, 0};
  const std::string in2 = (dir.path / "gold_forbidden.safetensors").string();
  st::save(in2, problem_file(pb, true, false));
  std::string err;
  EXPECT_EQ(run_cli("crf replay " + in2 + " --backend cpu --out " + out, &err), 1);
  EXPECT_NE(err.find("error: " + in2 + ": cpu backend: utterance 1: the gold segmentation has score -inf"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(out));
}

TEST(ReplayCli, RefusesToOverwriteItsInputOrWriteADirectory) {
  TempDir dir;
  const Problem pb = random_problem(Dims{1, 6, 3, 2}, 23, {6});
  const std::string in = (dir.path / "in.safetensors").string();
  st::save(in, problem_file(pb, true, false));
  const std::string before = read_bytes(in);
  std::string err;
  EXPECT_EQ(run_cli("crf replay " + in + " --out " + in, &err), 1);
  EXPECT_NE(err.find("error: crf replay: --out " + in + " is the input file " + in +
                     " itself; refusing to overwrite the input"),
            std::string::npos)
      << err;
  // Another spelling of the same file.
  const std::string alias = (dir.path / "." / "in.safetensors").string();
  EXPECT_EQ(run_cli("crf replay " + in + " --out " + alias, &err), 1);
  EXPECT_NE(err.find("is the input file"), std::string::npos) << err;
  EXPECT_EQ(read_bytes(in), before);
  // A directory.
  EXPECT_EQ(run_cli("crf replay " + in + " --out " + dir.path.string(), &err), 1);
  EXPECT_NE(err.find("error: crf replay: --out " + dir.path.string() + " is a directory; give a file name"),
            std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(CrfCli, RejectsNegativeCounts) {
  TempDir dir;
  const Problem pb = random_problem(Dims{1, 6, 3, 2}, 24, {6});
  const std::string in = (dir.path / "in.safetensors").string(), out = (dir.path / "out.safetensors").string();
  st::save(in, problem_file(pb, true, false));
  std::string err;
  EXPECT_EQ(run_cli("crf replay " + in + " --out " + out + " --threads -3", &err), 1);
  EXPECT_NE(err.find("error: crf replay: --threads must be >= 0 (0 = all hardware threads), got -3"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(run_cli("bench crf -B 2 -T 10 -K 3 -C 4 --threads -3", &err), 1);
  EXPECT_NE(err.find("error: bench crf: --threads must be >= 0 (0 = all hardware threads), got -3"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_cli("bench crf -B 2 -T 10 -K 3 -C 4 --check-utterances -1", &err), 1);
  EXPECT_NE(err.find("error: bench crf: --check-utterances must be >= 0 (0 = skip the check), got -1"),
            std::string::npos)
      << err;
  // A valid small run still works (and --threads 0 means all cores).
  EXPECT_EQ(run_cli("bench crf -B 2 -T 10 -K 3 -C 4 --threads 0 --repeats 1 --check-utterances 2", &err), 0) << err;
}

TEST(CrfCli, OversizedBenchIsRefusedBeforeAllocating) {
  std::string err;
  for (const std::string name : {"cpu", "reference"}) {
    EXPECT_EQ(run_cli("bench crf -T 100000000 -B 1000 --backend " + name, &err), 1) << name;
    EXPECT_NE(err.find("error: bench crf: B=1000 T=100000000 K=30 C=39 on the " + name + " backend needs about "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("more than this machine's physical memory of "), std::string::npos) << err;
    EXPECT_EQ(err.find("bad_alloc"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
