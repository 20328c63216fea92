#include "train/gaussian_reestimate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>
#include <vector>

#include "common/progress.h"
#include "model/batch.h"
#include "model/gaussian_head.h"

namespace timitseg::train {

namespace {

constexpr int kAlignBatch = 16;  // utterances per forced-alignment call

// Adds the valid frames of batch row b with their classes y [T] (row-major [B][T] from b * T).
void add_row(model::GaussianStats& st, const model::Batch& batch, int b, const int32_t* y) {
  const int T = batch.input.T, D = st.D;
  const int L = batch.input.lengths[static_cast<size_t>(b)];
  st.add(batch.input.features.data() + static_cast<size_t>(b) * T * D, y, L, batch.ids[static_cast<size_t>(b)]);
}

}  // namespace

std::string GaussianEstimate::describe() const {
  std::ostringstream os;
  os << "the Gaussian head (crf.gaussian_head) re-estimated from " << frames << " frames: " << timed
     << " utterances by their times, " << aligned << " by their forced alignment";
  if (graphs) os << " (" << graphs << " of them the best of their pronunciation combinations)";
  os << ", " << flat << " by the flat start";
  if (infeasible) os << "; " << infeasible << " without a feasible alignment left out";
  if (empty_classes) os << "; " << empty_classes << " classes without frames take the pooled Gaussian";
  os.setf(std::ios::fixed);
  os.precision(1);
  os << " (" << seconds << " s)";
  return os.str();
}

GaussianEstimate reestimate_gaussian_head(detail::TrainingRun& r, const TrainData& data) {
  GaussianEstimate out;
  if (!r.state.dims.gaussian) return out;
  const auto t0 = std::chrono::steady_clock::now();
  const model::ModelDims& d = r.state.dims;
  model::GaussianStats st(d.num_classes, d.input_dim);
  const std::vector<data::Utterance>& utts = data.train.utterances;
  const bool trained = r.state.optimizer.step > 0;
  std::vector<const data::Utterance*> timed, to_align, graphs;
  for (size_t i = 0; i < utts.size(); ++i) {
    const data::Utterance& u = utts[i];
    if (!r.by_transcript[i]) {
      timed.push_back(&u);
      continue;
    }
    const model::PhoneSequence s = model::transcript_of(u, r.ls);
    if (!trained) {  // the flat start: the equal split of the required phones
      const model::Batch batch = model::make_batch({&u}, r.cmvn, r.ls, 0, model::BatchSupervision::transcript);
      const std::vector<int32_t> y = model::flat_start_labels(s, u.num_frames);
      add_row(st, batch, 0, y.data());
      ++out.flat;
    } else if (!s.links.empty()) {
      graphs.push_back(&u);
    } else {
      to_align.push_back(&u);
    }
  }
  for (size_t i = 0; i < timed.size(); i += kAlignBatch) {
    const std::vector<const data::Utterance*> part(timed.begin() + i,
                                                   timed.begin() + std::min(timed.size(), i + kAlignBatch));
    const model::Batch batch = model::make_batch(part, r.cmvn, r.ls, 0, model::BatchSupervision::segments);
    for (int b = 0; b < batch.input.B; ++b) add_row(st, batch, b, batch.labels.data() + static_cast<size_t>(b) * batch.input.T);
    out.timed += batch.input.B;
  }
  const int64_t work = static_cast<int64_t>(to_align.size() + graphs.size());
  std::optional<Progress> progress;  // none when nothing is aligned (before the first step)
  if (work > 0) progress.emplace("Gaussian head: aligning", work, "utt");
  // Aligns `batch` and adds the alignment of its feasible rows (best_of_all: of the best-scoring row
  // only, the rows being one utterance's pronunciation combinations); false when none was feasible.
  const auto align_rows = [&](const model::Batch& batch, bool best_of_all) -> bool {
    const crf::AlignResult res = r.exec->align(batch, batch.N, batch.phones, batch.num_phones, batch.optional);
    std::vector<int> rows;
    for (int b = 0; b < batch.input.B; ++b) {
      const double sc = res.score[static_cast<size_t>(b)];
      if (!std::isfinite(sc)) continue;
      if (!best_of_all)
        rows.push_back(b);
      else if (rows.empty() || sc > res.score[static_cast<size_t>(rows[0])])  // ties: the earlier (primary first)
        rows.assign(1, b);
    }
    out.infeasible += best_of_all ? static_cast<int>(rows.empty()) : batch.input.B - static_cast<int>(rows.size());
    const int T = batch.input.T;
    std::vector<int32_t> y(static_cast<size_t>(T));
    for (const int row : rows) {
      std::fill(y.begin(), y.end(), -1);
      for (int n = 0; n < batch.num_phones[static_cast<size_t>(row)]; ++n) {
        const size_t at = (static_cast<size_t>(row) * batch.N + n) * 2;
        const int32_t start = res.spans[at], dur = res.spans[at + 1];
        for (int32_t t = start; t < start + dur && t < T; ++t)
          y[static_cast<size_t>(t)] = batch.phones[static_cast<size_t>(row) * batch.N + n];
      }
      add_row(st, batch, row, y.data());  // a frame left at -1 (none: the spans tile the utterance) throws naming it
      ++out.aligned;
    }
    return !rows.empty();
  };
  for (size_t i = 0; i < to_align.size(); i += kAlignBatch) {
    const std::vector<const data::Utterance*> part(to_align.begin() + i,
                                                   to_align.begin() + std::min(to_align.size(), i + kAlignBatch));
    align_rows(model::make_batch(part, r.cmvn, r.ls, 0, model::BatchSupervision::transcript), false);
    progress->advance(static_cast<int64_t>(part.size()));
  }
  for (const data::Utterance* u : graphs) {  // the best of its pronunciation combinations, as align --dict
    const std::vector<data::Utterance> chains = model::pronunciation_chains(*u);
    std::vector<const data::Utterance*> rows;
    for (const data::Utterance& c : chains) rows.push_back(&c);
    if (align_rows(model::make_batch(rows, r.cmvn, r.ls, 0, model::BatchSupervision::transcript), true)) ++out.graphs;
    progress->advance(1);
  }
  if (progress) progress->finish();
  const model::GaussianHead head = model::gaussian_head(st, r.cfg.crf_gaussian_weight);
  std::vector<float> params;
  model::AdamW opt;
  r.exec->get_state(params, opt);
  const model::CrfParamView& crf = r.layout->crf();
  std::copy(head.weight.begin(), head.weight.end(), crf.gaussian_weight.in(params));
  std::copy(head.bias.begin(), head.bias.end(), crf.gaussian_bias.in(params));
  r.exec->set_state(params, opt);
  r.state.params = params;
  out.frames = st.frames;
  out.empty_classes = head.empty_classes;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace timitseg::train
