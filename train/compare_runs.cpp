// Training the runs of `timitseg compare` (train/compare_plan.h): fresh,
// resumed or replacing an old folder, several at once on threads of this process.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/progress.h"
#include "model/checkpoint.h"
#include "train/compare_plan.h"
#include "train/interrupt.h"
#include "train/run_folder.h"

namespace fs = std::filesystem;

namespace timitseg::train {

namespace {

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

// Trains job.cfg (fresh, resumed or replacing the old folder); `after_epoch` makes its per-epoch callback.
void execute(const CompareJob& job, const TrainData& data, const EpochCallbackMaker& after_epoch) {
  const config::Config& cfg = job.cfg;
  const std::string& dir = cfg.train_run_dir;
  switch (job.action) {
    case CompareJob::Action::reuse:
      return;
    case CompareJob::Action::fresh:
      spdlog::info("compare: training {} (K={}, seed {})", dir, cfg.crf_max_duration, cfg.train_seed);
      train(cfg, data, false, after_epoch(data, cfg.train_threads));
      return;
    case CompareJob::Action::resume: {
      const model::ModelState s = model::load_checkpoint(latest_checkpoint(dir));
      spdlog::info("compare: {} stopped after epoch {}/{}: resuming", dir, s.epoch, cfg.train_epochs);
      train(cfg, data, true, after_epoch(data, cfg.train_threads));
      return;
    }
    case CompareJob::Action::replace: {
      // The old folder moves aside (one rename) and comes back if the new run
      // fails before its first epoch is written; after that it is deleted.
      const fs::path aside = replaced_run_path(dir);
      spdlog::warn("compare: --force: {} holds another run ({}): training it afresh; the old run waits in {} until "
                   "the new one has finished its first epoch",
                   dir, job.why, aside.string());
      fs::rename(dir, aside);
      bool old_deleted = false;
      AfterEpoch report = after_epoch(data, cfg.train_threads);
      auto after = [&](const EpochEnd& e) {
        if (!old_deleted) {
          std::error_code ec;
          fs::remove_all(aside, ec);
          if (ec) spdlog::warn("compare: cannot delete the replaced run {}: {}", aside.string(), ec.message());
          else spdlog::info("compare: {}: the new run finished its first epoch; the old run ({}) is deleted", dir,
                            aside.string());
          old_deleted = true;
        }
        report(e);
      };
      try {
        train(cfg, data, false, after);
      } catch (...) {
        if (!old_deleted) {
          std::error_code ec;
          fs::remove_all(dir, ec);
          fs::rename(aside, dir, ec);
          if (ec)
            spdlog::error("compare: cannot move the old run back from {} to {}: {}", aside.string(), dir, ec.message());
          else
            spdlog::warn("compare: the new run of {} failed before its first epoch: the old run is back in place", dir);
        }
        throw;
      }
      return;
    }
  }
}

// Runs the jobs that train, `jobs` at a time (one thread each; each run's
// executor has its own CUDA stream and handles), the others finishing when
// one fails. Fills job.error / job.interrupted.
// The data of every run to train, one TrainData per train_data_key (a variant
// such as no-speed, augment.speed=false, trains without the speed copies).
using DataByKey = std::map<std::string, TrainData>;

void train_all(std::vector<CompareJob>& all, const DataByKey& datas, int jobs, const EpochCallbackMaker& after_epoch) {
  std::vector<CompareJob*> todo;
  for (CompareJob& j : all)
    if (j.action != CompareJob::Action::reuse) todo.push_back(&j);
  auto run_one = [&](CompareJob& j) {
    if (stop_requested()) {
      j.interrupted = true;
      j.interrupt_code = stop_signal() > 0 ? 128 + stop_signal() : 1;
      j.error = "not started (interrupted)";
      return;
    }
    try {
      execute(j, datas.at(train_data_key(j.cfg)), after_epoch);
    } catch (const Interrupted& e) {
      j.interrupted = true;
      j.interrupt_code = e.exit_code();
      j.error = e.what();
    } catch (const std::exception& e) {
      j.error = e.what();
      spdlog::error("compare: {} failed: {}", j.cfg.train_run_dir, e.what());
    }
  };
  if (jobs <= 1 || todo.size() <= 1) {
    for (CompareJob* j : todo) run_one(*j);
    return;
  }
  // Concurrent runs: console lines tagged with the run, one train.log each,
  // no redrawn progress bars (the epoch lines say where each run is).
  prepare_concurrent_logging();
  Progress::set_enabled(false);
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < jobs && w < static_cast<int>(todo.size()); ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
        LogTag tag(todo[i]->name);
        run_one(*todo[i]);
      }
    });
  for (std::thread& t : workers) t.join();
}

}  // namespace

CompareTraining train_compare_runs(ComparePlan& plan, model::Device device, int jobs_arg,
                                   const EpochCallbackMaker& after_epoch) {
  std::vector<CompareJob>& jobs = plan.jobs;
  const config::Config& base = plan.base;
  CompareTraining done;
  for (const CompareJob& j : jobs) done.to_train += j.action != CompareJob::Action::reuse;

  if (done.to_train > 0) {
    DataByKey datas;
    for (const CompareJob& j : jobs) {
      const std::string key = train_data_key(j.cfg);
      if (j.action != CompareJob::Action::reuse && !datas.count(key)) datas.emplace(key, load_train_data(j.cfg));
    }
    const std::string base_key = train_data_key(base);
    const TrainData& data = datas.count(base_key) ? datas.at(base_key) : datas.begin()->second;
    done.jobs_used = jobs_arg > 0 ? jobs_arg : default_compare_jobs(device, base, data, done.to_train);
    done.jobs_used = std::max(1, std::min(done.jobs_used, done.to_train));
    spdlog::info("compare: training {} of {} runs, {} at a time on {}{}", done.to_train, jobs.size(), done.jobs_used,
                 model::device_name(device), device == model::Device::cpu && done.jobs_used > 1 ? " (their parallel sections share one thread pool)" : "");
    const auto t0 = std::chrono::steady_clock::now();
    train_all(jobs, datas, done.jobs_used, after_epoch);
    done.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::string> failed;
    int interrupt_code = 0;
    for (const CompareJob& j : jobs) {
      if (j.error.empty()) continue;
      failed.push_back(j.cfg.train_run_dir + ": " + j.error);
      if (j.interrupted) interrupt_code = j.interrupt_code;
    }
    if (!failed.empty()) {
      const std::string msg = "compare: " + std::to_string(failed.size()) + " of " + std::to_string(done.to_train) +
                              " runs did not finish (the others did; run compare again to resume or retrain "
                              "them): " + joined(failed);
      if (interrupt_code) throw Interrupted(msg, interrupt_code);
      throw std::runtime_error(msg);
    }
    spdlog::info("compare: trained {} runs in {:.1f} s, {} at a time", done.to_train, done.wall_seconds, done.jobs_used);
  }
  return done;
}

}  // namespace timitseg::train
