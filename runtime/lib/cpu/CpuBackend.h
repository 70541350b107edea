// The CPU backend: host memory, stage code as a native shared library,
// heavy ops on oneDNN, copies and accumulation split over the calling
// thread's OpenMP threads (the device's cores).
#ifndef GPIPE_RUNTIME_CPU_CPUBACKEND_H
#define GPIPE_RUNTIME_CPU_CPUBACKEND_H

#include "DeviceBackend.h"

#include <memory>

namespace gpipe::runtime::cpu {

struct OneDnn;

class CpuBackend : public DeviceBackend {
public:
  explicit CpuBackend(std::string name);
  ~CpuBackend() override;

  const std::string &name() const override { return name_; }
  DeviceBuffer allocate(int64_t bytes) override;
  void copyToDevice(char *dst, const void *src, int64_t bytes) override;
  void copyToHost(void *dst, const char *src, int64_t bytes) override;
  void copyOnDevice(char *dst, const char *src, int64_t bytes) override;
  void accumulate(float *dst, const float *src, int64_t count) override;
  void roundToBf16(char *dst, const char *src, int64_t count) override;
  void widenBf16(char *dst, const char *src, int64_t count) override;
  std::unique_ptr<StageCode> loadCode(const Bundle &bundle,
                                      const StageSpec &stage) override;
  std::unique_ptr<Kernel> createKernel(const KernelSpec &spec,
                                       const KernelMemory &memory) override;
  bool canAccumulate(const KernelSpec &spec) const override;
  void synchronize() override;
  int64_t kernelBytes() const override;

private:
  std::string name_;
  std::unique_ptr<OneDnn> dnn;
};

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_CPUBACKEND_H
