// A full disk during a checkpoint, a metrics.jsonl line or a prepared-cache
// write (docs/reliability.md): the command prints one `error:` line naming the
// file and "no space left on device", exits 1, and leaves the previous
// checkpoint / metrics.jsonl / cache as they were, loadable (checksums
// verified); a rerun then finishes with the uninterrupted result.
// FullDisk.*: ENOSPC injected through the test-only hook of
// common/atomic_file.h (TIMITSEG_TEST_ENOSPC_AFTER_BYTES, _PATH).
// FullDiskTmpfs.*: a real, small tmpfs mounted in a user namespace
// (`unshare -rm`); skipped where the machine does not allow it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/safetensors.h"
#include "data/dataset.h"
#include "model/checkpoint.h"

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::sh;
using testsupport::slurp;
std::string bin() { return TIMITSEG_BINARY; }
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }
// The hook's environment for one command.
std::string enospc(long long after_bytes, const std::string& path_part) {
  return "env TIMITSEG_TEST_ENOSPC_AFTER_BYTES=" + std::to_string(after_bytes) +
         (path_part.empty() ? std::string() : " TIMITSEG_TEST_ENOSPC_PATH=" + path_part) + " ";
}

// {relative path: bytes} of every file under ROOT, hidden ones included.
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = slurp(e.path());
  return out;
}

std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("error:", 0) == 0) out.push_back(line);
  return out;
}

// One `error:` line, naming FILE and the full disk.
void expect_enospc_error(const Cmd& c, const fs::path& file) {
  EXPECT_EQ(c.rc, 1) << c.output;
  const auto errs = error_lines(c.output);
  ASSERT_EQ(errs.size(), 1u) << c.output;
  EXPECT_EQ(errs[0].rfind("error: " + file.string() + ": cannot write: no space left on device", 0), 0u) << errs[0];
}

void expect_same_tensors(const fs::path& want, const fs::path& got) {
  const st::File a = st::load(want.string()), b = st::load(got.string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << got;
  for (const auto& [name, t] : a.tensors) {
    ASSERT_TRUE(b.has(name)) << got << ": " << name;
    EXPECT_EQ(t.bytes, b.get(name).bytes) << got << ": tensor " << name << " differs";
  }
}

std::vector<int> metrics_epochs(const fs::path& run) {
  std::vector<int> out;
  std::istringstream in(slurp(run / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("epoch").get<int>());
  return out;
}

// No temporary (NAME.tmp.PID.N) or staging folder anywhere under ROOT.
void expect_no_temporaries(const fs::path& root) {
  for (const auto& e : fs::recursive_directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
}

class FullDisk : public ::testing::Test {
 protected:
  static fs::path dir_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_full_disk");
    Cmd s = sh(bin() + " synth --out " + q(dir_ / "synth") + " --speakers 6 --utterances-per-speaker 3 --seed 5");
    ASSERT_EQ(s.rc, 0) << s.output;
    Cmd p = sh(bin() + " prepare --no-progress --timit " + q(dir_ / "synth") + " --out " + q(dir_ / "work"));
    ASSERT_EQ(p.rc, 0) << p.output;
    std::ofstream(dir_ / "tiny.yaml") << "data:\n  workdir: " << (dir_ / "work").string()
                                      << "\nmodel:\n  hidden_dim: 8\n  num_layers: 1\n"
                                         "crf:\n  max_duration: 8\n"
                                         "train:\n  epochs: 2\n  batch_size: 4\n  seed: 3\n  threads: 1\n";
    Cmd t = train_cmd(dir_ / "run_ref");
    ASSERT_EQ(t.rc, 0) << t.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static Cmd train_cmd(const fs::path& run, const std::string& env = "") {
    return sh(env + bin() + " train --config " + q(dir_ / "tiny.yaml") + " --set train.run_dir=" + run.string());
  }
};
fs::path FullDisk::dir_;

}  // namespace

TEST_F(FullDisk, HookOffByDefaultAndBadValueIsAnError) {
  Cmd bad = sh("env TIMITSEG_TEST_ENOSPC_AFTER_BYTES=lots " + bin() + " train --config " + q(dir_ / "tiny.yaml") +
               " --set train.run_dir=" + (dir_ / "run_bad").string());
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_NE(bad.output.find("TIMITSEG_TEST_ENOSPC_AFTER_BYTES must be a byte count (a test-only variable; unset it), got 'lots'"), std::string::npos)
      << bad.output;
}

// The epoch-2 checkpoint hits a full disk: epoch 1's checkpoint stays intact
// and loadable, no epoch-2 file or temporary is left, --resume then finishes
// with the uninterrupted run's tensors.
TEST_F(FullDisk, CheckpointWriteFailsCleanlyAndResumeFinishes) {
  const fs::path run = dir_ / "run_ckpt";
  Cmd t = train_cmd(run, enospc(100, "epoch-2.safetensors"));
  expect_enospc_error(t, run / "checkpoints" / "epoch-2.safetensors");
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "epoch-2.safetensors"));
  expect_no_temporaries(run);
  const fs::path e1 = run / "checkpoints" / "epoch-1.safetensors";
  EXPECT_NO_THROW(model::load_checkpoint(e1.string()));  // tensor checksum and ranges verified
  expect_same_tensors(dir_ / "run_ref" / "checkpoints" / "epoch-1.safetensors", e1);
  Cmd r = sh(bin() + " train --resume " + q(run));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(metrics_epochs(run), (std::vector<int>{1, 2}));
  expect_same_tensors(dir_ / "run_ref" / "checkpoints" / "epoch-2.safetensors", run / "checkpoints" / "epoch-2.safetensors");
}

