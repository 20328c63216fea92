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

void resolve_deferred(timitseg_crf& h) {
  if (!h.deferred) return;
  DeferredNll d = std::move(*h.deferred);
  h.deferred.reset();
  try {
    h.backend->check_deferred();
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
  if (h.cuda) {
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
  return ticket;
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

}  // namespace timitseg::capi

extern "C" {

int timitseg_crf_nll_deferred(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_crf_gold* gold,
                              double scale, timitseg_tensor* nll, const timitseg_crf_grads* grads, uint64_t* ticket) {
  // the prefix of timitseg_crf_nll: its errors read as the synchronous call's
  return timitseg::capi::guard("timitseg_crf_nll", [&] {
    using timitseg::capi::ApiError;
    if (ticket == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "ticket is NULL");
    *ticket = 0;
    if (crf == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
    if (batch == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "batch is NULL");
    if (gold == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "gold is NULL");
    if (nll == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "nll is NULL");
    *ticket = timitseg::capi::nll_deferred(*crf, *batch, *gold, scale, *nll, grads);
  });
}

int timitseg_crf_check(timitseg_crf* crf, uint64_t ticket, int* rerun) {
  if (rerun) *rerun = 0;
  return timitseg::capi::guard("timitseg_crf_nll", [&] {
    if (crf == nullptr) throw timitseg::capi::ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
    const bool again = timitseg::capi::check_nll(*crf, ticket);
    if (rerun) *rerun = again ? 1 : 0;
  });
}

}  // extern "C"
