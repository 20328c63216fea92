// libFuzzer target: the safetensors reader (st::load). Input: the bytes of a
// .safetensors file.
// Invariants: a rejected file gets an error naming it; an accepted file's
// tensors have byte sizes equal to numel * dtype size, and saving and loading it
// again gives the same tensors and metadata.
#include <cstdint>
#include <exception>
#include <string>

#include "common/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

using namespace timitseg;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("in.safetensors", data, size);
  st::File f;
  try {
    f = st::load(path);
  } catch (const std::exception& e) {
    fuzz::expect_error_names(e, path);
    return 0;
  }
  for (const auto& [name, t] : f.tensors) {
    fuzz::check(t.numel() >= 0, "tensor '" + name + "' with negative numel");
    fuzz::check(t.bytes.size() == static_cast<size_t>(t.numel()) * st::dtype_size(t.dtype),
                "tensor '" + name + "' byte size does not match its shape " + t.shape_str());
  }
  // Round trip through the writer.
  const std::string again = fuzz::scratch_dir() + "/again.safetensors";
  st::save(again, f);
  const st::File g = st::load(again);
  fuzz::check(g.metadata == f.metadata, "metadata changed in a save/load round trip");
  fuzz::check(g.tensors.size() == f.tensors.size(), "tensor count changed in a save/load round trip");
  for (const auto& [name, t] : f.tensors) {
    const st::Tensor& u = g.get(name);
    fuzz::check(u.dtype == t.dtype && u.shape == t.shape && u.bytes == t.bytes,
                "tensor '" + name + "' changed in a save/load round trip");
  }
  return 0;
}
