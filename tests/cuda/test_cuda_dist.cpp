// The GPU executor over several training processes (docs/multigpu.md "One
// step"), on one GPU:
//   - two shares' gradients at the global StepOptions::loss_norm, the penalty
//     on one of them only, sum to the whole batch's gradient (dropout on, both
//     normalizations, the frame CE, the lognormal duration chain);
//   - two "ranks" as threads with a communicator that really sums
//     (tests/cuda/thread_world.h) and the host-staged all-reduce: the global
//     gradient equals the whole batch's, the ranks end bitwise equal, and they
//     track one process with the whole batch; an empty share adds nothing;
//     a share that fails stops both ranks at that step, before any update;
//   - a world of one process (SingleCommunicator) is bitwise the executor
//     without a world, and so is the several-process path forced on through
//     either all-reduce ("mpi", and "nccl": a one-rank NCCL communicator);
//   - the reducers alone leave a one-rank buffer bitwise as it is.
// Skips without a GPU (the TIMITSEG_GPU_COLLECTIVES parsing runs everywhere).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "common/cuda_check.h"
#include "common/dist.h"
#include "model/cuda/cuda_executor.h"
#include "model/cuda/device_reducer.h"
#include "model/dist_step.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/cuda/thread_world.h"
#include "tests/support/model_problems.h"
#include "tests/support/gpu.h"

using timitseg::testsupport::small_dims;

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

// Random CRF parameters; with lognormal durations random crf.duration_lognormal rows too.
std::vector<float> params_for(const ModelDims& d, uint64_t seed) {
  std::vector<float> p = testsupport::random_model_params(d, seed, 0.5f);
  if (d.duration_lognormal) {
    const std::vector<float> ln = testsupport::random_lognormal_rows(d.num_classes, seed + 1);
    std::copy(ln.begin(), ln.end(), p.begin() + ParamLayout(d).get("crf.duration_lognormal").offset);
  }
  return p;
}

StepOptions step_options(bool frame_norm) {
  StepOptions o;
  o.lr = 1e-3;
  o.dropout = 0.3;
  o.seed = 77;
  o.clip_norm = 5.0;
  o.crf_reg = 0.05;  // large enough that a penalty counted twice shows
  o.frame_ce_weight = 0.2;
  o.frame_normalization = frame_norm;
  o.check_numerics = true;
  return o;
}

// Rows `rows` of `whole`, padded to their own longest length, naming their
// rows in the whole batch (BatchInput::share_rows). No rows: an empty share.
Batch share_of(const ModelDims& d, const Batch& whole, const std::vector<int32_t>& rows) {
  Batch s;
  const int D = d.input_dim, T0 = whole.input.T;
  s.input.B = static_cast<int>(rows.size());
  for (int32_t r : rows) s.input.T = std::max(s.input.T, whole.input.lengths[r]);
  for (int32_t r : rows) {
    const int L = whole.input.lengths[r];
    s.input.lengths.push_back(L);
    s.frames += L;
    s.ids.push_back(whole.ids[r]);
    for (int t = 0; t < s.input.T; ++t) {
      for (int k = 0; k < D; ++k) s.input.features.push_back(whole.input.features[(size_t(r) * T0 + t) * D + k]);
      s.labels.push_back(whole.labels[size_t(r) * T0 + t]);
    }
  }
  s.input.share_rows = rows;
  s.input.global_B = whole.input.B;
  s.input.global_T = T0;
  return s;
}

double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

std::unique_ptr<Executor> gpu_executor(const ModelDims& d, const std::vector<float>& params, dist::Communicator* world,
                                       std::optional<Collectives> collectives = std::nullopt) {
  ExecutorOptions xo;
  xo.threads = 2;
  xo.crf_backend = crf::BackendKind::cuda;
  xo.world = world;
  auto ex = collectives ? make_cuda_executor_with_collectives(d, xo, *collectives) : make_executor(Device::cuda, d, xo);
  AdamW opt;
  opt.reset(params.size());
  ex->set_state(params, opt);
  return ex;
}

