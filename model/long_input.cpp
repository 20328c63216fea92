// Windows of a long recording (long_input.h).
#include "model/long_input.h"

#include <algorithm>
#include <stdexcept>

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

}  // namespace timitseg::model
