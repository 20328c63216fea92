// A cuda handle and the CUDA device of its tensors: a handle runs on the
// device current when it was created; a tensor on another device is one
// TIMITSEG_ERR_DEVICE naming the tensor and both devices (before, the kernels
// read another device's memory: a crash, or wrong values with peer access),
// and every call runs on the handle's device whatever the thread's current
// device is, which it leaves as it found it. Skipped without a GPU; the
// two-device half without two.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/cuda.h"
#include "tests/capi/capi_helpers.h"

using namespace timitseg::capi::testing;
namespace cuda = timitseg::cuda;

namespace {

constexpr int kB = 2, kT = 6, kK = 3, kC = 4;

// Device copies of a small batch on device `dev` (the thread's current device is restored).
struct DeviceBatch {
  int dev;
  std::vector<void*> mem;
  timitseg_crf_batch in{};
  timitseg_crf_gold gold{};
  timitseg_tensor nll{};
  explicit DeviceBatch(int d) : dev(d) {
    const int before = cuda::current_device();
    cuda::set_device(dev);
    std::vector<float> x(kB * kT * kC);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) * 0.25f - 1.f;
    std::vector<int32_t> len = {kT, 3}, lab(kB * kT, 1);
    std::vector<double> out(kB, 0.0);
    in.scores = put(x, TIMITSEG_F32, {kB, kT, kC});
    in.lengths = put(len, TIMITSEG_I32, {kB});
    gold.labels = put(lab, TIMITSEG_I32, {kB, kT});
    nll = put(out, TIMITSEG_F64, {kB});
    cuda::set_device(before);
  }
  ~DeviceBatch() {
    for (void* p : mem) cuda::device_free(p);
  }
  template <class V>
  timitseg_tensor put(V& v, int dtype, std::vector<int64_t> shape) {
    timitseg_tensor t = tensor(v.data(), dtype, shape);
    mem.push_back(cuda::device_alloc(v.size() * sizeof(v[0])));
    cuda::copy_to_device(mem.back(), v.data(), v.size() * sizeof(v[0]));
    t.data = mem.back(), t.device = TIMITSEG_DEVICE_CUDA, t.device_index = dev;
    return t;
  }
  std::vector<double> fetch() {
    std::vector<double> v(kB);
    cuda::copy_to_host(v.data(), nll.data, v.size() * sizeof(double));
    return v;
  }
};

timitseg_crf* cuda_handle() {
  timitseg_crf_params p = timitseg_crf_default_params();
  p.num_labels = kC, p.max_duration = kK, p.backend = TIMITSEG_BACKEND_CUDA;
  timitseg_crf* h = nullptr;
  EXPECT_EQ(timitseg_crf_create(&p, &h), TIMITSEG_OK) << timitseg_last_error();
  return h;
}

std::string error_of(int status) { return status == TIMITSEG_OK ? "" : timitseg_last_error(); }

}  // namespace

