// `timitseg export CHECKPOINT --out model.safetensors`: the model tensors of a
// checkpoint only (PyTorch names, no optimizer state), CMVN statistics as
// tensors and the metadata needed to use the model (docs/export.md).
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "app/commands.h"
#include "common/files.h"
#include "common/walk.h"
#include "common/safetensors.h"
#include "common/version.h"
#include "model/checkpoint.h"
#include "model/params.h"

namespace timitseg::app {

namespace {

struct ExportArgs {
  std::string checkpoint, out;
};

void run_export(const ExportArgs& a) {
  check_output_file("--out", a.out, "model.safetensors");  // before any work (docs/cli.md "Output paths")
  InputSet inputs;
  inputs.add(a.checkpoint);
  refuse_output("--out", a.out, inputs, "the checkpoint being exported; an output never replaces its input");
  // load_checkpoint verifies the checksum and the value ranges before anything is written.
  const model::ModelState s = model::load_checkpoint(a.checkpoint);
  const model::ParamLayout layout(s.dims);
  st::File f;
  for (const model::ParamInfo& p : layout.params())
    f.tensors[p.name] = st::Tensor::from<float>(p.shape, s.params.data() + p.offset);
  if (s.has_cmvn) {  // float64, as in the checkpoint: x = (x - mean) / sqrt(max(var, 1e-10))
    f.tensors["cmvn.mean"] = st::Tensor::from<double>({int64_t(s.cmvn.mean.size())}, s.cmvn.mean);
    f.tensors["cmvn.var"] = st::Tensor::from<double>({int64_t(s.cmvn.var.size())}, s.cmvn.var);
  }
  auto& m = f.metadata;
  m["format"] = "timitseg-model-1";
  m["dims"] = dims_json(s.dims);
  model::write_phone_set_metadata(s.labels, m);  // label_set (TIMIT's) or phone_set + phone_set_sha256
  m["label_names"] = nlohmann::json(s.labels.names).dump();
  m["label_names39"] = nlohmann::json(s.labels.scoring_names).dump();
  m["label_to39"] = nlohmann::json(s.labels.scoring_index).dump();
  m["feature_options"] = data::feature_options_to_json(s.features).dump();
  m["cmvn_var_floor"] = "1e-10";
  if (s.has_cmvn && s.cmvn.per_utterance) m["cmvn_mode"] = "utterance";  // data.cmvn: each utterance's own statistics
  if (s.has_cmvn && s.cmvn.per_speaker) m["cmvn_mode"] = "speaker";  // data.cmvn: each speaker's own statistics
  m["source_checkpoint"] = a.checkpoint;
  m["epoch"] = std::to_string(s.epoch);
  m["timitseg_version"] = version();
  m["git_commit"] = git_commit();
  st::save(a.out, f);  // atomic: temporary file + rename
  spdlog::info("exported {} ({} model tensors{}, epoch {}) to {}", a.checkpoint, layout.params().size(),
               s.has_cmvn ? " + CMVN" : "", s.epoch, a.out);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* ex = app.add_subcommand(
      "export",
      "Write the model of a checkpoint only (no optimizer state) for other tools: the parameters under their PyTorch "
      "names (encoder.input_proj.*, encoder.lstm.*, crf.projection.*, crf.transition, crf.duration_bias, crf.start, "
      "crf.end), cmvn.mean / cmvn.var (F64) and metadata (dims, label set, phone names, feature options); "
      "docs/export.md loads it into torch.nn");
  ex->add_option("checkpoint", a->checkpoint, "Checkpoint (.safetensors) written by train, e.g. "
                                              "RUN_DIR/checkpoints/best.safetensors")
      ->required();
  ex->add_option("--out", a->out, "Output file (safetensors), written atomically")->required();
  ex->callback([a] { run_export(*a); });
}

}  // namespace timitseg::app
