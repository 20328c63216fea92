// The checkpointed backward of the cuda backend (docs/crf.md "The backward in
// bounded memory (checkpointed)", forced at small T by
// TIMITSEG_CUDA_CHECKPOINT=always) against the full-table path
// (TIMITSEG_CUDA_CHECKPOINT=never), bit for bit: log Z, gold, every gradient
// (cum_scores, transition, duration, start, end, onset), the boundary
// posteriors, Viterbi and span marginals; and against the float64 reference
// backend (crf/reference). Shapes: K = 1, K < T, K > T, padded batches
// (random lengths, NaN padding), onset scores, both fast-recurrence variants
// (K <= 64: unrolled; K > 64: generic), several blocks per window, blocks
// that end inside segments (the labels' runs are longer than a block), and a
// long utterance. The workspace at B 1 T 100k K 60 C 39 is checked against the
// issue's bound. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"

namespace timitseg::crf::testing {
namespace {

std::unique_ptr<Backend> backend_with(const char* checkpoint) {
  setenv("TIMITSEG_CUDA_CHECKPOINT", checkpoint, 1);
  auto be = make_backend(BackendKind::cuda);  // reads the knob when constructed
  unsetenv("TIMITSEG_CUDA_CHECKPOINT");
  return be;
}

template <class V>
void expect_bitwise(const V& got, const V& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(got[0]))) << what << " differs";
}

// Every span (start, duration <= 2 K, label) of each utterance, durations past
// K included (their score reads gamma rows outside the start's window).
void span_queries(const Problem& p, int64_t Q, std::vector<int32_t>& queries, std::vector<int32_t>& nq) {
  const int64_t B = p.dims.B, C = p.dims.C, K = p.dims.K;
  queries.assign(static_cast<size_t>(B * Q * 3), 0);
  nq.assign(static_cast<size_t>(B), 0);
  std::mt19937 rng(static_cast<uint32_t>(B * 7919 + p.dims.T));
  for (int64_t b = 0; b < B; ++b) {
    const int32_t L = p.lengths[b];
    for (int64_t i = 0; i < Q; ++i) {
      const int32_t s = static_cast<int32_t>(rng() % static_cast<uint32_t>(L));
      const int32_t most = std::min<int32_t>(L - s, static_cast<int32_t>(2 * K));
      int32_t* q = queries.data() + (b * Q + i) * 3;
      q[0] = s;
      q[1] = i % 7 == 0 ? 0 : 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(most));
      q[2] = static_cast<int32_t>(rng() % static_cast<uint32_t>(C));
    }
    nq[b] = static_cast<int32_t>(Q - b % 2);  // rows past nq: 0
  }
}

struct Cfg {
  int64_t B, T, K, C;
  bool onset;
};

void expect_checkpointed_equals_full(const Problem& p, Backend& ck, Backend& full, Backend& ref) {
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  opt.scale = 1.0 / static_cast<double>(p.dims.B);
  for (const bool labels : {true, false}) {
    SCOPED_TRACE(labels ? "with labels" : "without labels");
    const int32_t* lab = labels ? p.labels.data() : nullptr;
    const HostResult c = run_host(ck, p.dims, p.params(), lab, opt);
    const HostResult f = run_host(full, p.dims, p.params(), lab, opt);
    expect_bitwise(c.log_z, f.log_z, "log Z");
    expect_bitwise(c.gold, f.gold, "gold");
    expect_bitwise(c.grad_cum_scores, f.grad_cum_scores, "grad cum_scores");
    expect_bitwise(c.grad_transition, f.grad_transition, "grad transition");
    expect_bitwise(c.grad_duration_bias, f.grad_duration_bias, "grad duration_bias");
    expect_bitwise(c.grad_start, f.grad_start, "grad start");
    expect_bitwise(c.grad_end, f.grad_end, "grad end");
    expect_bitwise(c.grad_onset, f.grad_onset, "grad onset");
    expect_bitwise(c.boundary_posteriors, f.boundary_posteriors, "boundary posteriors");
    expect_bitwise(c.viterbi_score, f.viterbi_score, "viterbi score");
    EXPECT_TRUE(c.segments == f.segments) << "viterbi segments";
    // The float64 oracle (the reference backend's recurrences).
    const HostResult r = run_host(ref, p.dims, p.params(), lab, opt);
    EXPECT_LT(rel_err(c.log_z, r.log_z), 1e-9);
    EXPECT_LT(rel_err(c.grad_cum_scores, r.grad_cum_scores), 1e-5);
    EXPECT_LT(rel_err(c.grad_transition, r.grad_transition), 1e-5);
    EXPECT_LT(rel_err(c.grad_duration_bias, r.grad_duration_bias), 1e-5);
    EXPECT_LT(rel_err(c.grad_start, r.grad_start), 1e-5);
    EXPECT_LT(rel_err(c.grad_end, r.grad_end), 1e-5);
    if (!r.grad_onset.empty()) EXPECT_LT(rel_err(c.grad_onset, r.grad_onset), 1e-5);
    EXPECT_LT(rel_err(c.boundary_posteriors, r.boundary_posteriors), 1e-8);
    EXPECT_LT(rel_err(c.viterbi_score, r.viterbi_score), 1e-10);
  }
  const int64_t Q = 40;
  std::vector<int32_t> queries, nq;
  span_queries(p, Q, queries, nq);
  const SpanMarginalResult sc = span_marginals_host(ck, p.dims, p.params(), Q, queries.data(), nq.data());
  const SpanMarginalResult sf = span_marginals_host(full, p.dims, p.params(), Q, queries.data(), nq.data());
  const SpanMarginalResult sr = span_marginals_host(ref, p.dims, p.params(), Q, queries.data(), nq.data());
  expect_bitwise(sc.marginal, sf.marginal, "span marginals");
  expect_bitwise(sc.log_z, sf.log_z, "span marginals' log Z");
  EXPECT_LT(rel_err(sc.marginal, sr.marginal), 1e-8) << "span marginals against the reference";
}