// One GPU: descriptors that name another device index are refused by code and name the tensor, on the
// zero-copy path's inputs, the general path's, the outputs and bind_params.
TEST(CapiDeviceCuda, ATensorNamingAnotherDeviceIsOneErrorNamingIt) {
  if (!timitseg_has_cuda() || cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int here = cuda::current_device();
  timitseg_crf* h = cuda_handle();
  ASSERT_NE(h, nullptr);
  DeviceBatch b(here);
  ASSERT_EQ(timitseg_crf_nll(h, &b.in, &b.gold, 1.0, &b.nll, nullptr), TIMITSEG_OK) << timitseg_last_error();
  const std::vector<double> want = b.fetch();
  const int other = here + 1;  // a device that holds none of these tensors (it need not exist)
  auto expect_refused = [&](timitseg_crf_batch in, timitseg_crf_gold gold, timitseg_tensor out, const char* name) {
    const int status = timitseg_crf_nll(h, &in, &gold, 1.0, &out, nullptr);
    const std::string msg = error_of(status);
    EXPECT_EQ(status, TIMITSEG_ERR_DEVICE) << name << ": " << msg;
    EXPECT_NE(msg.find(std::string(name) + " is on CUDA device " + std::to_string(other)), std::string::npos) << msg;
    EXPECT_NE(msg.find("runs on CUDA device " + std::to_string(here)), std::string::npos) << msg;
  };
  timitseg_crf_batch in = b.in;
  in.scores.device_index = other;
  expect_refused(in, b.gold, b.nll, "scores");
  in = b.in;
  in.lengths.device_index = other;
  expect_refused(in, b.gold, b.nll, "lengths");
  timitseg_crf_gold gold = b.gold;
  gold.labels.device_index = other;
  expect_refused(b.in, gold, b.nll, "gold.labels");
  timitseg_tensor out = b.nll;
  out.device_index = other;
  expect_refused(b.in, b.gold, out, "nll");
  // bind_params: the parameters' memory on another device
  std::vector<float> A(kC * kC, 0.f), D(kK * kC, 0.f), s(kC, 0.f), e(kC, 0.f);
  DeviceBatch holder(here);
  timitseg_tensor t[4] = {holder.put(A, TIMITSEG_F32, {kC, kC}), holder.put(D, TIMITSEG_F32, {kK, kC}),
                          holder.put(s, TIMITSEG_F32, {kC}), holder.put(e, TIMITSEG_F32, {kC})};
  t[1].device_index = other;
  const int status = timitseg_crf_bind_params(h, &t[0], &t[1], &t[2], &t[3]);
  EXPECT_EQ(status, TIMITSEG_ERR_DEVICE);
  EXPECT_NE(error_of(status).find("parameter duration_bias is on CUDA device"), std::string::npos);
  // nothing was changed by the refusals
  ASSERT_EQ(timitseg_crf_nll(h, &b.in, &b.gold, 1.0, &b.nll, nullptr), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(b.fetch(), want);
  EXPECT_EQ(cuda::current_device(), here);
  timitseg_crf_free(h);
}

// Two GPUs: a handle made on device 1 runs there while the thread's current device is 0 (its
// results equal a handle made on device 0, bitwise), leaves the current device at 0, and refuses
// device 0's tensors.
TEST(CapiDeviceCuda, AHandleRunsOnItsOwnDeviceAndRestoresTheCurrentOne) {
  if (!timitseg_has_cuda() || cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  cuda::set_device(0);
  timitseg_crf* h0 = cuda_handle();
  cuda::set_device(1);
  timitseg_crf* h1 = cuda_handle();
  cuda::set_device(0);
  ASSERT_NE(h0, nullptr);
  ASSERT_NE(h1, nullptr);
  DeviceBatch on0(0), on1(1);
  ASSERT_EQ(timitseg_crf_nll(h0, &on0.in, &on0.gold, 1.0, &on0.nll, nullptr), TIMITSEG_OK) << timitseg_last_error();
  for (int round = 0; round < 2; ++round) {  // the second with the handle's buffers already made
    ASSERT_EQ(timitseg_crf_nll(h1, &on1.in, &on1.gold, 1.0, &on1.nll, nullptr), TIMITSEG_OK)
        << timitseg_last_error();
    EXPECT_EQ(cuda::current_device(), 0);
    EXPECT_EQ(on1.fetch(), on0.fetch());
  }
  const int status = timitseg_crf_nll(h1, &on0.in, &on0.gold, 1.0, &on0.nll, nullptr);
  EXPECT_EQ(status, TIMITSEG_ERR_DEVICE);
  EXPECT_NE(error_of(status).find("scores is on CUDA device 0, the handle's cuda backend runs on CUDA device 1"),
            std::string::npos)
      << error_of(status);
  EXPECT_EQ(cuda::current_device(), 0);
  timitseg_crf_free(h1);
  timitseg_crf_free(h0);
}
