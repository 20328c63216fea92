// Stopping a long command at a safe point on SIGINT (Ctrl-C) or SIGTERM.
// A signal handler only sets an atomic flag (request_stop); the command's
// loop checks stop_requested() between units of work (a training step, an
// input of decode / align, a batch of evaluate, an utterance of prepare), where
// nothing is being written, and throws Interrupted, whose one line says what
// was done and what was not. A second signal of the same kind kills the
// process at once (the handler is one-shot). train/interrupt.h forwards these
// names into timitseg::train.
#pragma once

#include <stdexcept>
#include <string>

namespace timitseg {

// Installs the SIGINT and SIGTERM handlers (call once, before the work).
void install_stop_handlers();
// Asks the running loop to stop after the current unit of work; `signal` is
// the reason (SIGINT, SIGTERM), 0 for a request from code (tests). Async-signal-safe.
void request_stop(int signal = 0);
bool stop_requested();
int stop_signal();  // the signal of the first request, 0 if none or from code
void clear_stop();  // forget a request (tests)
// The exit code of a stop: 128 + the signal (130 for SIGINT, 143 for
// SIGTERM), 1 for a request from code.
int stop_exit_code();

// Thrown by a loop once a stop was requested. exit_code(): stop_exit_code().
class Interrupted : public std::runtime_error {
 public:
  Interrupted(const std::string& what, int exit_code) : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Throws Interrupted("WHAT interrupted (SIGINT): DONE", stop_exit_code())
// when a stop was requested; nothing otherwise. TEST ONLY: with the
// environment variable TIMITSEG_TEST_SIGINT_AT_CHECK=N the process sends
// itself SIGINT (raise, through the installed handler) at the N-th call, so a
// test interrupts a command at a known point (tests/model/test_new_user_round3.cpp).
void throw_if_stopped(const std::string& what, const std::string& done);

}  // namespace timitseg
