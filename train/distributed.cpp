// The training loop on several processes (train/distributed.h).
#include "train/distributed.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/cuda.h"
#include "eval/evaluate.h"
#include "train/batches.h"
#include "train/interrupt.h"

namespace timitseg::train {

BatchShare share_of_batch(const std::vector<int>& batch, const std::vector<int32_t>& lengths, int fixed_length,
                          const dist::Communicator& world) {
  BatchShare s;
  s.global_B = static_cast<int>(batch.size());
  for (int i : batch) {
    const int L = fixed_length > 0 ? fixed_length : lengths.at(static_cast<size_t>(i));
    s.global_T = std::max(s.global_T, L);
    s.global_frames += L;
  }
  const std::vector<int> pos = world.size() > 1 ? shard_of_batch(batch, lengths, world.rank(), world.size())
                                                : [&] {
                                                    std::vector<int> all(batch.size());
                                                    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
                                                    return all;
                                                  }();
  for (int p : pos) {
    s.utts.push_back(batch[static_cast<size_t>(p)]);
    s.rows.push_back(p);
  }
  return s;
}

void mark_share(model::Batch& batch, const BatchShare& share, const dist::Communicator& world) {
  if (world.size() == 1) return;
  batch.input.share_rows = share.rows;
  batch.input.global_B = share.global_B;
  batch.input.global_T = share.global_T;
}

int agreed_stop(dist::Communicator& world) {
  int64_t v = 0;
  if (stop_requested()) v = stop_signal() > 0 ? 1000 + stop_signal() : 1;
  world.allreduce_max(&v, 1, "the stop request");
  if (v == 0) return 0;
  return v >= 1000 ? 128 + static_cast<int>(v - 1000) : 1;
}

namespace {

// One rank's decoded chunks: per utterance its position in the sorted order,
// its NLL and its segments, as bytes for the all-gather.
void put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
T take(const std::string& in, size_t& at) {
  if (at + sizeof(T) > in.size()) throw std::runtime_error("dev evaluation: a rank's results are truncated");
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

}  // namespace

void evaluate_across_ranks(model::Executor& exec, const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn,
                           const model::LabelSet& ls, int batch_size, eval::Metrics& metrics, double* nll_sum,
                           std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>>* keep,
                           dist::Communicator& world) {
  const auto chunks = eval::evaluation_chunks(utts, batch_size);
  std::vector<const data::Utterance*> sorted;
  for (const auto& c : chunks) sorted.insert(sorted.end(), c.begin(), c.end());
  std::string mine;
  dist::agree("the dev evaluation", [&] {
    std::vector<double> nll;
    int64_t pos = 0;
    for (size_t j = 0; j < chunks.size(); pos += static_cast<int64_t>(chunks[j].size()), ++j) {
      if (static_cast<int>(j % static_cast<size_t>(world.size())) != world.rank()) continue;
      const model::Batch batch = model::make_batch(chunks[j], cmvn, ls, 0);
      const auto segs = exec.decode(batch, nullptr, &nll);
      for (size_t b = 0; b < chunks[j].size(); ++b) {
        const int64_t p = pos + static_cast<int64_t>(b);
        const int64_t n = static_cast<int64_t>(segs[b].size());
        put(mine, &p, sizeof p);
        put(mine, &nll[b], sizeof(double));
        put(mine, &n, sizeof n);
        for (const crf::Segment& s : segs[b]) put(mine, &s, sizeof s);
      }
    }
  });
  const std::vector<std::string> all = world.allgather(mine, "the dev evaluation's results");
  std::vector<double> nll(sorted.size(), 0.0);
  std::vector<std::vector<crf::Segment>> segs(sorted.size());
  std::vector<char> seen(sorted.size(), 0);
  for (const std::string& part : all)
    for (size_t at = 0; at < part.size();) {
      const int64_t p = take<int64_t>(part, at);
      if (p < 0 || p >= static_cast<int64_t>(sorted.size()) || seen[p])
        throw std::runtime_error("dev evaluation: a rank sent an utterance twice or out of range");
      seen[p] = 1;
      nll[p] = take<double>(part, at);
      const int64_t n = take<int64_t>(part, at);
      for (int64_t k = 0; k < n; ++k) segs[p].push_back(take<crf::Segment>(part, at));
    }
  if (std::count(seen.begin(), seen.end(), 0) > 0) throw std::runtime_error("dev evaluation: an utterance was not decoded");
  if (nll_sum) *nll_sum = 0;
  std::vector<int32_t> ref;
  for (size_t p = 0; p < sorted.size(); ++p) {
    const data::Utterance& u = *sorted[p];
    ref.resize(static_cast<size_t>(u.num_frames));
    for (int t = 0; t < u.num_frames; ++t) ref[t] = ls.class_of_label(u.labels[t]);  // as make_batch collates them
    eval::add_utterance_metrics(metrics, ls, u, ref.data(), u.num_frames, segs[p]);
    if (nll_sum) *nll_sum += nll[p];
    if (keep) keep->emplace_back(&u, std::move(segs[p]));
  }
}

std::string resume_command(const std::string& run_dir, const dist::Communicator& world) {
  const dist::Launcher l = world.launch().launcher;
  if (l == dist::Launcher::mpirun) return "mpirun -np " + std::to_string(world.size()) + " timitseg train --resume " + run_dir;
  if (l == dist::Launcher::srun) return "srun ... timitseg train --resume " + run_dir;
  return "timitseg train --resume " + run_dir;
}

void inject_exit(const config::InjectExit& x, const dist::Communicator& world, int64_t step) {
  if ((!x.all && x.rank != world.rank()) || x.rank < 0 || x.step != step) return;
  if (x.action == config::ExitAction::throw_exception)
    throw std::runtime_error("debug.inject_exit: an exception planted before step " + std::to_string(step));
  if (x.action == config::ExitAction::kill) {
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  }
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hang: until the job is torn down
}

bool fault_on_this_rank(const config::Config& cfg, const dist::Communicator& world) {
  return cfg.debug_fault_rank < 0 || cfg.debug_fault_rank == world.rank();
}

void check_state_agrees(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                        const std::string& when) {
  dist::Communicator& w = dist::world();
  if (w.size() == 1) return;
  std::string fps;
  for (const std::vector<float>* x : {&params, &m, &v}) {
    const int64_t fp = dist::fingerprint(x->data(), x->size() * sizeof(float));
    fps.append(reinterpret_cast<const char*>(&fp), sizeof fp);
  }
  dist::check_same_on_every_rank(dist::fingerprint(fps.data(), fps.size()),
                                 "the parameters and optimizer state " + when);
}

int threads_of_rank(int threads, const dist::Launch& launch) {
  if (threads > 0 || launch.size == 1) return threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, launch.local_size));
}

