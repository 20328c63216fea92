// Thread count resolution and one parallel-for for the whole project.
//
// parallel_for(n, threads, fn) runs fn(i, worker) for every i in [0, n) on
// at most `threads` workers (the calling thread is worker 0), blocks until all
// are done, and rethrows the exception of the smallest failing i. Indices are
// handed out dynamically, so a caller that needs results independent of the
// thread count must make fn(i) depend on i alone (write to slot i, reduce the
// slots in index order afterwards) and must not use `worker` for anything but
// per-worker scratch memory.
//
// The workers are kept in one process-wide pool (started on first use, grown
// on demand), so a parallel_for per training step or per LSTM layer costs a
// wake-up, not a thread start. Nested calls run serially on the calling worker.
#pragma once

#include <cstdint>
#include <functional>

namespace timitseg {

// requested > 0: requested; otherwise std::thread::hardware_concurrency() (at least 1).
int resolve_threads(int requested);

void parallel_for(int64_t n, int threads, const std::function<void(int64_t i, int worker)>& fn);

}  // namespace timitseg
