// RUN: gpipe-opt %s --gpipe-annotate-cost | FileCheck %s
// FLOPs and bytes moved of each op, from CostOpInterface.

// CHECK-LABEL: func @costs
func.func @costs(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>,
                 %a: tensor<16x32xf32>, %m: tensor<64x32xf32>) -> (tensor<2x4x4x4xf32>, tensor<16x64xf32>) {
  // 2*4*4*4 = 128 outputs, each a dot product of 3*3*3 = 27 terms: 2*128*27
  // FLOPs plus 128 bias adds. Bytes: (384 + 108 + 4 + 128) * 4.
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
