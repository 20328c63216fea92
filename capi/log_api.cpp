// The library's log level (include/timitseg.h timitseg_set_log_level): spdlog's
// level and the progress bars (common/progress.h), for the whole process. The
// log lines go to stderr, as the commands' (spdlog's own default logger writes
// to stdout, where a library must not write).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <string>

#include "capi/api_detail.h"
#include "common/progress.h"

namespace {

// The default logger on stderr, once per process (the library's own logger: the
// `timitseg` binary does not link the C API).
void log_to_stderr() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = spdlog::stderr_color_mt("timitseg");
    logger->set_level(spdlog::default_logger()->level());
    spdlog::set_default_logger(logger);
  });
}

// At load (the shared library holds this object, so it runs for every program that loads it).
[[maybe_unused]] const bool kLogToStderr = (log_to_stderr(), true);

}  // namespace

extern "C" {

int timitseg_set_log_level(const char* level) {
  return timitseg::capi::guard("timitseg_set_log_level", [&] {
    const std::string name = level ? level : "";
    static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
    bool known = false;
    for (const char* k : kLevels) known = known || name == k;
    if (!known)
      throw timitseg::capi::ApiError(TIMITSEG_ERR_ARGUMENT,
                                     "level must be trace, debug, info, warn, error or off, got '" + name + "'");
    log_to_stderr();
    const spdlog::level::level_enum l = spdlog::level::from_str(name);
    spdlog::set_level(l);
    timitseg::Progress::set_enabled(l <= spdlog::level::info);
  });
}

}  // extern "C"
