// RUN: gpipe-opt %s --gpipe-annotate-cost | FileCheck %s
// FLOPs and bytes moved of each op, from CostOpInterface.

// CHECK-LABEL: func @costs
func.func @costs(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>,
                 %a: tensor<16x32xf32>, %m: tensor<64x32xf32>) -> (tensor<2x4x4x4xf32>, tensor<16x64xf32>) {
  // 2*4*4*4 = 128 outputs over 3 channels, counting every tap that reads
  // the input at some output position, at every position (the kernels
  // multiply zeros where it reads padding): along each axis (output o, tap
  // t reads 2o - 1 + t) tap 0 reads from output 1 on, taps 1 and 2 from 0:
  // 3 taps x 4 outputs, 144 pairs in 2-D (121 read the input). 2 FLOPs * 2
  // images * 4 * 3 channels * 144, plus 128 bias adds. Bytes: (384 + 108 +
  // 4 + 128) * 4.
  // CHECK: nn.conv {{.*}}gpipe.bytes = 2496 : i64, gpipe.flops = 7040 : i64
  %0 = nn.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x4x4xf32>
  // One compare per element: 128 FLOPs, 2 * 128 * 4 bytes.
  // CHECK: nn.relu {{.*}}gpipe.bytes = 1024 : i64, gpipe.flops = 128 : i64
  %1 = nn.relu %0 : tensor<2x4x4x4xf32>
  // 2 * 16 * 64 * 32 FLOPs; (512 + 2048 + 1024) * 4 bytes.
  // CHECK: nn.gemm {{.*}}gpipe.bytes = 14336 : i64, gpipe.flops = 65536 : i64
  %2 = nn.gemm %a, %m {trans_b = true} : (tensor<16x32xf32>, tensor<64x32xf32>) -> tensor<16x64xf32>
  // Data movement has no FLOPs.
  // CHECK: nn.transpose {{.*}}gpipe.flops = 0 : i64
  %3 = nn.transpose %2 {perm = array<i64: 1, 0>} : (tensor<16x64xf32>) -> tensor<64x16xf32>
  // (64x16) x (16x64): 2 * 64 * 64 * 16.
  // CHECK: nn.matmul {{.*}}gpipe.flops = 131072 : i64
  %4 = nn.matmul %3, %2 : (tensor<64x16xf32>, tensor<16x64xf32>) -> tensor<64x64xf32>
  return %1, %2 : tensor<2x4x4x4xf32>, tensor<16x64xf32>
}

// A map of one output pixel: only the taps that read the input (a 3x3
// kernel with padding 1 on a 1x1 map: its centre), 2 FLOPs * 2 images * 4 *
// 3 channels, as the CPU backend's one-pixel kernel multiplies. A 2x2 map
// multiplies all 9 taps at its 4 positions: 2 * 2 * 4 * 3 * 36.
// CHECK-LABEL: func @conv_small_maps
func.func @conv_small_maps(%x: tensor<2x3x1x1xf32>, %y: tensor<2x3x2x2xf32>,
                           %w: tensor<4x3x3x3xf32>) -> (tensor<2x4x1x1xf32>, tensor<2x4x2x2xf32>) {
  // CHECK: nn.conv {{.*}}gpipe.flops = 48 : i64
  %0 = nn.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x3x1x1xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x1x1xf32>
  // CHECK: nn.conv {{.*}}gpipe.flops = 1728 : i64
  %1 = nn.conv %y, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x3x2x2xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x2x2xf32>
  return %0, %1 : tensor<2x4x1x1xf32>, tensor<2x4x2x2xf32>
}

