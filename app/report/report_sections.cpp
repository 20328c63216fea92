// The sections of the HTML report (app/report/report_sections.h): run
// summary, tables, training curves, boundary F1 against tolerance, durations,
// confusion matrix, configuration and environment (the decoded utterances:
// report_utterances.cpp).
#include "app/report/report_sections.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "app/report/phone_classes.h"
#include "app/report/svg.h"
#include "eval/metrics.h"

namespace fs = std::filesystem;

namespace timitseg::app::report::sections {

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}
std::string str_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "n/a";
  return it->is_string() ? it->get<std::string>() : it->dump();
}
std::string yaml_str(const YAML::Node& cfg, const char* section, const char* key) {
  try {
    if (cfg && cfg[section] && cfg[section][key] && cfg[section][key].IsScalar()) return cfg[section][key].as<std::string>();
  } catch (const YAML::Exception&) {
  }
  return "n/a";
}

// ---- statistics of the predictions ----------------------------------------

Stats stats_of(const RunPredictions& p, const std::vector<std::string>& names) {
  Stats s;
  eval::Metrics m(names, p.frame_shift_ms);
  const size_t C = names.size();
  s.hist_ref.assign(C, std::vector<int64_t>(kMaxDur, 0));
  s.hist_pred.assign(C, std::vector<int64_t>(kMaxDur, 0));
  for (const UtteranceLabels& u : p.utterances) {
    m.add(u.ref, u.pred);
    for (const eval::Run& r : eval::runs_of(u.ref)) ++s.hist_ref[r.label][std::min(r.length, kMaxDur) - 1];
    for (const eval::Run& r : eval::runs_of(u.pred)) ++s.hist_pred[r.label][std::min(r.length, kMaxDur) - 1];
  }
  s.metrics = m.to_json();
  s.confusion = s.metrics["confusion"].get<std::vector<std::vector<int64_t>>>();
  return s;
}

// ---- sections -----------------------------------------------------------------

std::string pct(double v) { return std::isfinite(v) ? fmt(100 * v, 2) + " %" : "n/a"; }

// Each run's colour and line style (run_dash), as its curves draw them.
std::string legend_html(const std::vector<RunFiles>& runs) {
  std::string h = "<div class=\"legend-row\">";
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string& dash = run_dash(static_cast<int>(i));
    h += "<svg class=\"legend-sample\" width=\"34\" height=\"10\" data-run=\"" + std::to_string(i) +
         "\"><line x1=\"1\" y1=\"5\" x2=\"33\" y2=\"5\" stroke=\"" + run_color(static_cast<int>(i)) +
         "\" stroke-width=\"2.5\"" + (dash.empty() ? std::string() : " stroke-dasharray=\"" + dash + "\"") +
         "/></svg> " + escape(runs[i].label) + " &nbsp; ";
  }
  return h + "</div>";
}

std::string summary_section(const ReportInput& in, const std::vector<RunFiles>& runs) {
  std::string h = "<h2 id=\"runs\">Runs</h2><table id=\"summary\"><tr><th></th><th>run folder</th><th>epochs</th>"
                  "<th>best dev PER</th><th>at epoch</th><th>last train loss</th><th>CRF max duration K</th>"
                  "<th>predictions shown below</th></tr>";
  for (size_t i = 0; i < runs.size(); ++i) {
    double best = NAN;
    int best_epoch = 0;
    for (const json& e : runs[i].epochs) {
      const double per = num(e, "dev_per");
      if (std::isfinite(per) && !(per >= best)) best = per, best_epoch = static_cast<int>(num(e, "epoch"));
    }
    const double last_loss = runs[i].epochs.empty() ? NAN : num(runs[i].epochs.back(), "train_loss");
    h += "<tr><td><span class=\"swatch\" style=\"background:" + run_color(static_cast<int>(i)) + "\"></span></td><td>" +
         escape(in.runs[i].run_dir) + "</td><td>" + std::to_string(runs[i].epochs.size()) + "</td><td>" + pct(best) +
         "</td><td>" + (best_epoch ? std::to_string(best_epoch) : "n/a") + "</td><td>" + fmt(last_loss, 4) +
         "</td><td>" + escape(yaml_str(runs[i].config, "crf", "max_duration")) + "</td><td>" +
         escape(in.runs[i].has_predictions ? in.runs[i].predictions.source : "n/a: " + in.runs[i].predictions_note) +
         "</td></tr>";
  }
  return h + "</table>";
}

