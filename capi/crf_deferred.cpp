// Deferred NLL calls of the C API (include/timitseg.h: timitseg_crf_nll_deferred,
// timitseg_crf_check): on the cuda zero-copy path the call returns once
// cumsum, CRF, gradients, cumsum backward, penalty and NLL conversion are
// queued on the caller's stream; its check waits once and reports what
// timitseg_crf_nll reports for the same inputs (the same status and message).
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "capi/crf_fast.h"

namespace timitseg::capi {

void drop_begun(timitseg_crf& h) {
  if (!h.begun) return;
  const BegunNll bn = std::move(*h.begun);
  h.begun.reset();
  if (bn.queued) finish_dropped(h, bn.batch.stream);
}

void resolve_deferred(timitseg_crf& h) {
  drop_begun(h);  // any other call on the handle drops a begun nll
  if (!h.deferred) return;
  DeferredNll d = std::move(*h.deferred);
  h.deferred.reset();
  h.last_checked = d;
  try {
    h.backend->check_deferred();
    // its status read waited for the whole call (mark_deferred_end's event, recorded after its last
    // kernel) or for everything queued on its stream; it is the last zero-copy call when it ran there
    // (every call resolves it first), so settle() need not wait again
    if (h.fast_stream == d.batch.stream) h.fast_pending = false;
    return;  // success is not kept: a check of a ticket not in h.resolved reports OK
  } catch (const std::invalid_argument&) {
    d.rejected = true;  // a length 0 or a bad input: the check re-runs the general path, which words it
    --h.fast_calls;     // the zero-copy path did not serve it (as when its device check throws at once)
  } catch (const std::bad_alloc&) {
    d.status = TIMITSEG_ERR_MEMORY;
    d.message = "out of memory";
  } catch (const std::exception& e) {
    d.status = TIMITSEG_ERR_RUNTIME;  // as guard() reports it (e.g. no path of finite score)
    d.message = e.what();
  }
  h.resolved.emplace(d.ticket, std::move(d));
}

namespace {
// The queued call's arguments for its check (a re-run on the general path when the device check rejects it).
void remember_deferred(timitseg_crf& h, uint64_t ticket, const timitseg_crf_batch& in, const timitseg_crf_gold& gold,
                       double scale, const timitseg_tensor& out, const timitseg_crf_grads* grads) {
  DeferredNll d;
  d.ticket = ticket;
  d.batch = in;
  d.gold = gold;
  d.scale = scale;
  d.out = out;
  d.has_grads = grads != nullptr;
  if (grads) d.grads = *grads;
  h.deferred = std::move(d);
}
}  // namespace

uint64_t nll_deferred(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_crf_gold& gold, double scale,
                      timitseg_tensor& out, const timitseg_crf_grads* grads) {
  const uint64_t ticket = ++h.last_ticket;
  bool queued = false;
  try {
    queued = fast_nll(h, in, gold, scale, out, grads, h.cuda);
  } catch (...) {
    try {
      h.backend->check_deferred();  // a failure after the backend call was queued: its status word is free again
    } catch (...) {
    }
    throw;
  }
  if (!queued) {
    nll_general(&h, &in, &gold, scale, &out, grads);  // synchronous: its errors are this call's
    return ticket;
  }
  if (h.cuda) remember_deferred(h, ticket, in, gold, scale, out, grads);
  return ticket;
}

uint64_t nll_begin(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_crf_gold& gold, double scale,
                   bool with_grads) {
  drop_begun(h);
  BegunNll bn;
  bn.ticket = ++h.last_ticket;
  bn.batch = in;
  bn.gold = gold;
  bn.scale = scale;
  bn.with_grads = with_grads;
  if (with_grads && h.cuda) {  // host backends: the whole call runs in the end (nothing to overlap)
    try {
      bn.queued = fast_nll_begin(h, bn);
    } catch (...) {
      try {
        h.backend->check_deferred();
      } catch (...) {
      }
      throw;
    }
  }
  h.begun = bn;
  return bn.ticket;
}

uint64_t nll_end(timitseg_crf& h, uint64_t ticket, timitseg_tensor& out, const timitseg_crf_grads* grads) {
  if (!h.begun || h.begun->ticket != ticket)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "ticket " + std::to_string(ticket) +
                                              " is not a begun nll of this handle (ended already, or dropped by a "
                                              "later call on the handle)");
  BegunNll bn = std::move(*h.begun);
  h.begun.reset();
  if (grads && !bn.with_grads) {
    if (bn.queued) finish_dropped(h, bn.batch.stream);
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "grads given to the end of an nll begun with with_grads = 0");
  }
  if (bn.queued) {
    bool queued = false;
    try {
      queued = fast_nll_end(h, bn, out, grads, true);
    } catch (...) {
      try {
        h.backend->check_deferred();
      } catch (...) {
      }
      throw;
    }
    if (queued) {
      remember_deferred(h, bn.ticket, bn.batch, bn.gold, bn.scale, out, grads);
      return bn.ticket;
    }
  }
  return nll_deferred(h, bn.batch, bn.gold, bn.scale, out, grads);  // the whole call (outputs the begin could not serve)
}

