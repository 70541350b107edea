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

// Size-1 axes broadcast by constant indices: read through a view without
// them, after which the loops the broadcast does not index merge (a
// per-channel scale: 2 x 3 x 16; a global pool's gradient, [N, C, 1, 1] over
// [N, C, H, W]: N*C x H*W; an attention mask [1, 1, T, T] over [B, H, T, T]:
// B*H x T*T; a [1, 1] scalar: rank 0, one loop).
func.func @channels(%x: memref<2x3x4x4xf32>, %s: memref<1x3x1x1xf32>, %y: memref<2x3x4x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %s : memref<2x3x4x4xf32>, memref<1x3x1x1xf32>) outs(%y : memref<2x3x4x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  }
  return
}
// CHECK-LABEL: func.func @channels
// CHECK-DAG: memref.collapse_shape %{{.*}} {{\[\[}}0, 1, 2, 3]] : memref<1x3x1x1xf32> into memref<3xf32>
// CHECK-DAG: memref.collapse_shape %{{.*}} {{\[\[}}0], [1], [2, 3]] : memref<2x3x4x4xf32> into memref<2x3x16xf32>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel"]} ins({{.*}} : memref<2x3x16xf32>, memref<3xf32>)

func.func @pool_gradient(%g: memref<32x16x1x1xf32>, %m: memref<32x16x14x14xf32>, %y: memref<32x16x14x14xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, 0)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%g, %m : memref<32x16x1x1xf32>, memref<32x16x14x14xf32>) outs(%y : memref<32x16x14x14xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    linalg.yield %p : f32
  }
  return
}
// CHECK-LABEL: func.func @pool_gradient
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel", "parallel"]} ins({{.*}} : memref<512xf32>, memref<512x196xf32>) outs({{.*}} : memref<512x196xf32>)

func.func @mask(%x: memref<2x4x8x8xf32>, %k: memref<1x1x8x8xf32>, %y: memref<2x4x8x8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (0, 0, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %k : memref<2x4x8x8xf32>, memref<1x1x8x8xf32>) outs(%y : memref<2x4x8x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  }
  return
}
// CHECK-LABEL: func.func @mask
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel", "parallel"]} ins({{.*}} : memref<8x64xf32>, memref<64xf32>) outs({{.*}} : memref<8x64xf32>)

func.func @scalar(%x: memref<6x5xf32>, %c: memref<1x1xf32>, %y: memref<6x5xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (0, 0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%x, %c : memref<6x5xf32>, memref<1x1xf32>) outs(%y : memref<6x5xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.mulf %a, %b : f32
    linalg.yield %s : f32
  }
  return
}
// CHECK-LABEL: func.func @scalar
// CHECK: memref.collapse_shape %{{.*}} [] : memref<1x1xf32> into memref<f32>
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel"]} ins({{.*}} : memref<30xf32>, memref<f32>) outs({{.*}} : memref<30xf32>)

// Reductions: left as they are.
func.func @sum(%x: memref<6x5xf32>, %y: memref<6xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x5xf32>) outs(%y : memref<6xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  }
  return
}
// CHECK-LABEL: func.func @sum
// CHECK-NOT: collapse_shape
