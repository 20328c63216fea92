// SVG/HTML writer of `timitseg report` (see svg.h).
#include "app/report/svg.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace timitseg::app::report {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 12), v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (lo > hi) std::swap(lo, hi);
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  const double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (int i = 0;; ++i) {
    double t = first + i * step;
    if (std::abs(t) < step * 1e-9) t = 0.0;
    ticks.push_back(t);
    if (t >= last - step * 1e-9) break;
  }
  return ticks;
}

std::string tick_label(double v, double step) {
  step = std::abs(step);
  if (step > 0 && step < 1e-3 && std::abs(v) < 1e-3 + step) {
    if (v == 0) return "0";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0e", v);
    return buf;
  }
  int decimals = 0;
  if (step > 0)
    while (decimals < 6 && std::abs(step * std::pow(10.0, decimals) - std::round(step * std::pow(10.0, decimals))) > 1e-6)
      ++decimals;
  return fmt(v, decimals);
}

const std::string& run_color(int i) {
  static const std::vector<std::string> okabe_ito = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                     "#E69F00", "#56B4E9", "#000000", "#F0E442"};
  return okabe_ito[static_cast<size_t>(i) % okabe_ito.size()];
}

const std::string& run_dash(int i) {
  static const std::vector<std::string> dashes = {"", "10,4", "10,3,2,3", "4,3", "12,3,2,3,2,3"};
  return dashes[static_cast<size_t>(i) % dashes.size()];
}

std::string attrs_str(const Attrs& attrs) {
  std::string s;
  for (const auto& [k, v] : attrs) s += " " + k + "=\"" + escape(v) + "\"";
  return s;
}

Svg::Svg(double width, double height, const Attrs& attrs) : w_(width), h_(height) {
  open_ = "<svg width=\"" + fmt(w_) + "\" height=\"" + fmt(h_) + "\" viewBox=\"0 0 " + fmt(w_) + " " + fmt(h_) +
          "\"" + attrs_str(attrs) + ">";
}

void Svg::rect(double x, double y, double w, double h, const std::string& fill, const Attrs& attrs) {
  body_ += "<rect x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" width=\"" + fmt(w) + "\" height=\"" + fmt(h) +
           "\" fill=\"" + escape(fill) + "\"" + attrs_str(attrs) + "/>";
}

void Svg::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
               const Attrs& attrs) {
  body_ += "<line x1=\"" + fmt(x1) + "\" y1=\"" + fmt(y1) + "\" x2=\"" + fmt(x2) + "\" y2=\"" + fmt(y2) +
           "\" stroke=\"" + escape(stroke) + "\" stroke-width=\"" + fmt(width) + "\"" + attrs_str(attrs) + "/>";
}

void Svg::polyline(const std::vector<std::pair<double, double>>& pts, const std::string& stroke, double width,
                   const Attrs& attrs) {
  std::string p;
  for (const auto& [x, y] : pts) p += (p.empty() ? "" : " ") + fmt(x) + "," + fmt(y);
  body_ += "<polyline points=\"" + p + "\" fill=\"none\" stroke=\"" + escape(stroke) + "\" stroke-width=\"" +
           fmt(width) + "\"" + attrs_str(attrs) + "/>";
}

void Svg::circle(double cx, double cy, double r, const std::string& fill, const Attrs& attrs) {
  body_ += "<circle cx=\"" + fmt(cx) + "\" cy=\"" + fmt(cy) + "\" r=\"" + fmt(r) + "\" fill=\"" + escape(fill) +
           "\"" + attrs_str(attrs) + "/>";
}

void Svg::text(double x, double y, std::string_view s, const std::string& anchor, double size, const Attrs& attrs) {
  body_ += "<text x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" font-size=\"" + fmt(size) + "\"" +
           (anchor == "start" ? std::string() : " text-anchor=\"" + escape(anchor) + "\"") + attrs_str(attrs) + ">" +
           escape(s) + "</text>";
}

