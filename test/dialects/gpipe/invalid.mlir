// RUN: gpipe-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{value must be a statically shaped tensor, got 'vector<4xf32>'}}
gpipe.parameter @p = dense<1.0> : vector<4xf32>

// -----

// expected-error @+1 {{is at most one of trainable, optimizer_state and constant}}
gpipe.parameter @p trainable optimizer_state = dense<1.0> : tensor<4xf32>

// -----

func.func @missing_parameter() {
  // expected-error @+1 {{'q' does not name a gpipe.parameter}}
  %0 = gpipe.get_parameter @q : tensor<4xf32>
  return
}

// -----

gpipe.parameter @p = dense<1.0> : tensor<4xf32>
func.func @parameter_type() {
  // expected-error @+1 {{result type 'tensor<5xf32>' differs from parameter 'p' of type 'tensor<4xf32>'}}
  %0 = gpipe.get_parameter @p : tensor<5xf32>
  return
}

// -----

gpipe.parameter @p = dense<1.0> : tensor<4xf32>
func.func @assign_type(%v: tensor<2xf32>) {
  // expected-error @+1 {{value type 'tensor<2xf32>' differs from parameter 'p' of type 'tensor<4xf32>'}}
  gpipe.assign_parameter @p, %v : tensor<2xf32>
  return
}

// -----

func.func @assign_missing(%v: tensor<2xf32>) {
  // expected-error @+1 {{'nope' does not name a gpipe.parameter}}
  gpipe.assign_parameter @nope, %v : tensor<2xf32>
  return
}

// -----

func.func @stage_yield(%x: tensor<2xf32>) {
  // expected-error @+1 {{yielded types must match the result types}}
  %0 = gpipe.stage 0 on "cpu:0" (%x) : (tensor<2xf32>) -> tensor<3xf32> {
  ^bb0(%in: tensor<2xf32>):
    gpipe.yield %in : tensor<2xf32>
  }
  return
}

// -----

func.func @stage_args(%x: tensor<2xf32>) {
  // expected-error @+1 {{block argument types must match the input types}}
  %0 = gpipe.stage 0 on "cpu:0" (%x) : (tensor<2xf32>) -> tensor<2xf32> {
  ^bb0(%in: tensor<3xf32>):
    gpipe.yield %x : tensor<2xf32>
  }
  return
}

// -----

// Stage 1 waits for an activation that stage 0 never sends.
gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.recv_gradient 0 peer 1
    gpipe.backward 0
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:1" {
    // expected-error @+1 {{has no matching send on stage 0}}
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0
    gpipe.backward 0
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

// Crossed order: stage 0 waits for the gradient before sending the
// activation that stage 1 needs to produce it.
// expected-error @+1 {{deadlocks: stage 0 waits forever at this instruction}}
gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    // expected-note @+1 {{blocked here}}
    gpipe.recv_gradient 0 peer 1
    gpipe.send_activation 0 peer 1
    gpipe.backward 0
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:1" {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0
    gpipe.backward 0
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(2) {
  // expected-error @+1 {{stage 0 does not run forward and backward of micro-batch 1}}
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.backward 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    // expected-error @+1 {{backward of micro-batch 0 comes before its forward}}
    gpipe.backward 0
    gpipe.forward 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.recompute 0
    // expected-error @+1 {{recompute of micro-batch 0 must come once, after its forward and before its backward}}
    gpipe.recompute 0
    gpipe.backward 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.backward 0
    gpipe.optimizer_step
    // expected-error @+1 {{follows the optimizer step of stream 0}}
    gpipe.forward 0
  }
}

// -----

gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    // expected-error @+1 {{peer 0 of stage 0 must be stage 1}}
    gpipe.send_activation 0 peer 0
    gpipe.backward 0
    gpipe.optimizer_step
  }
}

// -----

// expected-error @+1 {{stage 1 has no stream}}
gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.backward 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    // expected-error @+1 {{micro-batch 3 is out of range [0, 1)}}
    gpipe.forward 3
    gpipe.backward 0
    gpipe.optimizer_step
  }
}

// -----

// GPipe keeps all three micro-batches alive, two of them in the stash (the
// last one's backward comes next: its values stay where its forward left
// them): 1000 + 2 x 400 = 1800 bytes, over the 1700-byte device (1F1B would
// stash none: 1000).
gpipe.schedule stages(1) micro_batches(3) {
  // expected-error @+1 {{stage 0 on cpu:0 needs 1800 bytes at its peak (1000 static + 2 micro-batches in the stash of 400 bytes), 100 more than its memory limit of 1700}}
  gpipe.stream 0 on "cpu:0" attributes {static_bytes = 1000 : i64, stash_bytes = 400 : i64, memory_limit = 1700 : i64} {
    gpipe.forward 0
    // expected-note @+1 {{the peak is reached here}}
    gpipe.forward 1
    gpipe.forward 2
    gpipe.backward 2
    gpipe.backward 1
    gpipe.backward 0
    gpipe.optimizer_step
  }
}

// -----

func.func @stage(%arena: memref<8xi8>, %params: memref<8xi8>, %ctx: i64) {
  // expected-error @+1 {{'gpipe.parallel_for' op 'missing' does not name a function}}
  gpipe.parallel_for @missing(%ctx) extent 2
  return
}

