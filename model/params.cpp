// Parameter layout (PyTorch names and shapes) and initialisation.
#include "model/params.h"

#include <cmath>

#include "crf/backend.h"
#include "crf/duration.h"
#include "crf/segments.h"

namespace timitseg::model {

ParamLayout::ParamLayout(const ModelDims& d) : dims_(d) {
  if (d.input_dim < 1 || d.hidden_dim < 2 || d.hidden_dim % 2 || d.num_layers < 1 || d.num_classes < 1 ||
      d.max_duration < 1)
    throw std::invalid_argument("model: invalid dimensions (input " + std::to_string(d.input_dim) + ", hidden " +
                                std::to_string(d.hidden_dim) + ", layers " + std::to_string(d.num_layers) +
                                ", classes " + std::to_string(d.num_classes) + ", K " +
                                std::to_string(d.max_duration) + ")");
  const int64_t D = d.input_dim, W = d.hidden_dim, H = d.per_direction();
  add("encoder.input_proj.weight", {W, D});
  add("encoder.input_proj.bias", {W});
  for (int k = 0; k < d.num_layers; ++k) {
    const int64_t in = k == 0 ? W : 2 * H;
    for (const char* suffix : {"", "_reverse"}) {
      const std::string l = "_l" + std::to_string(k) + suffix;
      add("encoder.lstm.weight_ih" + l, {4 * H, in});
      add("encoder.lstm.weight_hh" + l, {4 * H, H});
      add("encoder.lstm.bias_ih" + l, {4 * H});
      add("encoder.lstm.bias_hh" + l, {4 * H});
    }
  }
  crf_ = CrfParamView::names();
  bool in_structure = false;
  for (const CrfTensorEntry& e : crf_tensor_table()) {  // crf.projection, crf.onset_projection (the encoder's
    if (!e.present(d)) continue;                           // group), then the CRF structure group (last)
    if (e.structure && !in_structure) {
      crf_structure_begin_ = total_;
      in_structure = true;
    }
    add(e.name, e.shape(d));
    CrfTensor& t = crf_.*e.member;
    t.offset = params_.back().offset;
    t.size = params_.back().size;
    t.present = true;
  }
}

void ParamLayout::add(const std::string& name, std::vector<int64_t> shape) {
  ParamInfo p;
  p.name = name;
  p.shape = std::move(shape);
  p.size = 1;
  for (int64_t s : p.shape) p.size *= static_cast<size_t>(s);
  p.offset = total_;
  total_ += p.size;
  params_.push_back(std::move(p));
}

const ParamInfo& ParamLayout::get(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return p;
  throw std::invalid_argument("model: no parameter named '" + name + "'");
}

double standard_normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log is finite
  const double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

template <class S>
void init_params(const ParamLayout& layout, std::mt19937_64& rng, std::vector<S>& params, double crf_init_scale) {
  if (!(crf_init_scale >= 0.0)) throw std::invalid_argument("init_params: crf_init_scale must be >= 0");
  params.assign(layout.total(), S(0));
  const ModelDims& d = layout.dims();
  const CrfParamView& crf = layout.crf();
  auto is = [](const ParamInfo& p, const CrfTensor& t) { return t.present && p.offset == t.offset; };
  for (const ParamInfo& p : layout.params()) {
    double bound = 0;
    if (p.name.rfind("encoder.input_proj.", 0) == 0) bound = 1.0 / std::sqrt(double(d.input_dim));
    else if (p.name.rfind("encoder.lstm.", 0) == 0) bound = 1.0 / std::sqrt(double(d.per_direction()));
    else if (is(p, crf.projection_weight) || is(p, crf.projection_bias) || is(p, crf.onset_weight) ||
             is(p, crf.onset_bias) || is(p, crf.end_weight) || is(p, crf.end_bias))
      bound = 1.0 / std::sqrt(double(d.hidden_dim));
    else if ((is(p, crf.transition) || is(p, crf.duration_bias)) && crf_init_scale > 0) {
      for (size_t i = 0; i < p.size; ++i) params[p.offset + i] = static_cast<S>(crf_init_scale * standard_normal(rng));
      continue;
    } else {
      continue;  // start, end, duration_lognormal (and transition, duration_bias at scale 0): zeros
    }
    for (size_t i = 0; i < p.size; ++i) params[p.offset + i] = static_cast<S>((2.0 * uniform01(rng) - 1.0) * bound);
  }
}
DurationPrior duration_log_prior(const std::vector<std::vector<int32_t>>& class_labels, int K, int C) {
  if (K < 1 || C < 1)
    throw std::invalid_argument("duration_log_prior: K and C must be >= 1, got K " + std::to_string(K) + ", C " +
                                std::to_string(C));
  crf::check_class_labels("duration_log_prior", class_labels, C);
  std::vector<int64_t> n(static_cast<size_t>(K) * C, 0), per_label(static_cast<size_t>(C), 0);
  DurationPrior out;
  for (size_t u = 0; u < class_labels.size(); ++u) {
    const std::vector<int32_t>& y = class_labels[u];
    // the pieces of the loss's own gold segmentation (runs split at K)
    for (const crf::Segment& g : crf::gold_segments(y.data(), static_cast<int32_t>(y.size()), K)) {
      ++n[static_cast<size_t>(g.duration - 1) * C + g.label];
      ++per_label[g.label];
      ++out.segments;
    }
  }
  out.log_p.resize(n.size());
  for (int d = 0; d < K; ++d)
    for (int c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(d) * C + c;
      out.log_p[i] = std::log(static_cast<double>(n[i] + 1) / static_cast<double>(per_label[c] + K));
    }
  return out;
}

template void init_params<float>(const ParamLayout&, std::mt19937_64&, std::vector<float>&, double);
template void init_params<double>(const ParamLayout&, std::mt19937_64&, std::vector<double>&, double);

int penalized_durations(const ModelDims& d) { return d.duration_lognormal ? 0 : d.max_duration; }

void derive_duration_table(const ParamLayout& layout, float* params) {
  const ModelDims& d = layout.dims();
  if (!d.duration_lognormal) return;
  const CrfParamView& crf = layout.crf();
  crf::lognormal_duration_table(d.max_duration, d.num_classes, crf.duration_lognormal.in(params),
                                crf.duration_bias.in(params));
}

void chain_duration_gradient(const ParamLayout& layout, const float* params, float* grad) {
  const ModelDims& d = layout.dims();
  if (!d.duration_lognormal) return;
  const CrfParamView& crf = layout.crf();
  crf::lognormal_duration_backward(d.max_duration, d.num_classes, crf.duration_lognormal.in(params),
                                   crf.duration_bias.in(grad), crf.duration_lognormal.in(grad));
}

}  // namespace timitseg::model
