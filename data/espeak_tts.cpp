// libespeak-ng wrapper; see data/espeak_tts.h. Compiled with TIMITSEG_HAVE_ESPEAK=1
// only when CMake found libespeak-ng (data/CMakeLists.txt).
#include "data/espeak_tts.h"

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>

#ifdef TIMITSEG_HAVE_ESPEAK
#include <espeak-ng/speak_lib.h>
#endif

namespace timitseg::data {

bool espeak_built_in() {
#ifdef TIMITSEG_HAVE_ESPEAK
  return true;
#else
  return false;
#endif
}

std::string espeak_missing_message() {
  return "--voice espeak / --g2p espeak: libespeak-ng is not built in (install Debian libespeak-ng-dev and "
         "espeak-ng-data, scripts/setup.sh, then reconfigure and rebuild with cmake -DTIMITSEG_ESPEAK=AUTO or ON)";
}

namespace {

// Levenshtein distance over bytes (language codes are ASCII).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> d(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = d[0];
    d[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cur = d[j];
      d[j] = std::min({d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
      prev = cur;
    }
  }
  return d[b.size()];
}

// The text's words: split at ASCII spaces, leading/trailing ASCII punctuation stripped;
// starts[k]: the 1-based character (code point) position of word k, as espeak counts.
void split_words(const std::string& text, std::vector<std::string>* words, std::vector<int>* starts) {
  int chars = 0;
  std::string cur;
  int cur_start = 0;
  auto flush = [&] {
    size_t a = 0, b = cur.size();
    while (a < b && std::ispunct(static_cast<unsigned char>(cur[a]))) ++a;
    while (b > a && std::ispunct(static_cast<unsigned char>(cur[b - 1]))) --b;
    if (b > a) {
      words->push_back(cur.substr(a, b - a));
      starts->push_back(cur_start);
    }
    cur.clear();
  };
  for (unsigned char c : text) {
    const bool lead = (c & 0xC0) != 0x80;  // the first byte of a code point
    if (lead) ++chars;
    if (std::isspace(c)) { flush(); continue; }
    if (cur.empty()) cur_start = chars;
    cur += static_cast<char>(c);
  }
  flush();
}

}  // namespace

#ifndef TIMITSEG_HAVE_ESPEAK

std::string espeak_version() { return ""; }
void espeak_check_language(const std::string&) { throw std::runtime_error(espeak_missing_message()); }
std::vector<std::string> espeak_languages() { throw std::runtime_error(espeak_missing_message()); }
EspeakOutput espeak_speak(const EspeakRequest&) { throw std::runtime_error(espeak_missing_message()); }
std::vector<std::string> espeak_phones(const std::string&, const std::string&) {
  throw std::runtime_error(espeak_missing_message());
}

#else

namespace {

std::mutex& espeak_mutex() {
  static std::mutex m;
  return m;
}

// One phoneme event: the sample where it starts, its IPA name, the text position.
struct Event {
  int64_t sample;
  std::string name;
  int text_pos;
};

struct Collect {
  std::vector<int16_t> samples;
  std::vector<Event> events;
};

// The synthesis in progress (set under espeak_mutex() around espeak_Synth).
Collect* g_collect = nullptr;

int synth_callback(short* wav, int n, espeak_EVENT* ev) {
  Collect* c = g_collect;
  if (!c) return 0;
  if (wav && n > 0) c->samples.insert(c->samples.end(), wav, wav + n);
  for (; ev && ev->type != espeakEVENT_LIST_TERMINATED; ++ev)
    if (ev->type == espeakEVENT_PHONEME)
      c->events.push_back({ev->sample, std::string(ev->id.string, strnlen(ev->id.string, sizeof ev->id.string)),
                           ev->text_position});
  return 0;
}

// Initialized once, under espeak_mutex(); returns espeak's sample rate.
int init_locked() {
  static int rate = 0;
  if (rate > 0) return rate;
  rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, nullptr,
                           espeakINITIALIZE_PHONEME_EVENTS | espeakINITIALIZE_PHONEME_IPA | espeakINITIALIZE_DONT_EXIT);
  if (rate <= 0) {
    rate = 0;
    throw std::runtime_error("espeak-ng: cannot initialize (is espeak-ng-data installed? Debian espeak-ng-data)");
  }
  espeak_SetSynthCallback(synth_callback);
  return rate;
}

std::vector<std::string> languages_locked() {
  init_locked();
  std::set<std::string> codes;
  for (const espeak_VOICE** v = espeak_ListVoices(nullptr); v && *v; ++v)
    for (const char* l = (*v)->languages; l && *l; l += std::strlen(l + 1) + 2) codes.insert(l + 1);
  return {codes.begin(), codes.end()};
}

void select_voice_locked(const std::string& language, const std::string& variant) {
  init_locked();
  const std::string name = variant.empty() ? language : language + "+" + variant;
  if (language.empty() || language.find_first_of("+ /") != std::string::npos ||
      espeak_SetVoiceByName(name.c_str()) != EE_OK) {
    if (!variant.empty() && espeak_SetVoiceByName(language.c_str()) == EE_OK)
      throw std::invalid_argument("espeak-ng: no voice variant '" + variant + "' (language '" + language + "')");
    std::vector<std::string> all = languages_locked();
    std::stable_sort(all.begin(), all.end(), [&](const std::string& a, const std::string& b) {
      return edit_distance(a, language) < edit_distance(b, language);
    });
    std::string near;
    for (size_t i = 0; i < all.size() && i < 6; ++i) near += (i ? ", " : "") + all[i];
    throw std::invalid_argument("--language '" + language + "': not an espeak-ng language (nearest: " + near +
                                "; all " + std::to_string(all.size()) + " codes: espeak-ng --voices)");
  }
}

// The events -> phones tiling [0, N): zero-length events and language-switch markers
// dropped, pauses as kEspeakSilence (adjacent ones merged), audio before the first
// event silence; each phone's word from its text position.
std::vector<EspeakPhone> events_to_phones(const std::vector<Event>& ev, int64_t N, const std::vector<int>& starts,
                                          int* switches) {
  std::vector<EspeakPhone> out;
  auto word_of = [&](int pos) {
    int w = -1;
    for (size_t k = 0; k < starts.size(); ++k)
      if (starts[k] <= pos) w = static_cast<int>(k);
    return w;
  };
  auto push = [&](int64_t start, const std::string& label, int word) {
    if (!out.empty() && out.back().start == start) out.pop_back();  // the previous one had no samples
    if (!out.empty() && label == kEspeakSilence && out.back().label == kEspeakSilence) return;
    out.push_back({start, 0, label, word});
  };
  for (const Event& e : ev) {
    if (e.sample < 0 || e.sample > N || (!out.empty() && e.sample < out.back().start))
      throw std::runtime_error("espeak-ng: phoneme events out of order or past the audio (sample " +
                               std::to_string(e.sample) + " of " + std::to_string(N) + ")");
    if (!e.name.empty() && e.name.front() == '(') {  // "(en)": a language switch, not a phone
      ++*switches;
      continue;
    }
    if (out.empty() && e.sample > 0) push(0, kEspeakSilence, -1);
    if (e.name.empty()) push(e.sample, kEspeakSilence, -1);
    else push(e.sample, e.name, word_of(e.text_pos));
  }
  if (!out.empty() && out.back().start >= N) out.pop_back();
  if (out.empty() && N > 0) out.push_back({0, 0, kEspeakSilence, -1});
  if (!out.empty()) out.front().start = 0;
  for (size_t i = 0; i < out.size(); ++i) out[i].end = i + 1 < out.size() ? out[i + 1].start : N;
  return out;
}

}  // namespace

