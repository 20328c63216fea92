// The phone bonus's transition (crf/phone_bonus.h).
#include "crf/phone_bonus.h"

namespace timitseg::crf {

void add_phone_bonus(const float* transition, int64_t C, float beta, float* out) {
  for (int64_t from = 0; from < C; ++from)
    for (int64_t to = 0; to < C; ++to)
      out[from * C + to] = transition[from * C + to] + (from == to ? 0.f : beta);
}

}  // namespace timitseg::crf
