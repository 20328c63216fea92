// libflite wrapper; see data/flite_tts.h. Compiled with TIMITSEG_HAVE_FLITE=1
// only when CMake found libflite (data/CMakeLists.txt).
#include "data/flite_tts.h"

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#ifdef TIMITSEG_HAVE_FLITE
#include <csetjmp>
extern "C" {
#include <flite/cst_audio.h>
#include <flite/cst_cg.h>
#include <flite/flite.h>
cst_voice* register_cmu_us_awb(const char* voxdir);
cst_voice* register_cmu_us_rms(const char* voxdir);
cst_voice* register_cmu_us_slt(const char* voxdir);

// libflite's audio output (audio.o, pulled in by flite.o) calls ALSA through these
// five functions. synth never plays audio: defining them here keeps au_alsa.o,
// and with it libasound, out of the static link. Each one fails if ever called.
cst_audiodev* audio_open_alsa(int, int, cst_audiofmt) { return nullptr; }
int audio_close_alsa(cst_audiodev*) { return -1; }
int audio_write_alsa(cst_audiodev*, void*, int) { return -1; }
int audio_drain_alsa(cst_audiodev*) { return -1; }
int audio_flush_alsa(cst_audiodev*) { return -1; }
}
#endif

namespace timitseg::data {

bool flite_built_in() {
#ifdef TIMITSEG_HAVE_FLITE
  return true;
#else
  return false;
#endif
}

std::string flite_missing_message() {
  return "synth --voice flite: libflite is not built in (install Debian flite1-dev, scripts/setup.sh, then "
         "reconfigure and rebuild with cmake -DTIMITSEG_FLITE=AUTO or ON)";
}

const std::vector<std::string>& flite_voices() {
  static const std::vector<std::string> v = {"awb", "rms", "slt"};
  return v;
}

#ifndef TIMITSEG_HAVE_FLITE

FliteOutput flite_speak(const FliteRequest&) { throw std::runtime_error(flite_missing_message()); }
void flite_voice_f0(const std::string&, double*, double*) { throw std::runtime_error(flite_missing_message()); }
std::vector<std::string> flite_phoneset(const std::string&) { throw std::runtime_error(flite_missing_message()); }

#else

namespace {

std::mutex& flite_mutex() {
  static std::mutex m;
  return m;
}

// The voices, registered once (under flite_mutex) and kept for the life of the process.
cst_voice* voice_locked(const std::string& name) {
  static bool inited = false;
  static cst_voice *awb = nullptr, *rms = nullptr, *slt = nullptr;
  if (!inited) {
    cst_regex_init();
    inited = true;
  }
  if (name == "awb") return awb ? awb : (awb = register_cmu_us_awb(nullptr));
  if (name == "rms") return rms ? rms : (rms = register_cmu_us_rms(nullptr));
  if (name == "slt") return slt ? slt : (slt = register_cmu_us_slt(nullptr));
  throw std::invalid_argument("flite voice '" + name + "': synth uses awb, rms or slt");
}

// utt_synth under flite's error handler: cst_error() longjmps here instead of exit().
// Only plain C objects live in this frame.
bool synth_guarded(cst_utterance* u) {
  jmp_buf env;
  jmp_buf* saved = cst_errjmp;
  cst_errjmp = &env;
  bool ok = false;
  if (setjmp(env) == 0) {
    utt_synth(u);
    ok = true;
  }
  cst_errjmp = saved;
  return ok;
}

}  // namespace

FliteOutput flite_speak(const FliteRequest& r) {
  std::lock_guard<std::mutex> lock(flite_mutex());
  cst_voice* v = voice_locked(r.voice);
  cst_utterance* u = new_utterance();
  // The per-utterance settings go into the utterance's own features (searched
  // before the voice's), so the shared voice is never changed.
  utt_set_input_text(u, r.text.c_str());
  utt_init(u, v);
  if (r.duration_stretch > 0) feat_set_float(u->features, "duration_stretch", static_cast<float>(r.duration_stretch));
  if (r.f0_mean > 0) feat_set_float(u->features, "int_f0_target_mean", static_cast<float>(r.f0_mean));
  if (r.f0_stddev > 0) feat_set_float(u->features, "int_f0_target_stddev", static_cast<float>(r.f0_stddev));
  std::srand(r.rand_seed);  // flite's only randomness (cst_mlsa.c, cst_units.c): libc rand()
  if (!synth_guarded(u)) {
    delete_utterance(u);
    throw std::runtime_error("flite (" + r.voice + "): synthesis failed for \"" + r.text + "\"");
  }
  FliteOutput out;
  const cst_wave* w = utt_wave(u);
  if (!w || w->num_channels != 1) {
    delete_utterance(u);
    throw std::runtime_error("flite (" + r.voice + "): no mono wave for \"" + r.text + "\"");
  }
  out.sample_rate = w->sample_rate;
  out.samples.assign(w->samples, w->samples + w->num_samples);
  double prev_end = 0.0;
  for (cst_item* s = relation_head(utt_relation(u, "Segment")); s; s = item_next(s)) {
    FliteSegment seg;
    seg.phone = item_feat_string(s, "name");
    seg.stressed = std::string(ffeature_string(s, "R:SylStructure.parent.stress")) == "1";
    seg.end_s = item_feat_float(s, "end");
    seg.last_state_start_s = prev_end;
    const cst_item* ss = item_as(s, "segstate");
    const cst_item* last = ss ? item_last_daughter(ss) : nullptr;
    const cst_item* before = last ? item_prev(last) : nullptr;
    if (before) seg.last_state_start_s = item_feat_float(before, "end");
    out.segments.push_back(seg);
    prev_end = seg.end_s;
  }
  delete_utterance(u);  // frees the relations, items and the wave
  return out;
}

void flite_voice_f0(const std::string& voice, double* mean, double* stddev) {
  std::lock_guard<std::mutex> lock(flite_mutex());
  cst_voice* v = voice_locked(voice);
  const cst_val* db = feat_val(v->features, "cg_db");
  if (!db) throw std::runtime_error("flite voice " + voice + ": not a clustergen voice (no cg_db)");
  const cst_cg_db* cg = val_cg_db(db);
  *mean = cg->f0_mean;
  *stddev = cg->f0_stddev;
}

std::vector<std::string> flite_phoneset(const std::string& voice) {
  std::lock_guard<std::mutex> lock(flite_mutex());
  cst_voice* v = voice_locked(voice);
  cst_utterance* u = new_utterance();
  utt_init(u, v);
  std::vector<std::string> names;
  const cst_val* ps = feat_val(u->features, "phoneset");
  if (ps)
    for (int i = 0; val_phoneset(ps)->phonenames[i]; ++i) names.emplace_back(val_phoneset(ps)->phonenames[i]);
  delete_utterance(u);
  return names;
}

#endif

}  // namespace timitseg::data
