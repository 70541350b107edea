// RUN: gpipe-opt %s --gpipe-collapse-elementwise-loops --split-input-file | FileCheck %s

// A convolution's weight update: one loop over all 288 elements.
func.func @weights(%w: memref<8x4x3x3xf32>, %g: memref<8x4x3x3xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%g : memref<8x4x3x3xf32>) outs(%w : memref<8x4x3x3xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.subf %b, %a : f32
    linalg.yield %s : f32
  }
  return
}
// CHECK-LABEL: func.func @weights
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1, 2, 3]] : memref<8x4x3x3xf32> into memref<288xf32>
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel"]} ins({{.*}} : memref<288xf32>) outs({{.*}} : memref<288xf32>)

// -----

// A bias over the last axis: the leading axes merge, the biased one stays.
func.func @bias(%x: memref<5x9x7xf32>, %b: memref<7xf32>, %y: memref<5x9x7xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %b : memref<5x9x7xf32>, memref<7xf32>) outs(%y : memref<5x9x7xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  }
  return
}
// CHECK-LABEL: func.func @bias
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : memref<5x9x7xf32> into memref<45x7xf32>
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel", "parallel"]} ins({{.*}}, %{{.*}} : memref<45x7xf32>, memref<7xf32>)

// -----

// Size-1 axes broadcast by constant indices, and reductions: left as they are.
func.func @channels(%x: memref<2x3x4x4xf32>, %s: memref<1x3x1x1xf32>, %y: memref<2x3x4x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %s : memref<2x3x4x4xf32>, memref<1x3x1x1xf32>) outs(%y : memref<2x3x4x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  }
  return
}
func.func @sum(%x: memref<6x5xf32>, %y: memref<6xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x5xf32>) outs(%y : memref<6xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  }
  return
}
// CHECK-LABEL: func.func @channels
// CHECK-NOT: collapse_shape
// CHECK-LABEL: func.func @sum
// CHECK-NOT: collapse_shape
