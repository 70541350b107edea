// RUN: gpipe-opt %s | FileCheck %s
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s

// CHECK: gpipe.parameter @w trainable = dense<1.000000e+00> : tensor<4x4xf32>
gpipe.parameter @w trainable = dense<1.0> : tensor<4x4xf32>
// CHECK: gpipe.parameter @bn.running_mean = dense<0.000000e+00> : tensor<4xf32>
gpipe.parameter @"bn.running_mean" = dense<0.0> : tensor<4xf32>
// CHECK: gpipe.parameter @"__opt.momentum:w" optimizer_state = dense<0.000000e+00> : tensor<4x4xf32>
gpipe.parameter @"__opt.momentum:w" optimizer_state = dense<0.0> : tensor<4x4xf32>
// CHECK: gpipe.parameter @__constant_0 constant = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
gpipe.parameter @__constant_0 constant = dense<[1.0, 2.0]> : tensor<2xf32>

// CHECK-LABEL: func @update
func.func @update(%v: tensor<4x4xf32>) {
  // CHECK: gpipe.assign_parameter @w, %{{.*}} : tensor<4x4xf32>
  gpipe.assign_parameter @w, %v : tensor<4x4xf32>
  return
}

// CHECK-LABEL: func @stages
func.func @stages(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // CHECK: gpipe.stage 0 on "cpu:0" (%{{.*}}) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = gpipe.stage 0 on "cpu:0" (%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%in: tensor<2x4xf32>):
    // CHECK: gpipe.get_parameter @w : tensor<4x4xf32>
    %w = gpipe.get_parameter @w : tensor<4x4xf32>
    %y = nn.matmul %in, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    // CHECK: gpipe.yield %{{.*}} : tensor<2x4xf32>
    gpipe.yield %y : tensor<2x4xf32>
  }
  // CHECK: gpipe.stage 1 on "cpu:1" (%{{.*}}) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  %1 = gpipe.stage 1 on "cpu:1" (%0) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%r: tensor<2x4xf32>):
    %y = nn.relu %r : tensor<2x4xf32>
    gpipe.yield %y : tensor<2x4xf32>
  }
  return %1 : tensor<2x4xf32>
}

// A GPipe (fill-drain) schedule: two stages, two micro-batches.
// CHECK-LABEL: gpipe.schedule stages(2) micro_batches(2)
gpipe.schedule stages(2) micro_batches(2) {
  // CHECK: gpipe.stream 0 on "cpu:0"
  gpipe.stream 0 on "cpu:0" {
    // CHECK: gpipe.forward 0
    gpipe.forward 0
    // CHECK: gpipe.send_activation 0 peer 1
    gpipe.send_activation 0 peer 1
    gpipe.forward 1
    gpipe.send_activation 1 peer 1
    // CHECK: gpipe.recv_gradient 1 peer 1
    gpipe.recv_gradient 1 peer 1
    // CHECK: gpipe.recompute 1
    gpipe.recompute 1
    // CHECK: gpipe.backward 1
    gpipe.backward 1
    gpipe.recv_gradient 0 peer 1
    gpipe.recompute 0
    gpipe.backward 0
    // CHECK: gpipe.optimizer_step
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:1" {
    // CHECK: gpipe.recv_activation 0 peer 0
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0
    gpipe.recv_activation 1 peer 0
    gpipe.forward 1
    gpipe.backward 1
    // CHECK: gpipe.send_gradient 1 peer 0
    gpipe.send_gradient 1 peer 0
    gpipe.backward 0
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

// CHECK-LABEL: func.func @stage
// CHECK: gpipe.parallel_for @body(%{{.*}}) extent 16
func.func @stage(%arena: memref<8xi8>, %params: memref<8xi8>, %ctx: i64) {
  gpipe.parallel_for @body(%ctx) extent 16
  return
}
func.func private @body(%arena: memref<8xi8>, %params: memref<8xi8>, %b: index, %e: index)
