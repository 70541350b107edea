// RUN: gpipe-opt %s --split-input-file --gpipe-append-loss | FileCheck %s
// Labels are a data input the phases take batch-first, [b, ...] with each
// sample's labels in the order of its positions. Logits that hold the
// batch elsewhere (a sequence-first model's [T, b, V], or its [T * b, V]
// view) get their labels moved to that order, and the module records where
// the samples are in the arrays a user gives ([T, N]).

// CHECK: module attributes {gpipe.data_batch_axes = {labels = 1 : i64, src = 1 : i64}}
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x5xf32> {gpipe.name = "src"}, %[[L:[a-z0-9]+]]: tensor<2x3xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>})
// CHECK: %[[OUT:.*]] = nn.transpose %[[X]] {perm = array<i64: 1, 0, 2>}
// CHECK: %[[LT:.*]] = nn.transpose %[[L]] {perm = array<i64: 1, 0>} : (tensor<2x3xi64>) -> tensor<3x2xi64>
// CHECK: %[[ROWS:.*]] = nn.reshape %[[OUT]] {shape = array<i64: 6, 5>}
// CHECK: %[[LABELS:.*]] = nn.reshape %[[LT]] {shape = array<i64: 6>}
// CHECK: nn.softmax_cross_entropy %[[ROWS]], %[[LABELS]]
module attributes {gpipe.data_batch_axes = {src = 1 : i64}} {
  func.func @forward(%x: tensor<2x3x5xf32> {gpipe.name = "src"}) -> (tensor<3x2x5xf32> {gpipe.name = "logits"}) {
    %t = nn.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x5xf32>) -> tensor<3x2x5xf32>
    return %t : tensor<3x2x5xf32>
  }
}

// -----

// [T * b, V]: the batch inside the rows, T outside it.
// CHECK: module attributes {gpipe.data_batch_axes = {labels = 1 : i64}}
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[L:[a-z0-9]+]]: tensor<2x3xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>})
// CHECK: %[[LT:.*]] = nn.transpose %[[L]] {perm = array<i64: 1, 0>} : (tensor<2x3xi64>) -> tensor<3x2xi64>
// CHECK: %[[LABELS:.*]] = nn.reshape %[[LT]] {shape = array<i64: 6>}
// CHECK: nn.softmax_cross_entropy %{{.*}}, %[[LABELS]] : (tensor<6x5xf32>, tensor<6xi64>)
module {
  func.func @forward(%x: tensor<2x3x5xf32> {gpipe.name = "src"}) -> (tensor<6x5xf32> {gpipe.name = "logits"}) {
    %t = nn.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x5xf32>) -> tensor<3x2x5xf32>
    %r = nn.reshape %t {shape = array<i64: 6, 5>} : (tensor<3x2x5xf32>) -> tensor<6x5xf32>
    return %r : tensor<6x5xf32>
  }
}

// -----

// Batch-first [b * T, V] logits keep their labels [b * T] as before (the
// runtime reads them from [N, T] arrays).
// CHECK-NOT: data_batch_axes
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %{{.*}}: tensor<6xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>})
module {
  func.func @forward(%x: tensor<2x3x5xf32> {gpipe.name = "src"}) -> (tensor<6x5xf32> {gpipe.name = "logits"}) {
    %r = nn.reshape %x {shape = array<i64: 6, 5>} : (tensor<2x3x5xf32>) -> tensor<6x5xf32>
    return %r : tensor<6x5xf32>
  }
}
