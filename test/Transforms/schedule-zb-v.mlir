// ZB-V over four stages laid out as a V on two devices (cpu:0, cpu:1,
// cpu:1, cpu:0): each stream in its device's group (stages 0 and 3 in
// group 0, 1 and 2 in group 1), each compute instruction with its turn on
// the device, the backward in two parts; verified (deadlock-free through
// the turns, each device within its memory).
// RUN: gpipe-opt %s "--gpipe-schedule=kind=zb-v micro-batches=2" | FileCheck %s
// RUN: gpipe-opt %s "--gpipe-schedule=kind=zb-v micro-batches=2" --gpipe-verify-schedule -o /dev/null 2>&1 | FileCheck %s --check-prefix=VERIFY
// RUN: not gpipe-opt %s "--gpipe-schedule=kind=interleaved-1f1b micro-batches=2" 2>&1 | FileCheck %s --check-prefix=LOOPED
// RUN: sed -e 's/"cpu:1" (%b)/"cpu:0" (%b)/' %s | not gpipe-opt - "--gpipe-schedule=kind=zb-v micro-batches=2" 2>&1 | FileCheck %s --check-prefix=NOTV

// CHECK: gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64
// CHECK-NEXT: gpipe.forward 0 {turn = 0 : i64}
// CHECK-NEXT: gpipe.send_activation 0 peer 1
// CHECK-NEXT: gpipe.forward 1 {turn = 1 : i64}
// CHECK-NEXT: gpipe.send_activation 1 peer 1
// CHECK-NEXT: gpipe.recv_gradient 0 peer 1
// CHECK-NEXT: gpipe.backward_input 0 {turn = 8 : i64}
// CHECK-NEXT: gpipe.backward_weight 0 {turn = 9 : i64}
// CHECK: gpipe.stream 1 on "cpu:1" attributes {device_group = 1 : i64
// CHECK: gpipe.stream 2 on "cpu:1" attributes {device_group = 1 : i64
// CHECK: gpipe.stream 3 on "cpu:0" attributes {device_group = 0 : i64
// CHECK-NEXT: gpipe.recv_activation 0 peer 2
// CHECK-NEXT: gpipe.forward 0 {turn = 2 : i64}
// CHECK-NEXT: gpipe.backward_input 0 {turn = 3 : i64}
// CHECK-NEXT: gpipe.send_gradient 0 peer 2
// CHECK-NEXT: gpipe.backward_weight 0 {turn = 4 : i64}
// VERIFY: remark: stage 0 on cpu:0: peak memory 1200 bytes, 2 micro-batches alive at once
// VERIFY: remark: stage 3 on cpu:0

// LOOPED: error: schedule interleaved-1f1b needs each device listed two or more times over, in the same order
// NOTV: error: schedule zb-v needs each device listed twice, forth and back

module {
  func.func @forward(%x: tensor<4xf32> {gpipe.name = "x"}) -> (tensor<f32> {gpipe.name = "loss"}) {
    %a = gpipe.stage 0 on "cpu:0" (%x) : (tensor<4xf32>) -> tensor<4xf32> attributes {gpipe.static_bytes = 1000 : i64, gpipe.stash_bytes = 100 : i64, gpipe.memory_limit = 1000000 : i64} {
    ^bb0(%in: tensor<4xf32>):
      %r = nn.relu %in : tensor<4xf32>
      gpipe.yield %r : tensor<4xf32>
    }
    %b = gpipe.stage 1 on "cpu:1" (%a) : (tensor<4xf32>) -> tensor<4xf32> attributes {gpipe.static_bytes = 1000 : i64, gpipe.stash_bytes = 100 : i64} {
    ^bb0(%in: tensor<4xf32>):
      %r = nn.relu %in : tensor<4xf32>
      gpipe.yield %r : tensor<4xf32>
    }
    %c = gpipe.stage 2 on "cpu:1" (%b) : (tensor<4xf32>) -> tensor<4xf32> attributes {gpipe.static_bytes = 1000 : i64, gpipe.stash_bytes = 100 : i64} {
    ^bb0(%in: tensor<4xf32>):
      %r = nn.relu %in : tensor<4xf32>
      gpipe.yield %r : tensor<4xf32>
    }
    %l = gpipe.stage 3 on "cpu:0" (%c) : (tensor<4xf32>) -> tensor<f32> attributes {gpipe.static_bytes = 500 : i64, gpipe.stash_bytes = 50 : i64} {
    ^bb0(%in: tensor<4xf32>):
      %m = nn.reduce_mean %in {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
      gpipe.yield %m : tensor<f32>
    }
    return %l : tensor<f32>
  }
}