void select_local_gpu(const dist::Launch& launch) {
  const int device = dist::local_device(launch, cuda::device_count());
  cuda::set_device(device);
  spdlog::info("rank {} (local rank {} on {}): GPU {}", launch.rank, launch.local_rank, launch.host, device);
}

std::string step_line(int64_t step, const model::StepResult& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"step\": %lld, \"loss\": %.17g, \"grad_norm\": %.17g}\n",
                static_cast<long long>(step), r.loss, r.grad_norm);
  return buf;
}

std::string steps_upto(const std::string& path, int64_t upto) {
  std::ifstream in(path);
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t at = line.find("\"step\": ");
    if (at == std::string::npos) continue;
    if (std::strtoll(line.c_str() + at + 8, nullptr, 10) <= upto) out += line + "\n";
  }
  return out;
}

// Several ranks (train/distributed.h): the global batch holds a share for
// every rank, every rank reads the same data, a GPU rank takes its local GPU.
void set_up_ranks(const config::Config& cfg, const TrainData& data, model::Device device, dist::Communicator& w) {
  if (w.size() == 1) return;
  // Each check agreed on its own (dist::agree around code without collectives
  // only: a collective inside could wait for a rank that has already left).
  dist::agree(w, "the set-up", [&] {
    if (cfg.train_batch_size < w.size())
      throw std::invalid_argument("config: train.batch_size = " + std::to_string(cfg.train_batch_size) +
                                  " is the global batch, split across " + std::to_string(w.size()) +
                                  " ranks; it must be at least the number of ranks");
  });
  std::string ids;
  int64_t frames = 0;
  for (const data::Split* split : {&data.train, &data.dev})
    for (const data::Utterance& u : split->utterances) {
      ids += u.id + "\n";
      frames += u.num_frames;
    }
  ids += std::to_string(frames);
  dist::check_same_on_every_rank(dist::fingerprint(ids.data(), ids.size()),
                                 "the training data (utterance ids and frames of data.workdir's train and dev splits)");
  if (device == model::Device::cuda) dist::agree(w, "the GPU of each rank", [&] { select_local_gpu(w.launch()); });
}

}  // namespace timitseg::train
