/* timitseg.h: the C API of timitseg (libtimitseg.so), the one binding surface
 * of the semi-Markov CRF and of checkpoint inference. python/ binds it with
 * ctypes; Julia, Rust or C can do the same. docs/python.md describes it.
 *
 * Conventions (after llama.cpp and whisper.cpp):
 *   - Opaque handles (timitseg_crf, timitseg_model, timitseg_segments),
 *     created by *_create / *_load, released by *_free (free(NULL) is a no-op).
 *   - Every call that can fail returns an int status (TIMITSEG_OK = 0, else a
 *     timitseg_status); the message is timitseg_last_error(), one line naming
 *     the argument and the problem, kept per thread until that thread's next
 *     failing call. No C++ exception ever crosses this interface.
 *   - Memory is the caller's: tensors are described by timitseg_tensor (data
 *     pointer, dtype, device, shape, strides in elements) and results are
 *     written into the caller's tensors. Nothing a call returns must be freed,
 *     except the handles.
 *   - Thread safety: the CRF calls have no mutable global state: a handle is
 *     used by one thread at a time, different handles run in parallel. The
 *     model calls run the commands' pipeline (eval/) on the handle's loaded
 *     executor, in memory, and log progress lines on stderr (spdlog,
 *     thread-safe) at the level of timitseg_set_log_level.
 *   - CUDA: tensors may live on a CUDA device (device = TIMITSEG_DEVICE_CUDA)
 *     when the handle's backend is TIMITSEG_BACKEND_CUDA; the call queues its
 *     work on `stream` (a cudaStream_t passed as void*, NULL = the default
 *     stream), in order with the caller's earlier work there, and its results
 *     are in the caller's tensors for any later work on that stream; read them
 *     from the host after a cudaStreamSynchronize(stream). (The zero-copy path
 *     of nll and log_partition, docs/python.md "Zero-copy", may return before
 *     its last kernels ran; the other calls return with the results written.)
 *
 * The CRF is the one of docs/crf.md (every backend computes it exactly):
 * per-frame scores x [B][T][C] are zero-centered over each utterance's valid
 * frames and summed into cum [B][T+1][C]; parameters transition [C][C] (from,
 * to), duration_bias [K][C] (D[d-1][c]), start [C], end [C], named as in a
 * timitseg checkpoint without the "crf." prefix. An utterance of length 0 is
 * allowed here: its log partition, NLL, gradients and Viterbi score are 0 and
 * it has no segments.
 */
#ifndef TIMITSEG_H
#define TIMITSEG_H

#include <stddef.h>
#include <stdint.h>

#if defined(TIMITSEG_BUILDING_SHARED)
#define TIMITSEG_API __attribute__((visibility("default")))
#else
#define TIMITSEG_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this interface: bumped on any incompatible change. A binding
 * checks timitseg_api_version() == the TIMITSEG_API_VERSION it was written for.
 * 2: timitseg_model_params gained device_kind and backend_kind (its size
 * changed; the string fields device and backend still work).
 * 3: timitseg_crf_transcript_graph_nll (a phone graph: several pronunciations). */
#define TIMITSEG_API_VERSION 3
TIMITSEG_API int timitseg_api_version(void);
/* The library's version and build ("0.1.0 (cuda)" or "0.1.0 (cpu only)"); static storage. */
TIMITSEG_API const char* timitseg_version_string(void);
/* 1 when this build has the CUDA backend, else 0. */
TIMITSEG_API int timitseg_has_cuda(void);

/* ---- status and errors --------------------------------------------------- */
typedef enum timitseg_status {
  TIMITSEG_OK = 0,
  TIMITSEG_ERR_ARGUMENT = 1,  /* a bad value (NULL handle, out-of-range option or label, non-finite score) */
  TIMITSEG_ERR_SHAPE = 2,     /* a tensor of the wrong rank or shape */
  TIMITSEG_ERR_DTYPE = 3,     /* a tensor of a dtype the call does not take */
  TIMITSEG_ERR_DEVICE = 4,    /* a tensor on a device the handle's backend cannot read, or no CUDA */
  TIMITSEG_ERR_LENGTH = 5,    /* a length outside [0, T], a phone count outside [1, N], a segmentation that does not cover */
  TIMITSEG_ERR_RUNTIME = 6,   /* the computation failed (e.g. -inf parameters leave no path), or I/O */
  TIMITSEG_ERR_MEMORY = 7     /* an allocation failed */
} timitseg_status;

