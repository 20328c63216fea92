// write_replay (model/replay_file.h).
#include "model/replay_file.h"

#include "common/safetensors.h"

namespace timitseg::model {

void write_replay(const std::string& path, const ParamLayout& layout, const std::vector<float>& params,
                  const Batch& batch, const std::vector<float>& cum) {
  const ModelDims& d = layout.dims();
  const int64_t B = batch.input.B, T = batch.input.T, C = d.num_classes, K = d.max_duration;
  const CrfParamView& crf = layout.crf();
  st::File f;
  auto put = [&](const CrfTensor& t, std::vector<int64_t> shape) {
    f.tensors[t.short_name()] = st::Tensor::from<float>(std::move(shape), t.in(params));
  };
  f.tensors["cum_scores"] = st::Tensor::from<float>({B, T + 1, C}, cum);
  put(crf.transition, {C, C});
  put(crf.duration_bias, {K, C});
  put(crf.start, {C});
  put(crf.end, {C});
  f.tensors["lengths"] = st::Tensor::from<int32_t>({B}, batch.input.lengths);
  f.tensors["labels"] = st::Tensor::from<int32_t>({B, T}, batch.labels);
  std::string ids;
  for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : " ") + id;
  f.metadata["utterance_ids"] = ids;
  st::save(path, f);
}

}  // namespace timitseg::model
