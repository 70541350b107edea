#include "gpipe/runtime/Tensor.h"
#include "gpipe/runtime/Bundle.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace gpipe::runtime;

namespace {
/// A tensor of `shape` whose elements are distinct random int64 values.
HostTensor randomInts(std::vector<int64_t> shape, unsigned seed) {
  HostTensor t;
  t.dtype = DType::I64;
  t.shape = std::move(shape);
  t.data.resize(t.numElements() * sizeof(int64_t));
  std::mt19937_64 rng(seed);
  auto *v = reinterpret_cast<int64_t *>(t.data.data());
  for (int64_t i = 0; i < t.numElements(); ++i)
    v[i] = static_cast<int64_t>(rng() >> 1);
  return t;
}

int64_t at(const HostTensor &t, const std::vector<int64_t> &index) {
  int64_t flat = 0;
  for (size_t i = 0; i < index.size(); ++i)
    flat = flat * t.shape[i] + index[i];
  return reinterpret_cast<const int64_t *>(t.data.data())[flat];
}
} // namespace

// A sequence-first array [T, N, E] (and [T, N]) with its samples moved
// first: element [n, t, e] of the result is [t, n, e] of the array, for
// every index.
TEST(HostTensors, MoveAxisToFront) {
  for (int64_t axis : {1, 2}) {
    HostTensor t = randomInts({3, 5, 4}, 7 + axis);
    HostTensor m = moveAxisToFront(t, axis);
    std::vector<int64_t> want = t.shape;
    want.erase(want.begin() + axis);
    want.insert(want.begin(), t.shape[axis]);
    ASSERT_EQ(m.shape, want);
    ASSERT_EQ(m.dtype, t.dtype);
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 5; ++b)
        for (int64_t c = 0; c < 4; ++c) {
          std::vector<int64_t> from{a, b, c}, to(from);
          to.erase(to.begin() + axis);
          to.insert(to.begin(), from[axis]);
          ASSERT_EQ(at(m, to), at(t, from)) << "axis " << axis;
        }
  }
  HostTensor tokens = randomInts({6, 2}, 3);
  HostTensor moved = moveAxisToFront(tokens, 1);
  ASSERT_EQ(moved.shape, (std::vector<int64_t>{2, 6}));
  for (int64_t s = 0; s < 6; ++s)
    for (int64_t n = 0; n < 2; ++n)
      EXPECT_EQ(at(moved, {n, s}), at(tokens, {s, n}));
  // Axis 0: the same tensor.
  HostTensor same = moveAxisToFront(tokens, 0);
  EXPECT_EQ(same.shape, tokens.shape);
  EXPECT_EQ(same.data, tokens.data);
}

// The shape a user's array has for an input whose samples are on axis 1
// of the model's layout: the slot's (batch-first) with the samples there.
TEST(HostTensors, DataShapeOfASequenceFirstInput) {
  TensorSlot slot;
  slot.shape = {4, 12, 32};
  EXPECT_EQ(slot.dataShape(9), (std::vector<int64_t>{9, 12, 32}));
  slot.dataBatchAxis = 1;
  EXPECT_EQ(slot.dataShape(9), (std::vector<int64_t>{12, 9, 32}));
  slot.dataBatchAxis = 2;
  EXPECT_EQ(slot.dataShape(9), (std::vector<int64_t>{12, 32, 9}));
}
