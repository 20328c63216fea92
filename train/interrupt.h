// Stopping `train` at a safe point on SIGINT (Ctrl-C) or SIGTERM: the
// mechanism is common/interrupt.h (shared with decode, align, evaluate,
// prepare and compare); its names are used here as timitseg::train's.
#pragma once

#include "common/interrupt.h"

namespace timitseg::train {

using timitseg::clear_stop;
using timitseg::install_stop_handlers;
using timitseg::Interrupted;
using timitseg::request_stop;
using timitseg::stop_requested;
using timitseg::stop_signal;

}  // namespace timitseg::train
