// RUN: gpipe-opt %s --gpipe-convert-elementwise-to-linalg "--gpipe-lower-stage=function=forward entry=gpipe_stage0_forward" "--gpipe-lower-stage=function=backward entry=gpipe_stage0_backward" | FileCheck %s

// A training stage's forward and backward share one arena: what the
// backward reads of the forward (its stash output and, as with recompute,
// the received input) sits at the forward's offsets, and the backward plans
// everything else around it. The forward keeps the received input intact
// to its end: its last reader is the first op, yet the sum (the second)
// does not take its place.
// CHECK-LABEL: func.func @gpipe_stage0_forward(
// CHECK-NOT: arena_of
// CHECK-SAME: gpipe.arena_size = 192 : i64
// CHECK-SAME: gpipe.inputs = [{dtype = "f32", name = "act:0", offset = 0 : i64, role = #gpipe.role<activation>, shape = [16]}]
// CHECK-SAME: gpipe.outputs = [{dtype = "f32", name = "act:1", offset = 128 : i64, role = #gpipe.role<activation>, shape = [16]}, {dtype = "f32", name = "stash:0", offset = 64 : i64, role = #gpipe.role<stash>, shape = [16]}]
// CHECK-SAME: gpipe.phase = "forward"
// CHECK-LABEL: func.func @gpipe_stage0_backward(
// CHECK-SAME: gpipe.arena_of = "forward"
// CHECK-SAME: gpipe.inputs = [{dtype = "f32", name = "act:0", offset = 0 : i64, role = #gpipe.role<activation>, shape = [16]}, {dtype = "f32", name = "stash:0", offset = 64 : i64, role = #gpipe.role<stash>, shape = [16]}, {dtype = "f32", name = "output_grad:act:1", offset = 128 : i64, role = #gpipe.role<output_grad>, shape = [16]}]
// After its last read, the received input's place is free again: the
// gradient takes it.
// CHECK-SAME: gpipe.outputs = [{dtype = "f32", name = "input_grad:act:0", offset = 0 : i64, role = #gpipe.role<input_grad>, shape = [16]}]
// CHECK-SAME: gpipe.phase = "backward"
func.func @forward(%x: tensor<16xf32> {gpipe.name = "act:0", gpipe.role = #gpipe.role<activation>}) -> (tensor<16xf32> {gpipe.name = "act:1", gpipe.role = #gpipe.role<activation>}, tensor<16xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>}) {
  %s = nn.mul %x, %x : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %y = nn.add %s, %s : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %y, %s : tensor<16xf32>, tensor<16xf32>
}
func.func @backward(%x: tensor<16xf32> {gpipe.name = "act:0", gpipe.role = #gpipe.role<activation>}, %s: tensor<16xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>}, %g: tensor<16xf32> {gpipe.name = "output_grad:act:1", gpipe.role = #gpipe.role<output_grad>}) -> (tensor<16xf32> {gpipe.name = "input_grad:act:0", gpipe.role = #gpipe.role<input_grad>}) {
  %a = nn.mul %g, %x : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %b = nn.add %a, %s : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %b : tensor<16xf32>
}
