#include "data/augment_corpus.h"

#include <sndfile.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/files.h"
#include "common/parallel.h"
#include "data/augment.h"
#include "data/corpus.h"
#include "data/features.h"

namespace timitseg::data {
namespace fs = std::filesystem;
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The engine of one draw: (seed, utterance id, what), independent of threads.
std::mt19937_64 engine_for(uint64_t seed, const std::string& id, const std::string& what) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(fnv1a(id)), static_cast<uint32_t>(fnv1a(id) >> 32),
                    static_cast<uint32_t>(fnv1a(what))};
  return std::mt19937_64(seq);
}

// 16-bit RIFF WAV at `rate`; a mix whose peak leaves the 16-bit range is
// scaled down as a whole (returns true then).
bool write_wav16(const std::string& path, std::vector<float> x, int rate) {
  float peak = 0;
  for (float v : x) peak = std::max(peak, std::fabs(v));
  const bool rescale = peak > 32767.0f;
  if (rescale)
    for (float& v : x) v = v * (32767.0f / peak);
  std::vector<int16_t> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) s[i] = static_cast<int16_t>(std::lrint(std::clamp(x[i], -32768.0f, 32767.0f)));
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!f) throw std::runtime_error(path + ": cannot write audio: " + sf_strerror(nullptr));
  const sf_count_t wrote = sf_write_short(f, s.data(), static_cast<sf_count_t>(s.size()));
  sf_close(f);
  if (wrote != static_cast<sf_count_t>(s.size())) throw std::runtime_error(path + ": short write");
  return rescale;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream o(path, std::ios::binary);
  o << text;
  if (!o.flush()) throw std::runtime_error(path.string() + ": cannot write");
}

// The label files beside an utterance's audio: extension (".PHN" as found) -> path.
std::map<std::string, fs::path> label_files(const CorpusUtterance& u) {
  std::map<std::string, fs::path> out;
  const fs::path wav(u.wav_path);
  for (const auto& e : fs::directory_iterator(wav.parent_path())) {
    const std::string f = e.path().filename().string();
    if (f.size() != u.name.size() + 4) continue;
    std::string lower = f;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::string ext = lower.substr(u.name.size());
    if (lower.compare(0, u.name.size(), u.name) == 0 && (ext == ".phn" || ext == ".wrd" || ext == ".txt"))
      out[f.substr(u.name.size())] = e.path();
  }
  return out;
}

// The output path of `in` (a file under in_dir) under out_dir, with the file's stem replaced by `stem`.
fs::path out_path(const AugmentCorpusOptions& o, const fs::path& in, const std::string& stem, const fs::path& root) {
  fs::path rel = fs::relative(in, o.in_dir);
  const std::string name = rel.filename().string();
  const size_t dot = name.find('.');
  rel.replace_filename(stem + name.substr(dot));
  return root / rel;
}

struct Job {
  const CorpusUtterance* u = nullptr;
  double factor = 1.0;  // speed
  bool noise = false;
};

class Writer {
 public:
  Writer(const AugmentCorpusOptions& o, const std::vector<CorpusUtterance>& all, fs::path root)
      : o_(o), root_(std::move(root)) {
    for (const CorpusUtterance& u : all)
      if (u.part == SplitName::train && !u.wav_path.empty() && !u.is_sa()) talkers_.push_back(&u);
    if (o_.noise == NoiseKind::babble && talkers_.empty())
      throw std::invalid_argument("augment: babble noise needs TRAIN utterances (its talkers) in " + o_.in_dir);
  }

