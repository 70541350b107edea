// A kernel table entry over one arena, built as the bundle loader builds
// it (each tensor at the next 64-byte boundary): what the kernel tests of
// this folder run kernels on.
#ifndef GPIPE_TEST_RUNTIME_KERNELSPECBUILDER_H
#define GPIPE_TEST_RUNTIME_KERNELSPECBUILDER_H

#include "gpipe/common/KernelKind.h"
#include "gpipe/runtime/Bundle.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace gpipe::runtime::test {

/// `Self` is the builder's user (its methods chain on it).
template <class Self> class KernelSpecBuilder {
public:
  explicit KernelSpecBuilder(const std::string &kind) {
    spec.kind = kind;
    spec.contract = gpipe::findKernelKind(kind);
    EXPECT_NE(spec.contract, nullptr) << kind;
  }
  Self &operand(const std::string &name, std::vector<int64_t> shape,
                DType dtype = DType::F32) {
    spec.operands.push_back(slot(name, std::move(shape), dtype));
    return static_cast<Self &>(*this);
  }
  Self &result(const std::string &name, std::vector<int64_t> shape) {
    spec.results.push_back(slot(name, std::move(shape), DType::F32));
    return static_cast<Self &>(*this);
  }
  Self &number(const std::string &key, std::vector<double> value) {
    spec.numbers[key] = std::move(value);
    return static_cast<Self &>(*this);
  }
  Self &text(const std::string &key, std::string value) {
    spec.strings[key] = std::move(value);
    return static_cast<Self &>(*this);
  }
  /// Bytes of the arena the tensors so far need.
  int64_t arenaBytes() const { return size; }

  KernelSpec spec;

private:
  TensorSlot slot(const std::string &name, std::vector<int64_t> shape,
                  DType dtype) {
    TensorSlot t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.offset = size;
    size += (t.byteSize() + 63) / 64 * 64;
    return t;
  }
  int64_t size = 0;
};

/// The builder on its own.
class KernelCase : public KernelSpecBuilder<KernelCase> {
public:
  using KernelSpecBuilder::KernelSpecBuilder;
};

} // namespace gpipe::runtime::test

#endif // GPIPE_TEST_RUNTIME_KERNELSPECBUILDER_H
