// A progress bar for long work (prepare, training epochs, evaluation).
// On a terminal (stderr is a TTY) it redraws one line in place, at most ten
// times a second; otherwise it prints a plain line at each 10% of progress, so
// logs of batch jobs stay readable. Thread-safe: advance() may be called from
// worker threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace timitseg {

class Progress {
 public:
  // label: what is being counted ("prepare train"); total: number of units;
  // unit: their name ("utt", "batch").
  Progress(std::string label, int64_t total, std::string unit = "it");
  ~Progress();  // finish() if not done
  void advance(int64_t n = 1);
  // Extra text shown after the counts, e.g. "loss 1.234  5400 frames/s".
  void set_postfix(const std::string& text);
  void finish();
  double elapsed_seconds() const;
  // Disable all output (tests, --quiet).
  static void set_enabled(bool on);

 private:
  void draw_locked(bool final_line);
  std::string label_, unit_, postfix_;
  int64_t total_ = 0, done_ = 0;
  int last_decile_ = -1;
  bool tty_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  mutable std::mutex mu_;
};

}  // namespace timitseg
