// RUN: gpipe-opt %s --split-input-file "--gpipe-partition=devices=cpu:0,cpu:1" | FileCheck %s
// RUN: gpipe-opt %s --split-input-file "--gpipe-partition=devices=cpu:0,cpu:1 stages=manual:1" | FileCheck %s --check-prefix=MANUAL
// RUN: gpipe-opt %s --split-input-file "--gpipe-partition=devices=cpu:0,cpu:1,cpu:2 stages=manual:1,2" | FileCheck %s --check-prefix=THREE
// RUN: not gpipe-opt %s --split-input-file "--gpipe-partition=devices=cpu:0,cpu:1 stages=manual:3" 2>&1 | FileCheck %s --check-prefix=BADCUT
// RUN: not gpipe-opt %s --split-input-file "--gpipe-partition=devices=cpu:0,tpu:1" 2>&1 | FileCheck %s --check-prefix=BADDEV

// Two equal gemms then a cheap loss: the balanced cut is after the first
// gemm. The tensor crossing the cut is a result of stage 0 ("act:0") and
// an input of stage 1; the labels go straight to stage 1.

// CHECK-LABEL: func.func @forward
// CHECK: %[[A:.*]] = gpipe.stage 0 on "cpu:0" (%arg0)
// CHECK-SAME: gpipe.input_names = ["x"]
// CHECK-SAME: gpipe.layers = array<i64: 0, 1>
// CHECK-SAME: gpipe.output_names = ["act:0"]
// CHECK: nn.gemm
// CHECK: gpipe.yield
// CHECK: %[[B:.*]]:2 = gpipe.stage 1 on "cpu:1" (%[[A]], %arg1)
// CHECK-SAME: gpipe.input_names = ["act:0", "labels"]
// CHECK-SAME: gpipe.layers = array<i64: 1, 3>
// CHECK-SAME: gpipe.output_names = ["loss", "logits"]
// CHECK: gpipe.get_parameter @w2
// CHECK: nn.gemm
// CHECK: nn.softmax_cross_entropy
// CHECK: return %[[B]]#0, %[[B]]#1

// MANUAL: gpipe.layers = array<i64: 0, 1>
// MANUAL: gpipe.layers = array<i64: 1, 3>

// BADCUT: error: --stages=manual:3: cuts must be increasing layer indices in [1, 3)
// BADDEV: error: --devices: invalid device 'tpu:1': unknown device kind 'tpu'

module {
  gpipe.parameter @w1 trainable = dense<0.5> : tensor<256x256xf32>
  gpipe.parameter @w2 trainable = dense<0.25> : tensor<256x256xf32>
  func.func @forward(%x: tensor<64x256xf32> {gpipe.name = "x"}, %labels: tensor<64xi64> {gpipe.name = "labels"}) -> (tensor<f32> {gpipe.name = "loss"}, tensor<64x256xf32> {gpipe.name = "logits"}) {
    %w1 = gpipe.get_parameter @w1 : tensor<256x256xf32>
    %h = nn.gemm %x, %w1 : (tensor<64x256xf32>, tensor<256x256xf32>) -> tensor<64x256xf32>
    %w2 = gpipe.get_parameter @w2 : tensor<256x256xf32>
    %y = nn.gemm %h, %w2 : (tensor<64x256xf32>, tensor<256x256xf32>) -> tensor<64x256xf32>
    %loss = nn.softmax_cross_entropy %y, %labels : (tensor<64x256xf32>, tensor<64xi64>) -> tensor<f32>
    return %loss, %y : tensor<f32>, tensor<64x256xf32>
  }
}

// -----

// A residual: relu's result is used by the add in the last stage, so the
// middle stage receives it and passes it on; each cut sends everything that
// crosses it. Graph inputs are not sent.

// THREE: // {{-----}}
// THREE: func.func @forward
// THREE: gpipe.stage 0 on "cpu:0" (%arg0)
// THREE-SAME: gpipe.input_names = ["x"]
// THREE-SAME: gpipe.output_names = ["act:0"]
// THREE: gpipe.stage 1 on "cpu:1"
// THREE-SAME: gpipe.input_names = ["act:0"]
// THREE-SAME: gpipe.output_names = ["act:0", "act:1"]
// THREE: ^bb0(%[[R:.*]]: tensor<8x16xf32>):
// THREE: nn.sigmoid %[[R]]
// THREE: gpipe.yield %[[R]], %{{.*}}
// THREE: gpipe.stage 2 on "cpu:2"
// THREE-SAME: gpipe.input_names = ["act:0", "act:1"]
// THREE-SAME: gpipe.output_names = ["loss"]
// THREE: nn.add
module {
  func.func @forward(%x: tensor<8x16xf32> {gpipe.name = "x"}) -> (tensor<f32> {gpipe.name = "loss"}) {
    %r = nn.relu %x : tensor<8x16xf32>
    %s = nn.sigmoid %r : tensor<8x16xf32>
    %t = nn.tanh %s : tensor<8x16xf32>
    %a = nn.add %t, %r : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    %m = nn.reduce_mean %a {axes = array<i64: 0, 1>, keepdims = false} : (tensor<8x16xf32>) -> tensor<f32>
    return %m : tensor<f32>
  }
}
