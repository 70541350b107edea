// gpipe-opt on MLIR input behaves like mlir-opt: passes, IR printing after
// each pass, split input files.
// RUN: gpipe-opt %s --split-input-file --canonicalize --mlir-print-ir-after-all 2>&1 | FileCheck %s

// CHECK: IR Dump After Canonicalizer
// CHECK-LABEL: func @dead_op
func.func @dead_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NOT: nn.sigmoid
  %0 = nn.sigmoid %x : tensor<4xf32>
  // CHECK: nn.relu
  %1 = nn.relu %x : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// CHECK: IR Dump After Canonicalizer
// CHECK-LABEL: func @second_split
func.func @second_split(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
