// crf.phone_bonus (crf::add_phone_bonus, crf::Session::decode_host and Session::viterbi with a bonus) against the
// brute-force oracle: Viterbi on the biased transition must return
//     argmax over every segmentation y of  score(y) + beta * (label changes in y)
// with the spec's tie rule, for every host backend, positive and negative
// beta, with and without start/end; the loss (log Z, gold score) that
// decode_host returns next to it must be the model's own, untouched by beta.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "crf/backend_kind.h"
#include "crf/phone_bonus.h"
#include "crf/segments.h"
#include "crf/session.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

// Tiny problems (inputs and the bonuses below are multiples of 1/16: exact
// path scores, exact ties, so the tie rule is tested too).
std::vector<Problem> tiny_problems() { return tiny_exact_problems({1, 3, 5, 6}, {2, 3}, {1, 2, 3}, 101); }

int label_changes(const std::vector<Segment>& segs) {
  int n = 0;
  for (size_t i = 1; i < segs.size(); ++i) n += segs[i].label != segs[i - 1].label;
  return n;
}

// The oracle: enumerate, add beta per label change, take the Viterbi path
// under the tie rule of tests/support/crf_bruteforce.h.
void brute_force_with_bonus(const Problem& pb, double beta, std::vector<double>& score, std::vector<Segment>& segs) {
  for (int64_t b = 0; b < pb.dims.B; ++b) {
    std::vector<Path> paths = enumerate_paths(pb, b);
    for (Path& p : paths) p.score += beta * label_changes(p.segs);
    const Path& best = viterbi_path(paths);
    score.push_back(best.score);
    segs.insert(segs.end(), best.segs.begin(), best.segs.end());
  }
}

std::string describe(const Problem& pb, double beta, const std::string& backend) {
  return backend + " T=" + std::to_string(pb.dims.T) + " C=" + std::to_string(pb.dims.C) +
         " K=" + std::to_string(pb.dims.K) + (pb.s.empty() ? " (no start/end)" : " (start/end)") +
         " beta=" + std::to_string(beta);
}

TEST(PhoneBonus, AddsBetaOffTheDiagonalOnlyAndKeepsForbiddenEntries) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = {0.5f, -1.f, -inf, 2.f, -inf, 0.25f, 1.f, 0.f, 3.f};  // [3][3]
  std::vector<float> out(9);
  add_phone_bonus(a.data(), 3, 1.5f, out.data());
  const std::vector<float> want = {0.5f, 0.5f, -inf, 3.5f, -inf, 1.75f, 2.5f, 1.5f, 3.f};
  EXPECT_EQ(out, want);
}

TEST(PhoneBonus, ViterbiIsTheArgmaxOfScorePlusBonusPerLabelChange) {
  for (const std::string name : {"reference", "cpu"}) {
    auto backend = make_backend(backend_kind(name));
    Session session(*backend);
    for (const double beta : {-2.5, -0.5, 0.0, 0.75, 1.25, 4.0})
      for (const Problem& pb : tiny_problems()) {
        SCOPED_TRACE(describe(pb, beta, name));
        std::vector<double> want_score;
        std::vector<Segment> want_segs;
        brute_force_with_bonus(pb, beta, want_score, want_segs);
        const HostResult r = session.decode_host(pb.dims, pb.params(), nullptr, beta);
        EXPECT_EQ(r.segments, want_segs);
        expect_close(r.viterbi_score, want_score, name == "reference" ? 1e-12 : 1e-6, 1e-6, "viterbi_score");
        // the same recipe on pointers in the backend's memory space (Session::viterbi with a bonus)
        std::vector<double> score(static_cast<size_t>(pb.dims.B));
        std::vector<int32_t> rows(static_cast<size_t>(pb.dims.B * pb.dims.T * 3)), counts(score.size());
        session.viterbi(pb.dims, pb.params(), beta, score.data(), rows.data(), counts.data());
        EXPECT_EQ(collect_segments(pb.dims, rows.data(), counts.data()), want_segs);
        expect_close(score, want_score, name == "reference" ? 1e-12 : 1e-6, 1e-6, "viterbi score (bonus overload)");
      }
  }
}

// The bonus changes the decoded path and nothing else: log Z and the gold
// score returned with it are those of the model's own transition (the
// brute-force oracle's), whatever beta is.
TEST(PhoneBonus, TheLossReturnedWithTheSegmentsIgnoresTheBonus) {
  auto backend = make_backend(BackendKind::reference);
  Session session(*backend);
  int changed = 0;
  for (const Problem& pb : tiny_problems()) {
    const Expected ex = brute_force(pb, 1.0);
    for (const double beta : {-3.0, 2.0}) {
      SCOPED_TRACE(describe(pb, beta, "reference"));
      const HostResult r = session.decode_host(pb.dims, pb.params(), pb.labels.data(), beta);
      expect_close(r.log_z, ex.log_z, 1e-9, 1e-12, "log_z");
      expect_close(r.gold, ex.gold, 1e-9, 1e-12, "gold");
      changed += r.segments != ex.vsegs;
    }
  }
  EXPECT_GT(changed, 10) << "the bonuses should change the decoded path of many problems";
}

// Large bonuses take the decoder to its limits: +100 puts a label change at
// every possible place (a segment per frame, each label unlike the last);
// -100 gives one label for the whole utterance.
TEST(PhoneBonus, ExtremeBonusesGiveOneLabelOrAChangeAtEveryFrame) {
  auto backend = make_backend(BackendKind::cpu);
  Session session(*backend);
  const Problem pb = random_problem(Dims{3, 40, 4, 5}, 7, {40, 23, 1});
  const HostResult many = session.decode_host(pb.dims, pb.params(), nullptr, 100.0);
  const HostResult one = session.decode_host(pb.dims, pb.params(), nullptr, -100.0);
  for (int32_t b = 0; b < 3; ++b) {
    std::vector<Segment> m, o;
    for (const Segment& s : many.segments)
      if (s.batch == b) m.push_back(s);
    for (const Segment& s : one.segments)
      if (s.batch == b) o.push_back(s);
    EXPECT_EQ(static_cast<int32_t>(m.size()), pb.lengths[b]) << "utterance " << b;
    EXPECT_EQ(label_changes(m), pb.lengths[b] - 1) << "utterance " << b;
    EXPECT_EQ(label_changes(o), 0) << "utterance " << b;
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
