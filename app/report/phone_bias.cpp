// The per-phone bias plot of evaluate --align (phone_bias.h).
#include "app/report/phone_bias.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "app/report/svg.h"

namespace timitseg::app::report {

std::string phone_bias_svg(const nlohmann::json& samples) {
  struct Row {
    double bias, within20;
    int64_t n;
    std::string phone;
  };
  std::vector<Row> rows;
  if (samples.contains("by_phone"))
    for (const auto& [phone, p] : samples.at("by_phone").items())
      if (p.at("boundaries").get<int64_t>() > 0)
        rows.push_back({p.at("mean_signed_ms").get<double>(), p.at("within_ms").at("20").get<double>(),
                        p.at("boundaries").get<int64_t>(), phone});
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.bias, a.phone) < std::tie(b.bias, b.phone);
  });
  const double row_h = 16, top = 48, left = 80, plot_w = 360, right = 190;
  const double height = top + row_h * static_cast<double>(std::max<size_t>(rows.size(), 1)) + 44;
  Svg svg(left + plot_w + right, height, {{"id", "phone-bias"}, {"data-plot", "bars"},
                                          {"data-rows", std::to_string(rows.size())}});
  svg.text(8, 20, "Bias per phone: mean signed error of the boundaries into it (< 0: aligned early)", "start", 13);
  if (rows.empty()) {
    svg.text(left, top + 12, "no phone has boundaries scored against a sample-accurate reference", "start", 12);
  } else {
    double lo = 0, hi = 0;
    for (const Row& r : rows) lo = std::min(lo, r.bias), hi = std::max(hi, r.bias);
    const std::vector<double> ticks = nice_ticks(lo, hi, 6);
    const double t0 = ticks.front(), t1 = ticks.back();
    auto x_of = [&](double v) { return left + (v - t0) / (t1 - t0) * plot_w; };
    const double y_end = top + row_h * static_cast<double>(rows.size());
    const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0;
    for (double t : ticks) {
      svg.line(x_of(t), top - 4, x_of(t), y_end, t == 0.0 ? "#333333" : "#dddddd", t == 0.0 ? 1.2 : 1);
      svg.text(x_of(t), y_end + 14, tick_label(t, step), "middle", 11);
    }
    svg.text(left + plot_w / 2, y_end + 32, "bias, ms (aligned minus reference)", "middle", 12);
    svg.text(left + plot_w + 8, top - 8, "boundaries, within 20 ms", "start", 11);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double y = top + row_h * static_cast<double>(i);
      const double x0 = x_of(0.0), x1 = x_of(r.bias);
      svg.text(left - 6, y + row_h - 4, r.phone, "end", 12);
      svg.rect(std::min(x0, x1), y + 2, std::max(std::fabs(x1 - x0), 0.5), row_h - 4, r.bias < 0 ? run_color(0) : run_color(1),
               {{"class", "bar"}, {"data-phone", r.phone}, {"data-bias", fmt(r.bias, 2)},
                {"data-boundaries", std::to_string(r.n)}});
      svg.text(left + plot_w + 8, y + row_h - 4, std::to_string(r.n) + ", " + fmt(100.0 * r.within20, 1) + " %", "start", 11);
    }
  }
  std::string out = svg.str();
  if (out.find("xmlns=") == std::string::npos) out.insert(out.find("<svg") + 4, " xmlns=\"http://www.w3.org/2000/svg\"");
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + out + "\n";
}

}  // namespace timitseg::app::report
