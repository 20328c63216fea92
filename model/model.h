// The model layer in one include: label set, batches, checkpoints, the
// executor interface (its implementations, model/cpu/ and model/cuda/, are
// private to model/). See docs/design.md.
#pragma once

#include "model/batch.h"
#include "model/checkpoint.h"
#include "config/config.h"
#include "model/executor.h"
#include "model/labels.h"
#include "model/optim.h"
#include "model/params.h"
