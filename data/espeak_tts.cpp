// libespeak-ng wrapper; see data/espeak_tts.h. Compiled with TIMITSEG_HAVE_ESPEAK=1
// only when CMake found libespeak-ng (data/CMakeLists.txt).
#include "data/espeak_tts.h"

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

#include "data/features.h"
#include "data/transitions.h"

#ifdef TIMITSEG_HAVE_ESPEAK
#include <sys/wait.h>
#include <unistd.h>

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

// The first code point of UTF-8 text (0 when empty or malformed).
char32_t first_code_point(const std::string& s) {
  if (s.empty()) return 0;
  const auto b = static_cast<unsigned char>(s[0]);
  const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || static_cast<int>(s.size()) < n) return 0;
  char32_t c = n == 1 ? b : b & (0x7F >> n);
  for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[k]) & 0x3F);
  return c;
}

}  // namespace

char sonorant_class(const std::string& label) {
  static const std::pair<char, std::u32string> kClasses[] = {
      {'V', U"aeiouyøœɛɔəɪʊɑæɐɜʏɒʌɤɯɨʉɵɘɞɶɚɝ"},
      {'N', U"mnɲŋɱɳɴ"},
      {'L', U"lɫʎɭʟrɾɹɻʀɺɽ"},
      {'G', U"jwɥʋɰ"}};
  const char32_t c = first_code_point(label);
  if (c != 0)
    for (const auto& [cls, first] : kClasses)
      if (first.find(c) != std::u32string::npos) return cls;
  return 0;
}

bool is_sonorant_label(const std::string& label) { return sonorant_class(label) != 0; }

void move_sonorant_boundaries(const std::vector<int16_t>& x, int sample_rate, std::vector<EspeakPhone>* phones) {
  auto& ph = *phones;
  Audio audio;
  audio.sample_rate = sample_rate;
  audio.samples.assign(x.begin(), x.end());
  std::vector<int64_t> start(ph.size());
  for (size_t i = 0; i < ph.size(); ++i) start[i] = ph[i].start;
  const std::vector<int64_t> middle = transition_middles(audio, start);
  std::vector<int64_t> moved(start);
  for (size_t i = 1; i < ph.size(); ++i)
    if (middle[i] >= 0 && is_sonorant_label(ph[i - 1].label) && is_sonorant_label(ph[i].label)) moved[i] = middle[i];
  for (size_t i = 1; i < ph.size(); ++i)  // each move stays between two middles; a phone emptied keeps its own start
    if (moved[i] <= moved[i - 1]) moved[i] = start[i];
  for (size_t i = 1; i < ph.size(); ++i) ph[i].start = moved[i];
}

#ifdef TIMITSEG_HAVE_ESPEAK
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
#endif

std::string espeak_label(const std::string& ipa_name) {
  std::string s = ipa_name;
  while (s.size() > 1 && s.back() == '-') s.pop_back();
  return s;
}

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

// The one-line error of a language espeak-ng cannot load, with the nearest codes.
[[noreturn]] void throw_unknown_language(const std::string& language) {
  std::vector<std::string> all = languages_locked();
  std::stable_sort(all.begin(), all.end(), [&](const std::string& a, const std::string& b) {
    return edit_distance(a, language) < edit_distance(b, language);
  });
  std::string near;
  for (size_t i = 0; i < all.size() && i < 6; ++i) near += (i ? ", " : "") + all[i];
  throw std::invalid_argument("--language '" + language + "': not an espeak-ng language (nearest: " + near +
                              "; all " + std::to_string(all.size()) + " codes: espeak-ng --voices)");
}

// In a child process only: loading a voice changes state that later syntheses inherit
// (measured: after cmn or a variant had been loaded, es+m3 spoke other samples), so the
// process that forks never loads one.
bool select_voice_in_child(const std::string& language, const std::string& variant) {
  const std::string name = variant.empty() ? language : language + "+" + variant;
  return !language.empty() && language.find_first_of("+ /") == std::string::npos &&
         espeak_SetVoiceByName(name.c_str()) == EE_OK;
}

constexpr int kExitNoVoice = 3;

// Mean square of x[a, b) (0 when empty).
double mean_square(const std::vector<int16_t>& x, int64_t a, int64_t b) {
  double e = 0.0;
  for (int64_t n = a; n < b; ++n) e += static_cast<double>(x[n]) * x[n];
  return b > a ? e / static_cast<double>(b - a) : 0.0;
}

// A plosive or affricate: its IPA name starts with a stop symbol (p b t d ʈ ɖ c ɟ k ɡ g q ɢ;
// affricates tʃ, ts, dʒ, tɕ, aspirated pʰ, ... start with one too).
bool is_stop_label(const std::string& label) {
  static const char* const kStops[] = {"p", "b", "t", "d", "c", "k", "g", "q", "ʈ", "ɖ", "ɟ", "ɡ", "ɢ"};
  for (const char* s : kStops)
    if (label.compare(0, std::strlen(s), s) == 0) return true;
  return false;
}

