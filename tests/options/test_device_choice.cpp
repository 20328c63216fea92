// The `auto` values of train.device, train.rnn_algo and crf.backend
// (options/device_choice.h), with the machine posed through DeviceFacts: no GPU,
// an H100 (9.0), an A100 (8.0), a future 10.0 part; config validation of the
// three keys; compare's view of saved against requested configs.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "common/cuda.h"
#include "config/config.h"
#include "options/device_choice.h"

using namespace timitseg::model;
using namespace timitseg::config;
using namespace timitseg::options;

namespace {

DeviceFacts no_gpu() {
  DeviceFacts f;
  f.no_gpu_reason = "no CUDA device was found (no NVIDIA GPU or driver on this machine)";
  return f;
}
DeviceFacts gpu(int major, int minor, const std::string& name) {
  DeviceFacts f;
  f.gpus = 1;
  f.cc_major = major;
  f.cc_minor = minor;
  f.gpu_name = name;
  return f;
}

Config autos(int hidden_dim = 128) {
  Config c;
  c.train_device = DeviceSetting::automatic;
  c.train_rnn_algo = RnnAlgo::automatic;
  c.crf_backend = CrfBackendSetting::automatic;
  c.model_hidden_dim = hidden_dim;
  return c;
}

}  // namespace

TEST(DeviceChoice, DeviceAutoIsTheGpuWhenOneIsPresent) {
  EXPECT_EQ(std::string(device_name(choose_device(DeviceSetting::automatic, no_gpu()))), "cpu");
  EXPECT_EQ(std::string(device_name(choose_device(DeviceSetting::automatic, gpu(9, 0, "H100")))), "cuda");
  EXPECT_EQ(std::string(device_name(choose_device(DeviceSetting::automatic, gpu(7, 5, "T4")))), "cuda");
  // explicit values win, whatever the machine
  EXPECT_EQ(std::string(device_name(choose_device(DeviceSetting::cpu, gpu(9, 0, "H100")))), "cpu");
  EXPECT_EQ(std::string(device_name(choose_device(DeviceSetting::cuda, no_gpu()))), "cuda");
}

TEST(DeviceChoice, RnnAlgoAutoIsFusedOnComputeCapability9xOnly) {
  const DeviceFacts h100 = gpu(9, 0, "H100"), a100 = gpu(8, 0, "A100"), next = gpu(10, 0, "B200");
  for (int H : {64, 128, 256}) EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::automatic, Device::cuda, H, h100))), "fused") << H;
  EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::automatic, Device::cuda, 128, gpu(9, 1, "H-next")))), "fused");
  EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::automatic, Device::cuda, 128, a100))), "standard");
  EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::automatic, Device::cuda, 128, next))), "standard");
  // sizes the fused kernel does not have
  for (int H : {8, 32, 96, 512}) EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::automatic, Device::cuda, H, h100))), "standard") << H;
  // the CPU does not use it: standard, even on a machine with an H100
  EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::automatic, Device::cpu, 128, h100))), "standard");
  // explicit values kept
  EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::fused, Device::cuda, 128, a100))), "fused");
  EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::persist_static, Device::cuda, 128, h100))), "persist_static");
  EXPECT_EQ(std::string(to_string(choose_rnn_algo(RnnAlgo::standard, Device::cuda, 128, h100))), "standard");
}

TEST(DeviceChoice, CrfBackendAutoFollowsTheDevice) {
  EXPECT_EQ(std::string(timitseg::crf::to_string(choose_crf_backend(CrfBackendSetting::automatic, Device::cuda))), "cuda");
  EXPECT_EQ(std::string(timitseg::crf::to_string(choose_crf_backend(CrfBackendSetting::automatic, Device::cpu))), "cpu");
  EXPECT_EQ(std::string(timitseg::crf::to_string(choose_crf_backend(CrfBackendSetting::reference, Device::cuda))), "reference");
  EXPECT_EQ(std::string(timitseg::crf::to_string(choose_crf_backend(CrfBackendSetting::cpu, Device::cuda))), "cpu");
}

