// RUN: gpipe-opt %s --split-input-file --gpipe-append-loss=loss=output:l -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<f32> {gpipe.name = "l", gpipe.role = #gpipe.role<loss>}, tensor<2xf32> {gpipe.name = "y", gpipe.role = #gpipe.role<output>})
// CHECK: return %{{.*}}, %{{.*}} : tensor<f32>, tensor<2xf32>
func.func @forward(%x: tensor<2xf32> {gpipe.name = "x"}, %s: tensor<f32> {gpipe.name = "s"}) -> (tensor<2xf32> {gpipe.name = "y"}, tensor<f32> {gpipe.name = "l"}) {
  return %x, %s : tensor<2xf32>, tensor<f32>
}

// -----

// expected-error @+1 {{--loss=output:l: the model has no output of that name}}
func.func @forward(%x: tensor<2xf32>) -> (tensor<2xf32> {gpipe.name = "y"}) {
  return %x : tensor<2xf32>
}
