// write_replay (model/replay_file.h).
#include "model/replay_file.h"

#include "common/safetensors.h"

namespace timitseg::model {

void write_replay(const std::string& path, const ParamLayout& layout, const std::vector<float>& params,
                  const Batch& batch, const std::vector<float>& cum) {
  const ModelDims& d = layout.dims();
  const int64_t B = batch.input.B, T = batch.input.T, C = d.num_classes, K = d.max_duration;
  auto P = [&](const char* name) { return params.data() + layout.get(name).offset; };
  st::File f;
  f.tensors["cum_scores"] = st::Tensor::from<float>({B, T + 1, C}, cum);
  f.tensors["transition"] = st::Tensor::from<float>({C, C}, P("crf.transition"));
  f.tensors["duration_bias"] = st::Tensor::from<float>({K, C}, P("crf.duration_bias"));
  f.tensors["start"] = st::Tensor::from<float>({C}, P("crf.start"));
  f.tensors["end"] = st::Tensor::from<float>({C}, P("crf.end"));
  f.tensors["lengths"] = st::Tensor::from<int32_t>({B}, batch.input.lengths);
  f.tensors["labels"] = st::Tensor::from<int32_t>({B, T}, batch.labels);
  std::string ids;
  for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : " ") + id;
  f.metadata["utterance_ids"] = ids;
  st::save(path, f);
}

}  // namespace timitseg::model