// The metrics.jsonl line of epoch 2 hits a full disk: metrics.jsonl keeps its
// epoch-1 line, no epoch-2 checkpoint is written, and --resume finishes.
TEST_F(FullDisk, MetricsLineFailsCleanlyAndResumeFinishes) {
  // metrics.jsonl is rewritten whole per epoch: epoch 1 writes L1 bytes, epoch
  // 2 L1 + L2 (about L1): a budget of 1.5 L1 fails in the middle of epoch 2's.
  const std::string ref_metrics = slurp(dir_ / "run_ref" / "metrics.jsonl");
  const long long l1 = static_cast<long long>(ref_metrics.find('\n') + 1);
  const fs::path run = dir_ / "run_metrics";
  Cmd t = train_cmd(run, enospc(l1 + l1 / 2, "metrics.jsonl"));
  expect_enospc_error(t, run / "metrics.jsonl");
  EXPECT_EQ(metrics_epochs(run), (std::vector<int>{1}));
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "epoch-2.safetensors"));
  expect_no_temporaries(run);
  EXPECT_NO_THROW(model::load_checkpoint((run / "checkpoints" / "epoch-1.safetensors").string()));
  Cmd r = sh(bin() + " train --resume " + q(run));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(metrics_epochs(run), (std::vector<int>{1, 2}));
  expect_same_tensors(dir_ / "run_ref" / "checkpoints" / "epoch-2.safetensors", run / "checkpoints" / "epoch-2.safetensors");
}

// prepare --force over a complete WORKDIR hits a full disk while writing
// train.safetensors, and with no path filter at its very first write: the
// error names the WORKDIR file, and the previous cache is byte for byte as it
// was and loads (checksums verified).
TEST_F(FullDisk, CacheWriteFailsAndLeavesThePreviousCache) {
  const fs::path work = dir_ / "work_copy";
  fs::remove_all(work);
  fs::copy(dir_ / "work", work, fs::copy_options::recursive);
  const auto before = tree(work);
  const std::string prep = bin() + " prepare --no-progress --force --timit " + q(dir_ / "synth") + " --out " + q(work);
  Cmd p = sh(enospc(1000, "train.safetensors") + prep);
  expect_enospc_error(p, work / "train.safetensors");
  EXPECT_EQ(tree(work), before) << "the previous cache changed";
  EXPECT_NO_THROW(data::load_split(work.string(), "train"));
  EXPECT_NO_THROW(data::load_cmvn(work.string()));
  Cmd p0 = sh(enospc(0, "") + prep);
  EXPECT_EQ(p0.rc, 1) << p0.output;
  ASSERT_EQ(error_lines(p0.output).size(), 1u) << p0.output;
  EXPECT_NE(p0.output.find(work.string() + "/"), std::string::npos) << p0.output;
  EXPECT_NE(p0.output.find(": cannot write: no space left on device"), std::string::npos) << p0.output;
  EXPECT_EQ(tree(work), before) << "the previous cache changed";
  // with space again, the same command rebuilds the same cache
  Cmd ok = sh(prep);
  ASSERT_EQ(ok.rc, 0) << ok.output;
  EXPECT_EQ(tree(work), before);
}