std::string tables_section(const ReportInput& in) {
  std::string h;
  for (const ReportTable& t : in.tables) {
    h += "<h2 id=\"" + escape(t.id) + "\">" + escape(t.title) + "</h2>";
    if (!t.note.empty()) h += "<p>" + escape(t.note) + "</p>";
    h += "<table id=\"" + escape(t.id) + "-table\"><tr>";
    for (const std::string& c : t.header) h += "<th>" + escape(c) + "</th>";
    h += "</tr>";
    for (const auto& row : t.rows) {
      h += "<tr>";
      for (const std::string& c : row) h += "<td>" + escape(c) + "</td>";
      h += "</tr>";
    }
    h += "</table>";
  }
  return h;
}

std::string curves_section(const std::vector<RunFiles>& runs) {
  struct Curve {
    const char* id;
    const char* title;
    const char* y_label;
    std::vector<const char*> keys;  // first present per line; a second series (dashed) from `dashed_keys`
    std::vector<const char*> dashed_keys;
    double scale;
    bool from_zero;
  };
  std::string loss_unit = "nats per utterance";
  std::set<std::string> norms;
  for (const RunFiles& r : runs) norms.insert(yaml_str(r.config, "crf", "loss_normalization"));
  if (norms.size() == 1 && *norms.begin() == "frame") loss_unit = "nats per frame";
  if (norms.size() > 1) loss_unit = "nats, per crf.loss_normalization";
  const std::string loss_label = "loss (" + loss_unit + ")";
  const std::vector<Curve> curves = {
      {"plot-train-loss", "Train loss and dev loss (dotted)", loss_label.c_str(), {"train_loss"}, {"dev_loss"}, 1, false},
      {"plot-dev-per", "Dev phone error rate", "PER (%)", {"dev_per"}, {}, 100, false},
      {"plot-dev-boundary-f1", "Dev boundary F1 (tolerance 2 frames)", "boundary F1 (%)", {"dev_boundary_f1_tol2"}, {}, 100, false},
      {"plot-lr", "Learning rate (end of epoch)", "learning rate", {"lr"}, {}, 1, true},
      {"plot-max-transition", "CRF drift: max |transition|", "max |transition| (log-potential)", {"max_abs_transition"}, {}, 1, true},
      {"plot-max-duration-bias", "CRF drift: max |duration_bias|", "max |duration_bias| (log-potential)", {"max_abs_duration_bias"}, {}, 1, true},
      {"plot-grad-norm", "Gradient norm: mean, max (dotted)", "global L2 norm", {"grad_norm", "grad_norm_mean"}, {"grad_norm_max"}, 1, true},
      {"plot-frames-per-sec", "Training speed", "frames per second", {"frames_per_sec"}, {}, 1, true},
  };
  std::string h = "<h2 id=\"curves\">Training curves</h2><p>Per epoch, from RUN_DIR/metrics.jsonl; x: epoch. "
                  "A point is missing where the run did not record the value. Each run has its colour and its line style "
                  "(solid, long dashes, dash-dot, ...), so runs that share their first epochs stay apart; a run's second "
                  "series (dev loss, max gradient norm) is dotted.</p>" + legend_html(runs) +
                  "<div class=\"grid\">";
  for (const Curve& c : curves) {
    LineChart ch;
    ch.id = c.id;
    ch.title = c.title;
    ch.x_label = "epoch";
    ch.y_label = c.y_label;
    ch.x_integer = true;
    ch.y_from_zero = c.from_zero;
    for (size_t i = 0; i < runs.size(); ++i) {
      auto series = [&](const std::vector<const char*>& keys, bool dashed) {
        const char* key = nullptr;
        for (const char* k : keys)
          for (const json& e : runs[i].epochs)
            if (!key && e.contains(k)) key = k;
        if (!key && dashed) return;  // an optional second series that no line holds
        Series s;
        s.name = runs[i].label + (dashed ? " (" + std::string(keys.front()) + ")" : "");
        s.color = run_color(static_cast<int>(i));
        s.dashed = dashed;
        s.dash = run_dash(static_cast<int>(i));
        s.run = static_cast<int>(i);
        for (const json& e : runs[i].epochs) {
          s.x.push_back(num(e, "epoch"));
          s.y.push_back(key ? num(e, key) * c.scale : NAN);
        }
        ch.series.push_back(std::move(s));
      };
      series(c.keys, false);
      if (!c.dashed_keys.empty()) series(c.dashed_keys, true);
    }
    h += "<div class=\"cell\">" + line_chart(ch) + "</div>";
  }
  return h + "</div>";
}

