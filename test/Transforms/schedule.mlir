// RUN: gpipe-opt %s "--gpipe-schedule=kind=gpipe micro-batches=2" | FileCheck %s --check-prefix=GPIPE
// RUN: gpipe-opt %s "--gpipe-schedule=kind=1f1b micro-batches=3 recompute=except-last" | FileCheck %s --check-prefix=ONEF
// RUN: gpipe-opt %s "--gpipe-schedule=kind=1f1b micro-batches=3" --gpipe-verify-schedule 2>&1 | FileCheck %s --check-prefix=VERIFY
// RUN: gpipe-opt %s "--gpipe-schedule=kind=zb-h1 micro-batches=3" --gpipe-verify-schedule 2>&1 | FileCheck %s --check-prefix=ZB
// RUN: not gpipe-opt %s "--gpipe-schedule=kind=zigzag" 2>&1 | FileCheck %s --check-prefix=BAD

// GPIPE: gpipe.schedule stages(2) micro_batches(2)
// GPIPE: gpipe.stream 0 on "cpu:0" attributes {memory_limit = 1000000 : i64, stash_bytes = 100 : i64, static_bytes = 1000 : i64}
// GPIPE-NEXT: gpipe.forward 0
// GPIPE-NEXT: gpipe.send_activation 0 peer 1
// GPIPE-NEXT: gpipe.forward 1
// GPIPE-NEXT: gpipe.send_activation 1 peer 1
// GPIPE-NEXT: gpipe.recv_gradient 1 peer 1
// GPIPE-NEXT: gpipe.backward 1
// GPIPE-NEXT: gpipe.recv_gradient 0 peer 1
// GPIPE-NEXT: gpipe.backward 0
// GPIPE-NEXT: gpipe.optimizer_step
// GPIPE: gpipe.stream 1 on "cpu:1"
// GPIPE-NEXT: gpipe.recv_activation 0 peer 0
// GPIPE-NEXT: gpipe.forward 0
// GPIPE-NEXT: gpipe.recv_activation 1 peer 0
// GPIPE-NEXT: gpipe.forward 1
// GPIPE-NEXT: gpipe.backward 1
// GPIPE-NEXT: gpipe.send_gradient 1 peer 0
// GPIPE-NEXT: gpipe.backward 0
// GPIPE-NEXT: gpipe.send_gradient 0 peer 0
// GPIPE-NEXT: gpipe.optimizer_step

// 1F1B: one warm-up forward on stage 0 (K-1-k), then alternating; only
// stage 0 recomputes under except-last.
// ONEF: gpipe.stream 0 on "cpu:0"
// ONEF-NEXT: gpipe.forward 0
// ONEF-NEXT: gpipe.send_activation 0 peer 1
// ONEF-NEXT: gpipe.forward 1
// ONEF-NEXT: gpipe.send_activation 1 peer 1
// ONEF-NEXT: gpipe.recv_gradient 0 peer 1
// ONEF-NEXT: gpipe.recompute 0
// ONEF-NEXT: gpipe.backward 0
// ONEF-NEXT: gpipe.forward 2
// ONEF: gpipe.stream 1 on "cpu:1"
// ONEF-NEXT: gpipe.recv_activation 0 peer 0
// ONEF-NEXT: gpipe.forward 0
// ONEF-NEXT: gpipe.backward 0
// ONEF-NEXT: gpipe.send_gradient 0 peer 0
// ONEF-NOT: recompute

// The verifier's peak: static + stash x most micro-batches in the stash
// at once (1F1B: 2 alive and stashed on stage 0; 1 alive on stage 1, each
// backward next after its forward, its values left where the forward put
// them).
// VERIFY: remark: stage 0 on cpu:0: peak memory 1200 bytes, 2 micro-batches alive at once, 2 of them in the stash
// VERIFY: remark: stage 1 on cpu:1: peak memory 500 bytes, 1 micro-batches alive at once, 0 of them in the stash
// VERIFY: peak_bytes = 1200

