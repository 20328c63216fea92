// Windows of a long recording (long_input.h).
#include "model/long_input.h"

#include "crf/cumsum.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace timitseg::model {

std::vector<Window> windows_of(int64_t length, int64_t window, int64_t context) {
  if (window < 1 || context < 0) throw std::invalid_argument("windows_of: window must be >= 1 and context >= 0");
  std::vector<Window> out;
  for (int64_t a = 0; a < length; a += window) {
    Window w;
    w.a = a;
    w.b = std::min(length, a + window);
    w.wa = std::max<int64_t>(0, a - context);
    w.wb = std::min(length, w.b + context);
    out.push_back(w);
  }
  return out;
}

void long_cumsum(int64_t T, int64_t C, const float* x, int32_t L, int64_t centre_frames, float* cum) {
  if (centre_frames < 0)
    throw std::invalid_argument("--centre-frames must be >= 0 (0 = the whole recording), got " +
                                std::to_string(centre_frames));
  if (centre_frames == 0)
    crf::centered_cumsum_forward<float>(1, T, C, x, &L, cum);
  else
    crf::running_centered_cumsum_forward(T, C, x, L, centre_frames, cum);
}

}  // namespace timitseg::model
