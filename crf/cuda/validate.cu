// Input validation on the device, before any output is written.
#include <climits>
#include <sstream>
#include <stdexcept>

#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {

// Input validation on the device: lengths in [1,T]; cum_scores finite on the
// valid rows 0..L; parameters never NaN or +inf (-inf forbids an entry);
// labels in [0,C) on valid frames; onset (when given) finite on valid frames.
__global__ void validate_kernel(int B, int T, int K, int C, const float* __restrict__ cum,
                                const float* __restrict__ A, const float* __restrict__ D,
                                const float* __restrict__ s, const float* __restrict__ e,
                                const int32_t* __restrict__ lengths, const int32_t* __restrict__ labels,
                                const float* __restrict__ onset, unsigned long long* status) {
  const long long n_len = B;
  const long long n_cum = static_cast<long long>(B) * (T + 1) * C;
  const long long n_a = static_cast<long long>(C) * C;
  const long long n_d = static_cast<long long>(K) * C;
  const long long n_s = s ? C : 0;
  const long long n_e = e ? C : 0;
  const long long n_on = onset ? static_cast<long long>(B) * T * C : 0;
  const long long n_lab = labels ? static_cast<long long>(B) * T : 0;
  const long long total = n_len + n_cum + n_a + n_d + n_s + n_e + n_on + n_lab;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long j = i;
    if (j < n_len) {
      int L = lengths[j];
      if (L < 1 || L > T) report(status, kLengths, j);
      continue;
    }
    j -= n_len;
    if (j < n_cum) {
      const long long b = j / (static_cast<long long>(T + 1) * C);
      const long long t = (j / C) % (T + 1);
      const int L = lengths[b];
      if (L < 1 || L > T || t > L) continue;
      if (!isfinite(cum[j])) report(status, kCum, j);
      continue;
    }
    j -= n_cum;
    auto bad_param = [](float v) { return isnan(v) || v == INFINITY; };
    if (j < n_a) {
      if (bad_param(A[j])) report(status, kTransition, j);
      continue;
    }
    j -= n_a;
    if (j < n_d) {
      if (bad_param(D[j])) report(status, kDuration, j);
      continue;
    }
    j -= n_d;
    if (j < n_s) {
      if (bad_param(s[j])) report(status, kStart, j);
      continue;
    }
    j -= n_s;
    if (j < n_e) {
      if (bad_param(e[j])) report(status, kEnd, j);
      continue;
    }
    j -= n_e;
    if (j < n_on) {  // onset [B][T][C]: finite on the valid frames t < L
      const long long b = j / (static_cast<long long>(T) * C);
      const long long t = (j / C) % T;
      const int L = lengths[b];
      if (L < 1 || L > T || t >= L) continue;
      if (!isfinite(onset[j])) report(status, kOnset, j);
      continue;
    }
    j -= n_on;
    {
      const long long b = j / T, t = j % T;
      const int L = lengths[b];
      if (L < 1 || L > T || t >= L) continue;
      const int v = labels[j];
      if (v < 0 || v >= C) report(status, kLabels, j);
    }
  }
}


void launch_validate(const Layout& l, const Params& p, const int32_t* labels, unsigned long long* status,
                     cudaStream_t stream) {
  const long long total = l.B + static_cast<long long>(l.B) * (l.T + 1) * l.C + l.C * l.C + l.K * l.C + 2 * l.C +
                          (p.onset ? static_cast<long long>(l.B) * l.T * l.C : 0) +
                          (labels ? static_cast<long long>(l.B) * l.T : 0);
  validate_kernel<<<grid_for(total, 256), 256, 0, stream>>>(l.B, l.T, l.K, l.C, p.cum_scores, p.transition,
                                                            p.duration_bias, p.start, p.end, p.lengths, labels,
                                                            p.onset, status);
  TS_LAUNCHED("validate_kernel");
}

// The host's checks of the dims before any launch (common.cuh).
void check_dims(const Dims& d) {
  if (d.B < 1 || d.T < 1 || d.K < 1 || d.C < 1) {
    std::ostringstream os;
    os << "cuda backend: dims must be >= 1, got B=" << d.B << " T=" << d.T << " K=" << d.K << " C=" << d.C;
    throw std::invalid_argument(os.str());
  }
  // Utterances map to gridDim.y in the marginal kernel (at most 65535).
  if (d.B > 65535) {
    std::ostringstream os;
    os << "cuda backend: batch size B=" << d.B << " exceeds 65535 utterances per call; split the batch";
    throw std::invalid_argument(os.str());
  }
  // Per-utterance indices are int; batch offsets are size_t.
  if ((d.T + 1) * d.C > INT_MAX / 2 || d.C * d.C > INT_MAX / 2 || d.K * d.C > INT_MAX / 2 || d.B > INT_MAX / 2 ||
      d.B * d.T > (1LL << 50)) {
    std::ostringstream os;
    os << "cuda backend: dims too large, B=" << d.B << " T=" << d.T << " K=" << d.K << " C=" << d.C;
    throw std::invalid_argument(os.str());
  }
}

void check_align_n(const Dims& d, int64_t N) {
  if (N < 1 || (d.T + 1) * N > INT_MAX / 2 || d.B * (d.T + 1) * N > (1LL << 50)) {
    std::ostringstream os;
    os << "cuda backend: align: phone stride N=" << N << " must be >= 1 (and (T+1)*N small enough), T=" << d.T;
    throw std::invalid_argument(os.str());
  }
}

}  // namespace timitseg::crf::cuda_impl
