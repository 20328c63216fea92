// cuda_capi_overhead: the C API's semi-CRF calls from C++ (no Python, no torch) on
// device buffers, timed as `timitseg bench crf --backend cuda` times the backend,
// for the ratio (a) of bench/python_op_overhead.py: the C API alone over the bare kernels.
//
// Inputs as bench crf's: B utterances of full length T, C labels, durations up to
// K, frame scores x ~ N(0, 3^2) [B][T][C] float32 (the C API centres and sums them:
// that is part of its cost), frame labels in runs of 1..12 frames, parameters
// ~ N(0, 1) bound in place (timitseg_crf_bind_params, as the Python op binds
// them). Timed, each a median over --repeats calls of host wall time after
// --warmup calls, rotating over 3 input sets (bench crf's rule):
//   nll:           timitseg_crf_nll with every gradient (scores and the four
//                  parameters), scale 1/B: synchronous (it returns the status);
//   nll_deferred:  timitseg_crf_nll_deferred then timitseg_crf_check (one wait);
//   log_partition: timitseg_crf_log_partition.
// Prints one JSON object (ms). bench/python_op_overhead.py runs it beside
// `timitseg bench crf` and prints the ratio.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "timitseg.h"

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void check_api(int status, const char* what) {
  if (status != TIMITSEG_OK)
    throw std::runtime_error(std::string(what) + ": " + timitseg_status_name(status) + ": " + timitseg_last_error());
}

// A device buffer of n elements of T, freed with its owner.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) { check_cuda(cudaMalloc(&ptr, n * sizeof(T)), "cudaMalloc"); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : ptr(o.ptr), n(o.n) { o.ptr = nullptr; }
  ~DeviceArray() {
    if (ptr) cudaFree(ptr);
  }
  void upload(const std::vector<T>& h) {
    check_cuda(cudaMemcpy(ptr, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
};

timitseg_tensor tensor(void* data, int32_t dtype, std::initializer_list<int64_t> shape) {
  timitseg_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.device = TIMITSEG_DEVICE_CUDA;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  t.device_index = dev;
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  std::vector<int64_t> s(shape);
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = s[static_cast<size_t>(i)];
    t.strides[i] = stride;
    stride *= s[static_cast<size_t>(i)];
  }
  return t;
}

// One input set: scores x [B][T][C], lengths [B], labels [B][T].
struct InputSet {
  DeviceArray<float> x;
  DeviceArray<int32_t> len, lab;
  InputSet(size_t B, size_t T, size_t C, uint64_t seed) : x(B * T * C), len(B), lab(B * T) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nrm(0.0f, 3.0f);
    std::vector<float> hx(B * T * C);
    for (auto& v : hx) v = nrm(rng);
    std::vector<int32_t> hlen(B, static_cast<int32_t>(T)), hlab(B * T);
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < T;) {
        const size_t r = std::min<size_t>(1 + rng() % 12, T - t);
        const int32_t c = static_cast<int32_t>(rng() % C);
        for (size_t i = 0; i < r; ++i) hlab[b * T + t + i] = c;
        t += r;
      }
    x.upload(hx);
    len.upload(hlen);
    lab.upload(hlab);
  }
};

