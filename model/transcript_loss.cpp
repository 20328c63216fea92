#include "model/transcript_loss.h"

#include <stdexcept>
#include <string>

#include "crf/phone_graph.h"
#include "crf/validate.h"

namespace timitseg::model {

crf::HostResult transcript_crf_host(crf::Session& session, const crf::Dims& dims, const crf::Params& host_params,
                                    const Batch& batch, double scale) {
  if (!batch.transcript()) throw std::logic_error("transcript_crf_host: the batch has no phone sequences");
  if (session.backend().on_device()) throw std::logic_error("transcript_crf_host: a host backend is needed");
  crf::validate_host(dims, host_params, nullptr);
  const std::vector<int32_t> links = batch.graph_links();
  crf::validate_transcript_host(dims, batch.N, batch.phones.data(), batch.num_phones.data(), nullptr, links.data());
  const size_t B = static_cast<size_t>(dims.B), T = static_cast<size_t>(dims.T), K = static_cast<size_t>(dims.K),
               C = static_cast<size_t>(dims.C);
  for (size_t b = 0; b < B; ++b) {
    if (!crf::graph_feasible(host_params.lengths[b], links.data() + b * batch.N, batch.num_phones[b]))
      throw std::runtime_error("batch row " + std::to_string(b) + " (" + batch.ids.at(b) + "): its " +
                               std::to_string(host_params.lengths[b]) + " frames cannot hold its phones");
  }
  crf::HostResult r;
  r.log_z.assign(B, 0.0);
  r.gold.assign(B, 0.0);
  r.grad_cum_scores.assign(B * (T + 1) * C, 0.f);
  r.grad_transition.assign(C * C, 0.f);
  r.grad_duration_bias.assign(K * C, 0.f);
  r.grad_start.assign(C, 0.f);
  r.grad_end.assign(C, 0.f);
  crf::Grads g{r.grad_cum_scores.data(), r.grad_transition.data(), r.grad_duration_bias.data(), r.grad_start.data(),
               r.grad_end.data()};
  if (host_params.onset) {
    r.grad_onset.assign(B * T * C, 0.f);
    g.onset = r.grad_onset.data();
  }
  session.transcript_backward(dims, host_params, batch.N, batch.phones.data(), batch.num_phones.data(), nullptr,
                              links.data(), scale, r.log_z.data(), r.gold.data(), g);
  return r;
}

}  // namespace timitseg::model