// Two GPU executors as ranks 0 and 1 of a world of two threads (host-staged all-reduce).
struct TwoThreadRanks {
  testsupport::ThreadGroup group{2};
  testsupport::ThreadCommunicator c0{group, 0}, c1{group, 1};
  std::vector<std::unique_ptr<Executor>> ranks;
  TwoThreadRanks(const ModelDims& d, const std::vector<float>& params) {
    ranks.push_back(gpu_executor(d, params, &c0, Collectives::mpi));
    ranks.push_back(gpu_executor(d, params, &c1, Collectives::mpi));
  }
};

// (ii) share A with the penalty + share B without it, both at the global norm.
void expect_shares_sum_to_whole(bool lognormal, bool frame_norm) {
  const ModelDims d = small_dims(lognormal);
  const std::vector<float> params = params_for(d, 11);
  const Batch whole = testsupport::random_model_batch(d, 6, 41, 12);
  const StepOptions o = step_options(frame_norm);
  auto ex = gpu_executor(d, params, nullptr);
  std::vector<float> gw, ga, gb;
  const StepResult rw = ex->gradients(whole, o, gw);
  StepOptions oa = o, ob = o;
  oa.loss_norm = ob.loss_norm = step_norm(o, whole);
  ob.crf_reg = 0.0;  // what share_options gives every rank but 0
  const StepResult ra = ex->gradients(share_of(d, whole, {3, 1}), oa, ga);
  const StepResult rb = ex->gradients(share_of(d, whole, {0, 2, 4, 5}), ob, gb);
  std::vector<float> sum(gw.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = ga[i] + gb[i];
  const double rel = rel_norm_diff(sum, gw);
  const double norm = oa.loss_norm;
  const double loss = (ra.nll_sum + rb.nll_sum) / norm + ra.penalty + rb.penalty +
                      o.frame_ce_weight * (ra.frame_ce_sum + rb.frame_ce_sum) / norm;
  std::printf("[ shares ] lognormal %d frame_norm %d: gradient rel diff %.3g, loss %.9g vs %.9g\n", lognormal,
              frame_norm, rel, loss, rw.loss);
  EXPECT_LT(rel, 1e-5);
  EXPECT_NEAR(loss, rw.loss, 1e-5 * std::abs(rw.loss));
  EXPECT_EQ(rb.penalty, 0.0);
  EXPECT_NEAR(ra.penalty, rw.penalty, 1e-12 * std::max(1.0, rw.penalty));
}

TEST(CudaDist, ShareGradientsAtTheGlobalNormSumToTheWholeBatch) {
  REQUIRE_GPU();
  expect_shares_sum_to_whole(false, false);
  expect_shares_sum_to_whole(false, true);
  expect_shares_sum_to_whole(true, false);
}

// Runs f(rank) on `n` threads and rethrows the first failure.
template <class F>
void on_threads(int n, F f) {
  std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        f(r);
      } catch (...) {
        errs[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

TEST(CudaDist, TwoThreadRanksComputeTheWholeBatchStep) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const ParamLayout layout(d);
  const std::vector<float> params = params_for(d, 21);
  std::vector<Batch> batches;
  for (int k = 0; k < 3; ++k) batches.push_back(testsupport::random_model_batch(d, 5, 37 + k, 30 + k));
  const std::vector<std::vector<int32_t>> rows{{0, 3}, {1, 2, 4}};  // unequal shares
  const StepOptions base = step_options(false);

  TwoThreadRanks two(d, params);
  std::vector<std::unique_ptr<Executor>>& ranks = two.ranks;
  EXPECT_NE(ranks[0]->description().find("allreduce mpi (host-staged)"), std::string::npos) << ranks[0]->description();
  auto one = gpu_executor(d, params, nullptr);

  // The global gradient (gradients(): reduced, no update) on both ranks.
  StepOptions o = base;
  o.loss_norm = step_norm(o, batches[0]);
  std::vector<std::vector<float>> g(2);
  std::vector<StepResult> r(2);
  on_threads(2, [&](int k) { r[k] = ranks[k]->gradients(share_of(d, batches[0], rows[k]), o, g[k]); });
  std::vector<float> gw;
  const StepResult rw = one->gradients(batches[0], base, gw);
  EXPECT_EQ(0, std::memcmp(g[0].data(), g[1].data(), g[0].size() * sizeof(float))) << "the ranks' gradients differ";
  EXPECT_EQ(r[0].loss, r[1].loss);
  EXPECT_EQ(r[0].grad_norm, r[1].grad_norm);
  const double rel = rel_norm_diff(g[0], gw);
  std::printf("[ ranks ] global gradient vs the whole batch: rel %.3g; loss %.9g vs %.9g; norm %.9g vs %.9g\n", rel,
              r[0].loss, rw.loss, r[0].grad_norm, rw.grad_norm);
  EXPECT_LT(rel, 1e-5);
  EXPECT_NEAR(r[0].loss, rw.loss, 1e-5 * std::abs(rw.loss));
  EXPECT_NEAR(r[0].grad_norm, rw.grad_norm, 1e-5 * rw.grad_norm);
  EXPECT_NEAR(r[0].penalty, rw.penalty, 1e-12 * std::max(1.0, rw.penalty)) << "the penalty counts once";

  // Three updates: the ranks stay bitwise equal and track one process.
  for (size_t s = 0; s < batches.size(); ++s) {
    StepOptions os = base;
    os.step = static_cast<int64_t>(s) + 1;
    os.loss_norm = step_norm(os, batches[s]);
    on_threads(2, [&](int k) { r[k] = ranks[k]->train_step(share_of(d, batches[s], rows[k]), os); });
    StepOptions ow = base;
    ow.step = os.step;
    const StepResult w = one->train_step(batches[s], ow);
    EXPECT_EQ(r[0].loss, r[1].loss) << "step " << s;
    EXPECT_NEAR(r[0].loss, w.loss, 1e-5 * std::abs(w.loss)) << "step " << s;
  }
  std::vector<float> p0, p1, pw;
  AdamW a0, a1, aw;
  ranks[0]->get_state(p0, a0);
  ranks[1]->get_state(p1, a1);
  one->get_state(pw, aw);
  EXPECT_EQ(0, std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float))) << "the ranks' parameters differ";
  EXPECT_EQ(0, std::memcmp(a0.m.data(), a1.m.data(), a0.m.size() * sizeof(float)));
  for (const ParamInfo& p : layout.params()) {
    std::vector<float> x(p0.begin() + p.offset, p0.begin() + p.offset + p.size);
    std::vector<float> y(pw.begin() + p.offset, pw.begin() + p.offset + p.size);
    // crf.projection.bias: its gradient is 0 in exact arithmetic (the centered
    // cumsum), so rounding noise that AdamW scales to steps of about lr; any
    // two reduction orders move it differently, by at most lr per step.
    if (p.name == "crf.projection.bias") {
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 2 * 3 * base.lr) << p.name << "[" << i << "]";
      continue;
    }
    EXPECT_LT(rel_norm_diff(x, y), 1e-4) << p.name;
  }
}

