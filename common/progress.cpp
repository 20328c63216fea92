#include "common/progress.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace timitseg {
namespace {
std::atomic<bool> g_enabled{true};

std::string fmt_duration(double s) {
  char buf[32];
  const int t = static_cast<int>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%02d:%02d", t / 60, t % 60);
  return buf;
}
}  // namespace

void Progress::set_enabled(bool on) { g_enabled = on; }

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total < 0 ? 0 : total) {
  tty_ = ::isatty(STDERR_FILENO) == 1;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::advance(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += n;
  if (done_ > total_) done_ = total_;
  draw_locked(false);
}

void Progress::set_postfix(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  postfix_ = text;
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  draw_locked(true);
}

void Progress::draw_locked(bool final_line) {
  if (!g_enabled) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double frac = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0.0;
  char counts[160];
  std::snprintf(counts, sizeof counts, "%3d%% %lld/%lld %s [%s<%s, %.1f %s/s]", static_cast<int>(frac * 100.0),
                static_cast<long long>(done_), static_cast<long long>(total_), unit_.c_str(),
                fmt_duration(elapsed).c_str(), fmt_duration(eta).c_str(), rate, unit_.c_str());
  if (tty_) {
    if (!final_line && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int fill = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.append(static_cast<size_t>(kWidth - fill), '.');
    std::fprintf(stderr, "\r\033[K%s |%s| %s %s%s", label_.c_str(), bar.c_str(), counts, postfix_.c_str(),
                 final_line ? "\n" : "");
  } else {
    const int decile = static_cast<int>(frac * 10.0);
    if (!final_line && decile == last_decile_) return;
    if (final_line && decile == last_decile_ && done_ == total_) return;  // already printed
    last_decile_ = decile;
    std::fprintf(stderr, "%s: %s %s\n", label_.c_str(), counts, postfix_.c_str());
  }
  std::fflush(stderr);
}

}  // namespace timitseg
