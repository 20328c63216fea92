// The report's "Decoded dev utterances" section (app/report/report_sections.h):
// per drawn utterance, its spectrogram (or the model's features) as a PNG,
// the reference segmentation and each run's prediction as tiers, a time axis.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "app/report/report_sections.h"
#include "app/report/svg.h"
#include "eval/metrics.h"

namespace timitseg::app::report::sections {

namespace {

std::string spectrogram_png(const Spectrogram& s) {
  std::vector<uint8_t> rgb(static_cast<size_t>(s.T) * s.D * 3);
  if (s.log_mel) {
    // log-mel energies (natural log): the top 10 nats (about 43 dB) of the utterance, viridis; low bins at the bottom
    float top = -1e30f;
    for (float v : s.features) top = std::max(top, v);
    for (int d = 0; d < s.D; ++d)
      for (int t = 0; t < s.T; ++t) {
        const double v = s.features[static_cast<size_t>(t) * s.D + d];
        viridis(std::clamp((v - (top - 10.0)) / 10.0, 0.0, 1.0), &rgb[(static_cast<size_t>(s.D - 1 - d) * s.T + t) * 3]);
      }
    return png_rgb(s.T, s.D, rgb);
  }
  // the model's features: per-dimension z-score over the utterance, clipped at +-3, viridis; dimension 0 at the bottom.
  for (int d = 0; d < s.D; ++d) {
    double mean = 0, var = 0;
    for (int t = 0; t < s.T; ++t) mean += s.features[static_cast<size_t>(t) * s.D + d];
    mean /= std::max(1, s.T);
    for (int t = 0; t < s.T; ++t) {
      const double x = s.features[static_cast<size_t>(t) * s.D + d] - mean;
      var += x * x;
    }
    const double sd = std::sqrt(var / std::max(1, s.T)) + 1e-12;
    for (int t = 0; t < s.T; ++t) {
      const double z = (s.features[static_cast<size_t>(t) * s.D + d] - mean) / sd;
      viridis((std::clamp(z, -3.0, 3.0) + 3) / 6, &rgb[(static_cast<size_t>(s.D - 1 - d) * s.T + t) * 3]);
    }
  }
  return png_rgb(s.T, s.D, rgb);
}

// One utterance's plot: its geometry (px) and its SVG.
struct UtterancePlot {
  static constexpr double W = 1180, left = 96, right = 10, spec_h = 130, tier_h = 26, top = 24;
  static constexpr double pw = W - left - right;
  double fx;  // px per frame
  Svg svg;
};

// The spectrogram image, with what it shows (log-mel bins, or the features and why) at its left.
void draw_spectrogram(UtterancePlot& u, const Spectrogram& s) {
  Svg& svg = u.svg;
  const double left = u.left, top = u.top, spec_h = u.spec_h, pw = u.pw;
  svg.raw("<image class=\"spectrogram\" x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" + fmt(pw) +
          "\" height=\"" + fmt(spec_h) + "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" "
          "href=\"data:image/png;base64," + base64(spectrogram_png(s)) + "\"/>");
  if (s.log_mel) {
    svg.text(left - 6, top + spec_h / 2, "log-mel", "end", 11, {{"class", "spec-kind"}});
    svg.text(left - 6, top + spec_h / 2 + 13, "(" + std::to_string(s.D) + " bins)", "end", 10);
  } else {
    svg.text(left - 6, top + spec_h / 2, s.feature_type + " features", "end", 11, {{"class", "spec-kind"}});
    svg.text(left - 6, top + spec_h / 2 + 13, "(dim " + std::to_string(s.D) + ")", "end", 10);
    svg.text(left + pw, 16, "no spectrogram: audio not reachable (" + s.note + ")", "end", 11,
             {{"class", "spec-note"}});
  }
}

// One tier at height y: a bar per run of equal labels (nullptr: not decoded by this run).
void draw_tier(UtterancePlot& u, const std::vector<std::string>& scoring_names, double y, const std::string& name,
               const std::string& tier_id, const std::vector<int>* labels, const std::string& color) {
  Svg& svg = u.svg;
  const double left = u.left, tier_h = u.tier_h, fx = u.fx;
  svg.text(left - 6, y + tier_h / 2 + 4, name, "end", 11);
  if (!labels) {
    svg.open_group({{"class", "tier"}, {"data-tier", tier_id}, {"data-segments", "0"}});
    svg.text(left + 4, y + tier_h / 2 + 4, "n/a (utterance not decoded by this run)", "start", 11);
    svg.close_group();
    return;
  }
  const std::vector<eval::Run> rs = eval::runs_of(*labels);
  svg.open_group({{"class", "tier"}, {"data-tier", tier_id}, {"data-segments", std::to_string(rs.size())}});
  for (size_t j = 0; j < rs.size(); ++j) {
    const eval::Run& r = rs[j];
    const std::string& name39 = scoring_names.at(r.label);
    const double x = left + r.start * fx, w = r.length * fx;
    svg.raw("<rect class=\"seg\" x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" width=\"" + fmt(w) + "\" height=\"" +
            fmt(tier_h - 4) + "\" fill=\"" + color + "\" fill-opacity=\"" + (j % 2 ? "0.35" : "0.2") +
            "\" stroke=\"#333\" stroke-width=\"0.5\" data-label=\"" + escape(name39) + "\"><title>" +
            escape(name39) + ": frames " + std::to_string(r.start) + "-" + std::to_string(r.start + r.length - 1) +
            "</title></rect>");
    if (w >= 6.5 * static_cast<double>(name39.size()) + 2)
      svg.text(x + w / 2, y + tier_h / 2 + 2, name39, "middle", 10, {{"class", "seg-label"}});
  }
  svg.close_group();
}

// The time axis (seconds) at height y.
void draw_time_axis(UtterancePlot& u, const Spectrogram& s, double y) {
  Svg& svg = u.svg;
  const double left = u.left, pw = u.pw;
  svg.line(left, y, left + pw, y, "#444", 1);
  const double secs = s.T * s.frame_shift_ms / 1000.0;
  const std::vector<double> ticks = nice_ticks(0, secs, 10);
  for (double tk : ticks) {
    if (tk > secs + 1e-9) break;
    const double x = left + tk / secs * pw;
    svg.line(x, y, x, y + 4, "#444", 1);
    svg.text(x, y + 15, tick_label(tk, ticks.size() > 1 ? ticks[1] - ticks[0] : 1), "middle", 10);
  }
  svg.text(left + pw / 2, y + 30, "time (s)", "middle", 12, {{"class", "axis-label"}});
}

// Utterance k of in.drawn: spectrogram, reference tier (from the first run
// that decoded it), one tier per run, time axis.
std::string utterance_plot(const ReportInput& in, const std::vector<RunFiles>& runs, size_t k) {
  const Spectrogram& s = in.drawn[k];
  const double H = UtterancePlot::top + UtterancePlot::spec_h + 6 +
                   UtterancePlot::tier_h * (1 + static_cast<double>(runs.size())) + 40;
  UtterancePlot u{UtterancePlot::pw / std::max(1, s.T),
                  Svg(UtterancePlot::W, H, {{"id", "utt-" + std::to_string(k)}, {"class", "plot utt"},
                                            {"data-plot", "utterance"}, {"data-utterance", s.id},
                                            {"data-frames", std::to_string(s.T)}})};
  u.svg.text(u.left, 16, s.id + "  (" + std::to_string(s.T) + " frames)", "start", 13, {{"class", "title"}});
  draw_spectrogram(u, s);
  const UtteranceLabels* ref = nullptr;
  std::vector<const UtteranceLabels*> preds(runs.size(), nullptr);
  for (size_t i = 0; i < runs.size(); ++i)
    if (in.runs[i].has_predictions)
      for (const UtteranceLabels& p : in.runs[i].predictions.utterances)
        if (p.id == s.id && static_cast<int>(p.ref.size()) == s.T) {
          preds[i] = &p;
          if (!ref) ref = &p;
        }
  double y = u.top + u.spec_h + 6;
  draw_tier(u, in.scoring_names, y, "reference", "reference", ref ? &ref->ref : nullptr, "#777777");
  for (size_t i = 0; i < runs.size(); ++i) {
    y += u.tier_h;
    draw_tier(u, in.scoring_names, y, runs[i].label, "run-" + std::to_string(i), preds[i] ? &preds[i]->pred : nullptr,
              run_color(static_cast<int>(i)));
  }
  draw_time_axis(u, s, y + (u.tier_h + 2));
  return u.svg.str();
}

}  // namespace

std::string utterances_section(const ReportInput& in, const std::vector<RunFiles>& runs) {
  std::string h = "<h2 id=\"utterances\">Decoded dev utterances</h2><p>Top: the log-mel spectrogram of the "
                  "utterance's audio (" + std::to_string(kSpectrogramMelBins) + " mel bins, Kaldi-compatible fbank on "
                  "the frames of the model's features; low frequencies at the bottom; colour: the top 43 dB of the "
                  "utterance, brighter is louder); where the audio cannot be read, the model's input features instead "
                  "(each dimension standardized over the utterance), saying why. Below: the reference "
                  "segmentation, then each run's prediction (best checkpoint, Viterbi); phone labels on bars wide "
                  "enough to hold them (hover a bar for its label and frames).</p>";
  if (in.drawn.empty()) return h + "<p class=\"na\">n/a: no dev predictions to draw.</p>";
  for (size_t k = 0; k < in.drawn.size(); ++k) h += utterance_plot(in, runs, k);
  return h;
}

}  // namespace timitseg::app::report::sections