std::string tolerance_section(const ReportInput& in, const std::vector<RunFiles>& runs, const std::vector<Stats>& st) {
  LineChart ch;
  ch.id = "plot-boundary-f1-tolerance";
  ch.title = "Dev boundary F1 against tolerance";
  ch.x_label = "tolerance (frames)";
  ch.y_label = "boundary F1 (%)";
  ch.x_integer = true;
  ch.width = 560;
  ch.height = 300;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!in.runs[i].has_predictions) continue;
    Series s;
    s.name = runs[i].label;
    s.color = run_color(static_cast<int>(i));
    s.dash = run_dash(static_cast<int>(i));
    s.run = static_cast<int>(i);
    for (int tol = 0; tol <= eval::Metrics::kMaxTol; ++tol) {
      s.x.push_back(tol);
      s.y.push_back(100 * st[i].metrics["boundary_f1"][std::to_string(tol)].get<double>());
    }
    ch.series.push_back(std::move(s));
  }
  std::string table = "<table><tr><th>run</th>";
  for (int tol = 0; tol <= eval::Metrics::kMaxTol; ++tol) table += "<th>" + std::to_string(tol) + "</th>";
  table += "<th>P 20 ms</th><th>R 20 ms</th><th>F1 20 ms</th><th>R-value 20 ms</th>"
           "<th>PER</th><th>segment F1</th><th>frame accuracy</th></tr>";
  for (size_t i = 0; i < runs.size(); ++i) {
    table += "<tr><td>" + escape(runs[i].label) + "</td>";
    for (int tol = 0; tol <= eval::Metrics::kMaxTol; ++tol)
      table += "<td>" + (in.runs[i].has_predictions ? pct(st[i].metrics["boundary_f1"][std::to_string(tol)].get<double>())
                                                    : std::string("n/a")) + "</td>";
    auto metric = [&](const char* k) {
      return in.runs[i].has_predictions ? pct(st[i].metrics[k].get<double>()) : std::string("n/a");
    };
    for (const char* k : {"precision", "recall", "f1", "r_value"})  // the field's metrics (eval/metrics.h)
      table += "<td>" + (in.runs[i].has_predictions ? pct(st[i].metrics["boundary_20ms"][k].get<double>())
                                                    : std::string("n/a")) + "</td>";
    table += "<td>" + metric("per") + "</td><td>" + metric("segment_f1") + "</td><td>" + metric("frame_accuracy") +
             "</td></tr>";
  }
  table += "</table>";
  std::set<int> frames20;
  for (size_t i = 0; i < runs.size(); ++i)
    if (in.runs[i].has_predictions) frames20.insert(st[i].metrics["boundary_20ms"]["tolerance_frames"].get<int>());
  std::string tol20;
  for (int f : frames20) tol20 += (tol20.empty() ? "" : " or ") + std::to_string(f) + (f == 1 ? " frame" : " frames");
  if (tol20.empty()) tol20 = "n/a";
  return "<h2 id=\"tolerance\">Boundary F1 against tolerance</h2><p>A predicted boundary matches a reference "
         "boundary at most <i>tolerance</i> frames away (one-to-one); one frame is the feature frame shift. From the "
         "best checkpoint's dev predictions. The table adds the field's segmentation metrics at 20 ms (" +
         tol20 + "): boundary precision, recall, F1 and R-value (Räsänen et al. 2009), same boundaries and "
         "matching.</p><div class=\"grid\"><div class=\"cell\">" +
         line_chart(ch) + "</div><div class=\"cell\">" + table + "</div></div>";
}

