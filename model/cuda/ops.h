// The rest of a training step on the GPU: global gradient norm, clipping,
// AdamW, non-finite counts, and the dropout mask.
// Compiles without CUDA headers. Every pointer is device memory; `stream` is a
// cudaStream_t as void* (nullptr: the default stream). Nothing synchronizes:
// results are ready once the stream is. Reductions run in a fixed order (no
// float atomics): two runs on the same inputs give bitwise identical results.
// Errors (a failed launch) throw std::runtime_error naming the kernel.
#pragma once

#include <cstddef>
#include <cstdint>

// The CRF parameter penalty and the log-normal duration table on the GPU: crf/device_layers.h.
namespace timitseg::model::gpu {

// ||grad||_2 in float64, fixed-order two-pass reduction, -> *norm (device double[1]).
// scratch: device memory of global_norm_scratch_bytes(n) bytes.
size_t global_norm_scratch_bytes(size_t n);
void global_norm(const float* grad, size_t n, double* norm, void* scratch, void* stream);

// torch's clip_grad_norm_ rule from model/optim.h, factor computed ON THE DEVICE from *norm (no host read):
// when max_norm > 0 and *norm is finite and f = max_norm / (*norm + 1e-6) < 1, grad[i] = float(grad[i] * f).
void clip_by_norm(float* grad, size_t n, const double* norm, double max_norm, void* stream);

// model/optim.h AdamW::update, same arithmetic (float32 state, double where it uses double); step = the new step
// count (>= 1).
void adamw_update(float* params, float* exp_avg, float* exp_avg_sq, const float* grad, size_t n, double lr,
                  double beta1, double beta2, double eps, double weight_decay, int64_t step, void* stream);

// count of non-finite values in x[n] -> *count (device) : used by numeric checks.
void count_nonfinite(const float* x, size_t n, unsigned long long* count, void* stream);

// ---- numeric checks (model/numerics.h, model/cuda/numerics_taps.h) ----------------
// Per tapped tensor, a deterministic two-stage reduction into one StatsSlot:
// stage 1 (stats_partials) splits each tensor into a FIXED number of chunks (a
// function of its size only), one block per chunk, and writes one partial slot
// per chunk; stage 2 (stats_final) reduces the partials of each slot in chunk
// order, one block per slot. No atomics: counts are integers and min/max are
// exact, so the result never depends on scheduling.
struct StatsSlot {  // device POD; nan/inf/finite counts and the finite min/max
  unsigned long long nan, inf, finite;
  double min, max;  // +inf / -inf when there is no finite value
};
// One tensor of a stage-1 launch: element i (i < rows * cols) is at
// data[(i / cols) * stride + i % cols] (stride == cols: contiguous), float32
// or float64. slot: index into the step's slot array.
struct StatsEntry {
  const void* data;
  int64_t rows, cols, stride;
  int is_double;
  int slot;
};
constexpr int kStatsMaxEntries = 8;    // tensors per stage-1 launch (one layer's taps)
constexpr int kStatsChunks = 128;      // partial slots per tensor (stage-1 blocks at most)
// Stage 1 for `count` <= kStatsMaxEntries tensors in ONE launch (the table
// travels as a kernel argument): partials[slot * kStatsChunks + j], every j.
void stats_partials(const StatsEntry* entries, int count, StatsSlot* partials, void* stream);
// Stage 2: slots[s] for s in [first, last) from their kStatsChunks partials (one launch).
void stats_final(const StatsSlot* partials, int first, int last, StatsSlot* slots, void* stream);

// The encoder's dropout scales (model/cuda/dropout_hash.h): scale[i] = 0 when
// dropout_uniform(seed, step, site, i) < p, else float(1 / (1 - p)), i < n.
// p in [0, 1). Exposed so that tests can see the mask the encoder uses.
void dropout_scale(uint64_t seed, uint64_t step, uint64_t site, double p, size_t n, float* scale, void* stream);

}  // namespace timitseg::model::gpu