TEST(CudaDist, EmptyShareAddsNothing) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const std::vector<float> params = params_for(d, 23);
  const Batch whole = testsupport::random_model_batch(d, 3, 29, 40);
  const StepOptions base = step_options(false);
  TwoThreadRanks two(d, params);
  std::vector<std::unique_ptr<Executor>>& ranks = two.ranks;
  auto one = gpu_executor(d, params, nullptr);
  StepOptions o = base;
  o.step = 1;
  o.loss_norm = step_norm(o, whole);
  // rank 0 holds every row (its share's index is the flat index), rank 1 none
  const std::vector<Batch> shares{share_of(d, whole, {0, 1, 2}), share_of(d, whole, {})};
  std::vector<std::vector<float>> g(2);
  std::vector<StepResult> r(2);
  on_threads(2, [&](int k) { r[k] = ranks[k]->gradients(shares[k], o, g[k]); });
  std::vector<float> gw;
  StepOptions ow = base;
  ow.step = 1;
  const StepResult rw = one->gradients(whole, ow, gw);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(r[k].loss, rw.loss) << "rank " << k;
    EXPECT_EQ(r[k].grad_norm, rw.grad_norm) << "rank " << k;
    size_t differ = 0;
    for (size_t i = 0; i < gw.size(); ++i) differ += g[k][i] != gw[i];  // x + 0 == x
    EXPECT_EQ(differ, 0u) << "rank " << k;
  }
  on_threads(2, [&](int k) { r[k] = ranks[k]->train_step(shares[k], o); });
  const StepResult w = one->train_step(whole, ow);
  std::vector<float> p0, p1, pw;
  AdamW a;
  ranks[0]->get_state(p0, a);
  ranks[1]->get_state(p1, a);
  one->get_state(pw, a);
  EXPECT_EQ(r[1].loss, w.loss);
  EXPECT_EQ(0, std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float)));
  size_t differ = 0;
  for (size_t i = 0; i < pw.size(); ++i) differ += p0[i] != pw[i];
  EXPECT_EQ(differ, 0u);
}