// The bytes of each op's gradient: twice the forward's unless the op says
// otherwise.
// CHECK-LABEL: func @gradient_bytes
func.func @gradient_bytes(%x: tensor<4x6xf32>, %b: tensor<6xf32>) -> tensor<6x4xf32> {
  // The relu's gradient reads the result's gradient and what the forward
  // kept: 2 x (96 + 96).
  // CHECK: nn.relu {{.*}}gpipe.backward_bytes = 384 : i64, gpipe.bytes = 192
  %0 = nn.relu %x : tensor<4x6xf32>
  // Same shapes: the gradient passes through both operands unchanged.
  // CHECK: nn.add {{.*}}gpipe.backward_bytes = 0 : i64, gpipe.bytes = 288
  %1 = nn.add %0, %x : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  // A broadcast bias: its gradient sums the result's over the rows
  // (96 read, 24 written).
  // CHECK: nn.add {{.*}}gpipe.backward_bytes = 120 : i64, gpipe.bytes = 216
  %2 = nn.add %1, %b : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  // A reshape aliases its input: nothing moves either way.
  // CHECK: nn.reshape {{.*}}gpipe.backward_bytes = 0 : i64, gpipe.bytes = 0
  %3 = nn.reshape %2 {shape = array<i64: 24>} : (tensor<4x6xf32>) -> tensor<24xf32>
  %4 = nn.reshape %3 {shape = array<i64: 4, 6>} : (tensor<24xf32>) -> tensor<4x6xf32>
  // A slice copies its result (2 x 48 bytes); its gradient pads it back
  // to the input (96 written, 48 read).
  // CHECK: nn.slice {{.*}}gpipe.backward_bytes = 144 : i64, gpipe.bytes = 96
  %5 = nn.slice %4 {starts = array<i64: 0, 0>, ends = array<i64: 2, 6>, steps = array<i64: 1, 1>} : (tensor<4x6xf32>) -> tensor<2x6xf32>
  // Slices side by side along one axis, the only users of their input (an
  // attention's q, k and v): autodiff joins their gradients into one
  // concatenation, so each reads and writes its own bytes (2 x 48; alone,
  // 96 + 48, as above).
  // CHECK: nn.slice {{.*}}gpipe.backward_bytes = 96 : i64, gpipe.bytes = 96
  // CHECK: nn.slice {{.*}}gpipe.backward_bytes = 96 : i64, gpipe.bytes = 96
  %j = nn.relu %x : tensor<4x6xf32>
  %q = nn.slice %j {starts = array<i64: 0, 0>, ends = array<i64: 4, 3>, steps = array<i64: 1, 1>} : (tensor<4x6xf32>) -> tensor<4x3xf32>
  %k = nn.slice %j {starts = array<i64: 0, 3>, ends = array<i64: 4, 6>, steps = array<i64: 1, 1>} : (tensor<4x6xf32>) -> tensor<4x3xf32>
  // Dropout without randomness is the identity, and so is its gradient.
  // CHECK: nn.dropout {{.*}}gpipe.backward_bytes = 0 : i64, gpipe.bytes = 192
  %6 = nn.dropout %4 {ratio = 0.0 : f32, training = true} : tensor<4x6xf32>
  // A transpose's gradient is the inverse transpose.
  // CHECK: nn.transpose {{.*}}gpipe.backward_bytes = 192 : i64, gpipe.bytes = 192
  %7 = nn.transpose %6 {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  return %7 : tensor<6x4xf32>
}

// Attention scores every (query, key) pair, each with a product of D = 8,
// one of Dv = 8 and 5 for the softmax: 37 FLOPs. Over 2 heads of 130
// queries and keys: 2 * 130 * 130 * 37. Causal, the kernels cut 130 into
// 3 blocks of 44 (the last 42) and skip the tiles whose keys all come
// after their queries: query rows [0, 44) score keys [0, 44), rows
// [44, 88) keys [0, 88), rows [88, 130) all 130 keys:
// 2 * (44 * 44 + 44 * 88 + 42 * 130) * 37.
// CHECK-LABEL: func @attention_costs
// CHECK: nn.attention {{.*}}gpipe.flops = 1250600 : i64
// CHECK: nn.attention {{.*}}gpipe.flops = 833832 : i64
func.func @attention_costs(%q: tensor<2x130x8xf32>) -> (tensor<2x130x8xf32>, tensor<2x130x8xf32>) {
  %0:2 = nn.attention %q, %q, %q : (tensor<2x130x8xf32>, tensor<2x130x8xf32>, tensor<2x130x8xf32>) -> (tensor<2x130x8xf32>, tensor<2x130xf32>)
  %1:2 = nn.attention %q, %q, %q {causal = true} : (tensor<2x130x8xf32>, tensor<2x130x8xf32>, tensor<2x130x8xf32>) -> (tensor<2x130x8xf32>, tensor<2x130xf32>)
  return %0#0, %1#0 : tensor<2x130x8xf32>, tensor<2x130x8xf32>
}

// The convolutions' families: fewer than 16 channels in or out is
// "shallow_conv" (8 -> 16, 16 -> 8), 16 -> 16 a dense "conv", 1 channel in
// "narrow_conv" at stride 1 (the CPU backend's own loops), a strided one
// (ResNet's 7x7 at stride 2 on 3 channels, oneDNN's) "shallow_conv". A
// global average pool runs as oneDNN's pooling, its
// gradient as a generated broadcast (as many bytes as the forward); a pad's
// gradient is a slice of its input's size (2 * 2 * 16 * 14 * 14 * 4).
// CHECK-LABEL: func @families
// CHECK: nn.conv {{.*}}gpipe.kernel_family = "narrow_conv"
// CHECK: nn.conv {{.*}}gpipe.kernel_family = "shallow_conv"
// CHECK: nn.conv {{.*}}gpipe.kernel_family = "conv"
// CHECK: nn.conv {{.*}}gpipe.kernel_family = "shallow_conv", gpipe.kernel_family_backward = "shallow_conv"
// CHECK: nn.global_avg_pool {{.*}}gpipe.backward_bytes = [[GAP:[0-9]+]] : i64, gpipe.bytes = [[GAP]] : i64, {{.*}}gpipe.kernel_family = "pooling", gpipe.kernel_family_backward = "elementwise"
// CHECK: nn.pad {{.*}}gpipe.backward_bytes = 50176 : i64, {{.*}}gpipe.kernel_family = "copy", gpipe.kernel_family_backward = "copy"
// CHECK: nn.conv {{.*}}gpipe.kernel_family = "shallow_conv"
func.func @families(%x: tensor<2x1x14x14xf32>, %w1: tensor<8x1x3x3xf32>,
                    %w2: tensor<16x8x3x3xf32>, %w3: tensor<16x16x3x3xf32>,
                    %w4: tensor<8x16x3x3xf32>, %i: tensor<2x3x32x32xf32>,
                    %w5: tensor<64x3x7x7xf32>) -> (tensor<2x8x1x1xf32>, tensor<2x16x16x16xf32>, tensor<2x64x16x16xf32>) {
  %0 = nn.conv %x, %w1 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x1x14x14xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x14x14xf32>
  %1 = nn.conv %0, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x8x14x14xf32>, tensor<16x8x3x3xf32>) -> tensor<2x16x14x14xf32>
  %2 = nn.conv %1, %w3 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x16x14x14xf32>, tensor<16x16x3x3xf32>) -> tensor<2x16x14x14xf32>
  %3 = nn.conv %2, %w4 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x16x14x14xf32>, tensor<8x16x3x3xf32>) -> tensor<2x8x14x14xf32>
  %4 = nn.global_avg_pool %3 : (tensor<2x8x14x14xf32>) -> tensor<2x8x1x1xf32>
  %5 = nn.pad %2 {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>} : (tensor<2x16x14x14xf32>) -> tensor<2x16x16x16xf32>
  %6 = nn.conv %i, %w5 {strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>}
      : (tensor<2x3x32x32xf32>, tensor<64x3x7x7xf32>) -> tensor<2x64x16x16xf32>
  return %4, %5, %6 : tensor<2x8x1x1xf32>, tensor<2x16x16x16xf32>, tensor<2x64x16x16xf32>
}