TEST(DeviceChoice, ChooseAllResolvesEachAutoWithOnePickLine) {
  const DeviceChoice h = choose_all(autos(), gpu(9, 0, "NVIDIA H100 80GB HBM3"));
  EXPECT_EQ(std::string(device_name(h.device)), "cuda");
  EXPECT_EQ(std::string(to_string(h.rnn_algo)), "fused");
  EXPECT_EQ(std::string(timitseg::crf::to_string(h.crf_backend)), "cuda");
  ASSERT_EQ(h.picks.size(), 3u);
  EXPECT_EQ(h.picks[0], "train.device = auto: cuda (NVIDIA H100 80GB HBM3)");
  EXPECT_EQ(h.picks[1], "train.rnn_algo = auto: fused (the own Hopper kernel: compute capability 9.0)");
  EXPECT_EQ(h.picks[2], "crf.backend = auto: cuda (on the GPU)");

  const DeviceChoice c = choose_all(autos(), no_gpu());
  EXPECT_EQ(std::string(device_name(c.device)), "cpu");
  EXPECT_EQ(std::string(to_string(c.rnn_algo)), "standard");
  EXPECT_EQ(std::string(timitseg::crf::to_string(c.crf_backend)), "cpu");
  ASSERT_EQ(c.picks.size(), 3u);
  EXPECT_EQ(c.picks[0], "train.device = auto: cpu (no CUDA device was found (no NVIDIA GPU or driver on this machine))");

  const DeviceChoice a = choose_all(autos(), gpu(8, 0, "A100"));
  EXPECT_EQ(std::string(to_string(a.rnn_algo)), "standard");
  EXPECT_NE(a.picks[1].find("compute capability 8.0, the fused kernel needs 9.x"), std::string::npos) << a.picks[1];
  const DeviceChoice wide = choose_all(autos(1024), gpu(9, 0, "H100"));  // 512 units per direction
  EXPECT_EQ(std::string(to_string(wide.rnn_algo)), "standard");
  EXPECT_NE(wide.picks[1].find("512 units per direction"), std::string::npos) << wide.picks[1];

  // explicit values: kept, nothing to log
  Config e;
  e.train_device = DeviceSetting::cpu;
  e.train_rnn_algo = RnnAlgo::standard;
  e.crf_backend = CrfBackendSetting::reference;
  const DeviceChoice x = choose_all(e, gpu(9, 0, "H100"));
  EXPECT_EQ(std::string(device_name(x.device)), "cpu");
  EXPECT_EQ(std::string(timitseg::crf::to_string(x.crf_backend)), "reference");
  EXPECT_TRUE(x.picks.empty());
  // evaluate --device cpu on a GPU machine: the override decides, auto backend follows it
  const DeviceChoice o = choose_all(autos(), gpu(9, 0, "H100"), DeviceSetting::cpu);
  EXPECT_EQ(std::string(device_name(o.device)), "cpu");
  EXPECT_EQ(std::string(timitseg::crf::to_string(o.crf_backend)), "cpu");
  EXPECT_EQ(std::string(to_string(o.rnn_algo)), "standard");
}