// Rank 1's share fails (a NaN planted in a weight, debug.inject_nonfinite, with
// the numeric checks on): rank 1 throws its own error, rank 0 a PeerFailure
// naming rank 1, neither waits for the other in the all-reduce, nothing is
// updated, and the next step runs on both ranks alike.
TEST(CudaDist, AFailedShareStopsEveryRankBeforeAnyUpdate) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const ParamLayout layout(d);
  const std::vector<float> params = params_for(d, 41);
  const Batch whole = testsupport::random_model_batch(d, 4, 27, 60);
  const std::vector<std::vector<int32_t>> rows{{0, 2}, {1, 3}};
  TwoThreadRanks two(d, params);
  std::vector<std::unique_ptr<Executor>>& ranks = two.ranks;
  StepOptions o = step_options(false);
  o.step = 1;
  o.loss_norm = step_norm(o, whole);
  const size_t at = layout.get("encoder.input_proj.weight").offset + 3;
  std::vector<int> kind(2, 0);  // 1: its own error, 2: dist::PeerFailure
  std::vector<std::string> what(2);
  on_threads(2, [&](int k) {
    StepOptions ok = o;
    if (k == 1) ok.poison = {{at, std::numeric_limits<float>::quiet_NaN()}};
    try {
      ranks[k]->train_step(share_of(d, whole, rows[k]), ok);
    } catch (const dist::PeerFailure& e) {
      kind[k] = 2;
      what[k] = e.what();
    } catch (const std::exception& e) {
      kind[k] = 1;
      what[k] = e.what();
    }
  });
  std::printf("[ ranks ] rank 0: %s\n[ ranks ] rank 1: %s\n", what[0].c_str(), what[1].c_str());
  EXPECT_EQ(kind[0], 2) << what[0];
  EXPECT_EQ(kind[1], 1) << what[1];
  EXPECT_NE(what[0].find("rank 1 of 2"), std::string::npos) << what[0];
  for (int k = 0; k < 2; ++k) {
    std::vector<float> p;
    AdamW a;
    ranks[k]->get_state(p, a);
    EXPECT_EQ(a.step, 0) << "rank " << k << " updated";
    EXPECT_EQ(0, std::memcmp(p.data(), params.data(), p.size() * sizeof(float))) << "rank " << k << " changed";
  }
  std::vector<StepResult> r(2);
  on_threads(2, [&](int k) { r[k] = ranks[k]->train_step(share_of(d, whole, rows[k]), o); });
  EXPECT_EQ(r[0].loss, r[1].loss);
  EXPECT_TRUE(std::isfinite(r[0].loss));
}

// Three train_steps from the same state; the parameters, moments and results.
struct StepsRun {
  std::vector<float> params, m, v;
  std::vector<double> loss, norm;
};
StepsRun three_steps(Executor& ex, const ModelDims& d) {
  StepsRun out;
  for (int s = 0; s < 3; ++s) {
    StepOptions o = step_options(s == 1);
    o.step = s + 1;
    const StepResult r = ex.train_step(testsupport::random_model_batch(d, 4, 31 + s, 50 + s), o);
    out.loss.push_back(r.loss);
    out.norm.push_back(r.grad_norm);
  }
  AdamW a;
  ex.get_state(out.params, a);
  out.m = a.m;
  out.v = a.v;
  return out;
}
void expect_bitwise(const StepsRun& a, const StepsRun& b, const std::string& what) {
  EXPECT_EQ(a.loss, b.loss) << what;
  EXPECT_EQ(a.norm, b.norm) << what;
  EXPECT_EQ(0, std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float))) << what << ": params";
  EXPECT_EQ(0, std::memcmp(a.m.data(), b.m.data(), a.m.size() * sizeof(float))) << what << ": exp_avg";
  EXPECT_EQ(0, std::memcmp(a.v.data(), b.v.data(), a.v.size() * sizeof(float))) << what << ": exp_avg_sq";
}

