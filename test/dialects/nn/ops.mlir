// RUN: gpipe-opt %s | FileCheck %s
// Round trip: printing then parsing again gives the same IR.
// RUN: gpipe-opt %s | gpipe-opt | FileCheck %s

// CHECK-LABEL: func @elementwise
func.func @elementwise(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %i: tensor<2x3xi64>) -> tensor<2x3xf32> {
  // CHECK: nn.relu %{{.*}} : tensor<2x3xf32>
  %0 = nn.relu %x : tensor<2x3xf32>
  // CHECK: nn.leaky_relu %{{.*}} {alpha = 2.000000e-01 : f32} : tensor<2x3xf32>
  %1 = nn.leaky_relu %0 {alpha = 0.2 : f32} : tensor<2x3xf32>
  // CHECK: nn.sigmoid
  %2 = nn.sigmoid %1 : tensor<2x3xf32>
  // CHECK: nn.tanh
  %3 = nn.tanh %2 : tensor<2x3xf32>
  // CHECK: nn.erf
  %4 = nn.erf %3 : tensor<2x3xf32>
  // CHECK: nn.sqrt
  %5 = nn.sqrt %4 : tensor<2x3xf32>
  // CHECK: nn.gelu %{{.*}} {approximate = "tanh"}
  %6 = nn.gelu %5 {approximate = "tanh"} : tensor<2x3xf32>
  // CHECK: nn.dropout %{{.*}} {ratio = 1.000000e-01 : f32, training = true}
  %7 = nn.dropout %6 {ratio = 0.1 : f32, training = true} : tensor<2x3xf32>
  // CHECK: nn.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %8 = nn.add %7, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.sub
  %9 = nn.sub %8, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.mul
  %10 = nn.mul %9, %9 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.div
  %11 = nn.div %10, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.pow %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  %12 = nn.pow %11, %i : (tensor<2x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  // CHECK: nn.cast %{{.*}} : tensor<2x3xf32> to tensor<2x3xf16>
  %13 = nn.cast %12 : tensor<2x3xf32> to tensor<2x3xf16>
  return %12 : tensor<2x3xf32>
}

// CHECK-LABEL: func @linear
func.func @linear(%a: tensor<8x16xf32>, %w: tensor<4x16xf32>, %b: tensor<4xf32>,
                  %l: tensor<2x3x5x16xf32>, %r: tensor<3x16x7xf32>) -> (tensor<8x4xf32>, tensor<2x3x5x7xf32>) {
  // CHECK: nn.gemm %{{.*}}, %{{.*}}, %{{.*}} {trans_b = true} : (tensor<8x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %0 = nn.gemm %a, %w, %b {trans_b = true} : (tensor<8x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  // CHECK: nn.gemm %{{.*}}, %{{.*}} {
  %1 = nn.gemm %a, %w {alpha = 2.0 : f32, trans_b = true} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
  // CHECK: nn.matmul {{.*}} -> tensor<2x3x5x7xf32>
  %2 = nn.matmul %l, %r : (tensor<2x3x5x16xf32>, tensor<3x16x7xf32>) -> tensor<2x3x5x7xf32>
  return %0, %2 : tensor<8x4xf32>, tensor<2x3x5x7xf32>
}

// CHECK-LABEL: func @conv_and_pool
func.func @conv_and_pool(%x: tensor<2x4x9x9xf32>, %w: tensor<8x2x3x3xf32>, %b: tensor<8xf32>) -> tensor<2x8x1x1xf32> {
  // CHECK: nn.conv {{.*}} -> tensor<2x8x5x5xf32>
  %0 = nn.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64}
      : (tensor<2x4x9x9xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>) -> tensor<2x8x5x5xf32>
  // CHECK: nn.max_pool {{.*}} -> tensor<2x8x3x3xf32>
  %1 = nn.max_pool %0 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true}
      : (tensor<2x8x5x5xf32>) -> tensor<2x8x3x3xf32>
  // CHECK: nn.avg_pool {{.*}} -> tensor<2x8x2x2xf32>
  %2 = nn.avg_pool %1 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, count_include_pad = true}
      : (tensor<2x8x3x3xf32>) -> tensor<2x8x2x2xf32>
  // CHECK: nn.global_avg_pool {{.*}} -> tensor<2x8x1x1xf32>
  %3 = nn.global_avg_pool %2 : (tensor<2x8x2x2xf32>) -> tensor<2x8x1x1xf32>
  return %3 : tensor<2x8x1x1xf32>
}