/* The message of this thread's last failed call ("" if none); valid until this
 * thread's next call into the library. */
TIMITSEG_API const char* timitseg_last_error(void);
/* "TIMITSEG_ERR_SHAPE" etc.; static storage. */
TIMITSEG_API const char* timitseg_status_name(int status);

/* ---- tensors ---------------------------------------------------------------- */
typedef enum timitseg_dtype { TIMITSEG_F32 = 0, TIMITSEG_F64 = 1, TIMITSEG_I32 = 2, TIMITSEG_I64 = 3 } timitseg_dtype;
typedef enum timitseg_device { TIMITSEG_DEVICE_CPU = 0, TIMITSEG_DEVICE_CUDA = 1 } timitseg_device;

#define TIMITSEG_MAX_DIMS 4
/* A caller-owned tensor. strides are in elements (not bytes), any sign-free
 * layout; data == NULL means "absent" where a tensor is optional. */
typedef struct timitseg_tensor {
  void* data;
  int32_t dtype;         /* timitseg_dtype */
  int32_t device;        /* timitseg_device */
  int32_t device_index;  /* CUDA device ordinal (0 for the CPU); a cuda handle's tensors are on its device */
  int32_t ndim;
  int64_t shape[TIMITSEG_MAX_DIMS];
  int64_t strides[TIMITSEG_MAX_DIMS];
} timitseg_tensor;

/* ---- the CRF handle ------------------------------------------------------------ */
typedef enum timitseg_backend {
  TIMITSEG_BACKEND_AUTO = 0,      /* cuda when this build has it and a device is present, else cpu */
  TIMITSEG_BACKEND_REFERENCE = 1, /* float64, O(T K C^2): the oracle */
  TIMITSEG_BACKEND_CPU = 2,       /* factorized, threaded */
  TIMITSEG_BACKEND_CUDA = 3
} timitseg_backend;

typedef enum timitseg_duration_model {
  TIMITSEG_DURATION_TABLE = 0,     /* duration_bias [K][C] is the parameter */
  TIMITSEG_DURATION_LOGNORMAL = 1  /* duration_lognormal [3][C] (mu, log_sigma, offset) derives duration_bias */
} timitseg_duration_model;

typedef struct timitseg_crf_params {
  int32_t num_labels;     /* C >= 1 */
  int32_t max_duration;   /* K >= 1 */
  int32_t backend;        /* timitseg_backend */
  int32_t threads;        /* cpu backend's worker threads; 0 = all hardware threads */
  int32_t duration_model; /* timitseg_duration_model (crf.duration_model) */
  double reg;             /* crf.reg: nll adds reg * (||transition||^2 + ||duration_bias||^2) to the batch loss
                             (transition only with the log-normal), once per call, with its gradient */
  double phone_bonus;     /* crf.phone_bonus: viterbi decodes with transition + bonus off the diagonal */
} timitseg_crf_params;

/* C = 0, K = 0 (must be set), backend AUTO, threads 0, table durations, reg 0, bonus 0. */
TIMITSEG_API timitseg_crf_params timitseg_crf_default_params(void);

typedef struct timitseg_crf timitseg_crf;

/* Creates a handle holding the parameters (all 0, or the log-normal rows
 * mu 0, log_sigma 0, offset 0) and a session with its workspaces. A cuda
 * handle runs on the CUDA device current here: each of its calls runs there
 * whatever the thread's current device is, and leaves that as it was; a
 * CUDA tensor on another device (device_index) is TIMITSEG_ERR_DEVICE. */
TIMITSEG_API int timitseg_crf_create(const timitseg_crf_params* params, timitseg_crf** out);
TIMITSEG_API void timitseg_crf_free(timitseg_crf* crf);
/* The backend that runs ("reference", "cpu", "cuda"); valid while the handle lives. */
TIMITSEG_API const char* timitseg_crf_backend_name(const timitseg_crf* crf);

/* Parameters by name: "transition" [C][C], "duration_bias" [K][C], "start" [C],
 * "end" [C], "duration_lognormal" [3][C] (log-normal model only; setting it
 * re-derives duration_bias, which may then not be set directly). The tensor
 * is F32 or F64, on the CPU or (cuda backend) the device; values are copied.
 * Entries may be -inf (forbidden), never NaN or +inf. */
