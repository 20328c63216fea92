// Kaldi-compatible MFCC / log-mel filterbank features (dither 0), following
// Kaldi's feature-window.cc, mel-computations.cc, feature-mfcc.cc,
// feature-fbank.cc and feature-functions.cc (DeltaFeatures). Computed in
// double precision; see docs/features.md for every step.
#include "data/features.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <unsupported/Eigen/FFT>

#include "common/parallel.h"

#include <nlohmann/json.hpp>

namespace timitseg::data {

namespace {
constexpr double kPi = 3.14159265358979323846;
// Kaldi's floor for log energies and log mel energies: FLT_EPSILON.
const double kLogFloor = static_cast<double>(std::numeric_limits<float>::epsilon());

double mel_scale(double hz) { return 1127.0 * std::log(1.0 + hz / 700.0); }

int round_up_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}
}  // namespace

int FeatureOptions::frame_length_samples() const {
  return static_cast<int>(sample_rate * 0.001 * frame_length_ms);  // Kaldi: truncation
}
int FeatureOptions::frame_shift_samples() const { return static_cast<int>(sample_rate * 0.001 * frame_shift_ms); }

int FeatureOptions::dim() const {
  int base = (type == FeatureType::mfcc) ? num_ceps : num_mel_bins + (use_energy ? 1 : 0);
  return deltas ? 3 * base : base;
}

FeatureOptions FeatureOptions::defaults_for(FeatureType type) {
  FeatureOptions o;
  if (type == FeatureType::mfcc) return o;
  o.type = FeatureType::fbank;
  o.num_mel_bins = 40;
  o.use_energy = false;  // Kaldi compute-fbank-feats default
  o.deltas = false;
  return o;
}

FeatureType parse_feature_type(const std::string& text) {
  FeatureType t{};
  if (!common::parse_enum(text, &t))
    throw std::invalid_argument("feature option --features must be mfcc or fbank, got '" + text + "'");
  return t;
}

WindowType parse_window_type(const std::string& text) {
  WindowType w{};
  if (!common::parse_enum(text, &w))
    throw std::invalid_argument("feature option --window must be povey, hamming, hanning, rectangular, sine or "
                                "blackman, got '" + text + "'");
  return w;
}

// Messages name the command-line flag of each option (docs/features.md maps
// flags to FeatureOptions fields and manifest keys).
void validate(const FeatureOptions& o) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("feature option " + what); };
  auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (o.sample_rate <= 0) bad("--sample-rate must be positive, got " + std::to_string(o.sample_rate));
  // !(x > 0) also rejects NaN
  if (!(o.frame_length_ms > 0.0)) bad("--frame-length-ms must be positive, got " + num(o.frame_length_ms));
  if (!(o.frame_shift_ms > 0.0)) bad("--frame-shift-ms must be positive, got " + num(o.frame_shift_ms));
  if (o.sample_rate * 0.001 * o.frame_length_ms < 2.0)
    bad("--frame-length-ms " + num(o.frame_length_ms) + " is shorter than 2 samples at " +
        std::to_string(o.sample_rate) + " Hz");
  if (o.sample_rate * 0.001 * o.frame_shift_ms < 1.0)
    bad("--frame-shift-ms " + num(o.frame_shift_ms) + " is shorter than 1 sample at " + std::to_string(o.sample_rate) +
        " Hz");
  if (o.sample_rate * 0.001 * o.frame_length_ms > 1e8)
    bad("--frame-length-ms " + num(o.frame_length_ms) + " is too long (more than 1e8 samples)");
  if (o.sample_rate * 0.001 * o.frame_shift_ms > 1e8)
    bad("--frame-shift-ms " + num(o.frame_shift_ms) + " is too long (more than 1e8 samples)");
  if (!(o.preemph_coeff >= 0.0 && o.preemph_coeff <= 1.0)) bad("--preemph must be in [0, 1], got " + num(o.preemph_coeff));
  if (o.num_mel_bins < 3) bad("--num-mel-bins must be at least 3, got " + std::to_string(o.num_mel_bins));
  double nyq = 0.5 * o.sample_rate;
  double high = o.high_freq > 0.0 ? o.high_freq : nyq + o.high_freq;
  if (!(o.low_freq >= 0.0 && o.low_freq < nyq))
    bad("--low-freq must be in [0, Nyquist = " + num(nyq) + " Hz), got " + num(o.low_freq));
  if (!(high > o.low_freq && high <= nyq))
    bad("--high-freq must be in (--low-freq, Nyquist = " + num(nyq) + " Hz] (<= 0: offset from Nyquist), got " +
        num(o.high_freq));
  if (o.type == FeatureType::mfcc && (o.num_ceps < 1 || o.num_ceps > o.num_mel_bins))
    bad("--num-ceps must be in [1, --num-mel-bins = " + std::to_string(o.num_mel_bins) + "], got " +
        std::to_string(o.num_ceps));
}

