// timitseg augment: a TIMIT-layout corpus copy with augmented audio
// (data/augment_corpus.h; docs/training.md "Augmentation and noise").
#include <spdlog/spdlog.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/enum_flags.h"
#include "data/corpus.h"
#include "data/augment_corpus.h"
#include "settings/limits.h"

namespace timitseg::app {
namespace {

// "A:B" or "A" (dB) -> [min, max].
void parse_snr(const std::string& text, double* lo, double* hi) {
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    *lo = std::stod(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon)) throw std::invalid_argument("");
    *hi = *lo;
    if (colon != std::string::npos) {
      const std::string b = text.substr(colon + 1);
      *hi = std::stod(b, &used);
      if (used != b.size()) throw std::invalid_argument("");
    }
  } catch (const std::exception&) {
    throw std::invalid_argument("--snr '" + text + "': expected DB or MIN:MAX in dB, e.g. 10 or 0:20");
  }
  if (!std::isfinite(*lo) || !std::isfinite(*hi) || *lo > *hi)
    throw std::invalid_argument("--snr '" + text + "': expected finite dB with MIN <= MAX");
}

}  // namespace

void add_augment_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "augment",
      "Write a copy of a TIMIT-layout corpus with augmented audio, for `prepare --timit`: every input file linked, "
      "plus speed-perturbed (--speed) and noisy (--noise) copies of each TRAIN utterance in its speaker folder "
      "(NAME_augspNNN, NAME_augnoise; train's augment.speed / augment.noise choose them), or with --noisy-test every "
      "TEST utterance's audio replaced by a noisy one (labels unchanged). Deterministic per seed "
      "(docs/training.md \"Augmentation and noise\").");
  auto o = std::make_shared<data::AugmentCorpusOptions>();
  auto snr = std::make_shared<std::string>("10");
  auto skip = std::make_shared<std::string>();
  sub->add_option("--timit", o->in_dir, "The corpus (TIMIT layout: TRAIN/TEST/DRn/SPEAKER/UTT.WAV + .PHN)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--out", o->out_dir, "Output folder: must not exist (written as OUT.partial, then renamed)")
      ->required();
  sub->add_option("--speed", o->speeds,
                  "Speed factors of the TRAIN copies, comma-separated (e.g. 0.9,1.1): audio resampled with libsoxr "
                  "(pitch and tempo change), label sample positions divided by the factor")
      ->delimiter(',');
  add_enum_option<data::NoiseKind>(sub, "--noise", &o->noise,
                  "Additive noise: white, pink (generated) or babble (--babble-talkers other TRAIN utterances of "
                  "other speakers, summed)");
  sub->add_option("--snr", *snr,
                  "Signal-to-noise ratio in dB over the whole utterance: DB, or MIN:MAX for one drawn uniformly per "
                  "utterance")
      ->capture_default_str();
  sub->add_flag("--noisy-test", o->noisy_test,
                "Replace every TEST utterance's audio by speech + --noise at --snr (same names and labels) instead "
                "of adding TRAIN copies; TRAIN is linked unchanged, so the prepared copy has the clean copy's train "
                "split and CMVN");
  sub->add_option("--skip-speakers", *skip,
                  "TRAIN speakers (comma-separated, e.g. the dev speakers prepare takes from TRAIN: manifest.json "
                  "split_rule.dev.speakers) that get no copies");
  sub->add_option("--babble-talkers", o->babble_talkers, "Talkers summed into babble")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  sub->add_option("--seed", o->seed, "Random seed (same seed, same copy)")->capture_default_str();
  sub->add_option("--threads", o->threads, "Worker threads (0: all cores); the copy is the same for any count")
      ->capture_default_str()
      ->check(CLI::Range(limits::kThreads.lo, limits::kThreads.hi));
  sub->callback([o, snr, skip] {
    parse_snr(*snr, &o->snr_min, &o->snr_max);
    std::istringstream in(*skip);
    for (std::string s; std::getline(in, s, ',');)
      if (!s.empty()) o->skip_speakers.push_back(data::to_lower(s));
    const data::AugmentCorpusSummary s = data::augment_corpus(*o);
    spdlog::info("{}: {} utterances written ({:.1f} s of audio, {} scaled down to fit 16 bits), {} files linked, "
                 "{:.1f} s",
                 o->out_dir, s.written, s.audio_seconds, s.rescaled, s.linked, s.wall_seconds);
  });
}

}  // namespace timitseg::app
