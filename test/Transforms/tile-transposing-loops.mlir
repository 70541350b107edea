// RUN: gpipe-opt %s --split-input-file --gpipe-tile-transposing-loops --canonicalize | FileCheck %s

// Attention's key transpose, [T, N, D] -> [N, D, T] (perm [1, 2, 0]), as
// gpipe-outline-parallel-loops leaves it: the stores run along t, the load
// along d. Blocks of 16 d (one 64-byte line of floats) by 8 t; n one at a
// time outside them; the chunk's bounds [begin, end) kept.
// CHECK-LABEL: func.func @key_transpose
// CHECK-SAME: (%[[SRC:.*]]: memref<65x128x32xf32>, %[[DST:.*]]: memref<128x32x65xf32>, %[[BEGIN:.*]]: index, %[[END:.*]]: index)
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK: scf.parallel (%[[N:.*]], %[[D:.*]], %[[T:.*]]) = (%[[BEGIN]], %{{.*}}, %{{.*}}) to (%[[END]], %{{.*}}, %{{.*}}) step (%[[C1]], %[[C16]], %[[C8]])
// CHECK: %[[NEND:.*]] = affine.min #{{.*}}(%[[N]])[%[[END]]]
// CHECK: %[[TEND:.*]] = affine.min #{{.*}}(%[[T]])
// CHECK: scf.parallel (%[[N0:.*]], %[[D0:.*]], %[[T0:.*]]) = ({{.*}}) to (%[[NEND]], %[[C16]], %[[TEND]]) step (%[[C1]], %[[C1]], %[[C1]])
// CHECK-DAG: %[[NI:.*]] = arith.addi %[[N0]], %[[N]]
// CHECK-DAG: %[[DI:.*]] = arith.addi %[[D0]], %[[D]]
// CHECK-DAG: %[[TI:.*]] = arith.addi %[[T0]], %[[T]]
// CHECK: %[[V:.*]] = memref.load %[[SRC]][%[[TI]], %[[NI]], %[[DI]]]
// CHECK: memref.store %[[V]], %[[DST]][%[[NI]], %[[DI]], %[[TI]]]
func.func @key_transpose(%src: memref<65x128x32xf32>, %dst: memref<128x32x65xf32>, %begin: index, %end: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c65 = arith.constant 65 : index
  scf.parallel (%n, %d, %t) = (%begin, %c0, %c0) to (%end, %c32, %c65) step (%c1, %c1, %c1) {
    %v = memref.load %src[%t, %n, %d] : memref<65x128x32xf32>
    memref.store %v, %dst[%n, %d, %t] : memref<128x32x65xf32>
    scf.reduce
  }
  return
}

// -----

// Indices through one-dimension affine.apply (as linalg's lowering gives
// them), bytes (masks as i8): blocks of 64 along the read dimension.
#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @byte_transpose
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK: scf.parallel ({{.*}}) step (%[[C64]], %[[C8]])
func.func @byte_transpose(%src: memref<256x512xi8>, %dst: memref<512x256xi8>, %begin: index, %end: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i, %j) = (%begin, %c0) to (%end, %c256) step (%c1, %c1) {
    %i0 = affine.apply #id(%i)
    %j0 = affine.apply #id(%j)
    %v = memref.load %src[%j0, %i0] : memref<256x512xi8>
    memref.store %v, %dst[%i0, %j0] : memref<512x256xi8>
    scf.reduce
  }
  return
}

// -----

// Loads and stores along the same dimension (a slice, an element-wise op,
// a broadcast of a row): left as they are.
// CHECK-LABEL: func.func @no_transpose
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = {{.*}} step (%[[C1:.*]], %[[C1]])
// CHECK-NOT: scf.parallel
func.func @no_transpose(%src: memref<64x384xf32>, %row: memref<128xf32>, %dst: memref<64x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c128) step (%c1, %c1) {
    %k = arith.addi %j, %c128 : index
    %a = memref.load %src[%i, %k] : memref<64x384xf32>
    %b = memref.load %row[%j] : memref<128xf32>
    %s = arith.addf %a, %b : f32
    memref.store %s, %dst[%i, %j] : memref<64x128xf32>
    scf.reduce
  }
  return
}

// -----

// A transpose that is one block already (4 x 8 floats): left as it is.
// CHECK-LABEL: func.func @small_transpose
// CHECK: scf.parallel
// CHECK-NOT: scf.parallel
func.func @small_transpose(%src: memref<8x4xf32>, %dst: memref<4x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c8) step (%c1, %c1) {
    %v = memref.load %src[%j, %i] : memref<8x4xf32>
    memref.store %v, %dst[%i, %j] : memref<4x8xf32>
    scf.reduce
  }
  return
}
