// A small SVG/HTML writer for `timitseg report` (docs/report.md): text
// escaping, number formatting, "nice" axis ticks, an SVG element builder, line
// charts with axes and legends, and a PNG encoder (zlib) for embedded images.
// Debian packages no C++ SVG library worth a dependency; this stays small and
// is unit-tested (tests/app/test_svg.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace timitseg::app::report {

// Escapes & < > " ' for HTML/SVG text and attribute values.
std::string escape(std::string_view text);

// A number for coordinates and labels: fixed notation with at most `decimals`
// decimals, trailing zeros (and a trailing '.') removed, "-0" written as "0";
// "n/a" for NaN or infinity (a missing metric is never printed as `nan`).
std::string fmt(double v, int decimals = 2);

// Axis ticks: multiples of 1, 2 or 5 x 10^k covering [lo, hi] with about
// `target` intervals; the first tick <= lo, the last >= hi. lo == hi gives
// a unit-wide range around the value. Non-finite input: {0, 1}.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

// A tick label: the value with just enough decimals for the tick spacing
// `step` (e.g. step 0.25 -> 2 decimals), or scientific ("1e-04") for
// |values| < 1e-3 with a spacing below 1e-3.
std::string tick_label(double v, double step);

// Okabe-Ito colour-blind-safe palette (yellow last: weak on white).
const std::string& run_color(int i);
// The line style of run i, a stroke-dasharray ("" = solid): solid, long dashes,
// dash-dot, short dashes, dash-dot-dot, then again. Overlaid runs whose curves
// coincide (the same first epochs) stay told apart without colour.
const std::string& run_dash(int i);
// The stroke-dasharray of a run's second series (dev loss, max gradient norm): dotted.
inline const char* kSecondSeriesDash = "1.5,3";

// Attributes as (name, value) pairs, values escaped on output.
using Attrs = std::vector<std::pair<std::string, std::string>>;

// Builds one <svg> element; coordinates in px.
class Svg {
 public:
  Svg(double width, double height, const Attrs& attrs = {});
  void rect(double x, double y, double w, double h, const std::string& fill, const Attrs& attrs = {});
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const Attrs& attrs = {});
  // points as x0,y0 x1,y1 ...
  void polyline(const std::vector<std::pair<double, double>>& pts, const std::string& stroke, double width,
                const Attrs& attrs = {});
  void circle(double cx, double cy, double r, const std::string& fill, const Attrs& attrs = {});
  // anchor: start | middle | end
  void text(double x, double y, std::string_view s, const std::string& anchor = "start", double size = 12,
            const Attrs& attrs = {});
  void raw(const std::string& markup) { body_ += markup; }
  void open_group(const Attrs& attrs);
  void close_group() { body_ += "</g>"; }
  std::string str() const;

 private:
  double w_, h_;
  std::string open_, body_;
};

std::string attrs_str(const Attrs& attrs);

// A line chart: one series per run, NaN values leave gaps; axes with ticks,
// axis labels (with units), a title and a legend.
struct Series {
  std::string name, color;
  std::vector<double> x, y;
  bool dashed = false;  // a second series of a run: dotted (kSecondSeriesDash), class "series second", not in the legend
  std::string dash;     // stroke-dasharray of the line and its legend sample ("" = solid; run_dash(run))
  bool markers = true;
  int run = -1;  // data-run of the polylines (-1: the series index)
};
struct LineChart {
  std::string id, title, x_label, y_label;
  double width = 390, height = 260;
  std::vector<Series> series;
  bool x_integer = false;      // integer ticks only (epochs, frames)
  bool y_from_zero = false;    // the y range includes 0
};
// <svg id=ID data-plot="line" data-series=N> with one
// <polyline class="series" data-run=I data-points=P> per series (I: Series::run or the index) (P finite
// points; a series with gaps is drawn as several polylines of one
// data-run, data-points on the first) and "n/a" when a series has none.
std::string line_chart(const LineChart& c);

// PNG (8-bit RGB, no interlace) of rgb [h][w][3], deflated by zlib.
std::string png_rgb(int w, int h, const std::vector<uint8_t>& rgb);
// RFC 4648 base64 (OpenSSL EVP_EncodeBlock).
std::string base64(const std::string& bytes);

// Sequential colour map (viridis, 5 stops interpolated) of v in [0, 1].
void viridis(double v, uint8_t rgb[3]);

}  // namespace timitseg::app::report
