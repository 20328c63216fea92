// The table of the CRF's checkpoint tensors (model/crf_params.h): the one place
// their names are written.
#include "model/crf_params.h"

#include <cstring>

#include "model/model_dims.h"

namespace timitseg::model {

namespace {

constexpr char kPrefix[] = "crf.";

bool always(const ModelDims&) { return true; }
bool with_onset(const ModelDims& d) { return d.onset; }
bool with_end(const ModelDims& d) { return d.end; }
bool with_lognormal(const ModelDims& d) { return d.duration_lognormal; }
bool with_gaussian(const ModelDims& d) { return d.gaussian; }
std::vector<int64_t> c_by_2d(const ModelDims& d) { return {d.num_classes, 2 * static_cast<int64_t>(d.input_dim)}; }
std::vector<int64_t> c_by_w(const ModelDims& d) { return {d.num_classes, d.hidden_dim}; }
std::vector<int64_t> c(const ModelDims& d) { return {d.num_classes}; }
std::vector<int64_t> c_by_c(const ModelDims& d) { return {d.num_classes, d.num_classes}; }
std::vector<int64_t> k_by_c(const ModelDims& d) { return {d.max_duration, d.num_classes}; }
std::vector<int64_t> three_by_c(const ModelDims& d) { return {3, d.num_classes}; }

}  // namespace

const std::array<CrfTensorEntry, 13>& crf_tensor_table() {
  static const std::array<CrfTensorEntry, 13> table = {{
      {&CrfParamView::projection_weight, "crf.projection.weight", false, always, c_by_w},
      {&CrfParamView::projection_bias, "crf.projection.bias", false, always, c},
      // the Gaussian head right after crf.projection.bias: the two held ranges are one (held_parameters)
      {&CrfParamView::gaussian_weight, "crf.gaussian_projection.weight", false, with_gaussian, c_by_2d},
      {&CrfParamView::gaussian_bias, "crf.gaussian_projection.bias", false, with_gaussian, c},
      {&CrfParamView::onset_weight, "crf.onset_projection.weight", false, with_onset, c_by_w},
      {&CrfParamView::end_weight, "crf.end_projection.weight", false, with_end, c_by_w},  // the heads' weights adjacent
      {&CrfParamView::onset_bias, "crf.onset_projection.bias", false, with_onset, c},
      {&CrfParamView::end_bias, "crf.end_projection.bias", false, with_end, c},
      {&CrfParamView::transition, "crf.transition", true, always, c_by_c},
      {&CrfParamView::duration_bias, "crf.duration_bias", true, always, k_by_c},
      {&CrfParamView::start, "crf.start", true, always, c},
      {&CrfParamView::end, "crf.end", true, always, c},
      {&CrfParamView::duration_lognormal, "crf.duration_lognormal", true, with_lognormal, three_by_c},
  }};
  return table;
}

const CrfParamView& CrfParamView::names() {
  static const CrfParamView v = [] {
    CrfParamView n;
    for (const CrfTensorEntry& e : crf_tensor_table()) (n.*e.member).name = e.name;
    return n;
  }();
  return v;
}

AnchoredHeads CrfParamView::heads() const {
  struct Head {
    CrfTensor CrfParamView::*weight;
    CrfTensor CrfParamView::*bias;
    Anchor anchor;
  };
  static const Head table[] = {{&CrfParamView::onset_weight, &CrfParamView::onset_bias, Anchor::first_frame},
                               {&CrfParamView::end_weight, &CrfParamView::end_bias, Anchor::last_frame}};
  AnchoredHeads h;
  for (const Head& e : table) {
    const CrfTensor& w = this->*e.weight;
    const CrfTensor& b = this->*e.bias;
    if (!w.present) continue;
    if (!h.weights.empty() && (w.offset != h.weights.back()->offset + h.weights.back()->size ||
                               b.offset != h.biases.back()->offset + h.biases.back()->size))
      throw std::logic_error(std::string("model: ") + w.name + " does not follow the previous head in the layout");
    h.weights.push_back(&w);
    h.biases.push_back(&b);
    h.anchors.push_back(e.anchor);
  }
  if (!h.weights.empty()) h.weight = h.weights.front(), h.bias = h.biases.front();
  return h;
}

const char* CrfTensor::short_name() const {
  const size_t p = sizeof(kPrefix) - 1;
  return std::strncmp(name, kPrefix, p) == 0 ? name + p : name;
}

}  // namespace timitseg::model
