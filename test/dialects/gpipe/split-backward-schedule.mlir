// RUN: gpipe-opt %s --gpipe-verify-schedule 2>&1 | FileCheck %s

// A zero-bubble order written by hand: each backward in two parts, the
// weight parts (W) filling stage 0's wait for the gradients. The input
// part (B) sends the gradient; a micro-batch stays alive (its stash read)
// until its W: stage 0 keeps micro-batches 0 and 1 in the stash until
// its W's at the end. Stage 1 runs F, B, W of a micro-batch back to back;
// its kept values still go through the stash, which W reads as B does.
// CHECK: remark: stage 0 on cpu:0: peak memory 1200 bytes, 2 micro-batches alive at once, 2 of them in the stash
// CHECK: remark: stage 1 on cpu:1: peak memory 550 bytes, 1 micro-batches alive at once, 1 of them in the stash
// CHECK: gpipe.backward_input 0
// CHECK: gpipe.backward_weight 0
gpipe.schedule stages(2) micro_batches(2) {
  gpipe.stream 0 on "cpu:0" attributes {static_bytes = 1000 : i64, stash_bytes = 100 : i64} {
    gpipe.forward 0
    gpipe.send_activation 0 peer 1
    gpipe.forward 1
    gpipe.send_activation 1 peer 1
    gpipe.recv_gradient 0 peer 1
    gpipe.backward_input 0
    gpipe.recv_gradient 1 peer 1
    gpipe.backward_input 1
    gpipe.backward_weight 0
    gpipe.backward_weight 1
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:1" attributes {static_bytes = 500 : i64, stash_bytes = 50 : i64} {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0
    gpipe.backward_input 0
    gpipe.send_gradient 0 peer 0
    gpipe.backward_weight 0
    gpipe.recv_activation 1 peer 0
    gpipe.forward 1
    gpipe.backward_input 1
    gpipe.send_gradient 1 peer 0
    gpipe.backward_weight 1
    gpipe.optimizer_step
  }
}