bool check_nll(timitseg_crf& h, uint64_t ticket) {
  if (ticket == 0 || ticket > h.last_ticket)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "ticket " + std::to_string(ticket) +
                                              " was not issued by this handle (last: " +
                                              std::to_string(h.last_ticket) + ")");
  if (h.deferred && h.deferred->ticket == ticket) settle(h);  // the one wait: the call's work and its status word
  auto it = h.resolved.find(ticket);
  if (it == h.resolved.end()) return false;
  DeferredNll d = std::move(it->second);
  h.resolved.erase(it);
  if (!d.rejected) throw ApiError(d.status, d.message);
  // What timitseg_crf_nll does when the device check rejects its batch: the
  // general path (rows of length 0 computed, any error worded as there).
  nll_general(&h, &d.batch, &d.gold, d.scale, &d.out, d.has_grads ? &d.grads : nullptr);
  return true;
}

bool check_again(timitseg_crf& h) {
  settle(h);  // a pending deferred call: read (its outcome kept for its own check) and now the last one
  if (!h.last_checked) return false;
  DeferredNll d = *h.last_checked;
  try {
    h.backend->recheck_deferred();
    return false;
  } catch (const std::invalid_argument&) {
    // as check_nll: the general path words the error (or computes a batch with a row of length 0)
    nll_general(&h, &d.batch, &d.gold, d.scale, &d.out, d.has_grads ? &d.grads : nullptr);
    return true;
  } catch (const std::bad_alloc&) {
    throw ApiError(TIMITSEG_ERR_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    throw ApiError(TIMITSEG_ERR_RUNTIME, e.what());
  }
}

}  // namespace timitseg::capi

namespace {
// The argument checks of the calls that issue a ticket (errors read as timitseg_crf_nll's); *ticket = 0 first.
void need_ticket_call(uint64_t* ticket, const timitseg_crf* crf, const timitseg_crf_batch* batch,
                      const timitseg_crf_gold* gold) {
  using timitseg::capi::ApiError;
  if (ticket == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "ticket is NULL");
  *ticket = 0;
  if (crf == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
  if (batch == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "batch is NULL");
  if (gold == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "gold is NULL");
}
}  // namespace

extern "C" {

int timitseg_crf_nll_deferred(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_crf_gold* gold,
                              double scale, timitseg_tensor* nll, const timitseg_crf_grads* grads, uint64_t* ticket) {
  // the prefix of timitseg_crf_nll: its errors read as the synchronous call's
  return timitseg::capi::guard("timitseg_crf_nll", [&] {
    const timitseg::capi::OnHandleDevice on(crf);
    need_ticket_call(ticket, crf, batch, gold);
    if (nll == nullptr) throw timitseg::capi::ApiError(TIMITSEG_ERR_ARGUMENT, "nll is NULL");
    *ticket = timitseg::capi::nll_deferred(*crf, *batch, *gold, scale, *nll, grads);
  });
}

int timitseg_crf_nll_begin(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_crf_gold* gold,
                           double scale, int with_grads, uint64_t* ticket) {
  return timitseg::capi::guard("timitseg_crf_nll", [&] {
    const timitseg::capi::OnHandleDevice on(crf);
    need_ticket_call(ticket, crf, batch, gold);
    *ticket = timitseg::capi::nll_begin(*crf, *batch, *gold, scale, with_grads != 0);
  });
}

int timitseg_crf_nll_end(timitseg_crf* crf, uint64_t ticket, timitseg_tensor* nll, const timitseg_crf_grads* grads,
                         uint64_t* check_ticket) {
  if (check_ticket) *check_ticket = 0;
  return timitseg::capi::guard("timitseg_crf_nll", [&] {
    const timitseg::capi::OnHandleDevice on(crf);
    using timitseg::capi::ApiError;
    if (crf == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
    if (nll == nullptr) {
      timitseg::capi::drop_begun(*crf);
      throw ApiError(TIMITSEG_ERR_ARGUMENT, "nll is NULL");
    }
    const uint64_t t = timitseg::capi::nll_end(*crf, ticket, *nll, grads);
    if (check_ticket)
      *check_ticket = t;
    else
      timitseg::capi::check_nll(*crf, t);
  });
}

int timitseg_crf_check_again(timitseg_crf* crf, int* rerun) {
  if (rerun) *rerun = 0;
  return timitseg::capi::guard("timitseg_crf_nll", [&] {
    const timitseg::capi::OnHandleDevice on(crf);
    if (crf == nullptr) throw timitseg::capi::ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
    const bool again = timitseg::capi::check_again(*crf);
    if (rerun) *rerun = again ? 1 : 0;
  });
}

int timitseg_crf_check(timitseg_crf* crf, uint64_t ticket, int* rerun) {
  if (rerun) *rerun = 0;
  return timitseg::capi::guard("timitseg_crf_nll", [&] {
    const timitseg::capi::OnHandleDevice on(crf);
    if (crf == nullptr) throw timitseg::capi::ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
    const bool again = timitseg::capi::check_nll(*crf, ticket);
    if (rerun) *rerun = again ? 1 : 0;
  });
}

}  // extern "C"