// ZB-H1: stage s runs 1F1B's K-1-s forwards ahead, then s forwards each
// with an input part (B) whose weight part (W) waits, then F, B and the
// oldest W in turn, the remaining B's with a W each, the W's left. Every
// stage keeps K micro-batches from their forward to their W, all through
// the stash (a split backward's parts have arenas of their own).
// ZB: remark: stage 0 on cpu:0: peak memory 1200 bytes, 2 micro-batches alive at once, 2 of them in the stash
// ZB: remark: stage 1 on cpu:1: peak memory 600 bytes, 2 micro-batches alive at once, 2 of them in the stash
// ZB: gpipe.stream 0 on "cpu:0"
// ZB-NEXT: gpipe.forward 0
// ZB-NEXT: gpipe.send_activation 0 peer 1
// ZB-NEXT: gpipe.forward 1
// ZB-NEXT: gpipe.send_activation 1 peer 1
// ZB-NEXT: gpipe.recv_gradient 0 peer 1
// ZB-NEXT: gpipe.backward_input 0
// ZB-NEXT: gpipe.backward_weight 0
// ZB-NEXT: gpipe.forward 2
// ZB-NEXT: gpipe.send_activation 2 peer 1
// ZB-NEXT: gpipe.recv_gradient 1 peer 1
// ZB-NEXT: gpipe.backward_input 1
// ZB-NEXT: gpipe.backward_weight 1
// ZB-NEXT: gpipe.recv_gradient 2 peer 1
// ZB-NEXT: gpipe.backward_input 2
// ZB-NEXT: gpipe.backward_weight 2
// ZB-NEXT: gpipe.optimizer_step
// ZB: gpipe.stream 1 on "cpu:1"
// ZB-NEXT: gpipe.recv_activation 0 peer 0
// ZB-NEXT: gpipe.forward 0
// ZB-NEXT: gpipe.backward_input 0
// ZB-NEXT: gpipe.send_gradient 0 peer 0
// ZB-NEXT: gpipe.recv_activation 1 peer 0
// ZB-NEXT: gpipe.forward 1
// ZB-NEXT: gpipe.backward_input 1
// ZB-NEXT: gpipe.send_gradient 1 peer 0
// ZB-NEXT: gpipe.backward_weight 0
// ZB-NEXT: gpipe.recv_activation 2 peer 0
// ZB-NEXT: gpipe.forward 2
// ZB-NEXT: gpipe.backward_input 2
// ZB-NEXT: gpipe.send_gradient 2 peer 0
// ZB-NEXT: gpipe.backward_weight 1
// ZB-NEXT: gpipe.backward_weight 2
// ZB-NEXT: gpipe.optimizer_step

// BAD: error: schedule kind must be gpipe, 1f1b, zb-h1, interleaved-1f1b or zb-v, not 'zigzag'

module {
  func.func @forward(%x: tensor<4xf32> {gpipe.name = "x"}) -> (tensor<f32> {gpipe.name = "loss"}) {
    %a = gpipe.stage 0 on "cpu:0" (%x) : (tensor<4xf32>) -> tensor<4xf32> attributes {gpipe.static_bytes = 1000 : i64, gpipe.stash_bytes = 100 : i64, gpipe.memory_limit = 1000000 : i64} {
    ^bb0(%in: tensor<4xf32>):
      %r = nn.relu %in : tensor<4xf32>
      gpipe.yield %r : tensor<4xf32>
    }
    %l = gpipe.stage 1 on "cpu:1" (%a) : (tensor<4xf32>) -> tensor<f32> attributes {gpipe.static_bytes = 500 : i64, gpipe.stash_bytes = 50 : i64} {
    ^bb0(%in: tensor<4xf32>):
      %m = nn.reduce_mean %in {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
      gpipe.yield %m : tensor<f32>
    }
    return %l : tensor<f32>
  }
}
