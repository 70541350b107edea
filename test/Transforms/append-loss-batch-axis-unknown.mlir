// RUN: not gpipe-opt %s --gpipe-append-loss='loss=mse' 2>&1 | FileCheck %s
// Sequence-first inputs and an output whose batch cannot be located (a
// reduction over it): the labels cannot follow it, which is an error, not
// labels split along the wrong axis.
// CHECK: error: cannot tell where the output 'tensor<3xf32>' holds the batch of the sequence-first inputs
module attributes {gpipe.data_batch_axes = {src = 1 : i64}} {
  func.func @forward(%x: tensor<2x3xf32> {gpipe.name = "src"}) -> (tensor<3xf32> {gpipe.name = "out"}) {
    %s = nn.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
    return %s : tensor<3xf32>
  }
}
