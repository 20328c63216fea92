// The Gaussian head (crf.gaussian_head with crf.gaussian_weight w; docs/training.md
// "The Gaussian head, decided on dev (rule 8)"): a diagonal Gaussian of the
// (normalized) input features per class, whose log-likelihood, times w, is
// added to the frame scores:
//
//   scores[b][t][c] += w * sum_d ( -(x[d] - mu[c][d])^2 / (2 v[c][d]) - log(v[c][d]) / 2 )
//
// (the constant -D/2 log(2 pi), the same for every class, is left out: the
// centered cumsum and the CRF would cancel it). As a linear map of [x^2; x]
// it is crf.gaussian_projection: weight [C][2D] (row c: -w / (2 v[c][d]) for
// d < D, w mu[c][d] / v[c][d] for D + d), bias [C] (w * sum_d (-mu^2 / (2 v)
// - log(v) / 2)). Its parameters take no gradient step: each epoch starts by
// re-estimating them from the train split's frames and their labels (hard EM,
// as HTK's and Kaldi's Viterbi training re-estimate a monophone's Gaussian
// from the current alignment): the gold frame labels of a timed utterance,
// the forced alignment of a transcript one under the current model (the flat
// start's equal split before the first epoch). A frame-local score that no
// context can move: it holds a label to frames that sound like it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace timitseg::model {

// Sufficient statistics of each class's frames: counts [C], sums [C][D] and
// sums of squares [C][D], in float64.
struct GaussianStats {
  int C = 0, D = 0;
  std::vector<double> n, s1, s2;
  int64_t frames = 0;
  GaussianStats(int classes, int dim);
  // The L frames x [L][D] (row-major) with their classes y [L] (in [0, C); a
  // class outside throws naming `what`).
  void add(const float* x, const int32_t* y, int64_t L, const std::string& what);
  // Adds another accumulator of the same shape (several processes, tests).
  void merge(const GaussianStats& o);
};

// The head of `stats` at weight w > 0: weight [C][2D] and bias [C] as above.
// Each class's Gaussian is the MAP estimate with the pooled Gaussian (over
// every frame) as its prior, worth prior_frames frames (below); a class
// without frames gets the pooled Gaussian itself (every class's score then
// differs by what the data says only). Each variance is then floored at
// var_floor times the pooled variance of that dimension.
// Throws on w <= 0, no frames at all, a var_floor outside (0, 1] or a
// negative prior_frames.
//
// The prior's weight in frames (the relevance factor of Reynolds, Quatieri and
// Dunn 2000's MAP adaptation of a GMM, which uses 16): a class's mean and
// second moment are its frames' sums plus prior_frames frames of the pooled
// Gaussian's, so a class seen in a handful of frames gets nearly the pooled
// Gaussian instead of a needle (espeak-ng Spanish's `ɡ`, 4 train frames:
// sum of log variances -109 against -15 for `a`, which made training
// oscillate), and one seen in thousands its own. 0 is the ML estimate.
inline constexpr double kGaussianPriorFrames = 16.0;

struct GaussianHead {
  std::vector<float> weight, bias;
  int empty_classes = 0;  // classes without frames (given the pooled Gaussian)
};
GaussianHead gaussian_head(const GaussianStats& stats, double w, double var_floor = 0.01,
                           double prior_frames = kGaussianPriorFrames);

// scores [C] += weight [C][2D] [x^2; x] + bias for one frame x [D] (host;
// the CPU network's and the tests' one formula for the linear form).
template <class S>
void add_gaussian_scores(const S* weight, const S* bias, int C, int D, const S* x, S* scores);

}  // namespace timitseg::model
