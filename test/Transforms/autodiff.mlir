// RUN: gpipe-opt %s --split-input-file --gpipe-autodiff -verify-diagnostics | FileCheck %s

// A linear layer, ReLU and cross-entropy: the reverse sweep uses each op's
// VJP rule; the bias gradient sums the broadcast rows.
gpipe.parameter @w trainable = dense<0.5> : tensor<3x4xf32>
gpipe.parameter @b trainable = dense<0.1> : tensor<3xf32>
gpipe.parameter @frozen = dense<1.0> : tensor<3xf32>
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32> {gpipe.name = "x"}, %[[L:.*]]: tensor<2xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>}, %[[SEED:.*]]: tensor<f32> {gpipe.name = "loss_grad", gpipe.role = #gpipe.role<loss_grad>})
// CHECK-SAME: -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}, tensor<3x4xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>}, tensor<3xf32> {gpipe.name = "grad:b", gpipe.role = #gpipe.role<param_grad>})
// CHECK: %[[W:.*]] = gpipe.get_parameter @w
// CHECK: %[[Y:.*]] = nn.gemm %[[X]], %[[W]], %{{.*}} {trans_b = true}
// CHECK: %[[R:.*]] = nn.relu %[[Y]]
// CHECK: %[[LOSS:.*]] = nn.softmax_cross_entropy %[[R]], %[[L]]
// CHECK: %[[DR:.*]] = nn.softmax_cross_entropy_grad %[[SEED]], %[[R]], %[[L]]
// CHECK: %[[DY:.*]] = nn.relu_grad %[[DR]], %[[Y]]
// CHECK: %[[DW:.*]] = nn.gemm %[[DY]], %[[X]] {trans_a = true} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[DB:.*]] = nn.reduce_sum %[[DY]] {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<1x3xf32>
// CHECK: %[[DB1:.*]] = nn.reshape %[[DB]] {shape = array<i64: 3>}
// CHECK: return %[[LOSS]], %[[DW]], %[[DB1]]
// CHECK-NOT: @forward(
func.func @forward(%x: tensor<2x4xf32> {gpipe.name = "x"}, %labels: tensor<2xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>}) -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}) {
  %w = gpipe.get_parameter @w : tensor<3x4xf32>
  %b = gpipe.get_parameter @b : tensor<3xf32>
  %y = nn.gemm %x, %w, %b {trans_b = true} : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %r = nn.relu %y : tensor<2x3xf32>
  %loss = nn.softmax_cross_entropy %r, %labels : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Values used twice get their gradients summed; reductions broadcast their
// gradient back.
gpipe.parameter @p trainable = dense<2.0> : tensor<3xf32>
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[P:.*]] = gpipe.get_parameter @p
// CHECK: %[[G1:.*]] = nn.reshape %{{.*}} {shape = array<i64: 1>} : (tensor<f32>) -> tensor<1xf32>
// CHECK: %[[G:.*]] = nn.broadcast %[[G1]] {shape = array<i64: 3>} : (tensor<1xf32>) -> tensor<3xf32>
// CHECK: %[[M:.*]] = nn.mul %[[G]], %[[P]]
// CHECK: %[[N:.*]] = nn.mul %[[G]], %[[P]]
// CHECK: %[[SUM:.*]] = nn.add %[[M]], %[[N]]
// CHECK: return %{{.*}}, %[[SUM]]
func.func @forward() -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}) {
  %p = gpipe.get_parameter @p : tensor<3xf32>
  %sq = nn.mul %p, %p : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %s = nn.reduce_sum %sq {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

gpipe.parameter @q trainable = dense<2.0> : tensor<3xf32>
func.func @forward() -> tensor<f32> {
  %q = gpipe.get_parameter @q : tensor<3xf32>
  // A gradient op is not differentiable itself.
  // expected-error @+1 {{'nn.relu_grad' has no VJP rule yet (autodiff)}}
  %s = nn.relu_grad %q, %q : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %m = nn.reduce_mean %s {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// LayerNorm: one gradient op for input, scale and bias; a matmul with a
// shared 2-D weight: the weight gradient is one gemm over the folded batch.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[W:.*]] = nn.gemm %{{.*}}, %{{.*}} {trans_a = true} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[GI:.*]], %[[GS:.*]], %[[GB:.*]] = nn.layer_norm_grad %{{.*}}, %arg0, %{{.*}} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK: return %{{.*}}, %[[GS]], %[[GB]], %[[W]] : tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4x4xf32>
gpipe.parameter @ln.scale trainable = dense<1.0> : tensor<4xf32>
gpipe.parameter @ln.bias trainable = dense<0.0> : tensor<4xf32>
gpipe.parameter @w trainable = dense<0.5> : tensor<4x4xf32>
func.func @forward(%x: tensor<2x3x4xf32>) -> tensor<f32> {
  %s = gpipe.get_parameter @ln.scale : tensor<4xf32>
  %b = gpipe.get_parameter @ln.bias : tensor<4xf32>
  %w = gpipe.get_parameter @w : tensor<4x4xf32>
  %n = nn.layer_norm %x, %s, %b : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %y = nn.matmul %n, %w : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %m = nn.reduce_mean %y {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// LeakyReLU's gradient is its own op (grad, or alpha * grad where the input
// is not positive, as PyTorch); a float-to-float cast casts the gradient
// back.
gpipe.parameter @lw trainable = dense<0.5> : tensor<4xf64>
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[W:.*]] = gpipe.get_parameter @lw
// CHECK: %[[C:.*]] = nn.cast %[[W]] : tensor<4xf64> to tensor<4xf32>
// CHECK: %[[A:.*]] = nn.add %{{.*}}, %[[C]]
// CHECK: %[[LR:.*]] = nn.leaky_relu %[[A]] {alpha = 2.000000e-01 : f32}
// CHECK: nn.leaky_relu_grad %{{.*}}, %[[A]] {alpha = 2.000000e-01 : f32} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: nn.cast %{{.*}} : tensor<4xf32> to tensor<4xf64>
func.func @forward(%x: tensor<2x4xf32> {gpipe.name = "x"}, %labels: tensor<2xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>}) -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}) {
  %w = gpipe.get_parameter @lw : tensor<4xf64>
  %c = nn.cast %w : tensor<4xf64> to tensor<4xf32>
  %a = nn.add %x, %c : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %r = nn.leaky_relu %a {alpha = 0.2 : f32} : tensor<2x4xf32>
  %loss = nn.softmax_cross_entropy %r, %labels : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Slices that cut a tensor side by side along one axis (an attention's q,
// k and v of its joint projection): their gradients are concatenated, not
// zero-padded to the whole tensor and added. Two of three slices leave the
// rest of the axis zero: one pad of the joined gradients.
gpipe.parameter @qkv trainable = dense<0.5> : tensor<9xf32>
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[J:.*]] = nn.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
// CHECK: %[[K:.*]] = nn.concat %{{.*}}, %[[J]] {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x6xf32>) -> tensor<2x9xf32>
// CHECK-NOT: nn.pad
// CHECK-NOT: nn.add
// CHECK: nn.reduce_sum %[[K]]
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[P:.*]] = nn.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
// CHECK: %[[Z:.*]] = nn.pad %[[P]] {pads = array<i64: 0, 0, 0, 3>} : (tensor<2x6xf32>) -> tensor<2x9xf32>
// CHECK-NOT: nn.add
// CHECK: nn.reduce_sum %[[Z]]
func.func @forward(%x: tensor<2x9xf32> {gpipe.name = "x"}, %labels: tensor<2xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>}) -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}) {
  %w = gpipe.get_parameter @qkv : tensor<9xf32>
  %a = nn.add %x, %w : (tensor<2x9xf32>, tensor<9xf32>) -> tensor<2x9xf32>
  %q = nn.slice %a {starts = array<i64: 0, 0>, ends = array<i64: 2, 3>, steps = array<i64: 1, 1>} : (tensor<2x9xf32>) -> tensor<2x3xf32>
  %k = nn.slice %a {starts = array<i64: 0, 3>, ends = array<i64: 2, 6>, steps = array<i64: 1, 1>} : (tensor<2x9xf32>) -> tensor<2x3xf32>
  %v = nn.slice %a {starts = array<i64: 0, 6>, ends = array<i64: 2, 9>, steps = array<i64: 1, 1>} : (tensor<2x9xf32>) -> tensor<2x3xf32>
  %qk = nn.mul %q, %k : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %o = nn.mul %qk, %v : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %loss = nn.softmax_cross_entropy %o, %labels : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

gpipe.parameter @qk trainable = dense<0.5> : tensor<9xf32>
func.func @forward(%x: tensor<2x9xf32> {gpipe.name = "x"}, %labels: tensor<2xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>}) -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}) {
  %w = gpipe.get_parameter @qk : tensor<9xf32>
  %a = nn.add %x, %w : (tensor<2x9xf32>, tensor<9xf32>) -> tensor<2x9xf32>
  %q = nn.slice %a {starts = array<i64: 0, 0>, ends = array<i64: 2, 3>, steps = array<i64: 1, 1>} : (tensor<2x9xf32>) -> tensor<2x3xf32>
  %k = nn.slice %a {starts = array<i64: 0, 3>, ends = array<i64: 2, 6>, steps = array<i64: 1, 1>} : (tensor<2x9xf32>) -> tensor<2x3xf32>
  %qk = nn.mul %q, %k : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %loss = nn.softmax_cross_entropy %qk, %labels : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A strided slice (PatchMerging's x[:, 1::2]): its gradient spread over the
// step (an axis of 1 padded to 2 and merged: each element then a zero),
// trimmed to the input's extent past the start, then zero-padded back in
// place (the start before it).
gpipe.parameter @sw trainable = dense<0.5> : tensor<5xf32>
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[S:.*]] = nn.slice %{{.*}} {ends = array<i64: 2, 5>, starts = array<i64: 0, 1>, steps = array<i64: 1, 2>} : (tensor<2x5xf32>) -> tensor<2x2xf32>
// CHECK: %[[R:.*]] = nn.reshape %{{.*}} {shape = array<i64: 2, 2, 1>} : (tensor<2x2xf32>) -> tensor<2x2x1xf32>
// CHECK: %[[P:.*]] = nn.pad %[[R]] {pads = array<i64: 0, 0, 0, 0, 0, 1>} : (tensor<2x2x1xf32>) -> tensor<2x2x2xf32>
// CHECK: %[[M:.*]] = nn.reshape %[[P]] {shape = array<i64: 2, 4>} : (tensor<2x2x2xf32>) -> tensor<2x4xf32>
// CHECK: %[[G:.*]] = nn.pad %[[M]] {pads = array<i64: 0, 1, 0, 0>} : (tensor<2x4xf32>) -> tensor<2x5xf32>
func.func @forward(%x: tensor<2x5xf32> {gpipe.name = "x"}, %labels: tensor<2xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>}) -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}) {
  %w = gpipe.get_parameter @sw : tensor<5xf32>
  %a = nn.add %x, %w : (tensor<2x5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  %s = nn.slice %a {starts = array<i64: 0, 1>, ends = array<i64: 2, 5>, steps = array<i64: 1, 2>} : (tensor<2x5xf32>) -> tensor<2x2xf32>
  %loss = nn.softmax_cross_entropy %s, %labels : (tensor<2x2xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