TEST(CudaCheckpoint, EqualsTheFullTablesAndTheReference) {
  SKIP_WITHOUT_GPU();
  auto ck = backend_with("always");
  auto full = backend_with("never");
  auto ref = make_backend(BackendKind::reference);
  uint64_t seed = 4400;
  // Blocks (W positions, P per window) from the dims: {3,40,1,5}: W 14;
  // {1,300,2,5}: W 32, 10 blocks; {3,1000,4,9}: W 64, 16 blocks;
  // {1,3000,2,5}: W 80, 38 blocks, 3 a window; {2,300,20,39}: W 80;
  // {1,900,60,39}: W 240; {2,400,70,20}: K > 64 (the generic kernel).
  for (const Cfg& c : std::vector<Cfg>{{1, 1, 1, 1, false},
                                       {3, 40, 1, 5, false},
                                       {3, 5, 9, 3, true},
                                       {4, 60, 8, 7, true},
                                       {1, 300, 2, 5, false},
                                       {3, 1000, 4, 9, true},
                                       {2, 300, 20, 39, false},
                                       {8, 200, 30, 39, true},
                                       {1, 3000, 2, 5, false},
                                       {1, 900, 60, 39, true},
                                       {2, 400, 70, 20, false}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C
                                      << " onset=" << c.onset);
    Problem p = make_problem(c.B, c.T, c.K, c.C, ++seed);
    if (c.onset) add_onset(p, static_cast<uint32_t>(seed), 2.0, false, /*poison_padding=*/true);
    expect_checkpointed_equals_full(p, *ck, *full, *ref);
  }
}

// A long utterance (T = 20000, K = 60: blocks of 1080 positions, 19 windows,
// label runs of up to 4 K), every chunk of the parameter gradients spread
// over the windows.
TEST(CudaCheckpoint, LongUtteranceEqualsTheFullTables) {
  SKIP_WITHOUT_GPU();
  auto ck = backend_with("always");
  auto full = backend_with("never");
  Options o;
  o.vary_lengths = false;
  o.max_run = 240;
  const Problem p = make_problem(1, 20000, 60, 39, 4500, o);
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  const HostResult c = run_host(*ck, p.dims, p.params(), p.labels.data(), opt);
  const HostResult f = run_host(*full, p.dims, p.params(), p.labels.data(), opt);
  expect_bitwise(c.log_z, f.log_z, "log Z");
  expect_bitwise(c.grad_cum_scores, f.grad_cum_scores, "grad cum_scores");
  expect_bitwise(c.grad_transition, f.grad_transition, "grad transition");
  expect_bitwise(c.grad_duration_bias, f.grad_duration_bias, "grad duration_bias");
  expect_bitwise(c.grad_start, f.grad_start, "grad start");
  expect_bitwise(c.grad_end, f.grad_end, "grad end");
  expect_bitwise(c.boundary_posteriors, f.boundary_posteriors, "boundary posteriors");
  EXPECT_TRUE(c.segments == f.segments) << "viterbi segments";
}

// The shape: the workspace of every operation within the bound the
// docs quote (the full tables need 4 x 31 MB there: 135.6 MiB of workspace), and auto picks the
// full tables for a short batch (its workspace equals never's) and for a large training batch.
TEST(CudaCheckpoint, WorkspaceIsBoundedAtLongT) {
  SKIP_WITHOUT_GPU();
  auto automatic = make_backend(BackendKind::cuda);
  auto full = backend_with("never");
  const Dims big{1, 100000, 60, 39}, small{32, 200, 30, 39};
  const size_t ws_ck = automatic->workspace_bytes(big), ws_full = full->workspace_bytes(big);
  EXPECT_GT(ws_full, size_t{130} << 20);
  EXPECT_LT(ws_ck, size_t{40} << 20) << "checkpointed workspace " << ws_ck;
  EXPECT_EQ(automatic->workspace_bytes(small), full->workspace_bytes(small));
  EXPECT_TRUE(automatic->fuses_frame_grads(small));
  // A large training batch (200 MB of tables, each utterance's 1.6 MB) keeps the faster full tables; one
  // utterance over 32 MiB of tables (T 30000 at C 39: 37.4 MB) is checkpointed at any B.
  const Dims train{128, 800, 30, 61}, one_long{1, 30000, 30, 39};
  EXPECT_EQ(automatic->workspace_bytes(train), full->workspace_bytes(train));
  EXPECT_LT(automatic->workspace_bytes(one_long), full->workspace_bytes(one_long));
}

}  // namespace
}  // namespace timitseg::crf::testing
