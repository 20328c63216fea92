// The messages of the cuda backend's status word (common.cuh: the first
// invalid input a kernel reported): read back with the value it names, and
// thrown as one line (std::invalid_argument for an input, std::runtime_error
// for log Z or a gold score of -inf). Also allow_dynamic_smem (common.cuh).
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>
#include <stdexcept>
#include <string>

#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {
namespace {

// Copies `bytes` of device memory to the host on the stream and waits.
void read_back(cudaStream_t stream_, void* host_dst, const void* device_src, size_t bytes) {
  TS_CUDA(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  TS_CUDA(cudaStreamSynchronize(stream_));
}

// The message of a confidence input flagged on the device (check_status):
// `items` is spans [B][N][2] (kSpans) or queries [B][N][3] (kQueries, N = Q).
std::string confidence_status(cudaStream_t stream_, int tensor, long long idx, const Layout& l, const Params& p,
                              const int32_t* items, const int32_t* counts, int N) {
  std::ostringstream os;
  int32_t v[3] = {0, 0, 0}, len = 0;
  if (tensor == kNumQueries) {
    read_back(stream_, v, counts + idx, sizeof(int32_t));
    os << "span_marginals: num_queries[" << idx << "] = " << v[0] << " is outside [0, Q=" << N << "]";
    return os.str();
  }
  const int width = tensor == kSpans ? 2 : 3;
  read_back(stream_, v, items + width * idx, width * sizeof(int32_t));
  read_back(stream_, &len, p.lengths + idx / N, sizeof(len));
  if (tensor == kSpans)
    os << "align_posteriors: spans[" << idx / N << "][" << idx % N << "] = (" << v[0] << ", " << v[1]
       << ") is not a span (start, duration >= 0) inside [0, length=" << len << "]";
  else
    os << "span_marginals: queries[" << idx / N << "][" << idx % N << "] = (" << v[0] << ", " << v[1] << ", "
       << v[2] << ") is not (start, duration >= 0, label in [0, C=" << l.C << ")) inside [0, length=" << len
       << "]";
  return os.str();
}

}  // namespace

void allow_dynamic_smem(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> set;  // (kernel, device) -> the attribute's value
  int device = 0;
  TS_CUDA(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mu);
  size_t& now = set[{kernel, device}];
  if (bytes <= now) return;
  TS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  now = bytes;
}

namespace {

// The message of a score input flagged on the device (lengths, cum_scores,
// transition, duration_bias, start, end, onset, labels), with its value.
std::string input_status(cudaStream_t stream_, int tensor, long long idx, const Layout& l, const Params& p,
                         const int32_t* labels) {
  std::ostringstream os;
  auto fval = [&](const float* ptr) {
    float v = 0;
    read_back(stream_, &v, ptr + idx, sizeof(v));
    return v;
  };
  switch (tensor) {
    case kLengths: {
      int32_t v = 0;
      read_back(stream_, &v, p.lengths + idx, sizeof(v));
      os << "lengths[" << idx << "] = " << v << " is outside [1, T=" << l.T << "]";
      break;
    }
    case kCum: {
      const long long b = idx / ((static_cast<long long>(l.T) + 1) * l.C);
      const long long t = (idx / l.C) % (l.T + 1), c = idx % l.C;
      os << "cum_scores[" << b << "][" << t << "][" << c << "] = " << fval(p.cum_scores)
         << " is not finite (every valid row 0..lengths[b] must be finite)";
      break;
    }
    case kTransition:
      os << "transition[" << idx / l.C << "][" << idx % l.C << "] = " << fval(p.transition)
         << " is NaN or +inf (entries must be finite, or -inf to forbid a transition)";
      break;
    case kDuration:
      os << "duration_bias[" << idx / l.C << "][" << idx % l.C << "] = " << fval(p.duration_bias)
         << " is NaN or +inf (entries must be finite, or -inf to forbid a duration)";
      break;
    case kStart:
      os << "start[" << idx << "] = " << fval(p.start) << " is NaN or +inf (entries must be finite or -inf)";
      break;
    case kEnd:
      os << "end[" << idx << "] = " << fval(p.end) << " is NaN or +inf (entries must be finite or -inf)";
      break;
    case kOnset: {
      const long long b = idx / (static_cast<long long>(l.T) * l.C);
      const long long t = (idx / l.C) % l.T, c = idx % l.C;
      os << "onset[" << b << "][" << t << "][" << c << "] = " << fval(p.onset)
         << " is not finite (every valid frame t < lengths[b] must be finite)";
      break;
    }
    default: {  // kLabels
      int32_t v = 0;
      read_back(stream_, &v, labels + idx, sizeof(v));
      os << "labels[" << idx / l.T << "][" << idx % l.T << "] = " << v << " is outside [0, C=" << l.C << ")";
    }
  }
  return os.str();
}

// The message of an align input flagged on the device (num_phones, phones,
// optional [B][N]), with its value.
std::string align_status(cudaStream_t stream_, int tensor, long long idx, const Layout& l, const int32_t* phones,
                         const int32_t* num_phones, int N, const int32_t* optional) {
  std::ostringstream os;
  int32_t v = 0;
  switch (tensor) {
    case kNumPhones:
      read_back(stream_, &v, num_phones + idx, sizeof(v));
      os << "align: num_phones[" << idx << "] = " << v << " is outside [1, N=" << N << "]";
      break;
    case kPhones:
      read_back(stream_, &v, phones + idx, sizeof(v));
      os << "align: phones[" << idx / N << "][" << idx % N << "] = " << v << " is outside [0, C=" << l.C << ")";
      break;
    case kOptional:
      read_back(stream_, &v, optional + idx, sizeof(v));
      os << "align: optional[" << idx / N << "][" << idx % N << "] = ";
      if (v != 0 && v != 1)
        os << v << " is not 0 or 1";
      else
        os << "1 follows another optional phone (two optional phones in a row are not supported)";
      break;
    default:  // kOptionalAll
      os << "align: utterance " << idx << " has only optional phones";
  }
  return os.str();
}

}  // namespace

void check_status_word(cudaStream_t stream_, unsigned long long* pinned, const Layout& l, const Params& p,
                       const int32_t* labels, void* ws, const int32_t* phones, const int32_t* num_phones, int N,
                       const int32_t* optional) {
  read_back(stream_, pinned, at<char>(ws, l.status), sizeof(*pinned));
  const unsigned long long key = *pinned;
  if (key == kNoError) return;
  const int tensor = static_cast<int>(key >> kIndexBits);
  const long long idx = static_cast<long long>(key & ((1ULL << kIndexBits) - 1));
  const std::string who = "cuda backend: ";
  switch (tensor) {
    case kLengths:
    case kCum:
    case kTransition:
    case kDuration:
    case kStart:
    case kEnd:
    case kOnset:
    case kLabels:
      throw std::invalid_argument(who + input_status(stream_, tensor, idx, l, p, labels));
    case kLogZ:
      throw std::runtime_error(who + "utterance " + std::to_string(idx) +
                               " has no segmentation of finite score (log Z = -inf): the -inf entries of "
                               "transition/duration_bias/start/end forbid every path of its length");
    case kGold:
      throw std::runtime_error(who + "utterance " + std::to_string(idx) +
                               ": the gold segmentation has score -inf (it uses a -inf entry of "
                               "transition/duration_bias/start/end), so its NLL would be +inf");
    case kNumPhones:
    case kPhones:
    case kOptional:
    case kOptionalAll:
      throw std::invalid_argument(who + align_status(stream_, tensor, idx, l, phones, num_phones, N, optional));
    case kSpans:
    case kQueries:
    case kNumQueries:
      throw std::invalid_argument(who + confidence_status(stream_, tensor, idx, l, p, phones, num_phones, N));
    case kTranscript:
      throw std::runtime_error(who + "utterance " + std::to_string(idx) +
                               ": no alignment of its transcript has finite score (log Z_c = -inf): fewer frames "
                               "than non-optional phones (filter with crf::transcript_feasible), or the -inf "
                               "entries of transition/duration_bias/start/end forbid every alignment");
    default:
      throw std::runtime_error(who + "internal status code " + std::to_string(tensor) + " at index " +
                               std::to_string(idx));
  }
}

}  // namespace timitseg::crf::cuda_impl