  // Writes one job; returns {seconds written, rescaled}.
  std::pair<double, bool> run(const Job& j) const {
    const CorpusUtterance& u = *j.u;
    const Audio a = read_audio(u.wav_path);
    std::vector<float> x = a.samples;
    // the copy's name: the file's own stem (its letter case) and the suffix in that case
    const std::string file = fs::path(u.wav_path).filename().string(), orig = file.substr(0, file.find('.'));
    const bool upper = std::none_of(orig.begin(), orig.end(), [](unsigned char c) { return std::islower(c); });
    auto with_suffix = [&](std::string suffix) {
      if (upper) std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return std::toupper(c); });
      return orig + suffix;
    };
    std::string stem = orig;
    if (j.noise) {
      std::mt19937_64 rng = engine_for(o_.seed, u.id(), "noise");
      const double snr = o_.snr_min + (o_.snr_max - o_.snr_min) * (static_cast<double>(rng() >> 11) * 0x1.0p-53);
      x = mix_at_snr(x, noise(u, x.size(), rng), snr);
      if (!o_.noisy_test) stem = with_suffix(kNoiseSuffix);
    } else {
      x = speed_perturb(x, j.factor);
      stem = with_suffix(speed_suffix(j.factor));
    }
    const fs::path wav = out_path(o_, u.wav_path, stem, root_);
    const bool rescaled = write_wav16(wav.string(), x, a.sample_rate);
    if (stem != orig)  // a copy: its own label files (scaled by a speed factor)
      for (const auto& [ext, path] : label_files(u)) {
        const std::string text = read_file(path.string());
        write_text(out_path(o_, path, stem, root_),
                   j.noise ? text : scale_label_text(path.string(), text, j.factor, static_cast<int64_t>(x.size())));
      }
    return {static_cast<double>(x.size()) / a.sample_rate, rescaled};
  }

 private:
  std::vector<float> noise(const CorpusUtterance& u, size_t n, std::mt19937_64& rng) const {
    if (o_.noise == NoiseKind::white) return white_noise(n, rng);
    if (o_.noise == NoiseKind::pink) return pink_noise(n, rng);
    std::vector<std::vector<float>> talk;
    for (int k = 0, tries = 0; k < o_.babble_talkers && tries < 100 * o_.babble_talkers; ++tries) {
      const CorpusUtterance& t = *talkers_[rng() % talkers_.size()];
      if (t.speaker == u.speaker) continue;
      talk.push_back(read_audio(t.wav_path).samples);
      ++k;
    }
    if (talk.empty())
      throw std::invalid_argument("augment: babble for " + u.wav_path + " needs TRAIN utterances of other speakers");
    return babble_noise(n, talk, rng);
  }
  const AugmentCorpusOptions& o_;
  fs::path root_;
  std::vector<const CorpusUtterance*> talkers_;
};

void check_options(const AugmentCorpusOptions& o) {
  for (double f : o.speeds)
    if (!(f >= 0.5 && f <= 2.0) || std::lround(100 * f) == 100)
      throw std::invalid_argument("augment: speed factor " + std::to_string(f) + " must be in [0.5, 2] and not 1");
  if (!(o.snr_min <= o.snr_max) || !std::isfinite(o.snr_min) || !std::isfinite(o.snr_max))
    throw std::invalid_argument("augment: the SNR range must be finite with min <= max");
  if (o.noisy_test && (!o.noise || !o.speeds.empty()))
    throw std::invalid_argument("augment: a noisy test copy needs a noise and no speed factor");
  if (!o.noisy_test && !o.noise && o.speeds.empty())
    throw std::invalid_argument("augment: nothing to do (give speed factors, a noise, or a noisy test copy)");
  if (o.babble_talkers < 1) throw std::invalid_argument("augment: babble needs at least 1 talker");
  if (fs::exists(o.out_dir)) throw std::invalid_argument("augment: " + o.out_dir + " exists (give a new folder)");
  const fs::path in = fs::weakly_canonical(o.in_dir), out = fs::weakly_canonical(o.out_dir);
  const auto mismatch = std::mismatch(in.begin(), in.end(), out.begin(), out.end()).first;
  if (mismatch == in.end())
    throw std::invalid_argument("augment: " + o.out_dir + " is inside the corpus " + o.in_dir + " (give a folder outside it)");
}

}  // namespace