TEST(CudaDist, OneProcessWorldIsBitwiseTheExecutorWithoutAWorld) {
  REQUIRE_GPU();
  const ModelDims d = small_dims(true);
  const std::vector<float> params = params_for(d, 31);
  dist::SingleCommunicator single;
  auto plain = gpu_executor(d, params, nullptr);
  const StepsRun ref = three_steps(*plain, d);
  auto with_world = gpu_executor(d, params, &single);
  EXPECT_EQ(with_world->description().find("allreduce"), std::string::npos) << "one process: no all-reduce";
  expect_bitwise(three_steps(*with_world, d), ref, "world of size 1");
  auto forced_mpi = gpu_executor(d, params, &single, Collectives::mpi);
  expect_bitwise(three_steps(*forced_mpi, d), ref, "several-process path, host-staged, 1 rank");
  if (!gpu::nccl_built_in()) {
    std::printf("[ dist ] this build has no NCCL: the NCCL path is not checked\n");
    return;
  }
  auto forced_nccl = gpu_executor(d, params, &single, Collectives::nccl);
  EXPECT_NE(forced_nccl->description().find("allreduce nccl"), std::string::npos) << forced_nccl->description();
  expect_bitwise(three_steps(*forced_nccl, d), ref, "several-process path, NCCL, 1 rank");
}

TEST(CudaDist, OneRankReducersLeaveTheBufferBitwise) {
  REQUIRE_GPU();
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * double(i)) * std::pow(10.0, double(i % 11) - 5);
  x[0] = -0.0f;
  x[1] = std::numeric_limits<float>::denorm_min();
  x[2] = -std::numeric_limits<float>::max();
  dist::SingleCommunicator single;
  cudaStream_t stream = nullptr;
  TS_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<Collectives> kinds{Collectives::mpi};
  if (gpu::nccl_built_in()) kinds.push_back(Collectives::nccl);
  for (const Collectives kind : kinds) {
    auto red = gpu::make_device_reducer(single, kind);
    Buffer buf(Memory::device, 0);
    buf.upload(x, stream);
    red->allreduce_sum(buf.as<float>(), x.size(), stream);
    red->allreduce_sum(buf.as<float>(), x.size(), stream);  // twice: the second call reuses what the first made
    std::vector<float> y(x.size());
    buf.download(y.data(), y.size() * sizeof(float), stream);
    TS_CUDA(cudaStreamSynchronize(stream));
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << red->name();
  }
  cudaStreamDestroy(stream);
}

TEST(CudaDist, CollectivesFromTheEnvironment) {
  const char* old = std::getenv("TIMITSEG_GPU_COLLECTIVES");
  const std::string saved = old ? old : "";
  unsetenv("TIMITSEG_GPU_COLLECTIVES");
  EXPECT_EQ(gpu::collectives_from_environment(), gpu::nccl_built_in() ? Collectives::nccl : Collectives::mpi);
  setenv("TIMITSEG_GPU_COLLECTIVES", "mpi", 1);
  EXPECT_EQ(gpu::collectives_from_environment(), Collectives::mpi);
  setenv("TIMITSEG_GPU_COLLECTIVES", "nccl", 1);
  EXPECT_EQ(gpu::collectives_from_environment(), Collectives::nccl);
  setenv("TIMITSEG_GPU_COLLECTIVES", "gloo", 1);
  try {
    gpu::collectives_from_environment();
    ADD_FAILURE() << "'gloo' must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TIMITSEG_GPU_COLLECTIVES must be 'nccl' or 'mpi', got 'gloo'"),
              std::string::npos)
        << e.what();
  }
  if (old)
    setenv("TIMITSEG_GPU_COLLECTIVES", saved.c_str(), 1);
  else
    unsetenv("TIMITSEG_GPU_COLLECTIVES");
}

}  // namespace
