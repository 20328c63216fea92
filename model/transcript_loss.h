// The CRF stage of a transcript batch (Batch::transcript(): supervision by
// phone sequences, docs/crf.md "Training from transcripts") on host arrays,
// shared by the CPU executor and the GPU executor's host CRF backends.
#pragma once

#include "crf/backend.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "model/batch.h"

namespace timitseg::model {

// Validates the inputs (crf::validate_host, crf::validate_align_host), then
// log Z, log Z_c and the gradients of sum_b scale * (log Z_b - log Z_c_b)
// through session (a host backend: reference or cpu), in run_host's result
// type: gold holds log Z_c [B], so log_z - gold is each utterance's
// transcript NLL as it is the NLL of a segments batch. grad_onset only when
// host_params.onset is set. Throws std::invalid_argument for a bad input and
// std::runtime_error (naming the batch row and utterance) for an utterance
// whose phones cannot fit its frames.
crf::HostResult transcript_crf_host(crf::Session& session, const crf::Dims& dims, const crf::Params& host_params,
                                    const Batch& batch, double scale);

}  // namespace timitseg::model
