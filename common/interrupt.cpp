// SIGINT / SIGTERM: an atomic flag set by a one-shot handler (common/interrupt.h).
#include "common/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstdlib>

#include "settings/env.h"

namespace timitseg {
namespace {

// Lock-free int atomics are async-signal-safe to store from a handler.
std::atomic<int> g_stop{0};    // 0: none, 1: requested
std::atomic<int> g_signal{0};  // the signal of the first request
static_assert(std::atomic<int>::is_always_lock_free, "signal flag must be lock-free");

extern "C" void on_stop_signal(int sig) { request_stop(sig); }

}  // namespace

void request_stop(int signal) {
  int expected = 0;
  if (g_stop.compare_exchange_strong(expected, 1)) g_signal.store(signal);
}

bool stop_requested() { return g_stop.load() != 0; }
int stop_signal() { return g_signal.load(); }

void clear_stop() {
  g_stop.store(0);
  g_signal.store(0);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // One-shot: the first signal asks for a clean stop; a second one gets the
  // default action (the process ends at once).
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_exit_code() {
  const int sig = stop_signal();
  return sig > 0 ? 128 + sig : 1;
}

namespace {
// TEST ONLY (common/interrupt.h): the check number at which the process sends itself SIGINT, 0 = never.
long long test_sigint_at() {
  static const long long at = [] {
    return env::integer("TIMITSEG_TEST_SIGINT_AT_CHECK").value_or(0LL);
  }();
  return at;
}
std::atomic<long long> g_checks{0};
}  // namespace

void throw_if_stopped(const std::string& what, const std::string& done) {
  if (const long long at = test_sigint_at(); at > 0 && ++g_checks == at) std::raise(SIGINT);  // through the handler
  if (!stop_requested()) return;
  const int sig = stop_signal();
  const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a stop request";
  throw Interrupted(what + " interrupted (" + name + "): " + done, stop_exit_code());
}

}  // namespace timitseg