int64_t num_frames_for(int64_t n, const FeatureOptions& o) {
  const int64_t len = o.frame_length_samples(), shift = o.frame_shift_samples();
  if (o.snip_edges) return n < len ? 0 : 1 + (n - len) / shift;
  return (n + shift / 2) / shift;
}

int64_t frame_center_sample(int64_t t, const FeatureOptions& o) {
  const int64_t len = o.frame_length_samples(), shift = o.frame_shift_samples();
  if (o.snip_edges) return t * shift + len / 2;
  return t * shift + shift / 2;
}

nlohmann::ordered_json feature_options_to_json(const FeatureOptions& o, bool with_info) {
  nlohmann::ordered_json j;
  j["type"] = common::to_string(o.type);
  j["sample_rate"] = o.sample_rate;
  j["frame_length_ms"] = o.frame_length_ms;
  j["frame_shift_ms"] = o.frame_shift_ms;
  j["snip_edges"] = o.snip_edges;
  j["remove_dc_offset"] = o.remove_dc_offset;
  j["preemph_coeff"] = o.preemph_coeff;
  j["window_type"] = common::to_string(o.window_type);
  j["num_mel_bins"] = o.num_mel_bins;
  j["low_freq"] = o.low_freq;
  j["high_freq"] = o.high_freq;
  j["num_ceps"] = o.num_ceps;
  j["cepstral_lifter"] = o.cepstral_lifter;
  j["use_energy"] = o.use_energy;
  j["deltas"] = o.deltas;
  j["allow_resample"] = o.allow_resample;
  if (with_info) {
    j["dither"] = 0.0;
    j["dim"] = o.dim();
  }
  return j;
}

namespace {
// Typed reads that do not convert silently (nlohmann's get<int>() truncates 23.5).
int json_int(const nlohmann::json& v) {
  if (!v.is_number_integer()) throw std::runtime_error("expected an integer, got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    throw std::runtime_error("integer out of range: " + v.dump());
  return static_cast<int>(x);
}
double json_double(const nlohmann::json& v) {
  if (!v.is_number()) throw std::runtime_error("expected a number, got " + v.dump());
  return v.get<double>();
}
bool json_bool(const nlohmann::json& v) {
  if (!v.is_boolean()) throw std::runtime_error("expected true or false, got " + v.dump());
  return v.get<bool>();
}
std::string json_string(const nlohmann::json& v) {
  if (!v.is_string()) throw std::runtime_error("expected a string, got " + v.dump());
  return v.get<std::string>();
}
}  // namespace

FeatureOptions feature_options_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::runtime_error("feature options: expected a JSON object, got " + j.dump());
  // Keys not given keep the defaults of the given type (defaults_for), so
  // {"type": "fbank"} means Kaldi's fbank defaults.
  FeatureOptions o;
  if (j.contains("type")) {
    try {
      o = FeatureOptions::defaults_for(parse_feature_type(json_string(j["type"])));
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("feature options: key 'type': ") + e.what());
    }
  }
  const nlohmann::json* dim = nullptr;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const auto& v = it.value();
    try {
      if (k == "type") o.type = parse_feature_type(json_string(v));
      else if (k == "sample_rate") o.sample_rate = json_int(v);
      else if (k == "frame_length_ms") o.frame_length_ms = json_double(v);
      else if (k == "frame_shift_ms") o.frame_shift_ms = json_double(v);
      else if (k == "snip_edges") o.snip_edges = json_bool(v);
      else if (k == "remove_dc_offset") o.remove_dc_offset = json_bool(v);
      else if (k == "preemph_coeff") o.preemph_coeff = json_double(v);
      else if (k == "window_type") o.window_type = parse_window_type(json_string(v));
      else if (k == "num_mel_bins") o.num_mel_bins = json_int(v);
      else if (k == "low_freq") o.low_freq = json_double(v);
      else if (k == "high_freq") o.high_freq = json_double(v);
      else if (k == "num_ceps") o.num_ceps = json_int(v);
      else if (k == "cepstral_lifter") o.cepstral_lifter = json_double(v);
      else if (k == "use_energy") o.use_energy = json_bool(v);
      else if (k == "deltas") o.deltas = json_bool(v);
      else if (k == "allow_resample") o.allow_resample = json_bool(v);
      else if (k == "dither") {  // informational: features are always computed without dither
        if (json_double(v) != 0.0) throw std::runtime_error("only 0 is supported, got " + v.dump());
      } else if (k == "dim") {  // informational: checked once every other key is read
        json_int(v);
        dim = &v;
      } else {
        throw std::runtime_error("unknown key");
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("feature options: key '" + k + "': " + e.what());
    }
  }
  if (dim && json_int(*dim) != o.dim())
    throw std::runtime_error("feature options: key 'dim': " + dim->dump() + " does not match the other options (" +
                             std::to_string(o.dim()) + ")");
  return o;
}