// espeak's event for a stop comes at its release: the closure before it (measured on
// 825 Spanish stops after a speech phone: 35-40 ms at -25 dB below the vowel) would be
// the end of the phone before. Phonetic convention (TIMIT labels the closure apart, never
// with the vowel; Kaldi's and MFA's phone models hold it in the stop) counts the closure
// as part of the stop: its start moves back over the closure, the run of
// 5 ms windows of mean square <= kClosureLevel of the utterance's (-15 dB) just before the
// event, at most 150 ms, leaving the phone before at least 5 ms. After silence, or where
// no window before the release is quiet (a voiced closure, a nasal before b), nothing moves.
constexpr double kClosureLevel = 0.03;
void move_closures_to_stops(const std::vector<int16_t>& x, int sample_rate, double utt_ms,
                            std::vector<EspeakPhone>* phones) {
  auto& out = *phones;
  const int64_t W = std::max(1, sample_rate / 200);  // 5 ms
  const int64_t max_move = 30 * W;                   // 150 ms
  auto quiet = [&](int64_t a) { return mean_square(x, a, a + W) <= kClosureLevel * utt_ms; };  // [a, a + W)
  for (size_t i = 1; i < out.size(); ++i) {
    if (!is_stop_label(out[i].label) || out[i - 1].label == kEspeakSilence) continue;
    const int64_t release = out[i].start, floor = out[i - 1].start + W;
    int64_t s = release;
    while (s - W >= floor && release - (s - W) <= max_move && quiet(s - W)) s -= W;
    out[i].start = s;
  }
}

// The events -> phones tiling [0, N): zero-length events and language-switch markers
// dropped, pauses as kEspeakSilence (adjacent ones merged), audio before the first
// event silence; each phone's word from its text position; stops start at their closure,
// a boundary between two sonorants at the middle of its transition.
std::vector<EspeakPhone> events_to_phones(const std::vector<Event>& ev, const std::vector<int16_t>& x,
                                          int sample_rate, const std::vector<int>& starts, int* switches) {
  const int64_t N = static_cast<int64_t>(x.size());
  const double utt_ms = mean_square(x, 0, N);
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
  for (size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    if (e.sample < 0 || e.sample > N || (!out.empty() && e.sample < out.back().start))
      throw std::runtime_error("espeak-ng: phoneme events out of order or past the audio (sample " +
                               std::to_string(e.sample) + " of " + std::to_string(N) + ")");
    if (!e.name.empty() && e.name.front() == '(') {  // "(en)": a language switch, not a phone
      ++*switches;
      continue;
    }
    if (out.empty() && e.sample > 0) push(0, kEspeakSilence, -1);
    if (e.name.empty()) {
      // No IPA name: a pause (espeak's pauses are digital silence), or a modifier such as
      // Spanish ';' (palatalization) that sounds: that one stays part of the phone before.
      const int64_t end = i + 1 < ev.size() ? std::clamp<int64_t>(ev[i + 1].sample, e.sample, N) : N;
      if (mean_square(x, e.sample, end) <= 1e-4 * utt_ms) push(e.sample, kEspeakSilence, -1);
      continue;
    }
    push(e.sample, espeak_label(e.name), word_of(e.text_pos));
  }
  if (!out.empty() && out.back().start >= N) out.pop_back();
  if (out.empty() && N > 0) out.push_back({0, 0, kEspeakSilence, -1});
  if (!out.empty()) out.front().start = 0;
  move_closures_to_stops(x, sample_rate, utt_ms, &out);
  move_sonorant_boundaries(x, sample_rate, &out);
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
  init_locked();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("espeak-ng: cannot fork");
  if (pid == 0) ::_exit(select_voice_in_child(language, "") ? 0 : kExitNoVoice);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw_unknown_language(language);
}

std::vector<std::string> espeak_languages() {
  std::lock_guard<std::mutex> lock(espeak_mutex());
  return languages_locked();
}

