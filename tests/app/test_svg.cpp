// The report's SVG/HTML writer (app/report/svg.h) against known strings:
// escaping, number formatting, axis ticks, the line chart's data attributes,
// base64 (RFC 4648 test vectors) and the PNG encoder (inflated back by zlib).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include <tuple>

#include <nlohmann/json.hpp>

#include "app/report/phone_bias.h"
#include "app/report/reliability.h"
#include "app/report/svg.h"

using namespace timitseg::app::report;

TEST(Svg, EscapesTextAndAttributes) {
  EXPECT_EQ(escape("a<b & c>\"d\" 'e'"), "a&lt;b &amp; c&gt;&quot;d&quot; &#39;e&#39;");
  EXPECT_EQ(escape("plain"), "plain");
  EXPECT_EQ(escape(""), "");
  Svg svg(10, 20, {{"id", "x\"y"}});
  svg.text(1, 2, "<tag>", "middle", 9);
  EXPECT_EQ(svg.str(),
            "<svg width=\"10\" height=\"20\" viewBox=\"0 0 10 20\" id=\"x&quot;y\"><text x=\"1\" y=\"2\" "
            "font-size=\"9\" text-anchor=\"middle\">&lt;tag&gt;</text></svg>");
}

TEST(Svg, FormatsNumbers) {
  EXPECT_EQ(fmt(1.0), "1");
  EXPECT_EQ(fmt(1.5), "1.5");
  EXPECT_EQ(fmt(2.456), "2.46");
  EXPECT_EQ(fmt(2.456, 0), "2");
  EXPECT_EQ(fmt(-0.001), "0");  // rounds to -0.00 -> "0", never "-0"
  EXPECT_EQ(fmt(-3.25, 1), "-3.2");  // printf rounding of the binary value 3.25 (ties to even)
  EXPECT_EQ(fmt(1200.0), "1200");
  EXPECT_EQ(fmt(NAN), "n/a");
  EXPECT_EQ(fmt(INFINITY), "n/a");
  EXPECT_EQ(fmt(-INFINITY), "n/a");
}

TEST(Svg, NiceTicksCoverTheRangeWithOneTwoFiveSteps) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(1, 4, 3), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(nice_ticks(0.13, 0.87, 4), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(nice_ticks(-7, 3, 2), (std::vector<double>{-10, -5, 0, 5}));
  {  // lo == hi: the unit range around the value, step 0.2
    const std::vector<double> t = nice_ticks(5, 5, 5);
    ASSERT_EQ(t.size(), 7u);
    EXPECT_NEAR(t.front(), 4.4, 1e-12);
    EXPECT_NEAR(t.back(), 5.6, 1e-12);
  }
  EXPECT_EQ(nice_ticks(NAN, 1), (std::vector<double>{0, 1}));
  // Every case: first <= lo, last >= hi, constant step in {1,2,5} x 10^k.
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{0.3, 17.2}, {-2e-4, 9e-4}, {100, 1e5}, {3, 3.01}}) {
    const std::vector<double> t = nice_ticks(lo, hi, 5);
    ASSERT_GE(t.size(), 2u);
    EXPECT_LE(t.front(), lo);
    EXPECT_GE(t.back(), hi);
    const double step = t[1] - t[0];
    const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::abs(m - 1) < 1e-6 || std::abs(m - 2) < 1e-6 || std::abs(m - 5) < 1e-6) << lo << " " << hi;
    EXPECT_LE(t.size(), 12u);
  }
}

TEST(Svg, TickLabelsUseTheDecimalsOfTheStep) {
  EXPECT_EQ(tick_label(0.5, 0.25), "0.5");
  EXPECT_EQ(tick_label(0.75, 0.25), "0.75");
  EXPECT_EQ(tick_label(0.6000000000000001, 0.2), "0.6");
  EXPECT_EQ(tick_label(20, 5), "20");
  EXPECT_EQ(tick_label(0.0002, 0.0001), "2e-04");
  EXPECT_EQ(tick_label(0, 0.0001), "0");
}

TEST(Svg, PaletteIsOkabeIto) {
  EXPECT_EQ(run_color(0), "#0072B2");
  EXPECT_EQ(run_color(1), "#D55E00");
  EXPECT_EQ(run_color(8), run_color(0));
}