TIMITSEG_API int timitseg_crf_set_param(timitseg_crf* crf, const char* name, const timitseg_tensor* value);
TIMITSEG_API int timitseg_crf_get_param(const timitseg_crf* crf, const char* name, timitseg_tensor* out);

/* Binds the four parameters to the caller's memory instead of copies: every
 * later call reads transition [C][C], duration_bias [K][C], start [C] and
 * end [C] in place, at its own time on its own stream, so that writing them
 * between calls (an optimizer step on the device) needs no set_param and no
 * host wait. Each tensor F32, contiguous, in the handle's space (CUDA memory
 * for the cuda backend, on the handle's device; host memory for the others).
 * No values are read here: each call checks them as it checks its scores (a
 * NaN or +inf entry is that call's TIMITSEG_ERR_ARGUMENT naming it). The
 * memory must stay alive while bound. Calls that use the parameters on the
 * host (get_param, penalty, a batch the zero-copy path does not take) first
 * copy the bound values (a wait on the call's stream). set_param, or this
 * call with all four NULL, ends the binding: the bound values are copied into
 * the handle first. Duration model TABLE only (LOGNORMAL derives
 * duration_bias: TIMITSEG_ERR_ARGUMENT). */
TIMITSEG_API int timitseg_crf_bind_params(timitseg_crf* crf, const timitseg_tensor* transition,
                                          const timitseg_tensor* duration_bias, const timitseg_tensor* start,
                                          const timitseg_tensor* end);

/* One batch. scores: F32 or F64 [B][T][C] (per-frame scores x, centered and
 * summed here; F64 scores are computed in float64 end to end on the reference
 * and cpu backends: the centering, the reference backend's float64 recurrences
 * with the parameters' values as set_param took them (an F64 tensor's
 * unrounded), log Z, NLL, marginals, segment posteriors and every gradient;
 * viterbi and align round them to float32; a cuda handle refuses them,
 * TIMITSEG_ERR_DTYPE), or, with cumulative = 1, [B][T+1][C] already-summed cum_scores
 * as `timitseg crf replay` reads them (row 0 ignored and taken as 0). lengths:
 * I32 or I64 [B], each in [0, T]. onset: optional F32/F64 [B][T][C] onset
 * scores (docs/crf.md), data NULL = none. All on one device. */
typedef struct timitseg_crf_batch {
  timitseg_tensor scores;
  int32_t cumulative;
  timitseg_tensor lengths;
  timitseg_tensor onset;
  void* stream; /* cudaStream_t or NULL */
} timitseg_crf_batch;

/* The gold segmentation of nll: exactly one of
 *   labels [B][T] I32/I64 frame labels (runs split at K, docs/crf.md), or
 *   segments [B][S][3] I32/I64 rows (start, duration, label) in time order
 *   with num_segments [B]; they must tile [0, length) with 1 <= duration <= K. */
typedef struct timitseg_crf_gold {
  timitseg_tensor labels;
  timitseg_tensor segments;
  timitseg_tensor num_segments;
} timitseg_crf_gold;

/* Gradient outputs, overwritten; data NULL = not wanted. Shapes: scores like
 * the batch's scores, transition [C][C], duration_bias [K][C], start [C],
 * end [C], duration_lognormal [3][C] (log-normal only), onset [B][T][C]. */
typedef struct timitseg_crf_grads {
  timitseg_tensor scores, transition, duration_bias, start, end, duration_lognormal, onset;
} timitseg_crf_grads;

/* log_z [B] F32/F64. */
TIMITSEG_API int timitseg_crf_log_partition(timitseg_crf* crf, const timitseg_crf_batch* batch, timitseg_tensor* log_z);

/* log_z [B] as timitseg_crf_log_partition and, in grads (as timitseg_crf_nll's,
 * duration_lognormal included), the gradients of scale * sum_b log Z_b (no
 * penalty): the expected segment, transition, start and end counts, and for
 * the scores the frame marginals through the centering. The general path
 * (host copies on a cuda handle). */
TIMITSEG_API int timitseg_crf_log_partition_grads(timitseg_crf* crf, const timitseg_crf_batch* batch, double scale,
                                                  timitseg_tensor* log_z, const timitseg_crf_grads* grads);

/* nll [B] F32/F64 = log Z_b - Score(gold_b) (without the penalty), and, when
 * grads is not NULL, the gradients of  scale * sum_b nll_b + penalty. */