// A real full disk: a tmpfs a little larger than the files already there,
// mounted in a private user + mount namespace (`unshare -rm`). What is left on
// it is copied out before the namespace (and the mount) goes away.
TEST_F(FullDisk, RealTmpfsCheckpointAndCache) {
  if (sh("unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs " + q(dir_) + " && umount " + q(dir_) + "'").rc != 0)
    GTEST_SKIP() << "unshare -rm cannot mount a tmpfs on this machine (no user namespaces); the injected-ENOSPC "
                    "tests above cover the same code paths";
  // train: the run folder after epoch 1 of the reference run, epochs 1 -> 2 by
  // --resume, on a disk with 8 KiB to spare (a checkpoint is larger)
  const fs::path run1 = dir_ / "run_epoch1", mnt = dir_ / "mnt", out = dir_ / "after_tmpfs";
  fs::remove_all(run1);
  fs::remove_all(out);
  fs::create_directories(mnt);
  Cmd t1 = sh(bin() + " train --config " + q(dir_ / "tiny.yaml") + " --set train.epochs=1 --set train.run_dir=" +
              (mnt / "run").string());  // written here, moved below: the run folder's path is inside the mount
  ASSERT_EQ(t1.rc, 0) << t1.output;
  fs::rename(mnt / "run", run1);
  uint64_t used = 0;
  for (const auto& e : fs::recursive_directory_iterator(run1))
    if (e.is_regular_file()) used += (fs::file_size(e.path()) + 4095) / 4096 * 4096;
  const uint64_t size = used + 8192 + 4096 * 4;  // folders take a page each
  const std::string script =
      "mount -t tmpfs -o size=" + std::to_string(size) + " tmpfs " + q(mnt) + " && cp -r " + q(run1) + " " +
      q(mnt / "run") + " && { " + bin() + " train --resume " + q(mnt / "run") + " --set train.epochs=2 > " +
      q(dir_ / "tmpfs_train.log") + " 2>&1; echo \\$? > " + q(dir_ / "tmpfs_train.rc") + "; cp -r " + q(mnt / "run") +
      " " + q(out) + "; }";
  Cmd u = sh("unshare -rm sh -c \"" + script + "\"");
  ASSERT_EQ(u.rc, 0) << u.output;
  Cmd t{std::stoi(slurp(dir_ / "tmpfs_train.rc")), slurp(dir_ / "tmpfs_train.log")};
  EXPECT_EQ(t.rc, 1) << t.output;
  ASSERT_EQ(error_lines(t.output).size(), 1u) << t.output;
  EXPECT_NE(t.output.find(": cannot write: no space left on device"), std::string::npos) << t.output;
  EXPECT_FALSE(fs::exists(out / "checkpoints" / "epoch-2.safetensors"));
  expect_no_temporaries(out);
  EXPECT_EQ(slurp(out / "checkpoints" / "epoch-1.safetensors"), slurp(run1 / "checkpoints" / "epoch-1.safetensors"));
  EXPECT_NO_THROW(model::load_checkpoint((out / "checkpoints" / "epoch-1.safetensors").string()));
  EXPECT_EQ(metrics_epochs(out).size() <= 2u, true);

  // prepare --force over a complete WORKDIR with 8 KiB to spare (staging needs
  // a whole second copy): fails, the previous cache is left as it was
  const fs::path outw = dir_ / "work_after_tmpfs";
  fs::remove_all(outw);
  uint64_t wused = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "work"))
    if (e.is_regular_file()) wused += (fs::file_size(e.path()) + 4095) / 4096 * 4096;
  const std::string pscript =
      "mount -t tmpfs -o size=" + std::to_string(wused + 8192 + 4096 * 4) + " tmpfs " + q(mnt) + " && cp -r " +
      q(dir_ / "work") + " " + q(mnt / "work") + " && { " + bin() + " prepare --no-progress --force --timit " +
      q(dir_ / "synth") + " --out " + q(mnt / "work") + " > " + q(dir_ / "tmpfs_prep.log") + " 2>&1; echo \\$? > " +
      q(dir_ / "tmpfs_prep.rc") + "; cp -r " + q(mnt / "work") + " " + q(outw) + "; }";
  Cmd up = sh("unshare -rm sh -c \"" + pscript + "\"");
  ASSERT_EQ(up.rc, 0) << up.output;
  Cmd p{std::stoi(slurp(dir_ / "tmpfs_prep.rc")), slurp(dir_ / "tmpfs_prep.log")};
  EXPECT_EQ(p.rc, 1) << p.output;
  ASSERT_EQ(error_lines(p.output).size(), 1u) << p.output;
  EXPECT_NE(p.output.find(": cannot write: no space left on device"), std::string::npos) << p.output;
  EXPECT_EQ(p.output.find(".staging.tmp."), std::string::npos) << "names the staging folder: " << p.output;
  EXPECT_EQ(tree(outw), tree(dir_ / "work")) << "the previous cache changed";
}
