// RUN: gpipe-opt %s --split-input-file --gpipe-mark-batch-placement | FileCheck %s

// A language model's logits [B, T, V] (batch 4) viewed as [B * T, V]: axis
// 0, T = 3 rows per sample; time-major [T, B, V] after a transpose: axis 1;
// time-major flattened [T * B, V]: axis 0, one row per sample; a scalar
// loss and a mean over the batch carry no batch; an embedding lookup keeps
// the indices' batch; a reduction over another axis shifts it.
// CHECK-LABEL: func @forward
// CHECK-SAME: -> (tensor<12x5xf32> {gpipe.batch = array<i64: 0, 3>}, tensor<3x4x5xf32> {gpipe.batch = array<i64: 1, 1>}, tensor<12x5xf32> {gpipe.batch = array<i64: 0, 1>}, tensor<1x3x5xf32>, tensor<4x5xf32> {gpipe.batch = array<i64: 0, 1>})
func.func @forward(%ids: tensor<4x3xi64>, %table: tensor<7x5xf32>) -> (tensor<12x5xf32>, tensor<3x4x5xf32>, tensor<12x5xf32>, tensor<1x3x5xf32>, tensor<4x5xf32>) {
  %e = nn.gather %table, %ids {axis = 0 : i64} : (tensor<7x5xf32>, tensor<4x3xi64>) -> tensor<4x3x5xf32>
  %h = nn.tanh %e : tensor<4x3x5xf32>
  %flat = nn.reshape %h {shape = array<i64: 12, 5>} : (tensor<4x3x5xf32>) -> tensor<12x5xf32>
  %tm = nn.transpose %h {perm = array<i64: 1, 0, 2>} : (tensor<4x3x5xf32>) -> tensor<3x4x5xf32>
  %tmflat = nn.reshape %tm {shape = array<i64: 12, 5>} : (tensor<3x4x5xf32>) -> tensor<12x5xf32>
  %mean = nn.reduce_mean %h {axes = array<i64: 0>, keepdims = true} : (tensor<4x3x5xf32>) -> tensor<1x3x5xf32>
  %pooled = nn.reduce_sum %h {axes = array<i64: 1>, keepdims = false} : (tensor<4x3x5xf32>) -> tensor<4x5xf32>
  return %flat, %tm, %tmflat, %mean, %pooled : tensor<12x5xf32>, tensor<3x4x5xf32>, tensor<12x5xf32>, tensor<1x3x5xf32>, tensor<4x5xf32>
}

// -----

// A reshape that splits the batch over two dimensions loses it.
// CHECK-LABEL: func @forward
// CHECK-NOT: gpipe.batch
func.func @forward(%x: tensor<4x6xf32>) -> tensor<2x12xf32> {
  %r = nn.reshape %x {shape = array<i64: 2, 12>} : (tensor<4x6xf32>) -> tensor<2x12xf32>
  return %r : tensor<2x12xf32>
}