TIMITSEG_API int timitseg_crf_nll(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_crf_gold* gold,
                                  double scale, timitseg_tensor* nll, const timitseg_crf_grads* grads);

/* The transcript NLL (docs/crf.md "Training from transcripts"): nll [B]
 * F32/F64 = log Z_b - log Z_c_b, where Z_c sums over every alignment of
 * utterance b's phones phones[b][0..num_phones[b]) (phones [B][N] I32/I64,
 * labels in [0, C); num_phones [B] I32/I64 in [1, N], 0 for an utterance of
 * length 0, whose nll is 0) to its frames, optional [B][N] I32/I64 (data
 * NULL = none) marking phones that may be skipped (align's rules); and,
 * when grads is not NULL, the gradients (as timitseg_crf_nll's) of
 * scale * sum_b nll_b + penalty. F64 scores: float64 end to end (reference
 * and cpu handles). An utterance whose transcript has no alignment of finite
 * score (fewer frames than non-optional phones: filter first) is
 * TIMITSEG_ERR_RUNTIME naming it. The general path (host copies on a cuda
 * handle). */
TIMITSEG_API int timitseg_crf_transcript_nll(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                             const timitseg_tensor* phones, const timitseg_tensor* num_phones,
                                             const timitseg_tensor* optional, double scale, timitseg_tensor* nll,
                                             const timitseg_crf_grads* grads);

/* The same over a phone graph (docs/crf.md "Alternative pronunciations: the
 * phone graph"): Z_c sums over every path through the graph of utterance b's
 * phones and every alignment of that path. links [B][N] I32/I64: bit j
 * (j < 29) of links[b][n] = phone n-1-j may come right before phone n, bit 29
 * = phone n may be the first, bit 30 = the last (a word's several
 * pronunciations laid one after another, each one's first phone following
 * every last phone of the slot before). A bit naming a phone before 0, or any
 * bit above 30, is TIMITSEG_ERR_ARGUMENT; an utterance without a path of at
 * most its length in phones is TIMITSEG_ERR_RUNTIME naming it. */
TIMITSEG_API int timitseg_crf_transcript_graph_nll(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                                   const timitseg_tensor* phones, const timitseg_tensor* num_phones,
                                                   const timitseg_tensor* links, double scale, timitseg_tensor* nll,
                                                   const timitseg_crf_grads* grads);

/* Deferred nll (docs/python.md "Deferred check"): the same call and results
 * (bitwise) as timitseg_crf_nll, but where it takes the cuda zero-copy path
 * it returns once the whole call (cumsum, CRF, gradients, their cumsum
 * backward, the penalty's gradient, the NLL conversion) is queued on
 * batch->stream, without waiting for the GPU; its inputs are validated there,
 * on the device. *ticket (>= 1) names the call for timitseg_crf_check, which
 * must run before its outputs are read or its inputs and outputs are freed or
 * changed. Any other path (host backends, inputs the zero-copy path does not
 * take) runs synchronously: its errors are returned here and its check
 * returns TIMITSEG_OK. Errors read as timitseg_crf_nll's ("timitseg_crf_nll: ..."). */
TIMITSEG_API int timitseg_crf_nll_deferred(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                           const timitseg_crf_gold* gold, double scale, timitseg_tensor* nll,
                                           const timitseg_crf_grads* grads, uint64_t* ticket);

/* Waits for the deferred call `ticket` of this handle and returns what
 * timitseg_crf_nll returns for the same inputs: TIMITSEG_OK, or its status
 * and its message (timitseg_last_error(), naming the tensor and index). When
 * the device check rejected the batch (a row of length 0, which the device
 * path does not take, or a bad length, label or score), the check runs the
 * general path as timitseg_crf_nll does: *rerun (may be NULL) is then 1 and,
 * on success, the outputs are written by this check (not by the queued
 * work); else 0. A failed call leaves nothing behind: the next call runs as
 * usual. The pending state belongs to the handle: tickets are per handle, a
 * handle's calls (these included) must not run concurrently, and any other
 * call on the handle first reads the status of a pending deferred call (a
 * wait) and keeps its outcome for its check. Both wait for the deferred
 * call's own work only, not for work queued on its stream after it (the call
 * ends by queueing a copy of its status word; while the stream is captured
 * into a CUDA graph they wait for the stream). Checking a ticket twice, or one
 * whose call ran synchronously, returns TIMITSEG_OK; 0 or a ticket the handle
 * did not issue, TIMITSEG_ERR_ARGUMENT. */
