#include "crf/timing.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace timitseg::crf {

Timing time_calls(Backend& be, int warmup, int repeats, const std::function<void(int i)>& call) {
  if (repeats < 1) throw std::invalid_argument("time_calls: repeats must be >= 1, got " + std::to_string(repeats));
  for (int i = 0; i < warmup; ++i) call(i), be.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    call(i);
    be.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  Timing t;
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  t.min_ms = ms.front();
  return t;
}

}  // namespace timitseg::crf
