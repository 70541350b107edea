// RUN: gpipe-opt %s --gpipe-append-loss='class-axis=1' | FileCheck %s
// RUN: not gpipe-opt %s --gpipe-append-loss='class-axis=4' 2>&1 | FileCheck %s --check-prefix=AXIS
// Segmentation logits [N, C, H, W] with the classes on axis 1 (as
// F.cross_entropy reads them): labels [N, H, W]; the logits transposed to
// put the classes last, then one row per pixel.

// AXIS: error: --class-axis=4 is not an axis of the logits 'tensor<2x3x4x5xf32>' after the batch (1 to rank - 1, or -1 for the last)

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4x5xf32> {gpipe.name = "x"}, %[[L:.*]]: tensor<2x4x5xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>})
// CHECK: %[[T:.*]] = nn.transpose %[[X]] {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x3x4x5xf32>) -> tensor<2x4x5x3xf32>
// CHECK: %[[ROWS:.*]] = nn.reshape %[[T]] {shape = array<i64: 40, 3>}
// CHECK: %[[LABELS:.*]] = nn.reshape %[[L]] {shape = array<i64: 40>}
// CHECK: %[[LOSS:.*]] = nn.softmax_cross_entropy %[[ROWS]], %[[LABELS]] : (tensor<40x3xf32>, tensor<40xi64>) -> tensor<f32>
// CHECK: return %[[LOSS]], %[[X]]
func.func @forward(%x: tensor<2x3x4x5xf32> {gpipe.name = "x"}) -> (tensor<2x3x4x5xf32> {gpipe.name = "logits", gpipe.role = #gpipe.role<output>}) {
  return %x : tensor<2x3x4x5xf32>
}