std::string scale_label_text(const std::string& path, const std::string& text, double factor, int64_t num_samples) {
  std::istringstream in(text);
  std::string line, out;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::istringstream ls(line);
    int64_t s = 0, e = 0;
    std::string rest;
    if (!(ls >> s >> e)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      throw std::runtime_error(path + ":" + std::to_string(n) + ": expected 'start end label'");
    }
    std::getline(ls, rest);
    const int64_t s2 = std::min(speed_position(s, factor), num_samples);
    const int64_t e2 = std::min(speed_position(e, factor), num_samples);
    out += std::to_string(s2) + " " + std::to_string(e2) + rest + "\n";
  }
  return out;
}

namespace {

// OUT.partial: the input's folders made, its files linked (absolute targets)
// unless replaced, the jobs' audio and labels written.
void write_copy(const AugmentCorpusOptions& o, const std::vector<CorpusUtterance>& all, const std::vector<Job>& jobs,
                const std::set<std::string>& replaced, const fs::path& partial, AugmentCorpusSummary& sum) {
  // the tree: folders made, files linked (absolute targets) unless replaced
  const fs::path in_abs = fs::absolute(o.in_dir).lexically_normal();
  for (auto it = fs::recursive_directory_iterator(in_abs, fs::directory_options::follow_directory_symlink);
       it != fs::recursive_directory_iterator(); ++it) {
    const fs::path rel = fs::relative(it->path(), in_abs), dst = partial / rel;
    if (it->is_directory()) {
      fs::create_directories(dst);
    } else if (!replaced.count(it->path().lexically_normal().string())) {
      fs::create_directories(dst.parent_path());
      fs::create_symlink(fs::canonical(it->path()), dst);
      ++sum.linked;
    }
  }
  AugmentCorpusOptions absolute_in_opts = o;
  absolute_in_opts.in_dir = in_abs.string();
  const Writer w(absolute_in_opts, all, partial);
  std::vector<std::pair<double, bool>> done(jobs.size());
  parallel_for(static_cast<int64_t>(jobs.size()), resolve_threads(o.threads), [&](int64_t i, int) {
    Job j = jobs[static_cast<size_t>(i)];
    CorpusUtterance u = *j.u;
    u.wav_path = fs::absolute(u.wav_path).lexically_normal().string();
    j.u = &u;
    done[static_cast<size_t>(i)] = w.run(j);
  });
  for (const auto& [sec, rescaled] : done) {
    sum.audio_seconds += sec;
    sum.rescaled += rescaled ? 1 : 0;
  }
  sum.written = static_cast<int64_t>(jobs.size());
}

}  // namespace

AugmentCorpusSummary augment_corpus(const AugmentCorpusOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(o);
  std::vector<Problem> problems;
  const std::vector<CorpusUtterance> all = scan_timit(o.in_dir, &problems);
  const fs::path partial = fs::path(o.out_dir).concat(".partial");
  fs::remove_all(partial);
  AugmentCorpusSummary sum;
  std::set<std::string> replaced;  // input files the noisy test copy writes anew
  std::vector<Job> jobs;
  const std::set<std::string> skip(o.skip_speakers.begin(), o.skip_speakers.end());
  for (const CorpusUtterance& u : all) {
    if (u.wav_path.empty()) continue;
    if (o.noisy_test) {
      if (u.part != SplitName::test) continue;
      jobs.push_back({&u, 1.0, true});
      replaced.insert(fs::absolute(u.wav_path).lexically_normal().string());
    } else if (u.part == SplitName::train && !u.is_sa() && !u.phn_path.empty() && !skip.count(u.speaker)) {
      for (double f : o.speeds) jobs.push_back({&u, f, false});
      if (o.noise) jobs.push_back({&u, 1.0, true});
    }
  }
  try {
    write_copy(o, all, jobs, replaced, partial, sum);
  } catch (...) {  // nothing half-written is left behind
    std::error_code ec;
    fs::remove_all(partial, ec);
    throw;
  }
  fs::rename(partial, o.out_dir);
  sum.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace timitseg::data