TIMITSEG_API int timitseg_crf_check(timitseg_crf* crf, uint64_t ticket, int* rerun);

/* For a deferred nll captured in a CUDA graph (docs/python.md "CUDA graphs"):
 * its host part ran once, at the capture, and each replay queues its kernels
 * again, writing its status word again. This call waits for the stream of the
 * handle's last deferred call whose status was read (checked, or read by a
 * later call), reads that word again and returns what timitseg_crf_check
 * returns for it now: TIMITSEG_OK, or the error of the inputs the last replay
 * read (the capture's tensors, as they are now), worded by the general path,
 * which then also rewrites the outputs (*rerun = 1; a row of length 0 is
 * computed there). A pending deferred call is read first (its outcome kept
 * for its own check). TIMITSEG_OK when no deferred call was read yet (and
 * always on host backends). Valid until another call on the handle reuses
 * the status word. */
TIMITSEG_API int timitseg_crf_check_again(timitseg_crf* crf, int* rerun);

/* nll in two calls, for a caller that makes its output tensors while the
 * device computes (the Python package does: docs/python.md "Two calls").
 * timitseg_crf_nll_begin takes the inputs (batch, gold, scale) and, on the
 * cuda zero-copy path, queues the recurrences on batch->stream and returns;
 * *ticket (>= 1) names the call. with_grads: 1 when its end will take
 * gradients (0: the whole call runs in the end). timitseg_crf_nll_end(ticket)
 * takes the outputs (nll and grads as in timitseg_crf_nll), queues the rest
 * and returns as timitseg_crf_nll does when check_ticket is NULL (it waits and
 * reports), else as timitseg_crf_nll_deferred (*check_ticket for
 * timitseg_crf_check). The results are bitwise timitseg_crf_nll's. The inputs
 * stay alive and unchanged until the end (deferred: its check) returns. Any
 * other call on the handle between the two drops the begun call (its end then
 * returns TIMITSEG_ERR_ARGUMENT). Errors read as timitseg_crf_nll's. */
TIMITSEG_API int timitseg_crf_nll_begin(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                        const timitseg_crf_gold* gold, double scale, int with_grads,
                                        uint64_t* ticket);
TIMITSEG_API int timitseg_crf_nll_end(timitseg_crf* crf, uint64_t ticket, timitseg_tensor* nll,
                                      const timitseg_crf_grads* grads, uint64_t* check_ticket);

/* The penalty reg * (...) of the handle's parameters (0 when reg = 0). */
TIMITSEG_API int timitseg_crf_penalty(const timitseg_crf* crf, double* out);

/* The penalty reg * (||transition||^2 + ||duration_bias||^2) (transition only
 * with the log-normal model; -inf entries left out, as timitseg_crf_penalty)
 * of the caller's tensors transition [C][C] and duration_bias [K][C] (may be
 * NULL with the log-normal) for a binding that adds the penalty itself (its
 * handle's reg 0, so that nll's gradients leave it out; reg >= 0 given
 * here; the handle gives C, K, the duration model and the device), into value [1] F32/F64, and
 * its gradient 2 reg x into grad_transition / grad_duration_bias (overwritten;
 * NULL or data NULL = not wanted). The handle's own parameters are not used.
 * On a cuda handle with F32 contiguous tensors on its device and value F64
 * there, it is queued on `stream` (no host wait); otherwise computed on the
 * host in double (CUDA tensors copied). */
TIMITSEG_API int timitseg_crf_penalty_grads(const timitseg_crf* crf, double reg, const timitseg_tensor* transition,
                                            const timitseg_tensor* duration_bias, timitseg_tensor* value,
                                            timitseg_tensor* grad_transition, timitseg_tensor* grad_duration_bias,
                                            void* stream);

/* Viterbi: score [B] F32/F64; segments [B][T][3] I32 rows (start, duration,
 * label) in time order, num_segments [B] I32; rows past num_segments[b] are
 * written 0. Ties: smallest duration, then smallest label. On the cuda backend
 * with float32 scores, int32 lengths and contiguous outputs on the device
 * (score F32/F64, segments and num_segments I32) the whole call stays on the
 * device, on `stream` (the zero-copy path, docs/python.md). */
