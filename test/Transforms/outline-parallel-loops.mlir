// RUN: gpipe-opt %s --split-input-file --gpipe-outline-parallel-loops=min-elements=64 -verify-diagnostics | FileCheck %s

// An element-wise generic over 4x32 elements reading a scalar: it moves to
// @<entry>_loop0 with its views and constants, its outer dimension runs
// over [begin, end), and the stage function calls the runtime instead.
#id = affine_map<(d0, d1) -> (d0, d1)>
#scalar = affine_map<(d0, d1) -> ()>
// CHECK-LABEL: func.func @gpipe_stage0_forward
// CHECK-SAME: (%{{.*}}: memref<1024xi8>, %{{.*}}: memref<64xi8>, %[[CTX:.*]]: i64)
// CHECK-NOT: linalg.generic
// CHECK: gpipe.parallel_for @gpipe_stage0_forward_loop0(%[[CTX]]) extent 4
// CHECK: return
// CHECK-LABEL: func.func private @gpipe_stage0_forward_loop0
// CHECK-SAME: (%[[ARENA:.*]]: memref<1024xi8> {llvm.noalias}, %[[PARAMS:.*]]: memref<64xi8> {llvm.noalias}, %[[BEGIN:.*]]: index, %[[END:.*]]: index)
// CHECK-DAG: %[[X:.*]] = memref.view %[[ARENA]][%{{.*}}][] : memref<1024xi8> to memref<4x32xf32>
// CHECK-DAG: %[[S:.*]] = memref.view %[[PARAMS]][%{{.*}}][] : memref<64xi8> to memref<f32>
// CHECK-DAG: %[[Y:.*]] = memref.view %[[ARENA]][%{{.*}}][] : memref<1024xi8> to memref<4x32xf32>
// CHECK: scf.parallel (%[[I:.*]], %[[J:.*]]) = (%[[BEGIN]], %{{.*}}) to (%[[END]], %{{.*}})
// CHECK: %[[I0:.*]] = affine.apply #{{.*}}(%[[I]])
// CHECK: %[[J0:.*]] = affine.apply #{{.*}}(%[[J]])
// CHECK: memref.load %[[X]][%[[I0]], %[[J0]]]
// CHECK: memref.load %[[S]][]
// CHECK: arith.maximumf
// CHECK: memref.store %{{.*}}, %[[Y]]
// CHECK: return
func.func @gpipe_stage0_forward(%arena: memref<1024xi8>, %params: memref<64xi8>, %ctx: i64) attributes {gpipe.phase = "forward"} {
  %c0 = arith.constant 0 : index
  %c512 = arith.constant 512 : index
  %x = memref.view %arena[%c0][] : memref<1024xi8> to memref<4x32xf32>
  %y = memref.view %arena[%c512][] : memref<1024xi8> to memref<4x32xf32>
  %s = memref.view %params[%c0][] : memref<64xi8> to memref<f32>
  %zero = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [#id, #scalar, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : memref<4x32xf32>, memref<f32>) outs(%y : memref<4x32xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.maximumf %m, %zero : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// Leading unit dimensions are skipped: the chunks split the first one with
// more than one iteration.
#id4 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @gpipe_stage0_backward
// CHECK: gpipe.parallel_for @gpipe_stage0_backward_loop0(%{{.*}}) extent 8
// CHECK-LABEL: func.func private @gpipe_stage0_backward_loop0
// CHECK: scf.parallel (%{{.*}}, %{{.*}}, %{{.*}}) = (%{{.*}}, %[[BEGIN:arg2]], %{{.*}}) to (%{{.*}}, %[[END:arg3]], %{{.*}})
func.func @gpipe_stage0_backward(%arena: memref<1024xi8>, %params: memref<64xi8>, %ctx: i64) attributes {gpipe.phase = "backward"} {
  %c0 = arith.constant 0 : index
  %c512 = arith.constant 512 : index
  %x = memref.view %arena[%c0][] : memref<1024xi8> to memref<1x8x16xf32>
  %y = memref.view %arena[%c512][] : memref<1024xi8> to memref<1x8x16xf32>
  linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<1x8x16xf32>) outs(%y : memref<1x8x16xf32>) {
  ^bb0(%a: f32, %out: f32):
    %r = arith.negf %a : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// Left in place: too small, a reduction, and an in-place update that reads
// its output transposed (chunks of rows would race with each other).
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @gpipe_stage0_optimizer
// CHECK-NOT: gpipe.parallel_for
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT: gpipe.parallel_for
func.func @gpipe_stage0_optimizer(%arena: memref<1024xi8>, %params: memref<64xi8>, %ctx: i64) attributes {gpipe.phase = "optimizer"} {
  %c0 = arith.constant 0 : index
  %c256 = arith.constant 256 : index
  %c512 = arith.constant 512 : index
  %small = memref.view %arena[%c0][] : memref<1024xi8> to memref<2x4xf32>
  %small2 = memref.view %arena[%c512][] : memref<1024xi8> to memref<2x4xf32>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%small : memref<2x4xf32>) outs(%small2 : memref<2x4xf32>) {
  ^bb0(%a: f32, %out: f32):
    linalg.yield %a : f32
  }
  %m = memref.view %arena[%c0][] : memref<1024xi8> to memref<16x16xf32>
  %sum = memref.view %arena[%c512][] : memref<1024xi8> to memref<16xf32>
  linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%m : memref<16x16xf32>) outs(%sum : memref<16xf32>) {
  ^bb0(%a: f32, %out: f32):
    %r = arith.addf %a, %out : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#tr, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%m : memref<16x16xf32>) outs(%m : memref<16x16xf32>) {
  ^bb0(%a: f32, %out: f32):
    linalg.yield %a : f32
  }
  return
}

// -----

// Two loops: their bodies follow the stage function in loop order, named
// by their position, and the calls keep the order of the loops.
#same = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @gpipe_stage0_forward
// CHECK: gpipe.parallel_for @gpipe_stage0_forward_loop0(%{{.*}}) extent 128
// CHECK-NEXT: gpipe.parallel_for @gpipe_stage0_forward_loop1(%{{.*}}) extent 128
// CHECK: func.func private @gpipe_stage0_forward_loop0
// CHECK: arith.negf
// CHECK: func.func private @gpipe_stage0_forward_loop1
// CHECK: math.absf
func.func @gpipe_stage0_forward(%arena: memref<1024xi8>, %params: memref<64xi8>, %ctx: i64) attributes {gpipe.phase = "forward"} {
  %c0 = arith.constant 0 : index
  %c512 = arith.constant 512 : index
  %x = memref.view %arena[%c0][] : memref<1024xi8> to memref<128xf32>
  %y = memref.view %arena[%c512][] : memref<1024xi8> to memref<128xf32>
  linalg.generic {indexing_maps = [#same, #same], iterator_types = ["parallel"]}
      ins(%x : memref<128xf32>) outs(%y : memref<128xf32>) {
  ^bb0(%a: f32, %out: f32):
    %r = arith.negf %a : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#same, #same], iterator_types = ["parallel"]}
      ins(%y : memref<128xf32>) outs(%x : memref<128xf32>) {
  ^bb0(%a: f32, %out: f32):
    %r = math.absf %a : f32
    linalg.yield %r : f32
  }
  return
}
