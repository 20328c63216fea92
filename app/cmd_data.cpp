// Subcommands of the data layer: prepare, features, synth (docs/data.md,
// docs/features.md, docs/synth.md).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/enum_flags.h"
#include "common/files.h"
#include "settings/limits.h"
#include "common/interrupt.h"
#include "common/parallel.h"
#include "common/safetensors.h"
#include "data/dataset.h"
#include "data/features.h"
#include "data/synth.h"

namespace timitseg::app {

namespace {

// Feature flags shared by `prepare` and `features`: each overrides the default of
// the chosen --features type only when given.
struct FeatureFlags {
  std::string type = "mfcc";
  int sample_rate = 16000, num_mel_bins = 23, num_ceps = 13;
  double frame_length_ms = 25, frame_shift_ms = 10, preemph = 0.97, low_freq = 20, high_freq = 0, lifter = 22;
  std::string window = "povey";
  bool no_energy = false, energy = false, no_deltas = false, deltas = false, no_dc = false, no_snip = false,
       allow_resample = false;
  std::vector<std::pair<CLI::Option*, std::function<void(data::FeatureOptions&)>>> setters;

  // prepare: true adds --allow-resample (features and decode always resample, saying so).
  void add(CLI::App* s, bool prepare) {
    s->add_option("--features", type, "Feature type: mfcc (13 cepstra with c0 = log energy, + deltas + delta-deltas = 39 "
                                      "dims) or fbank (40 log-mel bins)")
        ->check(CLI::IsMember({"mfcc", "fbank"}))
        ->capture_default_str();
    auto opt = [&](CLI::Option* o, std::function<void(data::FeatureOptions&)> f) { setters.emplace_back(o, f); };
    opt(s->add_option("--sample-rate", sample_rate, "Expected audio sample rate in Hz (default 16000)"),
        [this](data::FeatureOptions& o) { o.sample_rate = sample_rate; });
    opt(s->add_option("--frame-length-ms", frame_length_ms, "Frame length in ms (default 25)"),
        [this](data::FeatureOptions& o) { o.frame_length_ms = frame_length_ms; });
    opt(s->add_option("--frame-shift-ms", frame_shift_ms, "Frame shift in ms (default 10)"),
        [this](data::FeatureOptions& o) { o.frame_shift_ms = frame_shift_ms; });
    opt(s->add_option("--preemph", preemph, "Pre-emphasis coefficient (default 0.97; 0 disables)"),
        [this](data::FeatureOptions& o) { o.preemph_coeff = preemph; });
    opt(s->add_option("--window", window, "Window: povey (default), hamming, hanning, sine, blackman, rectangular"),
        [this](data::FeatureOptions& o) { o.window_type = data::parse_window_type(window); });
    opt(s->add_option("--num-mel-bins", num_mel_bins, "Number of mel bins (default 23 for mfcc, 40 for fbank)"),
        [this](data::FeatureOptions& o) { o.num_mel_bins = num_mel_bins; });
    opt(s->add_option("--low-freq", low_freq, "Lowest mel filter edge in Hz (default 20)"),
        [this](data::FeatureOptions& o) { o.low_freq = low_freq; });
    opt(s->add_option("--high-freq", high_freq, "Highest mel filter edge in Hz; <= 0 is an offset from Nyquist "
                                                "(default 0 = Nyquist)"),
        [this](data::FeatureOptions& o) { o.high_freq = high_freq; });
    opt(s->add_option("--num-ceps", num_ceps, "mfcc: number of cepstra kept (default 13)"),
        [this](data::FeatureOptions& o) { o.num_ceps = num_ceps; });
    opt(s->add_option("--cepstral-lifter", lifter, "mfcc: cepstral lifter coefficient (default 22; 0 disables)"),
        [this](data::FeatureOptions& o) { o.cepstral_lifter = lifter; });
    opt(s->add_flag("--no-energy", no_energy, "mfcc: keep c0 instead of replacing it by the log energy"),
        [](data::FeatureOptions& o) { o.use_energy = false; });
    opt(s->add_flag("--energy", energy, "fbank: prepend the log energy as dimension 0 (Kaldi --use-energy)"),
        [](data::FeatureOptions& o) { o.use_energy = true; });
    opt(s->add_flag("--no-deltas", no_deltas, "mfcc: no deltas / delta-deltas (13 dims instead of 39)"),
        [](data::FeatureOptions& o) { o.deltas = false; });
    opt(s->add_flag("--deltas", deltas, "fbank: append deltas and delta-deltas (3x dims)"),
        [](data::FeatureOptions& o) { o.deltas = true; });
    opt(s->add_flag("--no-dc-removal", no_dc, "Do not subtract each frame's mean"),
        [](data::FeatureOptions& o) { o.remove_dc_offset = false; });
    opt(s->add_flag("--no-snip-edges", no_snip, "Kaldi --snip-edges=false: frames centred on t*shift + shift/2, "
                                                "edges reflected"),
        [](data::FeatureOptions& o) { o.snip_edges = false; });
    if (prepare)
      opt(s->add_flag("--allow-resample", allow_resample,
                      "Accept audio at another sample rate, sample size or channel count, resampling it with "
                      "libsoxr and down-mixing it (mean of the channels), instead of skipping the utterance "
                      "(`features` and `decode` always do this, saying so)"),
          [](data::FeatureOptions& o) { o.allow_resample = true; });
  }
  data::FeatureOptions options() const {
    data::FeatureOptions o = data::FeatureOptions::defaults_for(data::parse_feature_type(type));
    for (const auto& [opt, set] : setters)
      if (opt->count() > 0) set(o);
    data::validate(o);
    return o;
  }
};

// prepare's options for corpora other than TIMIT (--corpus and the options that need it).
void add_corpus_options(CLI::App* sub, CLI::Option* timit_opt, data::PrepareOptions& corpus) {
  auto* corpus_opt = sub->add_option(
      "--corpus", corpus.corpus_dir,
      "Any other labelled corpus: a folder (or a manifest file) read in --format (docs/data.md \"Other corpora\")");
  corpus_opt->excludes(timit_opt);
  add_enum_option<data::CorpusFormat>(sub, "--format", &corpus.corpus_format,
                  "With --corpus: timit | textgrid (MFA layout: SPEAKER/UTT.wav beside UTT.TextGrid, or beside "
                  "UTT.lab/UTT.txt holding its words) | buckeye (speaker folders of .wav + .phones) | kaldi (wav.scp, "
                  "segments, utt2spk, phones.ctm or, without times, text) | manifest (CSV or JSON lines; columns "
                  "labels/segments with times, phones/text without) | librispeech (SPEAKER/CHAPTER/*.flac with "
                  "SPEAKER-CHAPTER.trans.txt). Default: detected when exactly one layout fits")
      ->needs(corpus_opt);
  sub->add_option("--phone-set", corpus.phone_set,
                  "With --corpus: the phone-set file (YAML, docs/phone_sets.md) or a builtin name (timit61, "
                  "buckeye, ...) the labels are mapped through. Default: the format's own (timit: timit61, or the "
                  "corpus's phone_set.yaml when it holds another set; buckeye: the shipped one), else derived from "
                  "the train split's labels (written to WORKDIR/phone_set.yaml and printed)")
      ->needs(corpus_opt);
  sub->add_option("--dict", corpus.dict,
                  "With --corpus, word transcripts (labels without times): the pronunciation dictionary turning "
                  "words into phones: MFA's format ('word [prob ...] phone phone ...'), CMUdict's or TIMIT's; a "
                  "word's several pronunciations are all offered to the training loss (a phone graph, the most "
                  "probable first; their count is in manifest.json). Without --phone-set the phone set is the dictionary's phones plus silence. A word "
                  "missing from it (and --g2p): one line naming it and its utterance, which is skipped")
      ->needs(corpus_opt);
  add_enum_option<data::DictFormatSetting>(sub, "--dict-format", &corpus.dict_format,
                                           "With --dict: timit, cmudict, mfa or auto (default: detected)");
  add_enum_option<data::G2pEngine>(sub, "--g2p", &corpus.g2p,
                  "With --corpus, word transcripts: espeak: words (missing from --dict) pronounced by espeak-ng in "
                  "--language, in the IPA phones `synth --voice espeak` labels with")
      ->needs(corpus_opt);
  sub->add_option("--language", corpus.language, "With --g2p espeak: the espeak-ng language (en-us, es, de, fr, ...)");
  sub->add_option("--split-file", corpus.split_file,
                  "With --corpus: lines 'SPEAKER train|dev|test' choosing each speaker's split. Default: the corpus's "
                  "own splits (a manifest's split column, Kaldi dirs train/dev/test), else by speaker: a seeded 10% "
                  "dev and 10% test (seed 13; at least one each from 3 speakers; no speaker in two splits)")
      ->needs(corpus_opt);
  sub->add_option("--tier", corpus.tier, "With --format textgrid (or TextGrid label files of a manifest): the name "
                                          "of the phone tier (default: phones)")
      ->needs(corpus_opt);
  sub->add_option("--dev-fraction", corpus.dev_fraction,
                  "With --corpus, splits by speaker: the fraction of speakers held out as dev (default 0.1)")
      ->check(CLI::Range(0.0, 0.9))->needs(corpus_opt);
  sub->add_option("--test-fraction", corpus.test_fraction,
                  "With --corpus, splits by speaker: the fraction of speakers held out as test (default 0.1)")
      ->check(CLI::Range(0.0, 0.9))->needs(corpus_opt);
}

// timitseg prepare (data::prepare) and its summary lines.
void add_prepare_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "prepare",
      "Read a TIMIT tree (TRAIN/TEST, either letter case, NIST SPHERE or RIFF .WAV + .PHN), or with --corpus a "
      "TextGrid, Buckeye, Kaldi, manifest or LibriSpeech corpus (labels with times, or transcripts without), "
      "validate it, and write "
      "features, frame labels, segments, CMVN statistics, phone maps and duration statistics for the splits train, "
      "dev, core-test and test to WORKDIR (see docs/data.md). Re-running with the same corpus and options does "
      "nothing unless --force.");
  auto dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(0);
  auto strict = std::make_shared<bool>(false);
  auto force = std::make_shared<bool>(false);
  auto quiet = std::make_shared<bool>(false);
  auto dev_speakers = std::make_shared<int>(0);
  auto ff = std::make_shared<FeatureFlags>();
  auto corpus = std::make_shared<data::PrepareOptions>();
  auto* timit_opt = sub->add_option("--timit", *dir, "TIMIT root folder (holds TRAIN and TEST); the same as --corpus DIR "
                                                     "--format timit");
  add_corpus_options(sub, timit_opt, *corpus);
  sub->add_option("--out", *out, "Output WORKDIR (created if missing; an existing folder must be empty or a "
                                 "WORKDIR prepare wrote, recognized by its manifest.json)")->required();
  sub->add_option("--threads", *threads, "Worker threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_flag("--strict", *strict, "Stop with a non-zero exit at any bad utterance (default: skip it with a "
                                    "warning and count it; the summary counts skipped utterances and warnings per "
                                    "kind)");
  sub->add_flag("--force", *force, "Recompute even if WORKDIR is up to date");
  sub->add_flag("--no-progress", *quiet, "No progress bar");
  sub->add_option("--dev-speakers", *dev_speakers,
                  "Own corpora only (no TEST speaker on the standard dev list): hold N TRAIN speakers out of train "
                  "as the dev split (default: a seeded 10% of them, at least one; recorded in manifest.json)")
      ->check(CLI::PositiveNumber);
  ff->add(sub, /*prepare=*/true);
  sub->callback([=] {
    if (dir->empty() && corpus->corpus_dir.empty())
      throw std::invalid_argument("prepare: give the corpus: --timit DIR (TIMIT) or --corpus DIR [--format F]");
    data::PrepareOptions prepare_opts = *corpus;
    prepare_opts.timit_dir = *dir;
    prepare_opts.workdir = *out;
    prepare_opts.features = ff->options();
    prepare_opts.threads = *threads;
    prepare_opts.strict = *strict;
    prepare_opts.force = *force;
    prepare_opts.progress = !*quiet;
    prepare_opts.dev_speakers = *dev_speakers;
    install_stop_handlers();  // SIGINT/SIGTERM: one line, exit 130/143, the WORKDIR as it was (common/interrupt.h)
    const data::PrepareSummary s = data::prepare(prepare_opts);
    if (s.up_to_date) {
      spdlog::info("{}: up to date (same corpus and options); nothing to do (--force recomputes)", *out);
    } else {
      spdlog::info("found {} utterances: {} SA excluded, {} skipped (bad), {} warnings", s.utterances_found,
                   s.sa_excluded, s.skipped, s.warnings);
      if (s.transcript_only > 0)
        spdlog::info("{} utterance{} prepared from a transcript only (no times)", s.transcript_only,
                     s.transcript_only == 1 ? "" : "s");
      const int threads = resolve_threads(prepare_opts.threads);
      spdlog::info("{:.1f} s of audio in {:.2f} s wall: {:.1f} s of audio per second ({} thread{})", s.audio_seconds,
                   s.wall_seconds, s.audio_seconds / std::max(s.wall_seconds, 1e-9), threads, threads == 1 ? "" : "s");
    }
    // per kind, most frequent first: "skipped: 2 unknown phone, 1 truncated audio"
    auto by_kind = [](const std::map<std::string, int64_t>& m) {
      std::vector<std::pair<std::string, int64_t>> v(m.begin(), m.end());
      std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      std::string out;
      for (const auto& [k, n] : v) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + k;
      return out;
    };
    if (!s.skipped_by_kind.empty()) spdlog::info("  skipped: {}", by_kind(s.skipped_by_kind));
    if (!s.warnings_by_kind.empty()) spdlog::info("  warnings: {}", by_kind(s.warnings_by_kind));
    for (const auto& c : s.splits)
      spdlog::info("  {:<9} {:>5} utterances {:>4} speakers {:>8} frames {:>8.1f} s", c.name, c.utterances,
                   c.speakers, c.frames, c.seconds);
    if (s.dev_rule == "from train") {
      std::string ids;
      for (const auto& id : s.dev_speaker_ids) ids += (ids.empty() ? "" : " ") + id;
      spdlog::info("  dev: {} TRAIN speaker{} held out of train (no standard dev speaker in TEST): {}",
                   s.dev_speaker_ids.size(), s.dev_speaker_ids.size() == 1 ? "" : "s", ids);
    }
    if (s.core_test_rule == "empty")
      spdlog::info("  core-test: empty (no speaker of the standard core-test list in TEST)");
  });
}

// timitseg features: raw features of audio files.
void add_features_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "features",
      "Raw (not normalized) Kaldi-compatible features of audio files (NIST SPHERE or RIFF WAV): one F32 "
      "[frames, dims] tensor per input, named by the path as given, in one safetensors file (docs/features.md). "
      "Audio at another rate or with several channels is resampled to --sample-rate (libsoxr) and down-mixed "
      "(mean of the channels), with one line saying so.");
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto ff = std::make_shared<FeatureFlags>();
  sub->add_option("wav", *inputs, "Audio files")->required();
  sub->add_option("--out", *out, "Output .safetensors file (written atomically)")->required();
  ff->add(sub, /*prepare=*/false);
  sub->callback([=] {
    check_output_file("--out", *out, "features.safetensors");  // before any work
    const data::FeatureOptions o = ff->options();
    st::File f;
    f.metadata["feature_options"] = data::feature_options_to_json(o, /*with_info=*/true).dump();
    for (const auto& path : *inputs) {
      if (f.tensors.count(path)) throw std::invalid_argument(path + ": given twice");
      // any rate and channel count: resampled (libsoxr) and down-mixed, saying so
      std::string converted;
      const data::Audio a = data::to_rate(data::read_audio(path), o.sample_rate, &converted);
      if (!converted.empty()) spdlog::info("{}: {}", path, converted);
      int32_t T = 0;
      std::vector<float> x;
      try {
        x = data::compute_features(a, o, &T);
      } catch (const std::exception& e) {
        throw std::runtime_error(path + ": " + e.what());
      }
      f.tensors[path] = st::Tensor::from<float>({T, o.dim()}, x);
      spdlog::info("{}: {} frames x {} dims", path, T, o.dim());
    }
    st::save(*out, f);
  });
}