std::string espeak_version() {
  const char* path = nullptr;
  const char* v = espeak_Info(&path);
  return v ? v : "";
}

void espeak_check_language(const std::string& language) {
  std::lock_guard<std::mutex> lock(espeak_mutex());
  select_voice_locked(language, "");
}

std::vector<std::string> espeak_languages() {
  std::lock_guard<std::mutex> lock(espeak_mutex());
  return languages_locked();
}

EspeakOutput espeak_speak(const EspeakRequest& r) {
  std::lock_guard<std::mutex> lock(espeak_mutex());
  EspeakOutput out;
  out.sample_rate = init_locked();
  select_voice_locked(r.language, r.variant);
  espeak_SetParameter(espeakRATE, std::clamp(r.rate_wpm, 80, 450), 0);
  espeak_SetParameter(espeakPITCH, std::clamp(r.pitch, 0, 100), 0);
  espeak_SetParameter(espeakRANGE, std::clamp(r.range, 0, 100), 0);
  espeak_SetParameter(espeakWORDGAP, 0, 0);
  std::srand(r.rand_seed);
  Collect c;
  g_collect = &c;
  const espeak_ERROR err = espeak_Synth(r.text.c_str(), r.text.size() + 1, 0, POS_CHARACTER, 0,
                                        espeakCHARS_UTF8, nullptr, nullptr);
  g_collect = nullptr;
  if (err != EE_OK)
    throw std::runtime_error("espeak-ng (" + r.language + "): synthesis failed (error " + std::to_string(err) +
                             ") for \"" + r.text + "\"");
  std::vector<int> starts;
  split_words(r.text, &out.words, &starts);
  out.samples = std::move(c.samples);
  out.phones = events_to_phones(c.events, static_cast<int64_t>(out.samples.size()), starts, &out.language_switches);
  return out;
}

std::vector<std::string> espeak_phones(const std::string& text, const std::string& language) {
  EspeakRequest r;
  r.language = language;
  r.text = text;
  const EspeakOutput o = espeak_speak(r);
  std::vector<std::string> phones;
  for (const EspeakPhone& p : o.phones)
    if (p.label != kEspeakSilence) phones.push_back(p.label);
  return phones;
}

#endif

}  // namespace timitseg::data