double median_ms(int warmup, int repeats, const std::function<void(int)>& call) {
  for (int i = 0; i < warmup; ++i) call(i);
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto a = std::chrono::steady_clock::now();
    call(i);
    const auto b = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The C API's semi-CRF calls timed from C++ on device buffers (overhead ratio (a) of docs/python.md); prints JSON (ms)"};
  int B = 32, T = 200, K = 30, C = 39, warmup = 10, repeats = 100;
  app.add_option("-B", B, "Utterances per batch")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("-T", T, "Frames per utterance")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("-K", K, "Longest segment (frames)")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("-C", C, "Labels")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed calls first")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--repeats", repeats, "Timed calls (median)")->check(CLI::Range(1, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (!timitseg_has_cuda()) throw std::runtime_error("this libtimitseg was built without CUDA");
    timitseg_crf_params p = timitseg_crf_default_params();
    p.num_labels = C;
    p.max_duration = K;
    p.backend = TIMITSEG_BACKEND_CUDA;
    timitseg_crf* crf = nullptr;
    check_api(timitseg_crf_create(&p, &crf), "timitseg_crf_create");
    const size_t b = B, t = T, k = K, c = C;
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nrm(0.0f, 1.0f);
    auto randn = [&](size_t n) {
      std::vector<float> v(n);
      for (auto& x : v) x = nrm(rng);
      return v;
    };
    DeviceArray<float> A(c * c), D(k * c), s(c), e(c);
    A.upload(randn(c * c));
    D.upload(randn(k * c));
    s.upload(randn(c));
    e.upload(randn(c));
    const timitseg_tensor tA = tensor(A.ptr, TIMITSEG_F32, {C, C}), tD = tensor(D.ptr, TIMITSEG_F32, {K, C}),
                          ts = tensor(s.ptr, TIMITSEG_F32, {C}), te = tensor(e.ptr, TIMITSEG_F32, {C});
    check_api(timitseg_crf_bind_params(crf, &tA, &tD, &ts, &te), "timitseg_crf_bind_params");
    std::vector<InputSet> sets;
    for (uint64_t i = 0; i < 3; ++i) sets.emplace_back(b, t, c, 100 + i);
    DeviceArray<float> nll(b), logz(b), gx(b * t * c), gA(c * c), gD(k * c), gs(c), ge(c);
    timitseg_tensor tnll = tensor(nll.ptr, TIMITSEG_F32, {B}), tlogz = tensor(logz.ptr, TIMITSEG_F32, {B});
    timitseg_crf_grads grads{};
    grads.scores = tensor(gx.ptr, TIMITSEG_F32, {B, T, C});
    grads.transition = tensor(gA.ptr, TIMITSEG_F32, {C, C});
    grads.duration_bias = tensor(gD.ptr, TIMITSEG_F32, {K, C});
    grads.start = tensor(gs.ptr, TIMITSEG_F32, {C});
    grads.end = tensor(ge.ptr, TIMITSEG_F32, {C});
    auto batch_of = [&](InputSet& in) {
      timitseg_crf_batch bt{};
      bt.scores = tensor(in.x.ptr, TIMITSEG_F32, {B, T, C});
      bt.lengths = tensor(in.len.ptr, TIMITSEG_I32, {B});
      return bt;
    };
    auto gold_of = [&](InputSet& in) {
      timitseg_crf_gold g{};
      g.labels = tensor(in.lab.ptr, TIMITSEG_I32, {B, T});
      return g;
    };
    const double scale = 1.0 / B;
    const double t_nll = median_ms(warmup, repeats, [&](int i) {
      InputSet& in = sets[static_cast<size_t>(i) % sets.size()];
      const timitseg_crf_batch bt = batch_of(in);
      const timitseg_crf_gold g = gold_of(in);
      check_api(timitseg_crf_nll(crf, &bt, &g, scale, &tnll, &grads), "timitseg_crf_nll");
    });
    const double t_deferred = median_ms(warmup, repeats, [&](int i) {
      InputSet& in = sets[static_cast<size_t>(i) % sets.size()];
      const timitseg_crf_batch bt = batch_of(in);
      const timitseg_crf_gold g = gold_of(in);
      uint64_t ticket = 0;
      check_api(timitseg_crf_nll_deferred(crf, &bt, &g, scale, &tnll, &grads, &ticket), "timitseg_crf_nll_deferred");
      check_api(timitseg_crf_check(crf, ticket, nullptr), "timitseg_crf_check");
    });
    const double t_logz = median_ms(warmup, repeats, [&](int i) {
      InputSet& in = sets[static_cast<size_t>(i) % sets.size()];
      const timitseg_crf_batch bt = batch_of(in);
      check_api(timitseg_crf_log_partition(crf, &bt, &tlogz), "timitseg_crf_log_partition");
    });
    timitseg_crf_free(crf);
    cudaDeviceProp prop{};
    int dev = 0;
    check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
    check_cuda(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    std::printf(
        "{\"device\": \"%s\", \"B\": %d, \"T\": %d, \"K\": %d, \"C\": %d, \"repeats\": %d, \"timings_ms\": "
        "{\"nll\": %.6f, \"nll_deferred\": %.6f, \"log_partition\": %.6f}}\n",
        prop.name, B, T, K, C, repeats, t_nll, t_deferred, t_logz);
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "error: %s\n", ex.what());
    return 1;
  }
}
