// RUN: gpipe-opt %s --split-input-file --gpipe-convert-elementwise-to-linalg --linalg-fuse-elementwise-ops "--gpipe-lower-stage=function=optimizer entry=gpipe_stage0_optimizer" | FileCheck %s

// An optimizer update computed element-wise is written straight into the
// parameter (no copy): the generic's output is a view of the parameter
// blob. @w's old value is read only by that generic.
// Each op's code is a function of its own, called in order by the stage
// function and never inlined into it, between gpipe_loop calls that time
// it (loop 0: begin 0, end 1).
// CHECK-LABEL: func.func @gpipe_stage0_optimizer(
// CHECK-SAME: gpipe.loops = [{id = 0 : i64, op = ""}]
// CHECK-NEXT: %[[ID:.*]] = arith.constant 0 : i64
// CHECK-NEXT: %[[BEGIN:.*]] = arith.constant 0 : i64
// CHECK-NEXT: call @gpipe_loop(%[[CTX:.*]], %[[ID]], %[[BEGIN]]) : (i64, i64, i64) -> ()
// CHECK-NEXT: call @gpipe_stage0_optimizer_op0(
// CHECK-NEXT: %[[END:.*]] = arith.constant 1 : i64
// CHECK-NEXT: call @gpipe_loop(%[[CTX]], %[[ID]], %[[END]])
// CHECK-NEXT: return
// CHECK: func.func private @gpipe_stage0_optimizer_op0(%[[ARENA:.*]]: memref<{{.*}}xi8>, %[[PARAMS:.*]]: memref<64xi8>, %{{.*}}: i64) attributes {gpipe.stage_op, passthrough = ["noinline"]}
// CHECK: %[[W:.*]] = memref.view %[[PARAMS]][%{{.*}}][] : memref<64xi8> to memref<4xf32>
// CHECK: %[[LR:.*]] = memref.view %[[ARENA]]{{.*}} to memref<f32>
// CHECK: %[[G:.*]] = memref.view %[[ARENA]]{{.*}} to memref<4xf32>
// CHECK: %[[NEW:.*]] = memref.view %[[PARAMS]][%{{.*}}][] : memref<64xi8> to memref<4xf32>
// CHECK: linalg.generic {{.*}} ins(%[[W]], %[[LR]], %[[G]] : memref<4xf32>, memref<f32>, memref<4xf32>) outs(%[[NEW]] : memref<4xf32>)
// CHECK-NOT: memref.copy
// CHECK: return
gpipe.parameter @w trainable = dense<1.0> : tensor<4xf32>
func.func @optimizer(%g: tensor<4xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>}, %lr: tensor<f32> {gpipe.name = "hyper:lr", gpipe.role = #gpipe.role<hyper>}) {
  %w = gpipe.get_parameter @w : tensor<4xf32>
  %step = nn.mul %lr, %g : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %new = nn.sub %w, %step : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  gpipe.assign_parameter @w, %new : tensor<4xf32>
  return
}

// -----

// The old value of @w is still read after the new one is computed: the new
// value gets a buffer of its own and is copied in at the assignment.
// CHECK-LABEL: func.func @gpipe_stage0_optimizer(
// CHECK: call @gpipe_stage0_optimizer_op0(
// CHECK: call @gpipe_stage0_optimizer_op1(
// CHECK: memref.copy
// CHECK: return
// CHECK: func.func private @gpipe_stage0_optimizer_op0(
// CHECK: linalg.generic
gpipe.parameter @w trainable = dense<1.0> : tensor<4xf32>
gpipe.parameter @v = dense<0.0> : tensor<4xf32>
func.func @optimizer(%g: tensor<4xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>}) {
  %w = gpipe.get_parameter @w : tensor<4xf32>
  %new = nn.sub %w, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %late = nn.relu %w : tensor<4xf32>
  %sum = nn.mul %late, %new : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  gpipe.assign_parameter @w, %new : tensor<4xf32>
  gpipe.assign_parameter @v, %sum : tensor<4xf32>
  return
}