// A batch normalization of maps of 16 elements or more loops a plane; of
// smaller maps (3x3 here, 1x1, BatchNorm1d's [N, C]) it runs along each
// sample's row: the family "batch_norm_columns" (kBatchNormColumnsBelow).
// CHECK-LABEL: func @batch_norm_families
// CHECK: nn.batch_norm {{.*}}gpipe.kernel_family = "batch_norm"
// CHECK: nn.batch_norm {{.*}}gpipe.kernel_family = "batch_norm_columns"
// CHECK: nn.batch_norm {{.*}}gpipe.kernel_family = "batch_norm_columns"
func.func @batch_norm_families(%a: tensor<2x3x4x4xf32>, %b: tensor<2x3x3x3xf32>,
                               %c: tensor<8x3xf32>, %s: tensor<3xf32>)
    -> (tensor<2x3x4x4xf32>, tensor<2x3x3x3xf32>, tensor<8x3xf32>) {
  %0:3 = nn.batch_norm %a, %s, %s, %s, %s {training = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %1:3 = nn.batch_norm %b, %s, %s, %s, %s {training = true} : (tensor<2x3x3x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x3x3xf32>, tensor<3xf32>, tensor<3xf32>)
  %2:3 = nn.batch_norm %c, %s, %s, %s, %s {training = true} : (tensor<8x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<8x3xf32>, tensor<3xf32>, tensor<3xf32>)
  return %0#0, %1#0, %2#0 : tensor<2x3x4x4xf32>, tensor<2x3x3x3xf32>, tensor<8x3xf32>
}