// ---------------------------------------------------------------------------
namespace {

struct Extractor {
  FeatureOptions o;
  int len = 0, shift = 0, nfft = 0;
  std::vector<double> window;              // [len]
  std::vector<int> bank_first;             // [bins] first FFT bin with a weight
  std::vector<std::vector<double>> bank;   // [bins][...] triangular weights
  std::vector<double> dct;                 // [num_ceps][bins] orthonormal DCT-II rows
  std::vector<double> lifter;              // [num_ceps]
  Eigen::FFT<double> fft;

  explicit Extractor(const FeatureOptions& opts) : o(opts) {
    validate(o);
    len = o.frame_length_samples();
    shift = o.frame_shift_samples();
    nfft = round_up_pow2(len);
    window.resize(len);
    const double a = 2.0 * kPi / (len - 1);
    for (int i = 0; i < len; ++i) {
      const double c = std::cos(a * i);
      switch (o.window_type) {
        case WindowType::povey: window[i] = std::pow(0.5 - 0.5 * c, 0.85); break;
        case WindowType::hanning: window[i] = 0.5 - 0.5 * c; break;
        case WindowType::hamming: window[i] = 0.54 - 0.46 * c; break;
        case WindowType::sine: window[i] = std::sin(0.5 * a * i); break;
        case WindowType::blackman: window[i] = 0.42 - 0.5 * c + 0.08 * std::cos(2.0 * a * i); break;
        case WindowType::rectangular: window[i] = 1.0; break;
      }
    }
    // Mel filterbank (Kaldi MelBanks, no VTLN): bins equally spaced on the mel
    // scale between low_freq and high_freq; FFT bins 0 .. nfft/2 - 1.
    const double nyq = 0.5 * o.sample_rate;
    const double high = o.high_freq > 0.0 ? o.high_freq : nyq + o.high_freq;
    const double mel_low = mel_scale(o.low_freq), mel_high = mel_scale(high);
    const double delta = (mel_high - mel_low) / (o.num_mel_bins + 1);
    const double bin_hz = static_cast<double>(o.sample_rate) / nfft;
    bank_first.assign(o.num_mel_bins, 0);
    bank.assign(o.num_mel_bins, {});
    for (int b = 0; b < o.num_mel_bins; ++b) {
      const double left = mel_low + b * delta, center = left + delta, right = center + delta;
      int first = -1;
      std::vector<double> w;
      for (int i = 0; i < nfft / 2; ++i) {
        const double mel = mel_scale(bin_hz * i);
        if (mel > left && mel < right) {
          const double weight = mel <= center ? (mel - left) / (center - left) : (right - mel) / (right - center);
          if (first < 0) first = i;
          w.resize(i - first + 1, 0.0);
          w[i - first] = weight;
        }
      }
      if (first < 0)
        throw std::invalid_argument("feature options: mel bin " + std::to_string(b) +
                                    " has no FFT bin (too many mel bins for the FFT size)");
      bank_first[b] = first;
      bank[b] = std::move(w);
    }
    if (o.type == FeatureType::mfcc) {
      const int nb = o.num_mel_bins;
      dct.assign(static_cast<size_t>(o.num_ceps) * nb, 0.0);
      for (int k = 0; k < o.num_ceps; ++k)
        for (int n = 0; n < nb; ++n)
          dct[k * nb + n] = (k == 0) ? std::sqrt(1.0 / nb) : std::sqrt(2.0 / nb) * std::cos(kPi / nb * (n + 0.5) * k);
      lifter.assign(o.num_ceps, 1.0);
      if (o.cepstral_lifter != 0.0)
        for (int k = 0; k < o.num_ceps; ++k) lifter[k] = 1.0 + 0.5 * o.cepstral_lifter * std::sin(kPi * k / o.cepstral_lifter);
    }
  }

