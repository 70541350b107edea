// RUN: gpipe-opt %s --gpipe-convert-elementwise-to-linalg "--gpipe-lower-stage=function=forward entry=gpipe_stage0_forward" "--gpipe-lower-stage=function=backward entry=gpipe_stage0_backward" | FileCheck %s

// Under --precision=bf16 an activation the stage before sends may come in
// bfloat16 (message_dtype = "bf16": the runtime widens it into the
// forward's input) where the forward and the backward only multiply it in
// bfloat16: the products would round it to the same values. In float32:
// one that an element-wise op reads, a float32 product's operand, one the
// forward sends on or returns, one kept for an element-wise use in the
// backward.
// CHECK-LABEL: func.func @gpipe_stage0_forward(
// CHECK-SAME: gpipe.inputs = [
// CHECK-SAME: {dtype = "f32", message_dtype = "bf16", name = "act:0", offset = {{[0-9]+}} : i64, role = #gpipe.role<activation>, shape = [4, 8]}
// CHECK-SAME: {dtype = "f32", name = "act:1", offset = {{[0-9]+}} : i64, role = #gpipe.role<activation>, shape = [4, 8]}
// CHECK-SAME: {dtype = "f32", name = "act:2", offset = {{[0-9]+}} : i64, role = #gpipe.role<activation>, shape = [4, 8]}
// CHECK-SAME: {dtype = "f32", message_dtype = "bf16", name = "act:3", offset = {{[0-9]+}} : i64, role = #gpipe.role<activation>, shape = [4, 8]}
// CHECK-SAME: {dtype = "f32", name = "act:4", offset = {{[0-9]+}} : i64, role = #gpipe.role<activation>, shape = [4, 8]}
// CHECK-SAME: {dtype = "f32", name = "act:5", offset = {{[0-9]+}} : i64, role = #gpipe.role<activation>, shape = [4, 8]}]
// CHECK-SAME: gpipe.phase = "forward"
// CHECK-LABEL: func.func @gpipe_stage0_backward(
// CHECK-NOT: message_dtype
// CHECK-SAME: gpipe.phase = "backward"
gpipe.parameter @w trainable = dense<0.5> : tensor<8x3xf32>
func.func @forward(
    // act:0: a bfloat16 product's operand here and in the backward.
    %a0: tensor<4x8xf32> {gpipe.name = "act:0", gpipe.role = #gpipe.role<activation>},
    // act:1: an element-wise op's.
    %a1: tensor<4x8xf32> {gpipe.name = "act:1", gpipe.role = #gpipe.role<activation>},
    // act:2: a product's, and kept for an element-wise use in the backward.
    %a2: tensor<4x8xf32> {gpipe.name = "act:2", gpipe.role = #gpipe.role<activation>},
    // act:3: a product's, and kept for a bfloat16 product in the backward.
    %a3: tensor<4x8xf32> {gpipe.name = "act:3", gpipe.role = #gpipe.role<activation>},
    // act:4: a product's, and sent on to the next stage.
    %a4: tensor<4x8xf32> {gpipe.name = "act:4", gpipe.role = #gpipe.role<activation>},
    // act:5: a float32 product's.
    %a5: tensor<4x8xf32> {gpipe.name = "act:5", gpipe.role = #gpipe.role<activation>})
    -> (tensor<4x3xf32> {gpipe.name = "act:6", gpipe.role = #gpipe.role<activation>},
        tensor<4x8xf32> {gpipe.name = "act:4", gpipe.role = #gpipe.role<activation>},
        tensor<4x8xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>},
        tensor<4x8xf32> {gpipe.name = "stash:1", gpipe.role = #gpipe.role<stash>},
        tensor<4x8xf32> {gpipe.name = "stash:2", gpipe.role = #gpipe.role<stash>}) {
  %w = gpipe.get_parameter @w : tensor<8x3xf32>
  %y0 = nn.gemm %a0, %w {compute_type = "bf16"} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %r1 = nn.relu %a1 : tensor<4x8xf32>
  %y1 = nn.gemm %r1, %w {compute_type = "bf16"} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %y2 = nn.gemm %a2, %w {compute_type = "bf16"} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %y3 = nn.gemm %a3, %w {compute_type = "bf16"} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %y4 = nn.gemm %a4, %w {compute_type = "bf16"} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %y5 = nn.gemm %a5, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %s0 = nn.add %y0, %y1 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %s1 = nn.add %s0, %y2 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %s2 = nn.add %s1, %y3 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %s3 = nn.add %s2, %y4 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %s4 = nn.add %s3, %y5 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %s4, %a4, %a2, %a3, %a0 : tensor<4x3xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
func.func @backward(
    %k2: tensor<4x8xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>},
    %k3: tensor<4x8xf32> {gpipe.name = "stash:1", gpipe.role = #gpipe.role<stash>},
    %k0: tensor<4x8xf32> {gpipe.name = "stash:2", gpipe.role = #gpipe.role<stash>},
    %g: tensor<4x3xf32> {gpipe.name = "output_grad:act:6", gpipe.role = #gpipe.role<output_grad>})
    -> (tensor<8x3xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>},
        tensor<4x8xf32> {gpipe.name = "input_grad:act:2", gpipe.role = #gpipe.role<input_grad>}) {
  %g0 = nn.gemm %k0, %g {compute_type = "bf16", trans_a = true} : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %g3 = nn.gemm %k3, %g {compute_type = "bf16", trans_a = true} : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %gw = nn.add %g0, %g3 : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  %m = nn.mul %k2, %k2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %gw, %m : tensor<8x3xf32>, tensor<4x8xf32>
}