// CHECK-LABEL: func @normalization
func.func @normalization(%x: tensor<2x4x3x3xf32>, %c: tensor<4xf32>, %t: tensor<2x5x6xf32>, %g: tensor<6xf32>) -> (tensor<2x4x3x3xf32>, tensor<2x5x6xf32>) {
  // CHECK: nn.batch_norm {{.*}} {epsilon = 1.000000e-03 : f32, training = true}
  // CHECK-SAME: -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  %0:3 = nn.batch_norm %x, %c, %c, %c, %c {epsilon = 1.0e-3 : f32, training = true}
      : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  // CHECK: nn.layer_norm
  %1 = nn.layer_norm %t, %g, %g {axis = -1 : i64} : (tensor<2x5x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<2x5x6xf32>
  // CHECK: nn.softmax {{.*}} {axis = 1 : i64}
  %2 = nn.softmax %1 {axis = 1 : i64} : (tensor<2x5x6xf32>) -> tensor<2x5x6xf32>
  // CHECK: nn.log_softmax
  %3 = nn.log_softmax %2 : (tensor<2x5x6xf32>) -> tensor<2x5x6xf32>
  return %0#0, %3 : tensor<2x4x3x3xf32>, tensor<2x5x6xf32>
}

// CHECK-LABEL: func @shapes
func.func @shapes(%x: tensor<2x3x4xf32>, %i: tensor<5xi64>) -> tensor<2x5x4xf32> {
  // CHECK: nn.pad {{.*}} {mode = "reflect", pads = array<i64: 0, 1, 1, 0, 1, 1>}
  %0 = nn.pad %x {pads = array<i64: 0, 1, 1, 0, 1, 1>, mode = "reflect"} : (tensor<2x3x4xf32>) -> tensor<2x5x6xf32>
  // CHECK: nn.reshape {{.*}} -> tensor<10x6xf32>
  %1 = nn.reshape %0 {shape = array<i64: 10, 6>} : (tensor<2x5x6xf32>) -> tensor<10x6xf32>
  // CHECK: nn.transpose {{.*}} -> tensor<6x10xf32>
  %2 = nn.transpose %1 {perm = array<i64: 1, 0>} : (tensor<10x6xf32>) -> tensor<6x10xf32>
  // CHECK: nn.reduce_mean {{.*}} -> tensor<6xf32>
  %3 = nn.reduce_mean %2 {axes = array<i64: 1>, keepdims = false} : (tensor<6x10xf32>) -> tensor<6xf32>
  // CHECK: nn.concat {{.*}} -> tensor<2x6x4xf32>
  %4 = nn.concat %x, %x {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x6x4xf32>
  // CHECK: nn.slice {{.*}} -> tensor<2x3x2xf32>
  %5 = nn.slice %4 {starts = array<i64: 0, 5, 0>, ends = array<i64: 2, -1, 4>, steps = array<i64: 1, -2, 2>} : (tensor<2x6x4xf32>) -> tensor<2x3x2xf32>
  // CHECK: nn.split {{.*}} -> (tensor<2x1x4xf32>, tensor<2x2x4xf32>)
  %6:2 = nn.split %x {axis = 1 : i64, sizes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> (tensor<2x1x4xf32>, tensor<2x2x4xf32>)
  // CHECK: nn.gather {{.*}} -> tensor<2x5x4xf32>
  %7 = nn.gather %x, %i {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<5xi64>) -> tensor<2x5x4xf32>
  // CHECK: nn.constant dense<[1, 2]> : tensor<2xi64>
  %8 = nn.constant dense<[1, 2]> : tensor<2xi64>
  return %7 : tensor<2x5x4xf32>
}

// CHECK-LABEL: func @gradients
func.func @gradients(%g: tensor<2x8x5x5xf32>, %w: tensor<8x4x3x3xf32>, %x: tensor<2x4x5x5xf32>, %c: tensor<8xf32>) -> tensor<2x4x5x5xf32> {
  // CHECK: nn.conv_grad_input
  %0 = nn.conv_grad_input %g, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x8x5x5xf32>, tensor<8x4x3x3xf32>) -> tensor<2x4x5x5xf32>
  // CHECK: nn.conv_grad_weight
  %1 = nn.conv_grad_weight %g, %x {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x8x5x5xf32>, tensor<2x4x5x5xf32>) -> tensor<8x4x3x3xf32>
  // CHECK: nn.batch_norm_grad
  %2:3 = nn.batch_norm_grad %g, %g, %c, %c, %c : (tensor<2x8x5x5xf32>, tensor<2x8x5x5xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x5x5xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: nn.relu_grad
  %3 = nn.relu_grad %g, %g : (tensor<2x8x5x5xf32>, tensor<2x8x5x5xf32>) -> tensor<2x8x5x5xf32>
  // CHECK: nn.leaky_relu_grad %{{.*}} {alpha = 1.000000e-01 : f32}
  %lg = nn.leaky_relu_grad %g, %g {alpha = 0.1 : f32} : (tensor<2x8x5x5xf32>, tensor<2x8x5x5xf32>) -> tensor<2x8x5x5xf32>
  // CHECK: nn.max_pool_grad
  %4 = nn.max_pool_grad %g, %g {kernel_shape = array<i64: 1, 1>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : (tensor<2x8x5x5xf32>, tensor<2x8x5x5xf32>) -> tensor<2x8x5x5xf32>
  return %0 : tensor<2x4x5x5xf32>
}

// CHECK-LABEL: func @masks
func.func @masks(%x: tensor<2x3xf32>, %ids: tensor<2x3xi64>, %pad: tensor<i64>) -> (tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi64>) {
  // CHECK: nn.equal %{{.*}}, %{{.*}} : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
  %0 = nn.equal %ids, %pad : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
  // CHECK: nn.less_equal
  %1 = nn.less_equal %ids, %pad : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
  // CHECK: nn.or
  %2 = nn.or %0, %1 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: nn.not %{{.*}} : tensor<2x3xi1>
  %3 = nn.not %2 : tensor<2x3xi1>
  %inf = nn.constant dense<0xFF800000> : tensor<f32>
  // CHECK: nn.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %4 = nn.where %3, %x, %inf : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  // CHECK: nn.mod %{{.*}}, %{{.*}} : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi64>
  %5 = nn.mod %ids, %pad : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi64>
  return %4, %3, %5 : tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xi64>
}

// CHECK-LABEL: func @running_sums
func.func @running_sums(%ids: tensor<2x5xi64>, %x: tensor<2x5xf32>) -> (tensor<2x5xi64>, tensor<2x5xf32>) {
  // CHECK: nn.cumsum %{{.*}} {axis = 1 : i64} : (tensor<2x5xi64>) -> tensor<2x5xi64>
  %0 = nn.cumsum %ids {axis = 1 : i64} : (tensor<2x5xi64>) -> tensor<2x5xi64>
  // CHECK: nn.cumsum %{{.*}} {axis = -1 : i64, exclusive = true, reverse = true}
  %1 = nn.cumsum %x {axis = -1 : i64, exclusive = true, reverse = true} : (tensor<2x5xf32>) -> tensor<2x5xf32>
  return %0, %1 : tensor<2x5xi64>, tensor<2x5xf32>
}
