// Training on several processes, the parts that need no MPI (docs/multigpu.md):
// the share of a global batch, the launcher's environment, the single-process
// communicator, and the CPU executor's gradient of a batch split by hand into
// two ranks' shares, against the whole batch's (the oracle: one process).
// The multi-process runs themselves are tests/dist/dist_cpu.py (mpirun).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "common/dist.h"
#include "model/dist_step.h"
#include "model/executor.h"
#include "model/make_executor.h"
#include "model/params.h"
#include "tests/support/model_problems.h"
#include "train/batches.h"
#include "train/distributed.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;
using namespace timitseg::train;

namespace {

std::vector<int32_t> random_lengths(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> l(n);
  for (int32_t& x : l) x = 50 + static_cast<int32_t>(rng() % 500);
  return l;
}

}  // namespace

TEST(ShardOfBatch, PartitionsTheBatchEvenlyAndDeterministically) {
  const std::vector<int32_t> lengths = random_lengths(200, 1);
  for (int size : {1, 2, 3, 4, 8}) {
    for (int B : {8, 13, 32, 33}) {
      std::vector<int> batch(B);
      for (int i = 0; i < B; ++i) batch[i] = (i * 37 + 11) % 200;  // distinct utterances, not sorted
      std::set<int> all;
      int64_t min_frames = INT64_MAX, max_frames = 0;
      size_t min_n = SIZE_MAX, max_n = 0;
      int32_t longest = 0;
      for (int i : batch) longest = std::max(longest, lengths[i]);
      std::vector<int32_t> sorted_len;
      for (int i : batch) sorted_len.push_back(lengths[i]);
      std::sort(sorted_len.rbegin(), sorted_len.rend());
      for (int r = 0; r < size; ++r) {
        const std::vector<int> share = shard_of_batch(batch, lengths, r, size);
        EXPECT_EQ(share, shard_of_batch(batch, lengths, r, size));  // a pure function
        EXPECT_TRUE(std::is_sorted(share.begin(), share.end()));   // batch order kept
        int64_t frames = 0;
        int32_t my_longest = 0;
        for (int p : share) {
          EXPECT_TRUE(all.insert(p).second) << "position " << p << " in two shares";
          frames += lengths[batch[p]];
          my_longest = std::max(my_longest, lengths[batch[p]]);
        }
        // every rank holds one of the `size` longest utterances (the snake's first round)
        EXPECT_GE(my_longest, sorted_len[size - 1]) << "rank " << r << " of " << size;
        min_frames = std::min(min_frames, frames);
        max_frames = std::max(max_frames, frames);
        min_n = std::min(min_n, share.size());
        max_n = std::max(max_n, share.size());
      }
      EXPECT_EQ(all.size(), static_cast<size_t>(B));  // the shares cover the batch
      EXPECT_LE(max_n - min_n, 1u);
      EXPECT_LE(max_frames - min_frames, longest) << "B " << B << " size " << size;
    }
  }
}

TEST(ShardOfBatch, FewerUtterancesThanRanksLeaveEmptyShares) {
  const std::vector<int32_t> lengths = {100, 300, 200};
  const std::vector<int> batch = {2, 0};
  EXPECT_EQ(shard_of_batch(batch, lengths, 0, 3), std::vector<int>({0}));  // the longest (200) on rank 0
  EXPECT_EQ(shard_of_batch(batch, lengths, 1, 3), std::vector<int>({1}));
  EXPECT_TRUE(shard_of_batch(batch, lengths, 2, 3).empty());
  EXPECT_THROW(shard_of_batch(batch, lengths, 3, 3), std::invalid_argument);
}

TEST(ShareOfBatch, GlobalShapeAndFramesWithAndWithoutFixedLength) {
  const std::vector<int32_t> lengths = {100, 300, 200, 50};
  const std::vector<int> batch = {3, 1, 2};
  dist::SingleCommunicator one;
  const BatchShare s = share_of_batch(batch, lengths, 0, one);
  EXPECT_EQ(s.utts, batch);
  EXPECT_EQ(s.rows, std::vector<int32_t>({0, 1, 2}));
  EXPECT_EQ(s.global_B, 3);
  EXPECT_EQ(s.global_T, 300);
  EXPECT_EQ(s.global_frames, 550);
  const BatchShare f = share_of_batch(batch, lengths, 120, one);
  EXPECT_EQ(f.global_T, 120);
  EXPECT_EQ(f.global_frames, 360);
}