TEST(Svg, LineChartHoldsOnePolylinePerSeriesWithItsPointCount) {
  LineChart c;
  c.id = "plot-test";
  c.title = "Loss <per> epoch";
  c.x_label = "epoch";
  c.y_label = "loss (nats)";
  c.series.push_back({"run_a", "#0072B2", {1, 2, 3}, {3.0, 2.0, 1.5}});
  c.series.push_back({"run_b", "#D55E00", {1, 2, 3, 4}, {4.0, NAN, 2.0, 1.0}});  // a gap at epoch 2
  const std::string svg = line_chart(c);
  EXPECT_NE(svg.find("id=\"plot-test\""), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"2\""), std::string::npos);
  EXPECT_NE(svg.find("Loss &lt;per&gt; epoch"), std::string::npos);
  EXPECT_NE(svg.find(">loss (nats)</text>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const std::regex poly("<polyline points=\"([^\"]*)\"[^>]*data-run=\"(\\d)\"[^>]*data-points=\"(\\d+)\"");
  std::vector<std::tuple<int, int, int>> got;  // run, data-points, points in the attribute
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), poly); it != std::sregex_iterator(); ++it) {
    const std::string pts = (*it)[1];
    got.emplace_back(std::stoi((*it)[2]), std::stoi((*it)[3]), static_cast<int>(std::count(pts.begin(), pts.end(), ',')));
  }
  // run_b is split at its gap: 1 point, then 2 points (data-points 3 on the first part).
  EXPECT_EQ(got, (std::vector<std::tuple<int, int, int>>{{0, 3, 3}, {1, 3, 1}, {1, 0, 2}}));
  // x ticks at integer epochs 1..4 (x_integer not set: still labelled from the 1-2-5 ticks).
  EXPECT_NE(svg.find(">4</text>"), std::string::npos);
}

TEST(Svg, LineChartWithoutDataSaysNa) {
  LineChart c;
  c.id = "empty";
  c.series.push_back({"run", "#000000", {1, 2}, {NAN, NAN}});
  const std::string svg = line_chart(c);
  EXPECT_NE(svg.find(">n/a</text>"), std::string::npos);
  EXPECT_NE(svg.find("data-points=\"0\""), std::string::npos);
}

TEST(Svg, Base64MatchesRfc4648Vectors) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foob"), "Zm9vYg==");
  EXPECT_EQ(base64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
}

namespace {
uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}
}  // namespace

TEST(Svg, PngRoundTripsThroughInflate) {
  const int w = 3, h = 2;
  std::vector<uint8_t> rgb(w * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 13);
  const std::string png = png_rgb(w, h, rgb);
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t at = 8;
  std::string idat;
  std::vector<std::string> types;
  while (at < png.size()) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4), data = png.substr(at + 8, len);
    const uint32_t crc = be32(png, at + 8 + len);
    const std::string td = type + data;
    EXPECT_EQ(crc, crc32(0, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()))) << type;
    types.push_back(type);
    if (type == "IHDR") {
      EXPECT_EQ(be32(data, 0), uint32_t(w));
      EXPECT_EQ(be32(data, 4), uint32_t(h));
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    }
    if (type == "IDAT") idat += data;
    at += 12 + len;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  std::string raw(h * (1 + 3 * w), '\x7f');
  uLongf n = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &n, reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
            Z_OK);
  ASSERT_EQ(n, raw.size());
  for (int y = 0; y < h; ++y) {
    EXPECT_EQ(raw[y * (1 + 3 * w)], '\0');  // filter: none
    for (int i = 0; i < 3 * w; ++i) EXPECT_EQ(uint8_t(raw[y * (1 + 3 * w) + 1 + i]), rgb[y * 3 * w + i]);
  }
  EXPECT_THROW(png_rgb(2, 2, rgb), std::invalid_argument);
}