TIMITSEG_API int timitseg_crf_viterbi(timitseg_crf* crf, const timitseg_crf_batch* batch, timitseg_tensor* score,
                                      timitseg_tensor* segments, timitseg_tensor* num_segments);

/* Posteriors; either output may have data NULL. boundaries [B][T+1] F32/F64:
 * P(a segment ends at t), t = 1..length (0 elsewhere); frames [B][T][C]
 * F32/F64: P(frame t lies in a segment of label c) (0 on padding). */
TIMITSEG_API int timitseg_crf_marginals(timitseg_crf* crf, const timitseg_crf_batch* batch, timitseg_tensor* boundaries,
                                        timitseg_tensor* frames);

/* Segment posteriors: segments [B][T][K][C] F32/F64, entry [b][t][d-1][c] =
 * P(a segment of label c and duration d ends at frame t, i.e. covers frames
 * t-d+1..t); 0 for t >= length or d > t+1. Summed over d and c, row t is the
 * boundary posterior at t+1 of timitseg_crf_marginals. Every backend computes
 * them on the host in float64 (the reference recurrences; CUDA tensors are
 * copied). B*T*K*C may be at most TIMITSEG_SEGMENT_POSTERIORS_MAX_ENTRIES
 * (2 GiB as float64; TIMITSEG_ERR_SHAPE beyond). */
#define TIMITSEG_SEGMENT_POSTERIORS_MAX_ENTRIES 268435456
TIMITSEG_API int timitseg_crf_segment_posteriors(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                                 timitseg_tensor* segments);

/* The gradient of the marginals (docs/crf.md "Gradient of the marginals"):
 * given upstream gradients of timitseg_crf_marginals' and
 * timitseg_crf_segment_posteriors' outputs, grad_boundaries [B][T+1],
 * grad_frames [B][T][C] and grad_segments [B][T][K][C] (F32/F64; each NULL or
 * data NULL = zero; entries past an utterance's length, where the posteriors
 * are 0, are not read; the others must be finite), writes into grads (as
 * timitseg_crf_nll's: scores, transition, duration_bias, start, end,
 * duration_lognormal, onset; data NULL = not wanted; no penalty) the gradients
 * of sum(grad_boundaries * boundaries) + sum(grad_frames * frames) +
 * sum(grad_segments * segments) w.r.t. the batch's scores (through the
 * centering unless cumulative), onset and the handle's parameters: a
 * Hessian-vector product of log Z, exact. Every backend computes it on the
 * host in float64 (the reference backend's recurrences, O(T K C^2) per
 * utterance): F64 scores with the parameters' float64 values end to end (a
 * cuda handle refuses them, TIMITSEG_ERR_DTYPE, as every call does), F32
 * scores from their float32 values and the float32 parameters widened (CUDA
 * tensors copied to the host and the gradients back). Rows of length 0 get 0. */
TIMITSEG_API int timitseg_crf_marginals_backward(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                                 const timitseg_tensor* grad_boundaries,
                                                 const timitseg_tensor* grad_frames,
                                                 const timitseg_tensor* grad_segments,
                                                 const timitseg_crf_grads* grads);

/* Forced alignment (docs/crf.md "Forced alignment"): phones [B][N] I32/I64,
 * num_phones [B] in [1, N] (0 allowed for an utterance of length 0),
 * optional [B][N] 0/1 or data NULL. score [B] F32/F64 (-inf: infeasible),
 * spans [B][N][2] I32 (start, duration) per phone. */
TIMITSEG_API int timitseg_crf_align(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_tensor* phones,
                                    const timitseg_tensor* num_phones, const timitseg_tensor* optional,
                                    timitseg_tensor* score, timitseg_tensor* spans);

/* ---- checkpoint inference ------------------------------------------------------ */
typedef struct timitseg_model timitseg_model;
typedef struct timitseg_segments timitseg_segments;

typedef enum timitseg_model_device {
  TIMITSEG_MODEL_DEVICE_AUTO = 0, /* the GPU when one is present, else the CPU */
  TIMITSEG_MODEL_DEVICE_CPU = 1,
  TIMITSEG_MODEL_DEVICE_CUDA = 2
} timitseg_model_device;

/* The device and the CRF backend are enums (API version 2): device_kind and
 * backend_kind. The string fields of version 1 still work: a non-NULL,
 * non-empty device or backend is read as before; given beside an enum field
 * that is not AUTO and names another value, the load is refused
 * (TIMITSEG_ERR_ARGUMENT, one line naming both). */