TEST(DeviceChoice, ConfigAcceptsAutoAndRejectsOtherNames) {
  const Config c = Config::load("", {"train.device=auto", "train.rnn_algo=auto", "crf.backend=auto"});
  EXPECT_EQ(c.train_device, DeviceSetting::automatic);
  EXPECT_EQ(c.train_rnn_algo, RnnAlgo::automatic);
  EXPECT_EQ(c.crf_backend, CrfBackendSetting::automatic);
  auto error = [](const std::string& set) {
    try {
      Config::load("", {set});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error("crf.backend=gpu"),
            "--set crf.backend=gpu: 'crf.backend' = gpu is out of range: one of reference, cpu, cuda, auto");
  EXPECT_EQ(error("train.rnn_algo=fast"), "--set train.rnn_algo=fast: 'train.rnn_algo' = fast is out of range: one "
                                          "of standard, persist_static, persist_dynamic, fused, auto");
  EXPECT_EQ(error("train.device=gpu"),
            "--set train.device=gpu: 'train.device' = gpu is out of range: one of cpu, cuda, auto");
  // the shipped configs say auto for the three keys
  for (const char* f : {"configs/synth.yaml", "configs/timit.yaml"}) {
    const Config s = Config::load(std::string(TIMITSEG_SOURCE_DIR) + "/" + f, {});
    EXPECT_EQ(s.train_device, DeviceSetting::automatic) << f;
    EXPECT_EQ(s.train_rnn_algo, RnnAlgo::automatic) << f;
    EXPECT_EQ(s.crf_backend, CrfBackendSetting::automatic) << f;
  }
}

TEST(DeviceChoice, SettingsAndResolvedKindsMapOneToOne) {
  using timitseg::crf::BackendKind;
  // an explicit crf.backend names one kind, and the kind names that setting back
  const struct {
    CrfBackendSetting setting;
    BackendKind kind;
  } pairs[] = {{CrfBackendSetting::reference, BackendKind::reference},
               {CrfBackendSetting::cpu, BackendKind::cpu},
               {CrfBackendSetting::cuda, BackendKind::cuda}};
  for (const auto& p : pairs) {
    EXPECT_EQ(backend_kind(p.setting), p.kind);
    EXPECT_EQ(backend_setting(p.kind), p.setting);
    // the words agree: the config's word of the setting is the backend's name
    EXPECT_EQ(std::string(to_string(p.setting)), std::string(timitseg::crf::to_string(p.kind)));
  }
  EXPECT_THROW(backend_kind(CrfBackendSetting::automatic), std::logic_error);  // auto is chosen first
  EXPECT_EQ(device_setting(Device::cpu), DeviceSetting::cpu);
  EXPECT_EQ(device_setting(Device::cuda), DeviceSetting::cuda);
  EXPECT_EQ(std::string(device_name(Device::cuda)), std::string(to_string(DeviceSetting::cuda)));
  EXPECT_EQ(std::string(device_name(Device::cpu)), std::string(to_string(DeviceSetting::cpu)));
}

TEST(DeviceChoice, CompareSeesAutoAsItsPickOnThisMachine) {
  // a run saved with `auto` against a request for the explicit values `auto` picks: no difference
  const Config saved = autos();
  Config asked = autos();
  asked.train_device = DeviceSetting::cpu;
  asked.train_rnn_algo = RnnAlgo::standard;
  asked.crf_backend = CrfBackendSetting::cpu;
  const Config s1 = with_choices(saved, no_gpu()), a1 = with_choices(asked, no_gpu());
  EXPECT_EQ(s1.to_json(), a1.to_json());
  // on an H100 the same pair differs (auto means cuda / fused / cuda there)
  const Config s2 = with_choices(saved, gpu(9, 0, "H100")), a2 = with_choices(asked, gpu(9, 0, "H100"));
  EXPECT_EQ(s2.train_device, DeviceSetting::cuda);
  EXPECT_EQ(s2.train_rnn_algo, RnnAlgo::fused);
  EXPECT_EQ(s2.crf_backend, CrfBackendSetting::cuda);
  EXPECT_NE(s2.to_json(), a2.to_json());
  // other keys untouched
  EXPECT_EQ(s2.model_hidden_dim, saved.model_hidden_dim);
}

TEST(DeviceChoice, ResolveOnThisMachine) {
  const bool has_gpu = timitseg::cuda::device_count() > 0;
  const DeviceChoice c = resolve_choices(autos(), /*log=*/false);
  EXPECT_EQ(std::string(device_name(c.device)), has_gpu ? "cuda" : "cpu");
  EXPECT_EQ(std::string(timitseg::crf::to_string(c.crf_backend)), has_gpu ? "cuda" : "cpu");
  if (!has_gpu) {
    EXPECT_EQ(std::string(to_string(c.rnn_algo)), "standard");
    Config e = autos();
    e.train_device = DeviceSetting::cuda;
    try {
      resolve_choices(e, false, std::nullopt, "; use --device cpu");
      FAIL() << "cuda without a GPU was accepted";
    } catch (const std::runtime_error& x) {
      const std::string m = x.what();
      EXPECT_EQ(m.rfind("no CUDA device was found (", 0), 0u) << m;
      EXPECT_NE(m.find("; use --device cpu"), std::string::npos) << m;
    }
  }
}
