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
