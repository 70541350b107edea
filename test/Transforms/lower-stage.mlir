// RUN: gpipe-opt %s --gpipe-lower-stage --split-input-file -verify-diagnostics | FileCheck %s

// A gemm, an element-wise op and a reshape: the reshape aliases its input,
// buffers whose live ranges do not overlap share memory, parameters and
// constants live in the parameter blob.
// CHECK: gpipe.parameter @w = dense<5.000000e-01> : tensor<4x6xf32> {gpipe.offset = 0 : i64}
// CHECK: gpipe.parameter @__constant_0 constant = dense<1.000000e+00> : tensor<4xf32> {gpipe.offset = 128 : i64}
gpipe.parameter @w = dense<0.5> : tensor<4x6xf32>
// CHECK-LABEL: func.func @gpipe_stage0_forward
// CHECK-SAME: (%[[ARENA:.*]]: memref<128xi8>, %[[PARAMS:.*]]: memref<192xi8>, %[[CTX:.*]]: i64)
// CHECK-SAME: gpipe.arena_size = 128 : i64
// CHECK-SAME: gpipe.inputs = [{dtype = "f32", name = "x", offset = 0 : i64, role = #gpipe.role<data>, shape = [2, 6]}]
// CHECK-SAME: gpipe.kernels = [{attributes = {alpha = 1.000000e+00 : f32, beta = 1.000000e+00 : f32, compute_type = "f32", trans_a = false, trans_b = true}, id = 0 : i64, kind = "gemm", op = "", operands = [{dtype = "f32", offset = 0 : i64, shape = [2, 6], space = "arena"}, {dtype = "f32", offset = 0 : i64, shape = [4, 6], space = "params"}], results = [{dtype = "f32", offset = 64 : i64, shape = [2, 4], space = "arena"}]}]
// CHECK-SAME: gpipe.outputs = [{dtype = "f32", name = "y", offset = 0 : i64, role = #gpipe.role<output>, shape = [8]}]
// CHECK-SAME: gpipe.params_size = 192 : i64
// CHECK-SAME: gpipe.phase = "forward"
// CHECK: %[[ID:.*]] = arith.constant 0 : i64
// CHECK: call @gpipe_kernel(%[[CTX]], %[[ID]]) : (i64, i64) -> ()
// CHECK: memref.view %[[ARENA]][%{{.*}}][] : memref<128xi8> to memref<2x4xf32>
// CHECK: memref.view %[[PARAMS]][%{{.*}}][] : memref<192xi8> to memref<4xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : memref<2x4xf32>, memref<4xf32>) outs(%{{.*}} : memref<2x4xf32>)
// CHECK: return
// CHECK: func.func private @gpipe_kernel(i64, i64)
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @forward(%x: tensor<2x6xf32> {gpipe.name = "x"}) -> (tensor<8xf32> {gpipe.name = "y"}) {
  %w = gpipe.get_parameter @w : tensor<4x6xf32>
  %c = nn.constant dense<1.0> : tensor<4xf32>
  %0 = nn.gemm %x, %w {trans_b = true} : (tensor<2x6xf32>, tensor<4x6xf32>) -> tensor<2x4xf32>
  %e = tensor.empty() : tensor<2x4xf32>
  %1 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%0, %c : tensor<2x4xf32>, tensor<4xf32>) outs(%e : tensor<2x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<2x4xf32>
  %2 = nn.reshape %1 {shape = array<i64: 8>} : (tensor<2x4xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}

// -----

// Returning an input needs a copy into an output buffer of its own.
// CHECK-LABEL: func.func @gpipe_stage0_forward
// CHECK-SAME: gpipe.outputs = [{dtype = "f32", name = "y", offset = 64 : i64, role = #gpipe.role<output>, shape = [4]}]
// CHECK: memref.copy
func.func @forward(%x: tensor<4xf32> {gpipe.name = "x"}) -> (tensor<4xf32> {gpipe.name = "y"}) {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{no @forward function to lower}}
module {
}

// -----

func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.relu' is not supported by code generation yet}}
  %0 = nn.relu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// gather_grad (an embedding's gradient): zero the table, then serial loops
// over the gradient add each row at its index (repeated indices add up; an
// index outside the table adds nothing).
// CHECK-LABEL: func.func @gpipe_stage0_forward
// CHECK: linalg.fill
// CHECK: scf.for
// CHECK: scf.for
// CHECK: memref.load
// CHECK: scf.if
// CHECK: arith.addf
// CHECK: memref.store
func.func @forward(%g: tensor<3x4xf32> {gpipe.name = "g"}, %i: tensor<3xi64> {gpipe.name = "i"}) -> (tensor<5x4xf32> {gpipe.name = "d"}) {
  %0 = nn.gather_grad %g, %i {axis = 0 : i64} : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<5x4xf32>
  return %0 : tensor<5x4xf32>
}

// -----

// Data movement as contiguous runs: a Concat copies each input's rows into
// its columns of the output's rows, a Slice that cuts one axis with step 1
// copies runs of the rows it keeps (memref.copy of contiguous views, a loop
// over the rows); an element-wise op on operands of one shape is one loop
// over the elements. Each op's code is in a function of its own, its call
// timed by gpipe_loop (ids in order).
// CHECK-LABEL: func.func @gpipe_stage0_forward(
// CHECK-SAME: gpipe.loops = [{id = 0 : i64, op = ""}, {id = 1 : i64, op = ""}, {id = 2 : i64, op = ""}]
// CHECK: call @gpipe_stage0_forward_op0(
// CHECK-NEXT: %[[END0:.*]] = arith.constant 1 : i64
// CHECK-NEXT: call @gpipe_loop(%{{.*}}, %{{.*}}, %[[END0]])
// CHECK-NEXT: %[[ID1:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[BEGIN1:.*]] = arith.constant 0 : i64
// CHECK-NEXT: call @gpipe_loop(%{{.*}}, %[[ID1]], %[[BEGIN1]])
// CHECK-NEXT: call @gpipe_stage0_forward_op1(
// CHECK: call @gpipe_stage0_forward_op2(
// CHECK: func.func private @gpipe_stage0_forward_op0({{.*}} attributes {gpipe.stage_op, passthrough = ["noinline"]}
// CHECK: scf.for %[[ROW:.*]] = %c0 to %c2 step %c1 {
// CHECK: memref.view {{.*}} to memref<12xf32>
// CHECK: memref.view {{.*}} to memref<12xf32>
// CHECK: memref.copy {{.*}} : memref<12xf32> to memref<12xf32>
// CHECK: scf.for
// CHECK: memref.copy {{.*}} : memref<4xf32> to memref<4xf32>
// CHECK: func.func private @gpipe_stage0_forward_op1(
// CHECK: scf.for
// CHECK: memref.copy {{.*}} : memref<8xf32> to memref<8xf32>
// CHECK: func.func private @gpipe_stage0_forward_op2(
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel"]} ins(%{{.*}} : memref<16xf32>) outs(%{{.*}} : memref<16xf32>)
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @forward(%x: tensor<2x3x4xf32> {gpipe.name = "x"}, %y: tensor<2x1x4xf32> {gpipe.name = "y"}) -> (tensor<2x2x4xf32> {gpipe.name = "z"}) {
  %0 = nn.concat %x, %y {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x1x4xf32>) -> tensor<2x4x4xf32>
  %1 = nn.slice %0 {starts = array<i64: 0, 1, 0>, ends = array<i64: 2, 3, 4>, steps = array<i64: 1, 1, 1>} : (tensor<2x4x4xf32>) -> tensor<2x2x4xf32>
  %e = tensor.empty() : tensor<2x2x4xf32>
  %2 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%1 : tensor<2x2x4xf32>) outs(%e : tensor<2x2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = arith.constant 0.0 : f32
    %m = arith.maximumf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<2x2x4xf32>
  return %2 : tensor<2x2x4xf32>
}

// -----

// A convolution's bias gradient (axes 0, 2, 3 of NCHW): the input viewed as
// [N, C, H W], each run of H W summed in a register with reassociation
// allowed (vectorized by LLVM), added to its channel's sum; a reduction
// over leading axes only, and one whose runs are shorter than 16, stay
// linalg (their inner loop runs over kept elements or is short).
// CHECK-LABEL: func.func @gpipe_stage0_forward
// CHECK: linalg.fill
// CHECK: memref.view {{.*}} to memref<2x3x20xf32>
// CHECK: memref.view {{.*}} to memref<3xf32>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[SUM:.*]] = scf.for {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK: %[[X:.*]] = memref.load {{.*}} : memref<2x3x20xf32>
// CHECK: arith.addf %[[ACC]], %[[X]] fastmath<reassoc> : f32
// CHECK: %[[OLD:.*]] = memref.load {{.*}} : memref<3xf32>
// CHECK: %[[NEW:.*]] = arith.addf %[[OLD]], %[[SUM]] : f32
// CHECK: memref.store %[[NEW]]
// CHECK: linalg.fill
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel", "parallel", "parallel"]
// CHECK: linalg.fill
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel", "reduction", "reduction"]
// A mean over every axis (kept as 1s): one run of all 120 elements, then
// the scale.
// CHECK: linalg.fill
// CHECK: memref.view {{.*}} to memref<1x1x120xf32>
// CHECK: scf.for {{.*}} iter_args
// CHECK: fastmath<reassoc>
// CHECK: arith.mulf
func.func @forward(%x: tensor<2x3x4x5xf32> {gpipe.name = "x"}, %s: tensor<2x3x2x2xf32> {gpipe.name = "s"}) -> (tensor<3xf32> {gpipe.name = "bias"}, tensor<3x4x5xf32> {gpipe.name = "lead"}, tensor<3xf32> {gpipe.name = "short"}, tensor<1x1x1x1xf32> {gpipe.name = "mean"}) {
  %0 = nn.reduce_sum %x {axes = array<i64: 0, 2, 3>, keepdims = false} : (tensor<2x3x4x5xf32>) -> tensor<3xf32>
  %1 = nn.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<2x3x4x5xf32>) -> tensor<3x4x5xf32>
  %2 = nn.reduce_sum %s {axes = array<i64: 0, 2, 3>, keepdims = false} : (tensor<2x3x2x2xf32>) -> tensor<3xf32>
  %3 = nn.reduce_mean %x {axes = array<i64: 0, 1, 2, 3>, keepdims = true} : (tensor<2x3x4x5xf32>) -> tensor<1x1x1x1xf32>
  return %0, %1, %2, %3 : tensor<3xf32>, tensor<3x4x5xf32>, tensor<3xf32>, tensor<1x1x1x1xf32>
}
