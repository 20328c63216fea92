// The fused LSTM kernel's queries for the rooms above model/ (model/fused_lstm.h).
#include "model/fused_lstm.h"

#include "model/cuda/lstm_fused.h"
#include "model/cuda/lstm_fused_grid.h"  // grid_ctas is constexpr in the header: every build

namespace timitseg::model {

int fused_grid_ctas(int B, int H) { return fused::grid_ctas(B, H); }

bool fused_lstm_supported(int H, std::string* why) {
#ifdef TIMITSEG_HAVE_CUDA
  return fused::supported(H, why);
#else
  (void)H;
  if (why) *why = "this build has no CUDA";
  return false;
#endif
}

}  // namespace timitseg::model
