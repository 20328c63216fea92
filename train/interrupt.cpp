// SIGINT / SIGTERM: an atomic flag set by a one-shot handler (train/interrupt.h).
#include "train/interrupt.h"

#include <atomic>
#include <csignal>

namespace timitseg::train {
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

}  // namespace timitseg::train
