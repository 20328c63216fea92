// crf/posterior.h: frame marginals from the gradient of log Z, and the
// per-frame argmax decoding.
#include "crf/posterior.h"

#include <utility>

namespace timitseg::crf {

void frame_marginals(const Dims& dims, const float* grad_log_z, const int32_t* lengths, double* marginals) {
  const int64_t B = dims.B, T = dims.T, C = dims.C;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = lengths[b];
    const float* g = grad_log_z + b * (T + 1) * C;
    double* m = marginals + b * T * C;
    for (int64_t t = L; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) m[t * C + c] = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double run = 0.0;
      for (int64_t t = L - 1; t >= 0; --t) {
        run += static_cast<double>(g[(t + 1) * C + c]);
        m[t * C + c] = run;
      }
    }
  }
}

std::vector<Segment> posterior_segments(const Dims& dims, const double* marginals, const int32_t* lengths) {
  const int64_t T = dims.T, C = dims.C;
  std::vector<Segment> out;
  for (int64_t b = 0; b < dims.B; ++b) {
    const double* m = marginals + b * T * C;
    for (int32_t t = 0; t < lengths[b]; ++t) {
      int32_t best = 0;
      for (int32_t c = 1; c < C; ++c)
        if (m[t * C + c] > m[t * C + best]) best = c;
      if (t > 0 && out.back().label == best)
        ++out.back().duration;
      else
        out.push_back(Segment{static_cast<int32_t>(b), t, 1, best});
    }
  }
  return out;
}

HostResult posterior_decode_on_host(Session& session, const Dims& dims, const Params& p, const int32_t* labels) {
  HostRunOptions opt;
  opt.gradients = true;  // d log Z / d cum (labels == nullptr, scale 1)
  opt.viterbi = false;
  HostResult g = session.run_host(dims, p, nullptr, opt);
  HostResult r;
  if (labels) {  // log Z and the gold score
    HostRunOptions run_opts;
    run_opts.gradients = false;
    run_opts.viterbi = false;
    r = session.run_host(dims, p, labels, run_opts);
  } else {
    r.log_z = std::move(g.log_z);
  }
  std::vector<double> marginals(static_cast<size_t>(dims.B) * dims.T * dims.C);
  frame_marginals(dims, g.grad_cum_scores.data(), p.lengths, marginals.data());
  r.segments = posterior_segments(dims, marginals.data(), p.lengths);
  return r;
}

}  // namespace timitseg::crf
