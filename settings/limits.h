// Every numeric range of a setting, in one place: the config's keys
// (Config::validate, config/config.cpp), the command-line flags that set the
// same thing (app/, eval/), the C API (capi/, whose CRF half includes only
// crf/, common/ and settings/) and the auto picks (options/device_choice.cpp). A check
// asks `contains` and writes the range with `to_string` ("[0, 1024]",
// "(0, 1000]"), so a range and its message change here and nowhere else.
// docs/config.md's key table quotes them.
#pragma once

#include <sstream>
#include <string>

namespace timitseg::limits {

// [lo, hi], or with an open end: (lo, hi], [lo, hi).
template <typename T>
struct Range {
  T lo, hi;
  bool lo_open = false, hi_open = false;
  // False for NaN.
  constexpr bool contains(T v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
};

template <typename T>
std::string to_string(const Range<T>& r) {
  std::ostringstream os;
  os << (r.lo_open ? '(' : '[') << r.lo << ", " << r.hi << (r.hi_open ? ')' : ']');
  return os.str();
}

// CPU threads (train.threads, every --threads, the C API's threads); 0 = all cores.
inline constexpr Range<int> kThreads{0, 1024};
// The log-score per label change of decoding (crf.phone_bonus, --phone-bonus, the C API's phone_bonus).
inline constexpr Range<double> kPhoneBonus{-100.0, 100.0};
// Utterances per batch of inference (evaluate's and align's --batch-size) and of bench train's --batch.
inline constexpr Range<int> kBatchSize{1, 65535};
// model.hidden_dim: both directions together, an even number.
inline constexpr Range<int> kHiddenDim{2, 8192};
inline constexpr Range<int> kNumLayers{1, 16};                   // model.num_layers
inline constexpr Range<double> kDropout{0.0, 1.0, false, true};  // model.dropout
inline constexpr Range<int> kMaxDuration{1, 1000};               // crf.max_duration, in frames
inline constexpr Range<double> kInitScale{0.0, 10.0};            // crf.init_scale (0 = zeros)
inline constexpr Range<double> kLrScale{0.0, 1000.0, true, false};  // crf.lr_scale
inline constexpr Range<double> kFrameCeWeight{0.0, 100.0};       // crf.frame_ce_weight
inline constexpr Range<double> kGaussianWeight{0.0, 100.0, true, false};  // crf.gaussian_weight (0 excluded)
inline constexpr Range<double> kAdamBeta{0.0, 1.0, false, true};  // train.beta1, train.beta2

// The hidden units per direction the fused LSTM kernel is built for
// (model/cuda/lstm_fused.cu instantiates exactly these; train.rnn_algo: auto
// picks it only for them).
inline constexpr int kFusedLstmUnits[] = {64, 128, 256};
constexpr bool fused_lstm_units(int per_direction) {
  for (int h : kFusedLstmUnits)
    if (h == per_direction) return true;
  return false;
}
// "64, 128 or 256".
inline std::string fused_lstm_units_text() {
  std::string s;
  const int n = static_cast<int>(sizeof kFusedLstmUnits / sizeof kFusedLstmUnits[0]);
  for (int i = 0; i < n; ++i) s += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::to_string(kFusedLstmUnits[i]);
  return s;
}

}  // namespace timitseg::limits
