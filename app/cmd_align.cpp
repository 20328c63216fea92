// `timitseg align` (forced alignment with a checkpoint) and `timitseg bench
// align` (the constrained Viterbi of a CRF backend on random inputs, timed
// and checked against the reference). docs/align.md.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/bench_inputs.h"
#include "app/commands.h"
#include "app/enum_flags.h"
#include "app/inference_flags.h"
#include "app/long_flags.h"
#include "app/boundaries_flag.h"
#include "app/silence_edge_flags.h"
#include "settings/limits.h"
#include "common/buffer.h"
#include "crf/cumsum.h"
#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "crf/timing.h"
#include "eval/align.h"
#include "eval/formats.h"

namespace timitseg::app {
namespace {

struct BenchAlignOptions {
  int64_t utterances = 1344, batch = 1344, frames = 300, phones = 38, max_duration = 60, classes = 39;
  std::string backend = "cpu";
  int warmup = 1, repeats = 3, threads = 0, check_utterances = 4;
  uint32_t seed = 0;
  bool json = false;
};

// Random inputs of one batch: frame scores N(0,1) through the centered cumsum,
// parameters N(0, 0.5^2), full-length utterances; phone sequences of random
// labels (repeats allowed) of --phones phones each.
struct AlignInputs : RandomCrfInputs {
  int64_t N = 0;
  std::vector<int32_t> phones, nph;  // [B][N] random labels, [B] all N
};

AlignInputs make_align_inputs(const crf::Dims& dims, int64_t N, uint32_t seed) {
  std::mt19937 rng(seed);
  AlignInputs in;
  fill_random_crf_inputs(dims, rng, in);
  in.N = N;
  std::uniform_int_distribution<int32_t> ul(0, static_cast<int32_t>(dims.C - 1));
  in.phones.resize(dims.B * N);
  for (int32_t& p : in.phones) p = ul(rng);
  in.nph.assign(dims.B, static_cast<int32_t>(N));
  return in;
}

void run_bench_align(const BenchAlignOptions& o) {
  if (o.utterances < 1 || o.batch < 1 || o.frames < 1 || o.phones < 1 || o.max_duration < 1 || o.classes < 1)
    throw std::invalid_argument("bench align: --utterances, --batch, --frames, --phones, --max-duration and --classes must be >= 1");
  if (o.phones > o.frames) throw std::invalid_argument("bench align: --phones must be <= --frames (each phone needs a frame)");
  if (o.warmup < 0 || o.repeats < 1 || !limits::kThreads.contains(o.threads) || o.check_utterances < 0)
    throw std::invalid_argument("bench align: --warmup, --check-utterances >= 0, --threads in " +
                                limits::to_string(limits::kThreads) + " and --repeats >= 1");
  const int64_t B = std::min(o.batch, o.utterances);
  const int64_t calls = (o.utterances + B - 1) / B;
  const crf::Dims dims{B, o.frames, o.max_duration, o.classes};
  const AlignInputs in = make_align_inputs(dims, o.phones, o.seed);
  std::unique_ptr<crf::Backend> be = crf::make_backend(crf::backend_kind(o.backend), crf::BackendOptions{o.threads, nullptr});
  crf::Session session(*be);
  // Inputs and outputs in the backend's memory space, allocated once.
  const Memory mem = be->on_device() ? Memory::device : Memory::host;
  auto upload = [&](const auto& v) {
    Buffer b(mem, 0);
    b.upload(v);
    return b;
  };
  Buffer cum = upload(in.cum), A = upload(in.A), D = upload(in.D), s = upload(in.s), e = upload(in.e),
         len = upload(in.lengths), ph = upload(in.phones), np = upload(in.nph);
  Buffer score(mem, B * sizeof(double)), spans(mem, B * in.N * 2 * sizeof(int32_t));
  const crf::Params p{cum.as<float>(), A.as<float>(), D.as<float>(), s.as<float>(), e.as<float>(), len.as<int32_t>()};
  const crf::Timing t = crf::time_calls(*be, o.warmup, o.repeats, [&](int) {
    for (int64_t c = 0; c < calls; ++c)
      session.align(dims, p, in.N, ph.as<int32_t>(), np.as<int32_t>(), nullptr, score.as<double>(),
                    spans.as<int32_t>());
  });
  const double frames = static_cast<double>(calls * B * o.frames);
  // Check: the first utterances on this backend and on the reference.
  int64_t checked = 0, mismatches = 0;
  double max_rel = 0.0;
  if (o.check_utterances > 0) {
    const int64_t n = std::min<int64_t>(o.check_utterances, B);
    AlignInputs h = make_align_inputs(crf::Dims{n, o.frames, o.max_duration, o.classes}, o.phones, o.seed);
    // (inputs of their own, batch n, the same shapes; run on both backends)
    auto ref = crf::make_backend(crf::BackendKind::reference);
    const crf::AlignResult a = crf::align_host(*be, h.dims, h.params(), h.N, h.phones.data(), h.nph.data());
    const crf::AlignResult r = crf::align_host(*ref, h.dims, h.params(), h.N, h.phones.data(), h.nph.data());
    for (int64_t b = 0; b < n; ++b) {
      ++checked;
      max_rel = std::max(max_rel, std::fabs(a.score[b] - r.score[b]) / std::max(1.0, std::fabs(r.score[b])));
      if (!std::equal(a.spans.begin() + b * h.N * 2, a.spans.begin() + (b + 1) * h.N * 2, r.spans.begin() + b * h.N * 2))
        ++mismatches;
    }
  }
  if (o.json) {
    nlohmann::json j = {{"backend", be->name()},      {"utterances", calls * B}, {"batch", B},
                        {"frames", o.frames},         {"phones", o.phones},      {"max_duration", o.max_duration},
                        {"classes", o.classes},       {"median_ms", t.median_ms}, {"min_ms", t.min_ms},
                        {"frames_per_s", frames / (t.median_ms / 1000.0)},       {"checked_utterances", checked},
                        {"max_rel_score_err", max_rel}, {"span_mismatches", mismatches}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("bench align: backend %s, %lld utterances (%lld call(s) of B=%lld), T=%lld frames, N=%lld phones, "
                "K=%lld, C=%lld\n",
                be->name().c_str(), static_cast<long long>(calls * B), static_cast<long long>(calls),
                static_cast<long long>(B), static_cast<long long>(o.frames), static_cast<long long>(o.phones),
                static_cast<long long>(o.max_duration), static_cast<long long>(o.classes));
    std::printf("  align: median %.3f ms, min %.3f ms (%.3g frames/s)\n", t.median_ms, t.min_ms,
                frames / (t.median_ms / 1000.0));
    if (checked)
      std::printf("  check vs reference (%lld utterances): max relative score error %.3g, spans differing: %lld\n",
                  static_cast<long long>(checked), max_rel, static_cast<long long>(mismatches));
  }
  std::fflush(stdout);
  if (max_rel > 1e-9)
    throw std::runtime_error("bench align: the " + be->name() + " backend's scores differ from the reference by " +
                             std::to_string(max_rel) + " (relative)");
}

}  // namespace

// --dict and --dict-format (docs/align.md "Dictionaries").
constexpr const char* kDictHelp =
    "Pronunciation dictionary: TIMIT's TIMITDIC.TXT format ('word  /p h o n e s/', ';' comments, stress digits "
    "dropped), CMUdict's ('WORD  AH0 B ...', ARPAbet mapped to TIMIT phones, WORD(2) variants) or MFA's ('word "
    "[prob [3 silence probs]] phone phone ...', phones as written, in the checkpoint's phone set). A word's several "
    "pronunciations are all offered: each combination (up to 16 per utterance) is aligned and the best score plus "
    "log probability kept. Words missing from it: one line naming them all with their counts, before any work";
constexpr const char* kDictFormatHelp =
    "timit, cmudict, mfa or auto (TIMIT when the first entry holds '/'; CMUdict when every entry's phones are "
    "ARPAbet and one carries a stress digit; else MFA, phones as written)";

// --g2p and --language (docs/align.md "Dictionaries").
void add_g2p_options(CLI::App* c, eval::AlignOptions* o) {
  add_enum_option<data::G2pEngine>(c, "--g2p", &o->g2p,
                "espeak: words missing from --dict are pronounced by espeak-ng in --language (IPA phones, as "
                "`synth --voice espeak` labels them: for checkpoints trained on such phone sets); without it an "
                "utterance with a missing word is left out (one error line) and the others are aligned");
  c->add_option("--language", o->language, "espeak-ng language of --g2p espeak (es, de, fr, cmn, en-us, ...)");
}

// `bench align`: Backend::align timed on random inputs, checked against the reference.
void add_bench_align_command(CLI::App& app) {
  auto b = std::make_shared<BenchAlignOptions>();
  CLI::App* bc = bench_command(app)->add_subcommand(
      "align",
      "Time forced alignment (Backend::align, the constrained Viterbi) of one CRF backend on random inputs shaped like "
      "the TIMIT test set (1344 utterances), then check the first utterances against the reference backend");
  bc->add_option("--utterances", b->utterances, "Utterances aligned per timed run")->capture_default_str();
  bc->add_option("--batch", b->batch, "Utterances per align call")->capture_default_str();
  bc->add_option("--frames", b->frames, "Frames per utterance (T)")->capture_default_str();
  bc->add_option("--phones", b->phones, "Phones per utterance (N <= T)")->capture_default_str();
  bc->add_option("--max-duration", b->max_duration, "K")->capture_default_str();
  bc->add_option("--classes", b->classes, "C")->capture_default_str();
  bc->add_option("--backend", b->backend, "reference, cpu or cuda")
      ->check(CLI::IsMember({"reference", "cpu", "cuda"}))
      ->capture_default_str();
  bc->add_option("--warmup", b->warmup, "Untimed runs first")->capture_default_str();
  bc->add_option("--repeats", b->repeats, "Timed runs (median and minimum printed)")->capture_default_str();
  bc->add_option("--threads", b->threads, "cpu backend threads (0 = all cores)")->capture_default_str();
  bc->add_option("--check-utterances", b->check_utterances, "Utterances checked against the reference (0 = none)")
      ->capture_default_str();
  bc->add_option("--seed", b->seed, "Random seed of the inputs")->capture_default_str();
  bc->add_flag("--json", b->json, "Print the figures as JSON");
  bc->callback([b] { run_bench_align(*b); });
}

void add_align_command(CLI::App& app) {
  auto o = std::make_shared<eval::AlignOptions>();
  auto timit = std::make_shared<std::string>();
  auto no_closures = std::make_shared<bool>(false);
  auto no_edge = std::make_shared<bool>(false);
  auto obligatory = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand(
      "align",
      "Forced alignment: place a known phone (or word) sequence in each audio file with a checkpoint (the semi-CRF's "
      "constrained Viterbi; docs/align.md). Writes one TIMIT .PHN (samples of the file as given) + Praat TextGrid "
      "(tier phones, and words when words were given) per input, atomically, or the formats of --format. A bad file is reported and the others "
      "are still aligned; the exit is then non-zero, with a count.");
  c->add_option("inputs", o->inputs,
                "Audio files (WAV / NIST SPHERE) or folders searched for *.wav / *.WAV; the transcript is the file "
                "beside each (see --transcript)");
  c->add_option("--timit", *timit, "A TIMIT tree (or any folder): every .WAV under it, with the .PHN (or, with --dict, "
                                   ".WRD/.TXT) beside it");
  c->add_option("--checkpoint", o->checkpoint, "Checkpoint (.safetensors) written by train")->required();
  c->add_option("--out", o->out_dir,
                "Output folder: OUT/NAME.PHN and OUT/NAME.TextGrid by default, see --format (folders keep their layout)")
      ->required();
  c->add_option("--phones", o->phones_file,
                "List file instead of inputs: one utterance per line, 'AUDIO phone phone ...' (label-set names or "
                "TIMIT 61-set names; '#' comment lines); no silence is added");
  c->add_option("--words", o->words_file,
                "List file instead of inputs: one utterance per line, 'AUDIO word word ...' (needs --dict)");
  c->add_option("--wav-scp", o->wav_scp,
                "Kaldi style: a wav.scp file, 'UTTID AUDIO' per line; the lines of --phones/--words (e.g. Kaldi's "
                "text) then start with an utterance id instead of an audio path, and outputs are named by the ids");
  add_enum_list_option(c, "--format", &o->formats,
                "Output formats, comma-separated, each file written atomically: phn (NAME.PHN, TIMIT, samples), "
                "textgrid (NAME.TextGrid, Praat), csv (NAME.csv: tier,start,end,start_sample,end_sample,label,"
                "boundary_confidence,label_confidence), json (NAME.json, the same fields), ctm (NAME.ctm, Kaldi CTM of the phones, and NAME.words.ctm with words); words are in "
                "each when words were given");
  c->add_option("--dict", o->dict, kDictHelp);
  c->add_option("--shifts", o->shifts,
                "Move each aligned boundary by its shift (its phone pair's where the file has one, else the phone's "
                "after it): a JSON file written by `evaluate "
                "--align --fit-shifts` with this checkpoint (each phone's median boundary error on a split with "
                "times; docs/align.md \"Calibrating to a labelling convention\"); words follow their phones");
  add_boundaries_flag(c, &o->boundaries, "");
  add_silence_edge_flags(c, &o->silence_edges, &o->silence_edge_options, "");
  add_enum_option<data::DictFormatSetting>(c, "--dict-format", &o->dict_format, kDictFormatHelp)
      ->default_str(common::to_string(o->dict_format));
  add_g2p_options(c, o.get());
  add_enum_option<eval::TranscriptSource>(
      c, "--transcript", &o->transcript,
      "Transcript beside each audio file: phn (its .PHN, times ignored), wrd (.WRD words), txt (.TXT "
      "sentence), auto (with --dict .WRD, .TXT, then the words of a .TextGrid, Buckeye .words or .lab; "
      "else .PHN, then the phones of a .TextGrid, Buckeye .phones or .lab)")
      ->default_str(config::to_string(o->transcript));
  c->add_flag("--no-closures", *no_closures,
              "Words: do not give stops and affricates TIMIT's closure (by default on TIMIT's label sets b -> bcl b, "
              "ch -> tcl ch, ...; never on another phone set)");
  c->add_flag("--no-edge-silence", *no_edge, "Words: no silence before the first and after the last word (h# on TIMIT's label sets, else "
              "the checkpoint's silence label)");
  c->add_flag("--word-silence", o->words.word_silence,
              "Words: a silence (pau on TIMIT's label sets, else the checkpoint's) between every two words, "
              "which the aligner may skip (0 frames) where it hears none");
  c->add_flag("--obligatory-silence", *obligatory,
              "Words: the silences (at the edges, and between words with --word-silence) must take at least one frame "
              "(by default the aligner may skip them)");
  InferenceFlags flags;  // align has no --phone-bonus or --decode: the phones are given
  flags.backend = &o->backend, flags.device = &o->device, flags.batch_size = &o->batch_size, flags.threads = &o->threads;
  add_inference_flags(c, flags, kBackendFlag | kDeviceFlag | kBatchSizeFlag | kThreadsFlag, InferenceUse::alignment);
  add_centre_frames_option(c, &o->centre_frames);
  c->callback([o, timit, no_closures, no_edge, obligatory] {
    eval::AlignOptions a = *o;
    if (!timit->empty()) a.inputs.push_back(*timit);
    a.words.closures = !*no_closures;
    a.words.edge_silence = !*no_edge;
    a.words.optional_silence = !*obligatory;
    eval::align(a);
  });

  add_bench_align_command(app);  // `bench align`, the timing of the same alignment
}

}  // namespace timitseg::app
