// RUN: gpipe-opt %s --gpipe-convert-elementwise-to-linalg "--gpipe-lower-stage=function=forward entry=gpipe_stage0_forward" "--gpipe-lower-stage=function=backward entry=gpipe_stage0_backward" | FileCheck %s

// Under --precision=bf16 a value the forward keeps whose every use in the
// backward is a bfloat16 product's operand is kept in bfloat16
// (stash_dtype = "bf16": the runtime rounds it into the stash, and the
// product would round it to the same values); any other use keeps it in
// float32: an element-wise op, a float32 product, a gemm's c (added in
// float32). A forward's inputs are never marked: only what the backward
// reads from the stash.
// CHECK-LABEL: func.func @gpipe_stage0_forward(
// CHECK-NOT: stash_dtype
// CHECK-SAME: gpipe.phase = "forward"
// CHECK-LABEL: func.func @gpipe_stage0_backward(
// CHECK-SAME: gpipe.inputs = [
// CHECK-SAME: {dtype = "f32", name = "stash:0", offset = {{[0-9]+}} : i64, role = #gpipe.role<stash>, shape = [4, 8], stash_dtype = "bf16"}
// CHECK-SAME: {dtype = "f32", name = "stash:1", offset = {{[0-9]+}} : i64, role = #gpipe.role<stash>, shape = [4, 8]}
// CHECK-SAME: {dtype = "f32", name = "stash:2", offset = {{[0-9]+}} : i64, role = #gpipe.role<stash>, shape = [4, 8]}
// CHECK-SAME: {dtype = "f32", name = "stash:3", offset = {{[0-9]+}} : i64, role = #gpipe.role<stash>, shape = [2, 16], stash_dtype = "bf16"}
// CHECK-SAME: {dtype = "f32", name = "stash:4", offset = {{[0-9]+}} : i64, role = #gpipe.role<stash>, shape = [3, 8]}
// CHECK-SAME: {dtype = "f32", name = "act:0", offset = {{[0-9]+}} : i64, role = #gpipe.role<activation>, shape = [4, 8], stash_dtype = "bf16"}
// CHECK-SAME: {dtype = "f32", name = "output_grad:act:1", offset = {{[0-9]+}} : i64, role = #gpipe.role<output_grad>, shape = [4, 3]}]
// CHECK-SAME: gpipe.phase = "backward"
gpipe.parameter @w trainable = dense<0.5> : tensor<8x3xf32>
func.func @forward(%a: tensor<4x8xf32> {gpipe.name = "act:0", gpipe.role = #gpipe.role<activation>}) -> (tensor<4x3xf32> {gpipe.name = "act:1", gpipe.role = #gpipe.role<activation>}) {
  %w = gpipe.get_parameter @w : tensor<8x3xf32>
  %y = nn.gemm %a, %w {compute_type = "bf16"} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
func.func @backward(
    %x: tensor<4x8xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>},
    %r: tensor<4x8xf32> {gpipe.name = "stash:1", gpipe.role = #gpipe.role<stash>},
    %f: tensor<4x8xf32> {gpipe.name = "stash:2", gpipe.role = #gpipe.role<stash>},
    %t: tensor<2x16xf32> {gpipe.name = "stash:3", gpipe.role = #gpipe.role<stash>},
    %c: tensor<3x8xf32> {gpipe.name = "stash:4", gpipe.role = #gpipe.role<stash>},
    %a: tensor<4x8xf32> {gpipe.name = "act:0", gpipe.role = #gpipe.role<activation>},
    %g: tensor<4x3xf32> {gpipe.name = "output_grad:act:1", gpipe.role = #gpipe.role<output_grad>})
    -> (tensor<8x3xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>},
        tensor<4x8xf32> {gpipe.name = "grad:v", gpipe.role = #gpipe.role<param_grad>},
        tensor<3x8xf32> {gpipe.name = "grad:u", gpipe.role = #gpipe.role<param_grad>},
        tensor<8x3xf32> {gpipe.name = "grad:z", gpipe.role = #gpipe.role<param_grad>}) {
  // stash:0 and act:0: a bfloat16 gemm's a (transposed) and b.
  %gx = nn.gemm %x, %g {compute_type = "bf16", trans_a = true} : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %ga = nn.gemm %a, %g {compute_type = "bf16", trans_a = true} : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %gz = nn.add %gx, %ga : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  // stash:1: a product's operand and an element-wise op's.
  %gr = nn.gemm %r, %g {compute_type = "bf16", trans_a = true} : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %m = nn.mul %r, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // stash:2: a float32 product.
  %gf = nn.gemm %f, %g {trans_a = true} : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %sum = nn.add %gr, %gf : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  // stash:3: reshaped, then a bfloat16 matmul's operand.
  %tr = nn.reshape %t {shape = array<i64: 4, 8>} : (tensor<2x16xf32>) -> tensor<4x8xf32>
  %tt = nn.transpose %tr {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %gt = nn.matmul %tt, %g {compute_type = "bf16"} : (tensor<8x4xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %all = nn.add %sum, %gt : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  // stash:4: a bfloat16 gemm's c.
  %gc = nn.gemm %g, %m, %c {compute_type = "bf16", trans_a = true} : (tensor<4x3xf32>, tensor<4x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  return %all, %m, %gc, %gz : tensor<8x3xf32>, tensor<4x8xf32>, tensor<3x8xf32>, tensor<8x3xf32>
}
