// RUN: gpipe-opt %s --gpipe-set-inference-mode | FileCheck %s

// CHECK-LABEL: func @modes
func.func @modes(%x: tensor<2x3x4x4xf32>, %c: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  // CHECK: nn.batch_norm
  // CHECK-NOT: training
  // CHECK-SAME: -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %0:3 = nn.batch_norm %x, %c, %c, %c, %c {training = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  // CHECK: nn.dropout %{{.*}} {ratio = 2.500000e-01 : f32} : tensor<2x3x4x4xf32>
  %1 = nn.dropout %0#0 {ratio = 0.25 : f32, training = true} : tensor<2x3x4x4xf32>
  return %1 : tensor<2x3x4x4xf32>
}

// Attention's dropout on its weights is off too.
// CHECK-LABEL: func @attention
// CHECK: nn.attention %arg0, %arg0, %arg0 {scale = 5.000000e-01 : f32, stream = 2 : i64} :
func.func @attention(%q: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0:2 = nn.attention %q, %q, %q {dropout_ratio = 0.1 : f32, scale = 0.5 : f32, stream = 2 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3xf32>)
  return %0#0 : tensor<2x3x4xf32>
}