std::string durations_section(const ReportInput& in, const std::vector<RunFiles>& runs, const std::vector<Stats>& st) {
  int ref_run = -1;
  for (size_t i = 0; i < runs.size(); ++i)
    if (in.runs[i].has_predictions && ref_run < 0) ref_run = static_cast<int>(i);
  std::string h = "<h2 id=\"durations\">Segment durations per phone</h2>";
  if (ref_run < 0) return h + "<p class=\"na\">n/a: no run has dev predictions.</p>";
  h += "<p>Fraction of each phone's segments per duration (frames; the last bin holds " + std::to_string(kMaxDur) +
       " frames and longer). Grey bars: reference (dev); lines: each run's predictions (its colour and line style). "
       "Title: phone, reference "
       "segment count n.</p>" + legend_html(runs) + "<div class=\"grid\" id=\"duration-grid\">";
  const double W = 192, H = 118, l = 26, r = 6, t = 18, b = 20, pw = W - l - r, ph = H - t - b;
  for (size_t c = 0; c < in.scoring_names.size(); ++c) {
    const std::vector<int64_t>& ref = st[ref_run].hist_ref[c];
    int64_t nref = 0;
    for (int64_t v : ref) nref += v;
    std::vector<std::vector<double>> fr;  // [run][bin]
    double ymax = 0;
    std::vector<double> rf(kMaxDur, 0.0);
    for (int k = 0; k < kMaxDur; ++k) rf[k] = nref ? double(ref[k]) / nref : 0.0, ymax = std::max(ymax, rf[k]);
    for (size_t i = 0; i < runs.size(); ++i) {
      std::vector<double> f(kMaxDur, NAN);
      if (in.runs[i].has_predictions) {
        int64_t n = 0;
        for (int64_t v : st[i].hist_pred[c]) n += v;
        for (int k = 0; k < kMaxDur; ++k) f[k] = n ? double(st[i].hist_pred[c][k]) / n : 0.0, ymax = std::max(ymax, f[k]);
      }
      fr.push_back(std::move(f));
    }
    if (ymax <= 0) ymax = 1;
    Svg svg(W, H, {{"class", "plot dur"}, {"data-phone", in.scoring_names[c]}, {"data-reference-count", std::to_string(nref)}});
    svg.text(W / 2, 13, in.scoring_names[c] + "  (n=" + std::to_string(nref) + ")", "middle", 11, {{"class", "title"}});
    const double bw = pw / kMaxDur;
    for (int k = 0; k < kMaxDur; ++k)
      if (rf[k] > 0) svg.rect(l + k * bw, t + ph - rf[k] / ymax * ph, bw - 0.5, rf[k] / ymax * ph, "#bbbbbb", {{"class", "ref-bar"}});
    svg.line(l, t + ph, l + pw, t + ph, "#444", 1);
    svg.line(l, t, l, t + ph, "#444", 1);
    for (int d : {1, 10, 20, 30}) svg.text(l + (d - 0.5) * bw, t + ph + 12, std::to_string(d) + (d == kMaxDur ? "+" : ""), "middle", 9);
    svg.text(l - 3, t + 8, fmt(ymax, 2), "end", 9);
    svg.text(l - 3, t + ph, "0", "end", 9);
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!in.runs[i].has_predictions) continue;
      std::vector<std::pair<double, double>> pts;
      for (int k = 0; k < kMaxDur; ++k) pts.push_back({l + (k + 0.5) * bw, t + ph - fr[i][k] / ymax * ph});
      Attrs a = {{"class", "series"}, {"data-run", std::to_string(i)}, {"data-points", std::to_string(pts.size())}};
      if (!run_dash(static_cast<int>(i)).empty()) a.push_back({"stroke-dasharray", run_dash(static_cast<int>(i))});
      svg.polyline(pts, run_color(static_cast<int>(i)), 1.5, a);
    }
    h += svg.str();
  }
  return h + "</div><p class=\"note\">x: segment duration (frames); y: fraction of the phone's segments (max of the "
             "panel at the top of its axis).</p>";
}