TEST(Svg, ViridisEndsAndMiddle) {
  uint8_t c[3];
  viridis(0, c);
  EXPECT_EQ((std::vector<int>{c[0], c[1], c[2]}), (std::vector<int>{68, 1, 84}));
  viridis(1, c);
  EXPECT_EQ((std::vector<int>{c[0], c[1], c[2]}), (std::vector<int>{253, 231, 37}));
  viridis(0.5, c);
  EXPECT_EQ((std::vector<int>{c[0], c[1], c[2]}), (std::vector<int>{33, 145, 140}));
  viridis(NAN, c);
  EXPECT_EQ(c[0], 68);
}

// The reliability plot of evaluate --align: the diagonal and one curve per
// score, empty bins left out, the ECE in the legend, a standalone SVG.
TEST(ReliabilityPlot, CurvesFromTheBins) {
  auto bins = [](std::vector<std::tuple<int64_t, double, double>> rows) {
    nlohmann::json b = nlohmann::json::array();
    for (const auto& [n, c, a] : rows) b.push_back({{"count", n}, {"mean_confidence", c}, {"accuracy", a}});
    return b;
  };
  nlohmann::json conf;
  conf["boundary_confidence"]["reliability"] = {{"ece", 0.0815}, {"bins", bins({{3, 0.15, 0.5}, {0, 0.0, 0.0}, {7, 0.95, 0.9}})}};
  conf["label_confidence"]["reliability"] = {{"ece", 0.05}, {"bins", bins({{2, 0.25, 0.0}})}};
  const std::string svg = timitseg::app::report::reliability_svg(conf);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"3\""), std::string::npos) << svg.substr(0, 400);
  EXPECT_NE(svg.find("boundary_confidence (ECE 0.082)"), std::string::npos);
  EXPECT_NE(svg.find("label_confidence (ECE 0.05)"), std::string::npos);
  EXPECT_NE(svg.find("data-points=\"2\""), std::string::npos);  // the boundary curve: the empty bin left out
}

// The per-phone bias plot of evaluate --align: one bar per phone with boundaries into it,
// earliest first, left of the zero line when early and right when late; labels escaped.
TEST(PhoneBiasPlot, BarsFromByPhone) {
  auto phone = [](int64_t n, double bias, double w20) {
    nlohmann::json p = {{"boundaries", n}, {"phones", n + 1}, {"mean_length_error_ms", 0.0}};
    if (n > 0) p["mean_signed_ms"] = bias, p["within_ms"] = {{"20", w20}};
    return p;
  };
  nlohmann::json samples;
  samples["by_phone"] = {{"late", phone(4, 12.5, 0.75)}, {"<early>", phone(2, -30.0, 0.5)}, {"none", phone(0, 0, 0)}};
  const std::string svg = timitseg::app::report::phone_bias_svg(samples);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("data-rows=\"2\""), std::string::npos) << svg;
  const size_t early = svg.find("data-phone=\"&lt;early&gt;\" data-bias=\"-30\" data-boundaries=\"2\"");
  const size_t late = svg.find("data-phone=\"late\" data-bias=\"12.5\" data-boundaries=\"4\"");
  ASSERT_NE(early, std::string::npos) << svg;
  ASSERT_NE(late, std::string::npos) << svg;
  EXPECT_LT(early, late);  // earliest first
  EXPECT_EQ(svg.find("data-phone=\"none\""), std::string::npos);
  EXPECT_NE(svg.find("4, 75 %"), std::string::npos) << svg;
  // the bars' x and width: the early one ends at the zero line, the late one starts there
  auto attr = [&](size_t at, const std::string& name) {
    const size_t open = svg.rfind("<rect", at);
    const size_t k = svg.find(" " + name + "=\"", open) + name.size() + 3;
    return std::stod(svg.substr(k, svg.find('"', k) - k));
  };
  const double early_end = attr(early, "x") + attr(early, "width");
  EXPECT_NEAR(early_end, attr(late, "x"), 1e-6);
  EXPECT_NEAR(attr(early, "width") / attr(late, "width"), 30.0 / 12.5, 0.02);
  // nothing to draw: a plot that says so
  const std::string empty = timitseg::app::report::phone_bias_svg(nlohmann::json::object());
  EXPECT_NE(empty.find("data-rows=\"0\""), std::string::npos);
  EXPECT_NE(empty.find("no phone has boundaries"), std::string::npos);
}
