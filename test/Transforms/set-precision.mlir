// RUN: gpipe-opt %s --split-input-file --gpipe-set-precision=precision=bf16 | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-set-precision=precision=bf16 --gpipe-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: gpipe-opt %s --split-input-file --gpipe-set-precision | FileCheck %s --check-prefix=FP32
// RUN: not gpipe-opt %s --split-input-file --gpipe-set-precision=precision=fp16 2>&1 | FileCheck %s --check-prefix=BAD

// Products of matrices multiply in bfloat16; the other ops, the tensors
// and the parameters stay float32.
gpipe.parameter @w trainable = dense<0.5> : tensor<3x8xf32>
gpipe.parameter @k trainable = dense<0.25> : tensor<2x1x3x3xf32>
// CHECK-LABEL: func.func @forward
// CHECK: nn.conv %{{.*}}, %{{.*}} {compute_type = "bf16", {{.*}}} : (tensor<2x1x4x4xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x2x2xf32>
// CHECK: nn.reshape
// CHECK: nn.gemm %{{.*}}, %{{.*}} {compute_type = "bf16", trans_b = true} : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<2x3xf32>
// CHECK: nn.matmul %{{.*}}, %{{.*}} {compute_type = "bf16"} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// CHECK: nn.relu %{{.*}} : tensor<2x4xf32>
// CHECK-NOT: "bf16"
// The gradients of a bfloat16 product multiply in bfloat16.
// GRAD-LABEL: func.func @forward_backward
// GRAD-COUNT-3: compute_type = "bf16"
// GRAD: nn.relu_grad
// GRAD: nn.matmul %{{.*}}, %{{.*}} {compute_type = "bf16"}
// GRAD: nn.gemm %{{.*}}, %{{.*}} {compute_type = "bf16"}
// GRAD: nn.gemm %{{.*}}, %{{.*}} {compute_type = "bf16", trans_a = true}
// GRAD: nn.conv_grad_weight %{{.*}}, %{{.*}} {compute_type = "bf16"
// FP32-NOT: compute_type
// BAD: error: gpipe-set-precision: unknown precision 'fp16' (fp32 or bf16)
func.func @forward(%x: tensor<2x1x4x4xf32> {gpipe.name = "x"}, %v: tensor<3x4xf32> {gpipe.name = "v"}, %labels: tensor<2xi64> {gpipe.name = "labels", gpipe.role = #gpipe.role<data>}) -> (tensor<f32> {gpipe.name = "loss", gpipe.role = #gpipe.role<loss>}) {
  %k = gpipe.get_parameter @k : tensor<2x1x3x3xf32>
  %c = nn.conv %x, %k {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x1x4x4xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x2x2xf32>
  %f = nn.reshape %c {shape = array<i64: 2, 8>} : (tensor<2x2x2x2xf32>) -> tensor<2x8xf32>
  %w = gpipe.get_parameter @w : tensor<3x8xf32>
  %y = nn.gemm %f, %w {trans_b = true} : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<2x3xf32>
  %m = nn.matmul %y, %v : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %r = nn.relu %m : tensor<2x4xf32>
  %loss = nn.softmax_cross_entropy %r, %labels : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