std::string confusion_section(const ReportInput& in, const std::vector<RunFiles>& runs, const std::vector<Stats>& st) {
  const std::string order = timit_scoring_set(in.scoring_names)
                                ? "both in phonetic class order (vowels, semivowels, nasals, fricatives, affricates, "
                                  "stops, silence; lines between the classes), so confusions within a class sit in the "
                                  "blocks on the diagonal"
                                : "both in the phone set's order";
  std::string h = "<h2 id=\"confusion\">Confusion matrix (dev frames)</h2><p>Row: reference phone, column: "
                  "predicted phone, " + order + "; colour: fraction of the reference phone's frames (each row sums to "
                  "1), darker is more. The diagonal is the per-phone frame accuracy. Hover a cell for its "
                  "count.</p><div class=\"grid\">";
  const int C = static_cast<int>(in.scoring_names.size());
  std::vector<std::string> cls;
  const std::vector<int> ord = phone_class_order(in.scoring_names, &cls);  // display position -> phone index
  const double cell = 17, left = 112, top = 70, W = left + C * cell + 16, H = top + C * cell + 60;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!in.runs[i].has_predictions) {
      h += "<div class=\"cell\"><b>" + escape(runs[i].label) + "</b>: n/a (" + escape(in.runs[i].predictions_note) +
           ")</div>";
      continue;
    }
    Svg svg(W, H, {{"id", "plot-confusion-" + std::to_string(i)}, {"class", "plot"}, {"data-plot", "confusion"},
                   {"data-run", std::to_string(i)}, {"data-classes", std::to_string(C)}});
    svg.text(W / 2, 16, runs[i].label, "middle", 14, {{"class", "title"}, {"fill", run_color(static_cast<int>(i))}});
    svg.text(left + C * cell / 2, 32, "predicted phone", "middle", 12, {{"class", "axis-label"}});
    for (int k = 0; k < C; ++k) {
      const std::string& name = in.scoring_names[ord[k]];
      const double x = left + k * cell + cell / 2 + 4;
      svg.raw("<text class=\"col-label\" x=\"" + fmt(x) + "\" y=\"" + fmt(top - 4) + "\" font-size=\"12\" "
              "transform=\"rotate(-60 " + fmt(x) + " " + fmt(top - 4) + ")\">" + escape(name) + "</text>");
      svg.text(left - 4, top + k * cell + cell - 4, name, "end", 12, {{"class", "row-label"}});
    }
    // the classes: a name left of each block of rows, a line between blocks
    for (int k = 0; k < C;) {
      int e = k;
      while (e < C && cls[e] == cls[k]) ++e;
      if (!cls[k].empty()) svg.text(left - 34, top + (k + e) * cell / 2 + 4, cls[k], "end", 11, {{"class", "class-label"}});
      if (k > 0) {
        svg.line(left, top + k * cell, left + C * cell, top + k * cell, "#888", 1, {{"class", "class-line"}});
        svg.line(left + k * cell, top, left + k * cell, top + C * cell, "#888", 1, {{"class", "class-line"}});
      }
      k = e;
    }
    svg.raw("<text x=\"10\" y=\"" + fmt(top + C * cell / 2) + "\" font-size=\"12\" text-anchor=\"middle\" "
            "class=\"axis-label\" transform=\"rotate(-90 10 " + fmt(top + C * cell / 2) + ")\">reference phone</text>");
    for (int rk = 0; rk < C; ++rk) {
      const int r = ord[rk];
      int64_t row = 0;
      for (int c = 0; c < C; ++c) row += st[i].confusion[r][c];
      for (int ck = 0; ck < C; ++ck) {
        const int c = ord[ck];
        const int64_t n = st[i].confusion[r][c];
        const double f = row ? double(n) / row : 0.0;
        // white -> Okabe-Ito blue (#0072B2) -> dark blue: one hue, readable without colour vision
        const double a = std::sqrt(f);
        const int R = static_cast<int>(std::lround(255 + a * (0 - 255))), G = static_cast<int>(std::lround(255 + a * (60 - 255))),
                  B = static_cast<int>(std::lround(255 + a * (120 - 255)));
        char col[16];
        std::snprintf(col, sizeof col, "#%02x%02x%02x", R, G, B);
        svg.raw("<rect class=\"cell\" x=\"" + fmt(left + ck * cell) + "\" y=\"" + fmt(top + rk * cell) + "\" width=\"" +
                fmt(cell) + "\" height=\"" + fmt(cell) + "\" fill=\"" + col + "\" data-count=\"" + std::to_string(n) +
                "\" data-ref=\"" + escape(in.scoring_names[r]) + "\" data-pred=\"" + escape(in.scoring_names[c]) + "\"><title>" + escape(in.scoring_names[r]) + " as " + escape(in.scoring_names[c]) + ": " + std::to_string(n) +
                " frames (" + fmt(100 * f, 1) + " % of " + escape(in.scoring_names[r]) + ")</title></rect>");
      }
    }
    // colour bar
    const double by = top + C * cell + 20;
    for (int k = 0; k < 20; ++k) {
      const double a = std::sqrt(k / 19.0);
      char col[16];
      std::snprintf(col, sizeof col, "#%02x%02x%02x", static_cast<int>(std::lround(255 - a * 255)),
                    static_cast<int>(std::lround(255 - a * 195)), static_cast<int>(std::lround(255 - a * 135)));
      svg.rect(left + k * 10, by, 10, 10, col, {{"class", "colorbar"}});
    }
    svg.text(left, by + 24, "0", "middle", 10);
    svg.text(left + 200, by + 24, "1 (fraction of the row)", "start", 10);
    svg.raw("<rect x=\"" + fmt(left) + "\" y=\"" + fmt(by) + "\" width=\"200\" height=\"10\" fill=\"none\" stroke=\"#444\"/>");
    h += "<div class=\"cell\">" + svg.str() + "</div>";
  }
  return h + "</div>";
}

