// The model layer in one include: label set, batches, checkpoints, the
// executor interface and the CPU executor (model/cpu/). See docs/design.md.
#pragma once

#include "model/batch.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/cpu/cpu_executor.h"
#include "model/cpu/network.h"
#include "model/executor.h"
#include "model/labels.h"
#include "model/optim.h"
#include "model/params.h"
