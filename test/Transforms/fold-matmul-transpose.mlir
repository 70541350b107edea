// RUN: gpipe-opt %s --gpipe-fold-matmul-transpose --split-input-file | FileCheck %s
// A MatMul by a transposed [N, K] matrix (a Linear layer on a sequence, as
// exporters write it) is a Gemm with trans_b on the rows: no transpose left.

// CHECK-LABEL: func @linear_on_a_sequence
// CHECK-SAME: (%[[X:.*]]: tensor<2x5x4xf32>, %[[W:.*]]: tensor<3x4xf32>)
// CHECK: %[[ROWS:.*]] = nn.reshape %[[X]] {shape = array<i64: 10, 4>}
// CHECK: %[[Y:.*]] = nn.gemm %[[ROWS]], %[[W]] {{{.*}}trans_b = true} : (tensor<10x4xf32>, tensor<3x4xf32>) -> tensor<10x3xf32>
// CHECK: %[[OUT:.*]] = nn.reshape %[[Y]] {shape = array<i64: 2, 5, 3>}
// CHECK-NOT: nn.transpose
// CHECK: return %[[OUT]]
func.func @linear_on_a_sequence(%x: tensor<2x5x4xf32>, %w: tensor<3x4xf32>) -> tensor<2x5x3xf32> {
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %y = nn.matmul %x, %t : (tensor<2x5x4xf32>, tensor<4x3xf32>) -> tensor<2x5x3xf32>
  return %y : tensor<2x5x3xf32>
}

// -----

// Rows already: no reshape.
// CHECK-LABEL: func @matrix
// CHECK-NEXT: %[[Y:.*]] = nn.gemm %arg0, %arg1 {{{.*}}trans_b = true}
// CHECK-NEXT: return %[[Y]]
func.func @matrix(%x: tensor<6x4xf32>, %w: tensor<3x4xf32>) -> tensor<6x3xf32> {
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %y = nn.matmul %x, %t : (tensor<6x4xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  return %y : tensor<6x3xf32>
}

// -----

// Attention's k^T is a batched transpose of the last two axes: left as it
// is, and so is a transposed matrix read by something else too.
// CHECK-LABEL: func @left_alone
// CHECK: nn.transpose
// CHECK: nn.matmul
// CHECK: nn.gemm {{.*}}trans_b = true
// CHECK: return
func.func @left_alone(%q: tensor<2x5x4xf32>, %k: tensor<2x5x4xf32>, %x: tensor<6x4xf32>, %w: tensor<3x4xf32>) -> (tensor<2x5x5xf32>, tensor<6x3xf32>, tensor<4x3xf32>) {
  %kt = nn.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %s = nn.matmul %q, %kt : (tensor<2x5x4xf32>, tensor<2x4x5xf32>) -> tensor<2x5x5xf32>
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %y = nn.matmul %x, %t : (tensor<6x4xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  return %s, %y, %t : tensor<2x5x5xf32>, tensor<6x3xf32>, tensor<4x3xf32>
}

// -----

// A Linear layer's bias added after the product (x @ W.T + b, either
// order): the Gemm adds it (beta = 1), through the rows' reshape.
// CHECK-LABEL: func @linear_with_bias
// CHECK-SAME: (%[[X:.*]]: tensor<2x5x4xf32>, %[[W:.*]]: tensor<3x4xf32>, %[[B:.*]]: tensor<3xf32>)
// CHECK: %[[ROWS:.*]] = nn.reshape %[[X]] {shape = array<i64: 10, 4>}
// CHECK: %[[Y:.*]] = nn.gemm %[[ROWS]], %[[W]], %[[B]] {{{.*}}trans_b = true} : (tensor<10x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<10x3xf32>
// CHECK: %[[OUT:.*]] = nn.reshape %[[Y]] {shape = array<i64: 2, 5, 3>}
// CHECK-NOT: nn.add
// CHECK: return %[[OUT]]
func.func @linear_with_bias(%x: tensor<2x5x4xf32>, %w: tensor<3x4xf32>, %b: tensor<3xf32>) -> tensor<2x5x3xf32> {
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %y = nn.matmul %x, %t : (tensor<2x5x4xf32>, tensor<4x3xf32>) -> tensor<2x5x3xf32>
  %z = nn.add %b, %y : (tensor<3xf32>, tensor<2x5x3xf32>) -> tensor<2x5x3xf32>
  return %z : tensor<2x5x3xf32>
}

// -----

// Left as they are: a product read twice (its value without the bias is
// needed), and sums that add a column or a matrix rather than a row.
// CHECK-LABEL: func @bias_left_alone
// CHECK-COUNT-3: nn.add
// CHECK: nn.mul
func.func @bias_left_alone(%x: tensor<6x4xf32>, %w: tensor<3x4xf32>, %b: tensor<3xf32>, %col: tensor<6x1xf32>, %m: tensor<6x3xf32>) -> (tensor<6x3xf32>, tensor<6x3xf32>, tensor<6x3xf32>, tensor<6x3xf32>) {
  %t = nn.transpose %w {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %y = nn.matmul %x, %t : (tensor<6x4xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  %a = nn.add %y, %b : (tensor<6x3xf32>, tensor<3xf32>) -> tensor<6x3xf32>
  %y2 = nn.matmul %x, %t : (tensor<6x4xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  %c = nn.add %y2, %col : (tensor<6x3xf32>, tensor<6x1xf32>) -> tensor<6x3xf32>
  %y3 = nn.matmul %x, %t : (tensor<6x4xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  %d = nn.add %y3, %m : (tensor<6x3xf32>, tensor<6x3xf32>) -> tensor<6x3xf32>
  %e = nn.mul %a, %a : (tensor<6x3xf32>, tensor<6x3xf32>) -> tensor<6x3xf32>
  return %y, %c, %d, %e : tensor<6x3xf32>, tensor<6x3xf32>, tensor<6x3xf32>, tensor<6x3xf32>
}