typedef struct timitseg_model_params {
  const char* device;   /* version 1: "cpu", "cuda" or "auto"; NULL or "" = device_kind decides */
  const char* backend;  /* version 1: a CRF backend's name; NULL or "" = backend_kind decides */
  int32_t threads;      /* 0 = all hardware threads */
  int32_t device_kind;  /* timitseg_model_device; TIMITSEG_MODEL_DEVICE_AUTO (0) by default */
  int32_t backend_kind; /* timitseg_backend; TIMITSEG_BACKEND_AUTO (0) = as `timitseg decode` picks it
                           (cuda on the GPU, else the checkpoint's crf.backend, cpu for cuda) */
} timitseg_model_params;
TIMITSEG_API timitseg_model_params timitseg_model_default_params(void);

/* Loads a checkpoint (safetensors written by `timitseg train`). */
TIMITSEG_API int timitseg_model_load(const char* checkpoint, const timitseg_model_params* params,
                                     timitseg_model** out);
TIMITSEG_API void timitseg_model_free(timitseg_model* model);
/* The model's sample rate (Hz) and number of labels; label names by index. */
TIMITSEG_API int timitseg_model_sample_rate(const timitseg_model* model);
TIMITSEG_API int timitseg_model_num_labels(const timitseg_model* model);
TIMITSEG_API const char* timitseg_model_label_name(const timitseg_model* model, int label);
/* The model's phone set as JSON text, what its checkpoint records
 * (docs/phone_sets.md): {"name", "phones", "silence", "merge", "map", "drop", "fold",
 * "extra_scoring_labels", "broad_classes", "scoring_labels", "sha256"}; labels
 * are UTF-8. Owned by the model (valid until timitseg_model_free); NULL for a NULL model. */
TIMITSEG_API const char* timitseg_model_phone_set(const timitseg_model* model);

/* Decodes audio as `timitseg decode` does (the same .PHN rows): from a file
 * (any rate or channel count: resampled and down-mixed), or from mono float
 * samples in [-1, 1] at sample_rate Hz (what a 16-bit PCM file reads as: s / 32768).
 * Segments are in samples of the input. */
TIMITSEG_API int timitseg_model_decode_file(timitseg_model* model, const char* path, timitseg_segments** out);
TIMITSEG_API int timitseg_model_decode_samples(timitseg_model* model, const float* samples, int64_t num_samples,
                                               int32_t sample_rate, timitseg_segments** out);
/* Forced alignment of a known phone sequence ("h# sh iy ..." names of the
 * model's label set or TIMIT's 61 phones, separated by white space), as
 * `timitseg align --phones` does: the command's code for one utterance
 * (eval/'s align_input and align_one), in memory, on the executor the handle
 * loaded; no file is written and the checkpoint is not read again. Segments
 * are in samples of the audio file at path. */
TIMITSEG_API int timitseg_model_align_file(timitseg_model* model, const char* path, const char* phones,
                                           timitseg_segments** out);

/* Per-phone boundary shifts for the alignments of this handle, as `timitseg
 * align --shifts FILE` (docs/align.md "Calibrating to a labelling
 * convention"): path a JSON file written by `timitseg evaluate --align
 * --fit-shifts` with this checkpoint's phone set; from then on
 * timitseg_model_align_file and timitseg_model_align_words_file move each
 * boundary by its shift (its phone pair's, else the phone's after it). NULL or "" removes them. A bad
 * file (unreadable, another phone set, a label outside it) is the error
 * message, and the handle keeps the shifts it had. */
TIMITSEG_API int timitseg_model_set_shifts(timitseg_model* model, const char* path);

/* Silence edges for the alignments of this handle, as `timitseg align
 * --silence-edges MODE --silence-margin-db MARGIN --silence-max-move-ms MOVE
 * --silence-min-quiet QUIET` (docs/align.md "Silence edges"): each boundary
 * between a silence and a phone moved to where the audio's energy crosses the
 * utterance's floor + margin_db, within max_move_ms, for the silences of which
 * at least min_quiet_pct % is below that; before the shifts. A new handle has
 * TIMITSEG_SILENCE_EDGES_AUTO (on for a checkpoint trained on transcripts, off
 * for one trained on times) at the commands' defaults. A mode outside the
 * enum, margin_db not > 0, max_move_ms not >= 0 or min_quiet_pct outside
 * (0, 100] is the error message, and the handle keeps its setting. */