  int base_dim() const { return o.type == FeatureType::mfcc ? o.num_ceps : o.num_mel_bins + (o.use_energy ? 1 : 0); }

  // Rows [t0, t1) of out [num_frames][base_dim()] (already sized); each row
  // depends on its own frame alone.
  void compute_base(const std::vector<float>& x, int64_t t0, int64_t t1, std::vector<double>* out) {
    const int bd = base_dim();
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<double> frame(len), padded(nfft, 0.0), power(nfft / 2 + 1), logmel(o.num_mel_bins);
    std::vector<std::complex<double>> spec;
    for (int64_t t = t0; t < t1; ++t) {
      int64_t start = o.snip_edges ? t * shift : t * shift + shift / 2 - len / 2;
      for (int i = 0; i < len; ++i) {
        int64_t s = start + i;
        while (s < 0 || s >= n) s = (s < 0) ? -s - 1 : 2 * n - 1 - s;  // Kaldi's reflection
        frame[i] = x[static_cast<size_t>(s)];
      }
      if (o.remove_dc_offset) {
        double mean = 0.0;
        for (double v : frame) mean += v;
        mean /= len;
        for (double& v : frame) v -= mean;
      }
      double energy = 0.0;  // raw energy: after DC removal, before pre-emphasis and window
      for (double v : frame) energy += v * v;
      const double log_energy = std::log(std::max(energy, kLogFloor));
      if (o.preemph_coeff != 0.0) {
        for (int i = len - 1; i > 0; --i) frame[i] -= o.preemph_coeff * frame[i - 1];
        frame[0] -= o.preemph_coeff * frame[0];
      }
      for (int i = 0; i < len; ++i) padded[i] = frame[i] * window[i];
      fft.fwd(spec, padded);
      for (int k = 0; k <= nfft / 2; ++k) power[k] = std::norm(spec[k]);
      for (int b = 0; b < o.num_mel_bins; ++b) {
        double e = 0.0;
        const auto& w = bank[b];
        for (size_t i = 0; i < w.size(); ++i) e += w[i] * power[bank_first[b] + i];
        logmel[b] = std::log(std::max(e, kLogFloor));
      }
      double* row = out->data() + t * bd;
      if (o.type == FeatureType::mfcc) {
        const int nb = o.num_mel_bins;
        for (int k = 0; k < o.num_ceps; ++k) {
          double c = 0.0;
          for (int m = 0; m < nb; ++m) c += dct[k * nb + m] * logmel[m];
          row[k] = c * lifter[k];
        }
        if (o.use_energy) row[0] = log_energy;
      } else {
        int off = 0;
        if (o.use_energy) row[off++] = log_energy;  // Kaldi fbank puts energy first
        for (int b = 0; b < o.num_mel_bins; ++b) row[off + b] = logmel[b];
      }
    }
  }
};

// Kaldi DeltaFeatures (order 2, window 2): scales[1] = [-2..2]/10, scales[2] =
// scales[1] convolved with [-2..2]/10 (9 taps); frame indices outside
// [0, T) are clamped (edge frames replicated).
// Rows [t0, t1) of out [T][3 bd] (already sized, zero).
void add_deltas(const std::vector<double>& base, int64_t T, int bd, int64_t t0, int64_t t1, std::vector<double>* out) {
  const int W = 2;
  std::vector<std::vector<double>> scales(3);
  scales[0] = {1.0};
  for (int order = 1; order <= 2; ++order) {
    const auto& prev = scales[order - 1];
    const int prev_off = static_cast<int>(prev.size() - 1) / 2;
    const int cur_off = prev_off + W;
    std::vector<double> cur(prev.size() + 2 * W, 0.0);
    double norm = 0.0;
    for (int j = -W; j <= W; ++j) {
      norm += j * j;
      for (int k = -prev_off; k <= prev_off; ++k) cur[j + k + cur_off] += j * prev[k + prev_off];
    }
    for (double& v : cur) v /= norm;
    scales[order] = cur;
  }
  const int D = 3 * bd;
  for (int64_t t = t0; t < t1; ++t) {
    double* row = out->data() + t * D;
    for (int order = 0; order <= 2; ++order) {
      const auto& sc = scales[order];
      const int off = static_cast<int>(sc.size() - 1) / 2;
      for (int j = -off; j <= off; ++j) {
        const double s = sc[j + off];
        if (s == 0.0) continue;
        const int64_t f = std::min<int64_t>(std::max<int64_t>(t + j, 0), T - 1);
        const double* src = base.data() + f * bd;
        for (int d = 0; d < bd; ++d) row[order * bd + d] += s * src[d];
      }
    }
  }
}

}  // namespace

