// RUN: gpipe-opt %s --split-input-file --gpipe-append-loss -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<4x3xf32> {gpipe.name = "x"}, %[[L:.*]]: tensor<4xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>})
// CHECK-SAME: -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}, tensor<4x3xf32> {gpipe.name = "logits", gpipe.role = #gpipe.role<output>})
// CHECK: %[[LOSS:.*]] = nn.softmax_cross_entropy %[[X]], %[[L]] : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
// CHECK: return %[[LOSS]], %[[X]]
func.func @forward(%x: tensor<4x3xf32> {gpipe.name = "x"}) -> (tensor<4x3xf32> {gpipe.name = "logits", gpipe.role = #gpipe.role<output>}) {
  return %x : tensor<4x3xf32>
}

// -----

// expected-error @+1 {{--loss=cross-entropy needs a model with one output (the logits), this one has 2}}
func.func @forward(%x: tensor<2xf32>, %s: tensor<f32>) -> (tensor<2xf32>, tensor<f32>) {
  return %x, %s : tensor<2xf32>, tensor<f32>
}

// -----

// expected-error @+1 {{--loss=cross-entropy needs float logits with the classes on the last axis ([N, C] or [B, T, V]), the model returns 'tensor<2xf32>'}}
func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
