// RUN: gpipe-opt %s --gpipe-convert-elementwise-to-linalg --split-input-file -verify-diagnostics | FileCheck %s

// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[COL:.*]] = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: func @broadcast_add_relu
func.func @broadcast_add_relu(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %c: tensor<4x1xf32>) -> tensor<4x8xf32> {
  // CHECK: %[[E:.*]] = tensor.empty() : tensor<4x8xf32>
  // CHECK: %[[A:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], iterator_types = ["parallel", "parallel"]} ins(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8xf32>) outs(%[[E]] : tensor<4x8xf32>)
  // CHECK: arith.addf
  %0 = nn.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[COL]], #[[ID]]]
  // CHECK: arith.mulf
  %1 = nn.mul %0, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  // CHECK: linalg.generic
  // CHECK: arith.maximumf
  // CHECK-NOT: nn.
  %2 = nn.relu %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func @activations
func.func @activations(%x: tensor<3xf32>) -> tensor<3xf32> {
  // CHECK: math.exp
  // CHECK: arith.divf
  %0 = nn.sigmoid %x : tensor<3xf32>
  // CHECK: math.erf
  %1 = nn.gelu %0 : tensor<3xf32>
  // CHECK: math.tanh
  %2 = nn.gelu %1 {approximate = "tanh"} : tensor<3xf32>
  // CHECK: arith.cmpf oge
  // CHECK: arith.select
  %3 = nn.leaky_relu %2 {alpha = 0.1 : f32} : tensor<3xf32>
  // Inference dropout is the identity.
  // CHECK: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
  // CHECK-NEXT: linalg.yield %[[IN]] : f32
  %4 = nn.dropout %3 {ratio = 0.5 : f32} : tensor<3xf32>
  return %4 : tensor<3xf32>
}

// -----

// CHECK-LABEL: func @casts
func.func @casts(%x: tensor<3xf32>, %i: tensor<3xi64>) -> (tensor<3xi32>, tensor<3xf32>) {
  // CHECK: arith.fptosi %{{.*}} : f32 to i32
  %0 = nn.cast %x : tensor<3xf32> to tensor<3xi32>
  // CHECK: arith.sitofp %{{.*}} : i64 to f32
  // CHECK: math.powf
  %1 = nn.pow %x, %i : (tensor<3xf32>, tensor<3xi64>) -> tensor<3xf32>
  return %0, %1 : tensor<3xi32>, tensor<3xf32>
}

// -----

// Random dropout stays (a runtime kernel); ratio 0 is the identity.
// CHECK-LABEL: func.func @training_dropout
// CHECK: nn.dropout %{{.*}} {training = true}
// CHECK-NOT: nn.dropout
// CHECK: return
func.func @training_dropout(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = nn.dropout %x {ratio = 0.5 : f32, training = true} : tensor<3xf32>
  %1 = nn.dropout %x {ratio = 0.0 : f32, training = true} : tensor<3xf32>
  return %0, %1 : tensor<3xf32>, tensor<3xf32>
}
