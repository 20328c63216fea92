// Stopping `train` at a safe point on SIGINT (Ctrl-C) or SIGTERM.
// A signal handler only sets an atomic flag (request_stop); the training loop
// checks stop_requested() between optimizer steps, where nothing is being
// written, and throws Interrupted, whose message says how to resume. A second
// signal of the same kind kills the process at once (the handler is one-shot).
#pragma once

#include <stdexcept>
#include <string>

namespace timitseg::train {

// Installs the SIGINT and SIGTERM handlers (call once, before training).
void install_stop_handlers();
// Asks the training loop to stop after the current step; `signal` is the
// reason (SIGINT, SIGTERM), 0 for a request from code (tests). Async-signal-safe.
void request_stop(int signal = 0);
bool stop_requested();
int stop_signal();  // the signal of the first request, 0 if none or from code
void clear_stop();  // forget a request (tests)

// Thrown by the training loop once a stop was requested. exit_code(): 128 +
// the signal (130 for SIGINT, 143 for SIGTERM), 1 for a request from code.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(const std::string& what, int exit_code) : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace timitseg::train