namespace {

void put(std::string* b, const void* p, size_t n) { b->append(static_cast<const char*>(p), n); }

// In a child process (see espeak_speak): the synthesis, its samples and phoneme events
// serialized into the pipe, then _exit. Only the child's copy of espeak's state changes.
[[noreturn]] void synth_in_child(int fd, const EspeakRequest& r) {
  if (!select_voice_in_child(r.language, r.variant)) ::_exit(kExitNoVoice);
  espeak_SetParameter(espeakRATE, std::clamp(r.rate_wpm, 80, 450), 0);
  espeak_SetParameter(espeakPITCH, std::clamp(r.pitch, 0, 100), 0);
  espeak_SetParameter(espeakRANGE, std::clamp(r.range, 0, 100), 0);
  espeak_SetParameter(espeakWORDGAP, 0, 0);
  std::srand(r.rand_seed);
  Collect c;
  g_collect = &c;
  const int32_t err = espeak_Synth(r.text.c_str(), r.text.size() + 1, 0, POS_CHARACTER, 0, espeakCHARS_UTF8,
                                   nullptr, nullptr);
  std::string b;
  const uint64_t n = c.samples.size(), m = c.events.size();
  put(&b, &err, sizeof err);
  put(&b, &n, sizeof n);
  put(&b, c.samples.data(), n * sizeof(int16_t));
  put(&b, &m, sizeof m);
  for (const Event& e : c.events) {
    const uint32_t len = static_cast<uint32_t>(e.name.size());
    const int32_t pos = e.text_pos;
    put(&b, &e.sample, sizeof e.sample);
    put(&b, &pos, sizeof pos);
    put(&b, &len, sizeof len);
    put(&b, e.name.data(), len);
  }
  for (size_t off = 0; off < b.size();) {
    const ssize_t w = ::write(fd, b.data() + off, b.size() - off);
    if (w <= 0) ::_exit(2);
    off += static_cast<size_t>(w);
  }
  ::_exit(0);
}

template <class T>
T take(const std::string& b, size_t* off) {
  if (*off + sizeof(T) > b.size()) throw std::runtime_error("espeak-ng: truncated result from the synthesis process");
  T v;
  std::memcpy(&v, b.data() + *off, sizeof(T));
  *off += sizeof(T);
  return v;
}

// The child's bytes -> status, samples, events.
std::vector<Event> parse_child(const std::string& b, const EspeakRequest& r, std::vector<int16_t>* samples) {
  size_t off = 0;
  const int32_t err = take<int32_t>(b, &off);
  if (err != EE_OK)
    throw std::runtime_error("espeak-ng (" + r.language + "): synthesis failed (error " + std::to_string(err) +
                             ") for \"" + r.text + "\"");
  samples->resize(take<uint64_t>(b, &off));
  if (off + samples->size() * sizeof(int16_t) > b.size()) throw std::runtime_error("espeak-ng: truncated samples");
  std::memcpy(samples->data(), b.data() + off, samples->size() * sizeof(int16_t));
  off += samples->size() * sizeof(int16_t);
  std::vector<Event> events(take<uint64_t>(b, &off));
  for (Event& e : events) {
    e.sample = take<int64_t>(b, &off);
    e.text_pos = take<int32_t>(b, &off);
    const uint32_t len = take<uint32_t>(b, &off);
    if (off + len > b.size()) throw std::runtime_error("espeak-ng: truncated events");
    e.name.assign(b.data() + off, len);
    off += len;
  }
  return events;
}

}  // namespace

// espeak-ng's waveform generator keeps state from one synthesis to the next (glottal
// phase, flutter: the same request twice gives other samples), and espeak_Terminate
// followed by espeak_Initialize hangs. So every synthesis runs in a child process
// forked from this one, which never synthesizes: the result depends on the request
// only. (glibc keeps malloc usable in the child of a threaded process; the child
// touches nothing but espeak and the pipe, then _exits.)
EspeakOutput espeak_speak(const EspeakRequest& r) {
  EspeakOutput out;
  pid_t pid = -1;
  int from_child = -1;
  {
    // Only the fork is serialized: the children synthesize in parallel (synth's worker
    // threads). The write end is closed before the lock is released, so no later child
    // inherits it (this reader would then never see the end of the pipe).
    std::lock_guard<std::mutex> lock(espeak_mutex());
    out.sample_rate = init_locked();
    int fd[2];
    if (::pipe(fd) != 0) throw std::runtime_error("espeak-ng: cannot create a pipe");
    pid = ::fork();
    if (pid < 0) {
      ::close(fd[0]);
      ::close(fd[1]);
      throw std::runtime_error("espeak-ng: cannot fork the synthesis process");
    }
    if (pid == 0) {
      ::close(fd[0]);
      synth_in_child(fd[1], r);
    }
    ::close(fd[1]);
    from_child = fd[0];
  }
  std::string b;
  std::vector<char> buf(1 << 16);
  for (ssize_t k; (k = ::read(from_child, buf.data(), buf.size())) != 0;) {
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) break;
    b.append(buf.data(), static_cast<size_t>(k));
  }
  ::close(from_child);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitNoVoice) throw_unknown_language(r.language);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("espeak-ng (" + r.language + "): the synthesis process failed for \"" + r.text + "\"");
  const std::vector<Event> events = parse_child(b, r, &out.samples);
  std::vector<int> starts;
  split_words(r.text, &out.words, &starts);
  out.phones = events_to_phones(events, out.samples, out.sample_rate, starts, &out.language_switches);
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
