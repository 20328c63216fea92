// The library's log level (include/timitseg.h timitseg_set_log_level): spdlog's
// level and the progress bars (common/progress.h), for the whole process.
#include <spdlog/spdlog.h>

#include <string>

#include "capi/api_detail.h"
#include "common/progress.h"

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
    const spdlog::level::level_enum l = spdlog::level::from_str(name);
    spdlog::set_level(l);
    timitseg::Progress::set_enabled(l <= spdlog::level::info);
  });
}

}  // extern "C"