void Svg::open_group(const Attrs& attrs) { body_ += "<g" + attrs_str(attrs) + ">"; }

std::string Svg::str() const { return open_ + body_ + "</svg>"; }

namespace {

// A line chart's plot area (px), its ticks and the maps from data to pixels.
struct ChartFrame {
  static constexpr double left = 62, right = 14, top = 44, bottom = 44;
  double pw, ph;
  std::vector<double> xt, yt;  // ticks; the axes run from the first to the last
  double xa, xb, ya, yb;
  bool empty;  // no finite point
  double X(double x) const { return left + (xb > xa ? (x - xa) / (xb - xa) : 0.5) * pw; }
  double Y(double y) const { return top + ph - (yb > ya ? (y - ya) / (yb - ya) : 0.5) * ph; }
};

// The data ranges over the finite points, their ticks and the plot area.
ChartFrame chart_frame(const LineChart& c) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : c.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
        y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
      }
  ChartFrame f;
  f.empty = !std::isfinite(x0);
  if (f.empty) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (c.y_from_zero) y0 = std::min(y0, 0.0), y1 = std::max(y1, 0.0);
  f.xt = nice_ticks(x0, x1, c.x_integer ? std::min(8, std::max(1, static_cast<int>(x1 - x0))) : 5);
  if (c.x_integer) {
    std::vector<double> ints;
    for (double t : f.xt)
      if (t == std::round(t) && (ints.empty() || t != ints.back())) ints.push_back(t);
    if (ints.size() >= 2) f.xt = ints;
  }
  f.yt = nice_ticks(y0, y1, 4);
  f.xa = f.xt.front(), f.xb = f.xt.back(), f.ya = f.yt.front(), f.yb = f.yt.back();
  // Layout: title on top, legend below it, plot area, x label at the bottom, y label rotated at the left.
  f.pw = c.width - f.left - f.right, f.ph = c.height - f.top - f.bottom;
  return f;
}

// The legend under the title: one line and name per series (a run's second series left out).
void draw_legend(Svg& svg, const LineChart& c, const ChartFrame& f) {
  double lx = f.left;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    if (s.dashed) continue;  // a run's second series (its colour is in the legend already; the title says which)
    Attrs la = {{"class", "legend-line"}};
    if (!s.dash.empty()) la.push_back({"stroke-dasharray", s.dash});
    svg.line(lx, 30, lx + 18, 30, s.color, 2.5, la);
    svg.text(lx + 22, 34, s.name, "start", 11, {{"class", "legend"}});
    lx += 30 + 6.2 * static_cast<double>(s.name.size());
  }
}

// The grid, the ticks, the axes and their labels.
void draw_axes(Svg& svg, const LineChart& c, const ChartFrame& f) {
  const double left = f.left, top = f.top, pw = f.pw, ph = f.ph;
  const std::vector<double>&xt = f.xt, &yt = f.yt;
  for (double t : yt) {
    svg.line(left, f.Y(t), left + pw, f.Y(t), "#e4e4e4", 1);
    svg.text(left - 6, f.Y(t) + 4, tick_label(t, yt.size() > 1 ? yt[1] - yt[0] : 1), "end", 11);
  }
  for (double t : xt) {
    svg.line(f.X(t), top + ph, f.X(t), top + ph + 4, "#444", 1);
    svg.text(f.X(t), top + ph + 16, tick_label(t, xt.size() > 1 ? xt[1] - xt[0] : 1), "middle", 11);
  }
  svg.line(left, top, left, top + ph, "#444", 1);
  svg.line(left, top + ph, left + pw, top + ph, "#444", 1);
  svg.text(left + pw / 2, c.height - 6, c.x_label, "middle", 12, {{"class", "axis-label"}});
  svg.raw("<text x=\"14\" y=\"" + fmt(top + ph / 2) + "\" font-size=\"12\" text-anchor=\"middle\" "
          "class=\"axis-label\" transform=\"rotate(-90 14 " + fmt(top + ph / 2) + ")\">" + escape(c.y_label) +
          "</text>");
}