std::string flatten(const json& j, const std::string& prefix = "") {
  std::string rows;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object())
      rows += flatten(*it, key);
    else
      rows += "<tr><td>" + escape(key) + "</td><td>" +
              escape(it->is_string() ? it->get<std::string>() : it->dump()) + "</td></tr>";
  }
  return rows;
}

std::string environment_section(const ReportInput& in, const std::vector<RunFiles>& runs) {
  std::string h = "<h2 id=\"environment\">Configuration and environment</h2><div class=\"grid\">";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunFiles& r = runs[i];
    const json last = r.epochs.empty() ? json::object() : r.epochs.back();
    auto rj = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys)
        if (r.run_json.is_object() && r.run_json.contains(k)) return str_field(r.run_json, k);
      return std::string("n/a");
    };
    // resolved values first (run.json: `auto` replaced by its pick), then the epoch's record, then the config
    std::string device = rj({"device"});
    if (device == "n/a") device = str_field(last, "device");
    if (device == "n/a") device = yaml_str(r.config, "train", "device");
    std::string backend = rj({"crf_backend"});
    if (backend == "n/a") backend = yaml_str(r.config, "crf", "backend");
    std::string threads = rj({"threads"});
    if (threads == "n/a") threads = yaml_str(r.config, "train", "threads") + " (train.threads; 0 = all cores)";
    h += "<div class=\"cell env\" id=\"env-" + std::to_string(i) + "\"><h3><span class=\"swatch\" style=\"background:" +
         run_color(static_cast<int>(i)) + "\"></span>" + escape(r.label) + "</h3><table>" +
         "<tr><td>run folder</td><td>" + escape(in.runs[i].run_dir) + "</td></tr>" +
         "<tr><td>version</td><td>" + escape(rj({"timitseg_version", "version"})) + "</td></tr>" +
         "<tr><td>git commit</td><td>" + escape(rj({"git_commit", "commit"})) + "</td></tr>" +
         "<tr><td>device</td><td>" + escape(device) + "</td></tr>" +
         "<tr><td>CRF backend</td><td>" + escape(backend) + "</td></tr>" +
         "<tr><td>threads</td><td>" + escape(threads) + "</td></tr>" +
         "<tr><td>data.workdir</td><td>" + escape(yaml_str(r.config, "data", "workdir")) + "</td></tr>" +
         "<tr><td>epochs recorded</td><td>" + std::to_string(r.epochs.size()) + "</td></tr></table>";
    if (r.run_json.is_object())
      h += "<details><summary>run.json</summary><table>" + flatten(r.run_json) + "</table></details>";
    else
      h += "<p class=\"note\">run.json: n/a</p>";
    h += "<details><summary>config.yaml</summary><pre>" +
         escape(r.config_text.empty() ? std::string("n/a") : r.config_text) + "</pre></details></div>";
  }
  return h + "</div>";
}

}  // namespace timitseg::app::report::sections
