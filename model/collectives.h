// TIMITSEG_GPU_COLLECTIVES (an environment knob, docs/multigpu.md): the GPU
// gradient all-reduce through NCCL, or host-staged through the MPI world
// (model/cuda/device_reducer.h).
#pragma once

#include "common/enum_names.h"

namespace timitseg::model {

enum class Collectives { nccl, mpi };
TIMITSEG_ENUM_NAMES(Collectives, 2, {Collectives::nccl, "nccl"}, {Collectives::mpi, "mpi"});

}  // namespace timitseg::model