// -----

func.func @stage(%arena: memref<8xi8>, %params: memref<8xi8>, %ctx: i64) {
  // expected-error @+1 {{'gpipe.parallel_for' op 'body' must take (arena, params, begin, end) and return nothing}}
  gpipe.parallel_for @body(%ctx) extent 2
  return
}
func.func private @body(%arena: memref<8xi8>)

// -----

func.func @stage(%arena: memref<8xi8>, %params: memref<8xi8>, %ctx: i64) {
  // expected-error @+1 {{'gpipe.parallel_for' op attribute 'extent' failed to satisfy constraint}}
  gpipe.parallel_for @stage(%ctx) extent 0
  return
}

// -----

// A split backward: the weight part must follow the input part.
gpipe.schedule stages(1) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    // expected-error @+1 {{backward_weight of micro-batch 0 must follow its backward_input}}
    gpipe.backward_weight 0
    gpipe.backward_input 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(1) {
  // expected-error @+1 {{stage 0 runs backward_input of micro-batch 0 without its backward_weight}}
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.backward_input 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.backward 0
    // expected-error @+1 {{micro-batch 0 runs backward twice}}
    gpipe.backward_input 0
    gpipe.backward_weight 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(1) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    gpipe.forward 0
    gpipe.backward_input 0
    gpipe.backward_weight 0
    // expected-error @+1 {{micro-batch 0 runs backward_weight twice}}
    gpipe.backward_weight 0
    gpipe.optimizer_step
  }
}

// -----

// Interleaved schedules: streams of one device group take turns.
gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" {
    // expected-error @+1 {{'gpipe.forward' op has a turn, but stream 0 has its device to itself}}
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    gpipe.backward 0
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:1" {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0
    gpipe.backward 0
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    gpipe.backward 0 {turn = 3 : i64}
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.recv_activation 0 peer 0
    // expected-error @+1 {{'gpipe.forward' op has no turn on a device that stream 1 shares}}
    gpipe.forward 0
    gpipe.backward 0 {turn = 2 : i64}
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.forward 0 {turn = 1 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    // expected-error @+1 {{'gpipe.backward' op turn 0 does not follow its stream's turn 1}}
    gpipe.backward 0 {turn = 0 : i64}
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0 {turn = 2 : i64}
    gpipe.backward 0 {turn = 3 : i64}
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    gpipe.backward 0 {turn = 3 : i64}
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.recv_activation 0 peer 0
    // expected-error @+1 {{'gpipe.forward' op turn 0 is taken twice on device group 0}}
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.backward 0 {turn = 2 : i64}
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    // expected-error @+1 {{'gpipe.backward' op device group 0 skips turns: 4 instructions up to turn 4}}
    gpipe.backward 0 {turn = 4 : i64}
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0 {turn = 1 : i64}
    gpipe.backward 0 {turn = 2 : i64}
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    gpipe.backward 0 {turn = 3 : i64}
    gpipe.optimizer_step
  }
  // expected-error @+1 {{'gpipe.stream' op is on cpu:1, but its device group 0 is stream 0's, on cpu:0}}
  gpipe.stream 1 on "cpu:1" attributes {device_group = 0 : i64} {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0 {turn = 1 : i64}
    gpipe.backward 0 {turn = 2 : i64}
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

// Stage 0's forward waits for turn 1, but turn 0 is stage 1's forward,
// which waits for stage 0's activation.
// expected-error @+1 {{deadlocks: stage 0 waits forever at this instruction (a turn on a device it shares)}}
gpipe.schedule stages(2) micro_batches(1) {
  gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64} {
    // expected-note @+1 {{blocked here}}
    gpipe.forward 0 {turn = 1 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    gpipe.backward 0 {turn = 3 : i64}
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:0" attributes {device_group = 0 : i64} {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.backward 0 {turn = 2 : i64}
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}

// -----

// Two stages that fit the device's memory each (1000 and 500 bytes: each
// micro-batch's backward follows its forward, nothing in the stash; the
// limit 1200) do not fit it together.
gpipe.schedule stages(2) micro_batches(1) {
  // expected-error @+1 {{'gpipe.stream' op the stages on cpu:0 need 1500 bytes at their peaks together, more than its memory limit of 1200}}
  gpipe.stream 0 on "cpu:0" attributes {device_group = 0 : i64, static_bytes = 1000 : i64, stash_bytes = 100 : i64, memory_limit = 1200 : i64} {
    gpipe.forward 0 {turn = 0 : i64}
    gpipe.send_activation 0 peer 1
    gpipe.recv_gradient 0 peer 1
    gpipe.backward 0 {turn = 3 : i64}
    gpipe.optimizer_step
  }
  gpipe.stream 1 on "cpu:0" attributes {device_group = 0 : i64, static_bytes = 500 : i64, stash_bytes = 50 : i64, memory_limit = 1200 : i64} {
    gpipe.recv_activation 0 peer 0
    gpipe.forward 0 {turn = 1 : i64}
    gpipe.backward 0 {turn = 2 : i64}
    gpipe.send_gradient 0 peer 0
    gpipe.optimizer_step
  }
}