// timitseg synth: a synthetic labelled corpus (TIMIT's layout or another).
void add_synth_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "synth",
      "Write a synthetic labelled corpus, 16 kHz 16-bit: per-phone source-filter synthesis (--voice tones), English "
      "spoken by libflite (--voice flite), or any espeak-ng language (--voice espeak --language LANG); in TIMIT's "
      "layout (TRAIN/TEST/DRn/SPEAKER/UTT.WAV + .PHN) or --format textgrid|buckeye|kaldi|manifest|librispeech. TEST holds speakers "
      "of the dev and core-test lists so every split is non-empty. Deterministic per seed (docs/synth.md).");
  auto o = std::make_shared<data::SynthOptions>();
  sub->add_option("--out", o->out_dir, "Output folder: must not exist or be empty (synth never merges corpora)")->required();
  sub->add_option("--speakers", o->speakers, "Number of speakers (>= 4; a third, at least 3, go to TEST)")
      ->capture_default_str()
      ->check(CLI::Range(4, 10000));
  sub->add_option("--utterances-per-speaker", o->utterances_per_speaker,
                  "SI/SX utterances per speaker (each speaker also gets one SA1, which prepare excludes; only the "
                  "timit layout writes it)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--seed", o->seed, "Random seed (same seed, same corpus)")->capture_default_str();
  auto* noise = sub->add_option("--noise-db", o->noise_db,
                                "Background noise level relative to the speech RMS, in dB: the centre of a +-7 dB "
                                "range drawn per utterance (--voice flite and espeak: default -30)")
                    ->capture_default_str();
  add_enum_option<data::SynthVoice>(sub, "--voice", &o->voice,
                  "tones: the source-filter synthesizer; flite: random English sentences spoken by libflite's voices "
                  "awb, rms (male speakers) and slt (female), flite's own phone boundaries mapped to TIMIT's 61 "
                  "phones (needs a build with libflite, Debian flite1-dev); espeak: sentences in --language spoken by "
                  "libespeak-ng, labelled with espeak's IPA phone names and 'sil' from its phoneme events (needs a "
                  "build with libespeak-ng, Debian libespeak-ng-dev)")
      ->default_str(common::to_string(o->voice));
  sub->add_option("--language", o->language,
                  "--voice espeak: an espeak-ng language code (es, de, cmn, fr, en-us, ... : espeak-ng --voices); "
                  "word lists are shipped for cmn de en es fr it nl, any other language needs --text");
  sub->add_option("--text", o->text_file,
                  "--voice espeak: a UTF-8 file of sentences in --language, one per line; each utterance speaks a "
                  "line drawn at random (seeded) (default: random 4-10 word sentences of the shipped word list)")
      ->check(CLI::ExistingFile);
  // --format: a layout, or sphere/riff (the timit layout with that --audio, applied after --audio as before).
  auto old_spelling = std::make_shared<std::optional<data::SynthAudio>>();
  std::vector<std::string> layout_words = common::enum_words<data::CorpusFormat>();
  for (const std::string& w : common::enum_words<data::SynthAudio>()) layout_words.push_back(w);
  auto* layout = sub->add_option_function<std::string>(
      "--format",
      [o, old_spelling](const std::string& w) {
        data::SynthAudio audio{};
        if (common::parse_enum(w, &audio)) *old_spelling = audio, o->layout = data::CorpusFormat::timit;
        else o->layout = common::enum_value<data::CorpusFormat>(w, "--format"), old_spelling->reset();
      },
      "Corpus layout: timit (TRAIN/TEST/DRn/SPEAKER/UTT.WAV + .PHN; espeak adds .WRD and .TXT), textgrid (MFA: "
      "SPEAKER/UTT.wav + UTT.TextGrid, tiers words and phones), buckeye (SPEAKER/UTT.wav + .phones + .words), kaldi "
      "(train/dev/test: wav.scp, segments, utt2spk, spk2utt, text, phones.ctm), manifest (manifest.jsonl) or "
      "librispeech (--voice espeak: SUBSET/SPEAKER/CHAPTER/*.flac + SPEAKER-CHAPTER.trans.txt, the words without "
      "times; SUBSET train-clean, dev-clean, test-clean); sphere and riff are the old spellings of timit with --audio "
      "sphere / riff");
  layout->check(CLI::IsMember(layout_words))->default_str(common::to_string(o->layout));
  add_enum_option<data::SynthAudio>(sub, "--audio", &o->format,
                  "The timit layout's audio: sphere (NIST SPHERE, as on the LDC discs) or riff (RIFF WAV); the other "
                  "layouts write RIFF .wav")
      ->default_str(common::to_string(o->format));
  sub->add_option("--threads", o->threads,
                  "Worker threads (0: all cores); the corpus is the same for any count (flite synthesizes one "
                  "utterance at a time; espeak-ng one per worker, each in its own process)")
      ->capture_default_str()
      ->check(CLI::Range(limits::kThreads.lo, limits::kThreads.hi));
  sub->add_flag("--lower-case", o->lower_case, "timit layout: lower-case file and folder names (default: upper case, "
                                               "as on the LDC discs)");
  sub->callback([o, noise, old_spelling] {
    if (*old_spelling) o->format = **old_spelling;
    if (o->voice != data::SynthVoice::tones && noise->count() == 0) o->noise_db = data::kFliteNoiseDb;
    const data::SynthSummary s = data::synth_corpus(*o);
    spdlog::info("{}: {} utterances ({:.1f} s of audio, {} layout); TRAIN {} speakers, TEST {} speakers ({} dev, {} "
                 "core-test)",
                 o->out_dir, s.files, s.seconds, common::to_string(o->layout), s.train_speakers, s.test_speakers, s.dev_speakers,
                 s.core_test_speakers);
  });
}

}  // namespace

void add_data_commands(CLI::App& app) {
  add_prepare_command(app);
  add_features_command(app);
  add_synth_command(app);
}

}  // namespace timitseg::app