TEST(DetectLaunch, ReadsEachLaunchersVariables) {
  auto from = [](std::map<std::string, std::string> env) {
    return dist::detect_launch([env](const char* n) -> const char* {
      auto it = env.find(n);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  const dist::Launch none = from({});
  EXPECT_EQ(none.launcher, dist::Launcher::none);
  EXPECT_EQ(none.size, 1);
  EXPECT_EQ(none.rank, 0);
  const dist::Launch m = from({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(m.launcher, dist::Launcher::mpirun);
  EXPECT_EQ(m.size, 4);
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.local_rank, 1);
  EXPECT_EQ(m.local_size, 2);
  const dist::Launch s = from({{"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "16"}, {"SLURM_PROCID", "9"},
                               {"SLURM_LOCALID", "1"}, {"LOCAL_RANK", "5"}});
  EXPECT_EQ(s.launcher, dist::Launcher::srun);
  EXPECT_EQ(s.size, 16);
  EXPECT_EQ(s.rank, 9);
  EXPECT_EQ(s.local_rank, 5);  // LOCAL_RANK: the user's override
  // an allocation's shell (no step) is not a launch
  EXPECT_EQ(from({{"SLURM_NTASKS", "16"}, {"SLURM_PROCID", "0"}}).launcher, dist::Launcher::none);
  const dist::Launch p = from({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}});
  EXPECT_EQ(p.launcher, dist::Launcher::pmi);
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_SIZE", "x"}}).size, 1);  // garbage: one process
}

TEST(LocalDevice, OneGpuPerLocalRank) {
  dist::Launch l;
  l.rank = 9;
  l.local_rank = 1;
  l.host = "node1";
  EXPECT_EQ(dist::local_device(l, 1), 0);  // srun --gpus-per-task=1: the one visible device
  EXPECT_EQ(dist::local_device(l, 8), 1);
  l.local_rank = 8;
  try {
    dist::local_device(l, 8);
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 9 (local rank 8 on node1): 8 GPUs visible"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dist::local_device(l, 0), std::runtime_error);
}

TEST(SingleCommunicator, CollectivesLeaveTheDataAndAgreeRunsOnce) {
  dist::SingleCommunicator one;
  EXPECT_EQ(one.size(), 1);
  float f[2] = {1.5f, -2.f};
  one.allreduce_sum(f, 2, "test");
  EXPECT_EQ(f[1], -2.f);
  EXPECT_EQ(one.allgather("x", "test"), std::vector<std::string>({"x"}));
  int calls = 0;
  dist::agree(one, "test", [&] { ++calls; });
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(dist::agree(one, "test", [] { throw std::runtime_error("boom"); }), std::runtime_error);
  EXPECT_EQ(dist::world().size(), 1);  // no launcher in the test's environment
  const std::vector<float> a = {1, 2, 3}, b = {1, 2, 3.0001f};
  EXPECT_NE(dist::fingerprint(a.data(), 12), dist::fingerprint(b.data(), 12));
  EXPECT_EQ(dist::fingerprint(a.data(), 12), dist::fingerprint(std::vector<float>(a).data(), 12));
}

TEST(InjectExit, ParsesRankStepAction) {
  const InjectExit x = InjectExit::parse("1:5:kill");
  EXPECT_EQ(x.rank, 1);
  EXPECT_EQ(x.step, 5);
  EXPECT_EQ(x.action, config::ExitAction::kill);
  EXPECT_EQ(InjectExit::parse("0:2:throw").action, config::ExitAction::throw_exception);
  EXPECT_FALSE(x.all);
  const InjectExit a = InjectExit::parse("all:3:hang");
  EXPECT_TRUE(a.all);
  EXPECT_EQ(a.rank, 0);
  EXPECT_EQ(a.step, 3);
  EXPECT_EQ(a.action, config::ExitAction::hang);
  for (const char* bad : {"", "1:5", "1:0:throw", "a:5:throw", "1:5:explode", "-1:5:hang", "1:5x:throw"})
    EXPECT_LT(InjectExit::parse(bad).rank, 0) << bad;
}

namespace {

// Rows `rows` of a whole batch as their own batch (padded to their longest),
// marked as the share of a global batch of whole.input.B rows.
Batch share_batch(const Batch& whole, const std::vector<int>& rows, int D) {
  Batch s;
  const int T = whole.input.T;
  s.input.B = static_cast<int>(rows.size());
  for (int r : rows) s.input.T = std::max(s.input.T, whole.input.lengths[r]);
  const int Ts = s.input.T;
  for (int r : rows) {
    s.input.lengths.push_back(whole.input.lengths[r]);
    s.frames += whole.input.lengths[r];
    s.ids.push_back(whole.ids[r]);
    for (int t = 0; t < Ts; ++t) {
      for (int k = 0; k < D; ++k)
        s.input.features.push_back(whole.input.features[(static_cast<size_t>(r) * T + t) * D + k]);
      s.labels.push_back(whole.labels[static_cast<size_t>(r) * T + t]);
    }
    s.input.share_rows.push_back(r);
  }
  s.input.global_B = whole.input.B;
  s.input.global_T = T;
  return s;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b, size_t off, size_t n) {
  double d = 0, r = 0;
  for (size_t i = off; i < off + n; ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d) / std::max(1e-30, std::sqrt(r));
}

}  // namespace

// The heart of the design: two ranks' shares, each with the global loss
// normalization, the penalty on rank 0 only and the global batch's dropout
// masks, give gradients that sum to the whole batch's; each rank's engine
// ends where one process's does.
TEST(CpuExecutorShares, TwoSharesSumToTheWholeBatch) {
  ModelDims d;
  d.input_dim = 6;
  d.hidden_dim = 16;
  d.num_layers = 2;
  d.num_classes = 5;
  d.max_duration = 4;
  const ParamLayout lay(d);
  const std::vector<float> params = testsupport::random_model_params(d, 7, 0.3f);
  const Batch whole = testsupport::random_model_batch(d, 5, 24, 11);
  std::vector<int32_t> lengths = whole.input.lengths;
  std::vector<int> idx(whole.input.B);
  std::iota(idx.begin(), idx.end(), 0);
  for (bool frame_norm : {false, true}) {
    StepOptions o;
    o.dropout = 0.3;
    o.crf_reg = 0.05;
    o.frame_normalization = frame_norm;
    o.frame_ce_weight = 0.2;
    o.step = 3;
    ExecutorOptions xo;
    xo.threads = 2;
    auto ex = make_executor(Device::cpu, d, xo);
    AdamW opt;
    opt.reset(params.size());
    ex->set_state(params, opt);
    std::mt19937_64 rng_whole(42);
    o.rng = &rng_whole;
    std::vector<float> g_whole;
    const StepResult r_whole = ex->gradients(whole, o, g_whole);

    StepOptions so = o;
    so.loss_norm = frame_norm ? double(whole.frames) : double(whole.input.B);
    std::vector<float> g_sum(g_whole.size(), 0.f);
    double nll = 0, ce = 0, pen = 0;
    for (int rank = 0; rank < 2; ++rank) {
      const std::vector<int> pos = shard_of_batch(idx, lengths, rank, 2);
      const Batch share = share_batch(whole, pos, d.input_dim);
      std::mt19937_64 rng(42);
      StepOptions ro = so;
      ro.rng = &rng;
      if (rank != 0) ro.crf_reg = 0.0;  // share_options: the penalty once
      std::vector<float> g;
      const StepResult r = ex->gradients(share, ro, g);
      for (size_t i = 0; i < g.size(); ++i) g_sum[i] += g[i];
      nll += r.nll_sum;
      ce += r.frame_ce_sum;
      pen += r.penalty;
      EXPECT_TRUE(rng == rng_whole) << "rank " << rank << ": the engine must advance as one process's";
    }
    EXPECT_NEAR(nll, r_whole.nll_sum, 1e-9 * std::abs(r_whole.nll_sum));
    EXPECT_NEAR(ce, r_whole.frame_ce_sum, 1e-9 * std::abs(r_whole.frame_ce_sum));
    EXPECT_DOUBLE_EQ(pen, r_whole.penalty);
    for (const ParamInfo& p : lay.params())
      EXPECT_LT(rel_diff(g_sum, g_whole, p.offset, p.size), 1e-6) << p.name << (frame_norm ? " (frame)" : "");
  }
}

TEST(CpuExecutorShares, ABadShareMappingIsRefused) {
  ModelDims d;
  d.input_dim = 3;
  d.hidden_dim = 8;
  d.num_layers = 1;
  d.num_classes = 4;
  d.max_duration = 2;
  const std::vector<float> params = testsupport::random_model_params(d, 1);
  Batch b = testsupport::random_model_batch(d, 2, 10, 2);
  b.input.share_rows = {0, 0};  // one global row twice
  b.input.global_B = 4;
  b.input.global_T = 10;
  ExecutorOptions xo;
  xo.threads = 1;
  auto ex = make_executor(Device::cpu, d, xo);
  AdamW opt;
  ex->set_state(params, opt);
  StepOptions o;
  std::mt19937_64 rng(1);
  o.dropout = 0.1;
  o.rng = &rng;
  std::vector<float> g;
  EXPECT_THROW(ex->gradients(b, o, g), std::invalid_argument);
}

TEST(ThreadsOfRank, RanksOnOneNodeShareItsCores) {
  dist::Launch one;
  EXPECT_EQ(threads_of_rank(0, one), 0);  // one process: all cores, as before
  EXPECT_EQ(threads_of_rank(3, one), 3);
  dist::Launch l;
  l.size = 4;
  l.local_size = 2;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(threads_of_rank(0, l), std::max(1, cores / 2));
  EXPECT_EQ(threads_of_rank(5, l), 5);  // an explicit train.threads wins
  l.local_size = 4 * cores;             // more ranks than cores: one thread each
  EXPECT_EQ(threads_of_rank(0, l), 1);
}
