// RUN: gpipe-opt %s --gpipe-booleans-as-bytes | FileCheck %s
// A mask element is a byte in memory: read and written as an i8 (and
// truncated or extended), indexed in bytes, so that loops over masks
// vectorize. Other types are left alone.

// CHECK-LABEL: llvm.func @select_by_mask
// CHECK: %[[P:.*]] = llvm.getelementptr %arg0[%arg2] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: %[[BYTE:.*]] = llvm.load %[[P]] : !llvm.ptr -> i8
// CHECK: %[[BIT:.*]] = llvm.trunc %[[BYTE]] : i8 to i1
// CHECK: %[[Q:.*]] = llvm.getelementptr %arg1[%arg2] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK: %[[X:.*]] = llvm.load %[[Q]] : !llvm.ptr -> f32
// CHECK: llvm.select %[[BIT]], %{{.*}}, %[[X]] : i1, f32
// CHECK: %[[OUT:.*]] = llvm.zext %[[BIT]] : i1 to i8
// CHECK: llvm.store %[[OUT]], %[[P]] : i8, !llvm.ptr
// CHECK-NOT: i1, !llvm.ptr
llvm.func @select_by_mask(%mask: !llvm.ptr, %x: !llvm.ptr, %i: i64) -> f32 {
  %fill = llvm.mlir.constant(0xFF800000 : f32) : f32
  %p = llvm.getelementptr %mask[%i] : (!llvm.ptr, i64) -> !llvm.ptr, i1
  %m = llvm.load %p : !llvm.ptr -> i1
  %q = llvm.getelementptr %x[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %v = llvm.load %q : !llvm.ptr -> f32
  %r = llvm.select %m, %fill, %v : i1, f32
  llvm.store %m, %p : i1, !llvm.ptr
  llvm.return %r : f32
}
