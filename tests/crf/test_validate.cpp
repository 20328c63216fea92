// Bad input gives one clear error naming the tensor and index, on every host
// backend, never NaN output or a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

// Runs every host backend on pb and expects std::invalid_argument whose
// message contains `needle`.
void expect_error(const Problem& pb, bool with_labels, const std::string& needle) {
  for (const std::string name : {"reference", "cpu"}) {
    auto be = make_backend(backend_kind(name));
    try {
      run_host(*be, pb.dims, pb.params(), with_labels ? pb.labels.data() : nullptr);
      ADD_FAILURE() << name << ": no error, expected one containing '" << needle << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": message was: " << e.what();
    }
    // The backend entry points validate too (not only run_host).
    std::vector<uint64_t> ws((be->workspace_bytes(pb.dims) + 7) / 8 + 1);
    std::vector<double> lz(std::max<int64_t>(pb.dims.B, 1));
    EXPECT_THROW(
        {
          if (with_labels) {
            std::vector<float> gc(pb.cum.size());
            be->backward(pb.dims, pb.params(), pb.labels.data(), 1.0, lz.data(), nullptr, Grads{gc.data()}, ws.data());
          } else {
            be->log_partition(pb.dims, pb.params(), lz.data(), ws.data());
          }
        },
        std::invalid_argument)
        << name;
  }
}

Problem base() { return random_problem(Dims{2, 10, 4, 3}, 1, {10, 6}); }

TEST(Errors, LengthOutsideRange) {
  Problem pb = base();
  pb.lengths[1] = 0;
  expect_error(pb, false, "lengths[1] = 0 is outside [1, T=10]");
  pb.lengths[1] = 11;
  expect_error(pb, false, "lengths[1] = 11 is outside [1, T=10]");
}

TEST(Errors, LabelOutsideRange) {
  Problem pb = base();
  pb.labels[1 * 10 + 4] = 3;
  expect_error(pb, true, "labels[1][4] = 3 is outside [0, C=3)");
  pb.labels[1 * 10 + 4] = -1;
  expect_error(pb, true, "labels[1][4] = -1 is outside [0, C=3)");
  // A bad label on a padding frame (t >= length) is ignored.
  Problem ok = base();
  ok.labels[1 * 10 + 8] = 99;
  auto be = make_backend(BackendKind::cpu);
  EXPECT_NO_THROW(run_host(*be, ok.dims, ok.params(), ok.labels.data()));
}

TEST(Errors, BadDims) {
  Problem pb = base();
  pb.dims.K = 0;
  expect_error(pb, false, "max duration K must be >= 1, got 0");
  pb = base();
  pb.dims.C = 0;
  expect_error(pb, false, "number of classes C must be >= 1, got 0");
  pb = base();
  pb.dims.B = 0;
  expect_error(pb, false, "batch size B must be >= 1, got 0");
}

TEST(Errors, NonFiniteInputsNameTensorAndIndex) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Problem pb = base();
  pb.cum[(1 * 11 + 3) * 3 + 2] = nan;
  expect_error(pb, false, "cum_scores[1][3][2] = nan is not finite");
  pb = base();
  pb.A[1 * 3 + 2] = inf;
  expect_error(pb, false, "transition[1][2] = inf is NaN or +inf (entries must be finite, or -inf to forbid a transition)");
  pb = base();
  pb.D[3 * 3 + 0] = nan;
  expect_error(pb, false, "duration_bias[3][0] = nan is NaN or +inf (entries must be finite, or -inf to forbid a duration)");
  pb = base();
  pb.s[2] = nan;
  expect_error(pb, false, "start[2] = nan is NaN or +inf");
  pb = base();
  pb.e[0] = inf;
  expect_error(pb, false, "end[0] = inf is NaN or +inf");
  pb = base();
  pb.cum[(0 * 11 + 4) * 3 + 1] = -inf;  // -inf is allowed in the parameters only
  expect_error(pb, false, "cum_scores[0][4][1] = -inf is not finite");
}

TEST(Errors, BackendKindNamesRoundTripAndUnknownNamesFailInOneLine) {
  // the one table: every kind's name parses back to it; the names are the documented words
  const std::vector<std::string> want{"reference", "cpu", "cuda"};
  EXPECT_EQ(backend_kind_names(), want);
  for (BackendKind k : {BackendKind::reference, BackendKind::cpu, BackendKind::cuda}) {
    BackendKind back{};
    ASSERT_TRUE(parse_backend_kind(to_string(k), &back)) << to_string(k);
    EXPECT_EQ(back, k);
    EXPECT_EQ(backend_kind(to_string(k)), k);
  }
  // words are exact: case, blanks and other names are refused
  BackendKind out = BackendKind::reference;
  for (const char* bad : {"CPU", " cpu", "cpu ", "", "auto", "gpu", "Reference"}) {
    EXPECT_FALSE(parse_backend_kind(bad, &out)) << "'" << bad << "'";
    EXPECT_EQ(out, BackendKind::reference) << "unchanged on failure";
    try {
      backend_kind(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("unknown crf backend '" + std::string(bad) + "' (known: reference, cpu", 0), 0u)
          << e.what();
    }
  }
  // the kind a backend is made of is the backend it names itself
  for (BackendKind k : {BackendKind::reference, BackendKind::cpu}) EXPECT_EQ(make_backend(k)->name(), to_string(k));
}

TEST(Errors, UnknownAndUnavailableBackends) {
  try {
    make_backend(backend_kind("gpu"));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown crf backend 'gpu' (known: reference, cpu"), std::string::npos)
        << e.what();
  }
#ifndef TIMITSEG_HAVE_CUDA
  try {
    make_backend(BackendKind::cuda);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "cuda backend: this build of timitseg has no CUDA support (rebuild with -DTIMITSEG_CUDA=ON)");
  }
#endif
}

TEST(Errors, CpuWorkspaceNull) {
  Problem pb = base();
  auto be = make_backend(BackendKind::cpu);
  std::vector<double> lz(2);
  EXPECT_THROW(be->log_partition(pb.dims, pb.params(), lz.data(), nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace timitseg::crf::testing
