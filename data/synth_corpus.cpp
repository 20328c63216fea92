// synth_corpus: the utterances of a synth corpus made on worker threads and written
// in the chosen layout (data/synth_layouts.h), staged in OUT.tmp-PID and renamed to
// OUT at the end; see data/synth.h and docs/synth.md.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/progress.h"
#include "data/espeak_tts.h"
#include "data/flite_tts.h"
#include "data/synth.h"
#include "data/synth_espeak.h"
#include "data/synth_flite.h"
#include "data/synth_layouts.h"
#include "data/timit_lists.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

void check_options(const SynthOptions& o) {
  if (o.utterances_per_speaker < 1) throw std::invalid_argument("synth: --utterances-per-speaker must be >= 1");
  if (o.layout == CorpusFormat::librispeech && o.voice != SynthVoice::espeak)
    throw std::invalid_argument("synth --format librispeech: its transcripts are words, which only --voice espeak "
                                "speaks");
  if (o.voice == SynthVoice::flite && !flite_built_in()) throw std::runtime_error(flite_missing_message());
  if (o.voice == SynthVoice::espeak && !espeak_built_in()) throw std::runtime_error(espeak_missing_message());
  if (o.voice == SynthVoice::espeak && o.language.empty())
    throw std::invalid_argument("synth --voice espeak: --language is required (an espeak-ng code: es, de, cmn, fr, "
                                "en-us, ...)");
  if (o.voice != SynthVoice::espeak && (!o.language.empty() || !o.text_file.empty()))
    throw std::invalid_argument("synth: --language and --text are for --voice espeak");
}

// OUT as a path; throws when it exists and is not an empty folder.
fs::path checked_out(const std::string& out_dir) {
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "corpus/" -> "corpus"
  if (out.empty()) throw std::runtime_error("synth: --out is empty");
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) throw std::runtime_error(out_dir + ": exists and is not a folder");
    if (!fs::is_empty(out, ec))
      throw std::runtime_error(out_dir + ": folder exists and is not empty; synth never merges corpora (choose a new "
                               "--out or remove it)");
  }
  return out;
}

// TIMIT-style names: per speaker one SA1, then SI/SX numbered over the corpus.
std::vector<SynthJob> make_jobs(const std::vector<SynthSpeaker>& speakers, int per_speaker) {
  std::vector<SynthJob> jobs;
  for (size_t si = 0; si < speakers.size(); ++si)
    for (int k = -1; k < per_speaker; ++k) {
      const int64_t num = static_cast<int64_t>(si) * per_speaker + k;
      jobs.push_back({si, k, k < 0 ? "sa1" : (k % 3 == 0 ? "si" + std::to_string(1000 + num)
                                                         : "sx" + std::to_string(3 + num))});
    }
  return jobs;
}

// Runs body(j) for j in [0, n) on `threads` workers; the first exception stops the
// others (they finish the job in hand) and is rethrown.
template <class F>
void parallel_jobs(size_t n, int threads, F body) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mu;
  auto worker = [&] {
    for (size_t j; !failed && (j = next++) < n;) {
      try {
        body(j);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

SynthSummary synth_corpus(const SynthOptions& o) {
  check_options(o);
  EspeakTexts texts;
  if (o.voice == SynthVoice::espeak) texts = espeak_texts(o.language, o.text_file);
  const fs::path out = checked_out(o.out_dir);
  // Never merge into an existing corpus: the corpus is built in a temporary
  // folder beside OUT and renamed to OUT at the end, so a failure leaves nothing.
  const fs::path tmp_root = out.parent_path() / (out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  try {
    fs::create_directories(tmp_root);
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error(o.out_dir + ": cannot create the output folder (" + e.code().message() + ")");
  }
  struct Cleanup {
    fs::path dir;
    bool armed = true;
    ~Cleanup() {
      std::error_code ignore;
      if (armed) fs::remove_all(dir, ignore);
    }
  } cleanup{tmp_root};
  const auto speakers = synth_speakers(o.speakers, o.seed);
  const std::vector<SynthJob> jobs = make_jobs(speakers, o.utterances_per_speaker);
  SynthLayoutWriter writer(o, tmp_root, fs::absolute(out), speakers, jobs);
  std::vector<size_t> todo;
  for (size_t j = 0; j < jobs.size(); ++j)
    if (writer.wants(jobs[j])) todo.push_back(j);
  Progress progress(std::string("synth ") + common::to_string(o.voice) + (o.language.empty() ? "" : " " + o.language),
                    static_cast<int64_t>(todo.size()), "utt");
  std::vector<int64_t> samples(jobs.size(), 0);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  parallel_jobs(todo.size(), threads, [&](size_t t) {
    const size_t j = todo[t];
    const SynthJob& job = jobs[j];
    const SynthSpeaker& spk = speakers[job.speaker];
    const bool sa = job.index < 0;
    const SynthUtterance u =
        o.voice == SynthVoice::flite    ? synth_flite_utterance(spk, o.seed, job.index, sa, o.noise_db)
        : o.voice == SynthVoice::espeak ? synth_espeak_utterance(spk, texts, o.seed, job.index, sa, o.noise_db)
                              : synth_utterance(spk, o.seed, job.index, sa, o.noise_db);
    writer.write(j, u);
    samples[j] = static_cast<int64_t>(u.samples.size());
    progress.advance();
  });
  writer.finish();
  progress.finish();
  SynthSummary sum;
  for (const auto& spk : speakers) {
    if (spk.part == SplitName::train) ++sum.train_speakers;
    else {
      ++sum.test_speakers;
      sum.dev_speakers += dev_speakers().count(spk.id) ? 1 : 0;
      sum.core_test_speakers += core_test_speakers().count(spk.id) ? 1 : 0;
    }
  }
  for (size_t j : todo) {
    ++sum.files;
    sum.seconds += static_cast<double>(samples[j]) / 16000.0;
  }
  std::error_code ec;
  fs::rename(tmp_root, out, ec);
  if (ec) throw std::runtime_error(o.out_dir + ": cannot move the finished corpus into place (" + ec.message() + ")");
  cleanup.armed = false;
  return sum;
}

}  // namespace timitseg::data