// Series i: one polyline per stretch of finite points (non-finite points break the line), markers if asked.
void draw_series(Svg& svg, const Series& s, size_t i, const ChartFrame& f) {
  std::vector<std::vector<std::pair<double, double>>> parts(1);
  int finite = 0;
  for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
    if (std::isfinite(s.x[k]) && std::isfinite(s.y[k])) {
      parts.back().push_back({f.X(s.x[k]), f.Y(s.y[k])});
      ++finite;
    } else if (!parts.back().empty()) {
      parts.emplace_back();
    }
  }
  if (parts.back().empty() && parts.size() > 1) parts.pop_back();
  Attrs base = {{"class", s.dashed ? "series second" : "series"},
                {"data-run", std::to_string(s.run >= 0 ? s.run : static_cast<int>(i))},
                {"data-name", s.name}};
  const std::string dash = s.dashed ? std::string(kSecondSeriesDash) : s.dash;
  if (!dash.empty()) base.push_back({"stroke-dasharray", dash});
  for (size_t p = 0; p < parts.size(); ++p) {
    Attrs a = base;
    a.push_back({"data-points", std::to_string(p == 0 ? finite : 0)});
    svg.polyline(parts[p], s.color, 2, a);
    if (s.markers)
      for (const auto& [px, py] : parts[p]) svg.circle(px, py, 2.5, s.color, {{"class", "marker"}});
  }
}

}  // namespace

std::string line_chart(const LineChart& c) {
  const ChartFrame f = chart_frame(c);
  Svg svg(c.width, c.height,
          {{"id", c.id}, {"class", "plot"}, {"data-plot", "line"}, {"data-series", std::to_string(c.series.size())}});
  svg.text(c.width / 2, 16, c.title, "middle", 14, {{"class", "title"}});
  draw_legend(svg, c, f);
  draw_axes(svg, c, f);
  for (size_t i = 0; i < c.series.size(); ++i) draw_series(svg, c.series[i], i, f);
  if (f.empty) svg.text(f.left + f.pw / 2, f.top + f.ph / 2, "n/a", "middle", 14, {{"class", "na"}});
  return svg.str();
}

namespace {
void put_u32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
void chunk(std::string& png, const char* type, const std::string& data) {
  put_u32(png, static_cast<uint32_t>(data.size()));
  const std::string td = std::string(type, 4) + data;
  png += td;
  put_u32(png, static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()))));
}
}  // namespace

std::string png_rgb(int w, int h, const std::vector<uint8_t>& rgb) {
  if (w <= 0 || h <= 0 || rgb.size() != static_cast<size_t>(w) * h * 3)
    throw std::invalid_argument("png_rgb: image " + std::to_string(w) + "x" + std::to_string(h) + " needs " +
                                std::to_string(static_cast<size_t>(std::max(w, 0)) * std::max(h, 0) * 3) +
                                " bytes, got " + std::to_string(rgb.size()));
  std::string raw;  // one filter byte (0 = none) per row
  raw.reserve(static_cast<size_t>(h) * (1 + 3 * static_cast<size_t>(w)));
  for (int y = 0; y < h; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(rgb.data()) + static_cast<size_t>(y) * w * 3, static_cast<size_t>(w) * 3);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::string z(zlen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 9) != Z_OK)
    throw std::runtime_error("png_rgb: zlib compress2 failed");
  z.resize(zlen);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(w));
  put_u32(ihdr, static_cast<uint32_t>(h));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bit, RGB, deflate, filter 0, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  return png;
}

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

void viridis(double v, uint8_t rgb[3]) {
  static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  if (!std::isfinite(v)) v = 0;
  v = std::clamp(v, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(v));
  const double f = v - i;
  for (int k = 0; k < 3; ++k) rgb[k] = static_cast<uint8_t>(std::lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
}

}  // namespace timitseg::app::report
