// crf.phone_bonus decoding on a session (crf/session.h: viterbi with a bonus,
// decode_host): the one place the biased transition is made and used.
#include "crf/session.h"

#include <vector>

#include "common/cuda.h"
#include "crf/phone_bonus.h"

namespace timitseg::crf {

void Session::viterbi(const Dims& dims, const Params& p, double phone_bonus, double* score, int32_t* segments,
                      int32_t* num_segments) {
  if (phone_bonus == 0.0) {
    viterbi(dims, p, score, segments, num_segments);
    return;
  }
  const int64_t C = dims.C;
  const size_t n = static_cast<size_t>(C) * C, bytes = n * sizeof(float);
  bonus_host_.resize(n);
  Params pv = p;
  if (mem_ == Memory::device) {  // transition [C][C] read back, biased, copied into bonus_
    std::vector<float> a(n);
    cuda::copy_to_host(a.data(), p.transition, bytes, stream_);
    cuda::stream_synchronize(stream_);
    add_phone_bonus(a.data(), C, static_cast<float>(phone_bonus), bonus_host_.data());
    bonus_.reserve(bytes);
    cuda::copy_to_device(bonus_.data(), bonus_host_.data(), bytes, stream_);
    cuda::stream_synchronize(stream_);  // bonus_host_ may change on the next call
    pv.transition = bonus_.as<float>();
  } else {
    add_phone_bonus(p.transition, C, static_cast<float>(phone_bonus), bonus_host_.data());
    pv.transition = bonus_host_.data();
  }
  viterbi(dims, pv, score, segments, num_segments);
}

HostResult Session::decode_host(const Dims& dims, const Params& p, const int32_t* labels, double phone_bonus) {
  HostRunOptions opt;
  opt.gradients = false;
  opt.viterbi = true;
  if (phone_bonus == 0.0) return run_host(dims, p, labels, opt);
  HostResult r;
  if (labels) {  // log Z and gold of the model's own transition
    HostRunOptions run_opts = opt;
    run_opts.viterbi = false;
    r = run_host(dims, p, labels, run_opts);
  }
  std::vector<float> biased(static_cast<size_t>(dims.C) * dims.C);
  add_phone_bonus(p.transition, dims.C, static_cast<float>(phone_bonus), biased.data());
  Params pb = p;
  pb.transition = biased.data();
  HostResult v = run_host(dims, pb, nullptr, opt);
  r.viterbi_score = std::move(v.viterbi_score);
  r.segments = std::move(v.segments);
  return r;
}

}  // namespace timitseg::crf
