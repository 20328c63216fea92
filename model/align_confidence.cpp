// fill_align_confidence (model/executor.h): the confidence scores of aligned
// phones (docs/crf.md "Confidence") through a crf::Session on host arrays.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/executor.h"

namespace timitseg::model {
namespace {

// Utterance b of a batch alone: its rows of cum/onset, its phones, dims with T = its length.
struct OneUtt {
  crf::Dims dims;
  crf::Params p;
  int32_t length;
};

OneUtt one_utterance(const crf::Dims& dims, const crf::Params& hp, int64_t b) {
  OneUtt u;
  u.length = hp.lengths[b];
  u.dims = crf::Dims{1, u.length, dims.K, dims.C};
  u.p = hp;
  u.p.cum_scores = hp.cum_scores + b * (dims.T + 1) * dims.C;
  u.p.onset = hp.onset ? hp.onset + b * dims.T * dims.C : nullptr;
  u.p.lengths = &u.length;
  return u;
}

// One call of both confidence methods for the batch (dims, hp) with N phones a row.
void run_batch(crf::Session& session, const crf::Dims& dims, const crf::Params& hp, int64_t N, const int32_t* phones,
               const int32_t* nph, const int32_t* opt, const int32_t* spans, double* post3, double* label) {
  const crf::AlignPosteriorResult ap = session.align_posteriors_host(dims, hp, N, phones, nph, opt, spans);
  std::copy(ap.posterior.begin(), ap.posterior.end(), post3);
  std::vector<int32_t> queries(dims.B * N * 3, 0), nq(nph, nph + dims.B);
  for (int64_t b = 0; b < dims.B; ++b) {
    if (!(ap.log_z_c[b] > -INFINITY)) nq[b] = 0;  // infeasible: no spans to score
    for (int64_t n = 0; n < nq[b]; ++n) {
      queries[(b * N + n) * 3] = spans[(b * N + n) * 2];
      queries[(b * N + n) * 3 + 1] = spans[(b * N + n) * 2 + 1];
      queries[(b * N + n) * 3 + 2] = phones[b * N + n];
    }
  }
  const crf::SpanMarginalResult sm = session.span_marginals_host(dims, hp, N, queries.data(), nq.data());
  std::copy(sm.marginal.begin(), sm.marginal.end(), label);
}

}  // namespace

void fill_align_confidence(crf::Session& session, const crf::Dims& dims, const crf::Params& hp, int64_t N,
                           const std::vector<int32_t>& phones, const std::vector<int32_t>& num_phones,
                           const std::vector<int32_t>& optional, const crf::AlignResult& r, AlignConfidence* out,
                           double batch_limit, double utterance_limit) {
  const int64_t B = dims.B;
  const int32_t* opt = optional.empty() ? nullptr : optional.data();
  std::vector<double> post3(B * N * 3, 0.0), label(B * N, 0.0);
  out->computed.assign(B, 0);
  out->reason.assign(B, "");
  std::vector<char> feasible(B);
  for (int64_t b = 0; b < B; ++b) feasible[b] = r.score[b] > -INFINITY;
  // The constrained tables and the unconstrained pass's workspace (the loss's recurrences, (T+1) C per thread).
  auto need = [&](const crf::Dims& d, int64_t n) {
    return static_cast<double>(d.B) * crf::align_posterior_table_bytes(d.T, n) +
           static_cast<double>(session.backend().workspace_bytes(d));
  };
  // (the cpu backend refuses a table over 512 MiB per utterance: kConfidenceUtteranceBytes keeps below it)
  if (need(dims, N) <= batch_limit && crf::align_posterior_table_bytes(dims.T, N) <= utterance_limit) {
    run_batch(session, dims, hp, N, phones.data(), num_phones.data(), opt, r.spans.data(), post3.data(), label.data());
    for (int64_t b = 0; b < B; ++b) out->computed[b] = feasible[b];
  } else {
    for (int64_t b = 0; b < B; ++b) {
      const OneUtt u = one_utterance(dims, hp, b);
      const double bytes = need(u.dims, num_phones[b]);
      if (bytes > utterance_limit) {
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "the forward-backward passes need %.0f MiB (%d frames x %d phones x 32 bytes, and the "
                      "unconstrained pass's workspace), over the %.0f MiB limit",
                      bytes / (1 << 20), u.length, num_phones[b], utterance_limit / (1 << 20));
        out->reason[b] = buf;
        continue;
      }
      // one row: its own phone count as the stride (the backend's table is (length+1) x num_phones[b])
      run_batch(session, u.dims, u.p, num_phones[b], phones.data() + b * N, num_phones.data() + b,
                opt ? opt + b * N : nullptr, r.spans.data() + b * N * 2, post3.data() + b * N * 3, label.data() + b * N);
      out->computed[b] = feasible[b];
    }
  }
  out->boundary.assign(B * N, 0.0);
  out->start.assign(B * N, 0.0);
  out->end.assign(B * N, 0.0);
  out->label = label;
  for (int64_t i = 0; i < B * N; ++i) {
    out->boundary[i] = post3[3 * i];
    out->start[i] = post3[3 * i + 1];
    out->end[i] = post3[3 * i + 2];
  }
}

}  // namespace timitseg::model
