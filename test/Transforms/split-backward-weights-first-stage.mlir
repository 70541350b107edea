// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-split-forward-backward --gpipe-split-backward-weights | FileCheck %s

// The first stage (or a single one) has no input gradients: B is empty
// and returns nothing, W computes every gradient.

// CHECK-LABEL: func.func @backward_input
// CHECK-NOT: ->
// CHECK-SAME: {
// CHECK-NEXT: return
// CHECK-NEXT: }
// CHECK-LABEL: func.func @backward_weight
// CHECK-SAME: loss_grad
// CHECK-SAME: -> (tensor<4x3xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>})
// CHECK: nn.relu_grad
// CHECK: nn.gemm {{.*}} {trans_a = true}

gpipe.parameter @w trainable = dense<0.5> : tensor<4x3xf32>
func.func @forward(%x: tensor<2x3xf32> {gpipe.name = "x"}) -> tensor<f32> {
  %w = gpipe.get_parameter @w : tensor<4x3xf32>
  %h = nn.gemm %x, %w {trans_b = true} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %r = nn.relu %h : tensor<2x4xf32>
  %m = nn.reduce_mean %r {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  return %m : tensor<f32>
}
