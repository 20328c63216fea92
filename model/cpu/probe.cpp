// The host's numeric checks and fault injection (see probe.h).
#include "model/cpu/probe.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/parallel.h"

namespace timitseg::model {

template <class S>
void Probe::tap(const std::string& layer, config::Pass pass, const std::string& tensor, S* data, int64_t rows, int64_t cols,
                int64_t stride) {
  if (fault_now_ && !planted_ && fault_.layer == layer && fault_.pass == pass && rows > 0 && cols > 0) {
    data[0] = static_cast<S>(fault_.value);
    planted_ = true;
  }
  if (!check_) return;
  using Arr = Eigen::Array<S, Eigen::Dynamic, 1>;
  // rows [r0, r1) all finite? (a contiguous tensor is one long row)
  const bool contiguous = stride == cols;
  const int64_t R = contiguous ? 1 : rows, N = contiguous ? rows * cols : cols;
  auto rows_finite = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t r = r0; r < r1; ++r)
      if (!Eigen::Map<const Arr>(data + r * stride + c0, c1 - c0).allFinite()) return false;
    return true;
  };
  constexpr int64_t kChunk = int64_t(1) << 15;  // elements per task
  bool finite = true;
  if (threads_ > 1 && R * N >= 4 * kChunk) {
    const int64_t rows_per = contiguous ? 1 : std::max<int64_t>(1, kChunk / N);
    const int64_t cols_per = contiguous ? kChunk : N;
    const int64_t nr = (R + rows_per - 1) / rows_per, nc = (N + cols_per - 1) / cols_per;
    std::vector<char> ok(static_cast<size_t>(nr * nc), 1);
    parallel_for(nr * nc, threads_, [&](int64_t i, int) {
      const int64_t r0 = (i / nc) * rows_per, c0 = (i % nc) * cols_per;
      ok[i] = rows_finite(r0, std::min(R, r0 + rows_per), c0, std::min(N, c0 + cols_per));
    });
    for (char c : ok) finite = finite && c;
  } else {
    finite = rows_finite(0, R, 0, N);
  }
  if (finite) return;
  NumericsHit hit;
  hit.layer = layer;
  hit.pass = pass;
  hit.tensor = tensor;
  for (int64_t r = 0; r < rows; ++r) {
    const TensorStats t = tensor_stats(data + r * stride, static_cast<size_t>(cols));
    hit.stats.nan += t.nan;
    hit.stats.inf += t.inf;
    hit.stats.finite += t.finite;
    hit.stats.min = std::min(hit.stats.min, t.min);
    hit.stats.max = std::max(hit.stats.max, t.max);
  }
  throw NumericsError(hit);
}
void Probe::report(const std::string& layer, config::Pass pass, const std::string& tensor, const TensorStats& stats) const {
  if (!check_ || !stats.bad()) return;
  NumericsHit hit;
  hit.layer = layer;
  hit.pass = pass;
  hit.tensor = tensor;
  hit.stats = stats;
  throw NumericsError(hit);
}

template void Probe::tap<float>(const std::string&, config::Pass, const std::string&, float*, int64_t, int64_t, int64_t);
template void Probe::tap<double>(const std::string&, config::Pass, const std::string&, double*, int64_t, int64_t, int64_t);

}  // namespace timitseg::model
