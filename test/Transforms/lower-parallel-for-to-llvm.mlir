// RUN: gpipe-opt %s --split-input-file --gpipe-lower-parallel-for-to-llvm -verify-diagnostics | FileCheck %s

// The runtime's entry point is declared once and called with the address
// of the outlined body and the extent.
// CHECK: llvm.func @gpipe_parallel_for(i64, !llvm.ptr, i64)
// CHECK-LABEL: llvm.func @gpipe_stage0_forward
// CHECK-SAME: %[[CTX:[^ ]*]]: i64)
// CHECK: %[[BODY:.*]] = llvm.mlir.addressof @gpipe_stage0_forward_loop0 : !llvm.ptr
// CHECK: %[[N:.*]] = llvm.mlir.constant(64 : i64) : i64
// CHECK: llvm.call @gpipe_parallel_for(%[[CTX]], %[[BODY]], %[[N]]) : (i64, !llvm.ptr, i64) -> ()
// CHECK: %[[BODY1:.*]] = llvm.mlir.addressof @gpipe_stage0_forward_loop1 : !llvm.ptr
// CHECK: llvm.call @gpipe_parallel_for(%[[CTX]], %[[BODY1]], %{{.*}})
// CHECK-NOT: gpipe.parallel_for
llvm.func @gpipe_stage0_forward(%arena: !llvm.ptr, %params: !llvm.ptr, %ctx: i64) {
  gpipe.parallel_for @gpipe_stage0_forward_loop0(%ctx) extent 64
  gpipe.parallel_for @gpipe_stage0_forward_loop1(%ctx) extent 3
  llvm.return
}
llvm.func @gpipe_stage0_forward_loop0(%arena: !llvm.ptr {llvm.noalias}, %params: !llvm.ptr {llvm.noalias}, %begin: i64, %end: i64) {
  llvm.return
}
llvm.func @gpipe_stage0_forward_loop1(%arena: !llvm.ptr {llvm.noalias}, %params: !llvm.ptr {llvm.noalias}, %begin: i64, %end: i64) {
  llvm.return
}

// -----

// Before the conversion of func to LLVM, the body is not an llvm.func yet.
func.func @stage(%arena: memref<8xi8>, %params: memref<8xi8>, %ctx: i64) {
  // expected-error @+1 {{'gpipe.parallel_for' op 'body' is not an llvm.func; run this pass after the conversion of func to LLVM}}
  gpipe.parallel_for @body(%ctx) extent 2
  return
}
func.func private @body(%arena: memref<8xi8>, %params: memref<8xi8>, %b: index, %e: index) {
  return
}
