// The reliability plot of evaluate --align (reliability.h).
#include "app/report/reliability.h"

#include "app/report/svg.h"

namespace timitseg::app::report {

std::string reliability_svg(const nlohmann::json& confidence) {
  LineChart ch;
  ch.id = "reliability";
  ch.title = "Reliability (10 bins; ECE in the legend)";
  ch.x_label = "mean confidence in the bin";
  ch.y_label = "observed frequency";
  ch.width = 480;
  ch.height = 360;
  ch.y_from_zero = true;
  Series diag;
  diag.name = "perfect calibration";
  diag.color = "#999999";
  diag.dash = "4,4";
  diag.markers = false;
  diag.x = {0.0, 1.0};
  diag.y = {0.0, 1.0};
  ch.series.push_back(diag);
  int i = 0;
  for (const char* key : {"boundary_confidence", "label_confidence"}) {
    const nlohmann::json& rel = confidence.at(key).at("reliability");
    Series s;
    s.name = std::string(key) + " (ECE " + fmt(rel.at("ece").get<double>(), 3) + ")";
    s.color = run_color(i);
    s.dash = run_dash(i);
    for (const nlohmann::json& bin : rel.at("bins")) {
      if (bin.at("count").get<int64_t>() == 0) continue;
      s.x.push_back(bin.at("mean_confidence").get<double>());
      s.y.push_back(bin.at("accuracy").get<double>());
    }
    ch.series.push_back(s);
    ++i;
  }
  std::string svg = line_chart(ch);
  if (svg.find("xmlns=") == std::string::npos)
    svg.insert(svg.find("<svg") + 4, " xmlns=\"http://www.w3.org/2000/svg\"");
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + svg + "\n";
}

}  // namespace timitseg::app::report