typedef enum {
  TIMITSEG_SILENCE_EDGES_AUTO = 0,
  TIMITSEG_SILENCE_EDGES_ON = 1,
  TIMITSEG_SILENCE_EDGES_OFF = 2
} timitseg_silence_edges;
TIMITSEG_API int timitseg_model_set_silence_edges(timitseg_model* model, int mode, double margin_db,
                                                  double max_move_ms, double min_quiet_pct);

/* Where the boundaries of this handle's alignments go, as `timitseg align
 * --boundaries MODE` (docs/align.md "Boundaries from the posteriors"):
 * TIMITSEG_BOUNDARIES_VITERBI, the most probable alignment's; _POSTERIOR,
 * each boundary at its most probable frame under the transcript, jointly
 * increasing (the phones the alignment skips stay skipped), then moved up to
 * half a frame toward the likelier neighbour frame (docs/crf.md "Between
 * frames"); _POSTERIOR_FRAMES, the same left on the frames; before the
 * silence edges and the shifts. A new handle has TIMITSEG_BOUNDARIES_AUTO
 * (posterior, for every checkpoint: chosen on dev, docs/training.md rules 15,
 * 16 and 18). A mode outside the enum is the error message, and the handle
 * keeps its setting. */
typedef enum {
  TIMITSEG_BOUNDARIES_AUTO = 0,
  TIMITSEG_BOUNDARIES_VITERBI = 1,
  TIMITSEG_BOUNDARIES_POSTERIOR = 2,
  TIMITSEG_BOUNDARIES_POSTERIOR_FRAMES = 3
} timitseg_boundaries;
TIMITSEG_API int timitseg_model_set_boundaries(timitseg_model* model, int mode);

/* Forced alignment of words through a pronunciation dictionary, as `timitseg
 * align --words LIST --dict DICTIONARY` does (the command's code, in memory on
 * the handle's executor, as timitseg_model_align_file): words space
 * separated; the dictionary a file in TIMIT's TIMITDIC.TXT, CMUdict's or
 * MFA's format (dict_format below). *phones receives the
 * phone segments (the command's .PHN rows), *words the word segments (the
 * words tier of its TextGrid/csv: begin and end samples, the word); both are
 * freed with timitseg_segments_free. A word not in the dictionary, a bad
 * dictionary line or a phone outside the label set is the error message. */
typedef struct timitseg_align_words_options {
  int32_t closures;           /* 1: stops and affricates get TIMIT's closure (b -> bcl b); 0 = --no-closures */
  int32_t edge_silence;       /* 1: h# before the first and after the last word; 0 = --no-edge-silence */
  int32_t word_silence;       /* 1 = --word-silence: a pau between every two words (may take 0 frames) */
  int32_t obligatory_silence; /* 1 = --obligatory-silence: the silences take at least one frame */
  const char* dict_format;    /* "timit", "cmudict", "mfa" or "auto" (NULL = auto) */
} timitseg_align_words_options;
/* closures 1, edge_silence 1, word_silence 0, obligatory_silence 0, dict_format NULL: the command's defaults. */
TIMITSEG_API timitseg_align_words_options timitseg_align_words_default_options(void);
TIMITSEG_API int timitseg_model_align_words_file(timitseg_model* model, const char* path, const char* words,
                                                 const char* dictionary, const timitseg_align_words_options* options,
                                                 timitseg_segments** phones, timitseg_segments** words_out);

/* The log lines (stderr) and progress bars of the model calls, for the whole
 * process: level "trace", "debug", "info" (log lines and progress bars, as the
 * commands), "warn", "error" or "off" (nothing; failures are still returned
 * with their message). Progress bars are drawn at "info" and below. Python's
 * timitseg.Model.load(verbose=...) calls it (docs/python.md). */
TIMITSEG_API int timitseg_set_log_level(const char* level);

/* Segments of a decode or an alignment: (begin sample, end sample, label name). */
TIMITSEG_API int64_t timitseg_segments_count(const timitseg_segments* segs);
TIMITSEG_API int timitseg_segments_get(const timitseg_segments* segs, int64_t i, int64_t* begin, int64_t* end,
                                       const char** label);
TIMITSEG_API void timitseg_segments_free(timitseg_segments* segs);

#ifdef __cplusplus
}
#endif

#endif /* TIMITSEG_H */