// Frames per parallel job of compute_features (about 10 s of audio).
constexpr int64_t kFeatureChunkFrames = 1024;

std::vector<float> compute_features(const Audio& audio, const FeatureOptions& opts, int32_t* num_frames, int threads) {
  validate(opts);
  const std::vector<float>* x = &audio.samples;
  std::vector<float> resampled;
  if (audio.sample_rate != opts.sample_rate) {
    if (!opts.allow_resample)
      throw std::invalid_argument("audio sample rate " + std::to_string(audio.sample_rate) + " Hz, features expect " +
                                  std::to_string(opts.sample_rate) + " Hz (pass --allow-resample to resample it)");
    resampled = resample(audio.samples, audio.sample_rate, opts.sample_rate);
    x = &resampled;
  }
  const Extractor proto(opts);
  const int64_t T = num_frames_for(static_cast<int64_t>(x->size()), opts);
  if (T > std::numeric_limits<int32_t>::max()) throw std::invalid_argument("audio too long");
  // Chunks of frames on `threads` workers: every row is computed by the same
  // code from its own frame (deltas: from the base rows), so the features are
  // bitwise the same for any thread count (tests/data/test_features.cpp).
  const int bd = proto.base_dim();
  const int64_t chunks = (T + kFeatureChunkFrames - 1) / kFeatureChunkFrames;
  const int workers = chunks > 1 ? resolve_threads(threads) : 1;
  auto rows = [&](int64_t i) {
    return std::pair<int64_t, int64_t>{i * kFeatureChunkFrames, std::min(T, (i + 1) * kFeatureChunkFrames)};
  };
  std::vector<double> base(static_cast<size_t>(T) * bd, 0.0);
  std::vector<Extractor> ex(static_cast<size_t>(workers), proto);  // the FFT plan cache is per worker
  parallel_for(chunks, workers, [&](int64_t i, int w) { ex[w].compute_base(*x, rows(i).first, rows(i).second, &base); });
  std::vector<double> full;
  if (opts.deltas) {
    full.assign(static_cast<size_t>(T) * 3 * bd, 0.0);
    parallel_for(chunks, workers, [&](int64_t i, int) { add_deltas(base, T, bd, rows(i).first, rows(i).second, &full); });
  }
  const std::vector<double>& src = opts.deltas ? full : base;
  std::vector<float> out(src.size());
  for (size_t i = 0; i < src.size(); ++i) out[i] = static_cast<float>(src[i]);
  if (num_frames) *num_frames = static_cast<int32_t>(T);
  return out;
}

}  // namespace timitseg::data
