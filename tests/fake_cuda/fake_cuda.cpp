// A CUDA device that does nothing, for the simulated-CUDA tests (tests/fake_cuda/): with it, a CPU-only build of
// PyTorch runs FakeTensorMode's "cuda" tensors through indexing and autograd, which otherwise stop at "PyTorch is not
// linked with support for cuda devices" (no device guard) and "Cannot access accelerator device when none is
// available" (no CUDA hooks). Fake tensors hold no memory, so nothing here allocates, copies or launches anything.
//
// preload.py builds this file with torch.utils.cpp_extension (as modeling_ndr builds its CPU kernel) and loads it
// before torch is imported: PyTorch looks its CUDA hooks up once, while it is imported. Never load it into a process
// with a CUDA build of PyTorch, nor into one that runs real work: it tells PyTorch that a CUDA device exists.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {

// One device, index 0, with one stream; switching devices or streams changes nothing.
struct NoCudaGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  c10::Device exchangeDevice(c10::Device) const override { return getDevice(); }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::CUDA, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device device) const override { return c10::Stream(c10::Stream::DEFAULT, device); }
  c10::Stream exchangeStream(c10::Stream stream) const override { return stream; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};

// What the autograd engine asks before it runs a backward on CUDA tensors: that CUDA is built and has one device.
// Everything else keeps the CPU build's answers (it raises "Cannot ... without ATen_cuda library").
struct NoCudaHooks final : at::CUDAHooksInterface {
  explicit NoCudaHooks(at::CUDAHooksArgs) {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return false; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  int getNumGPUs() const override { return 1; }
};

C10_REGISTER_GUARD_IMPL(CUDA, NoCudaGuard);

}  // namespace

namespace at {
// registered under the name PyTorch's own CUDA library uses, so that at::detail::getCUDAHooks() finds it
C10_REGISTER_CLASS(CUDAHooksRegistry, CUDAHooks, NoCudaHooks);
}  // namespace at
