// RUN: gpipe-opt %s --split-input-file --gpipe-fuse-gelu | FileCheck %s

// torch.onnx's nn.GELU below opset 20: Div by sqrt(2), Erf, Add 1, Mul by
// x, Mul by 0.5: one nn.gelu, the rest gone.
// CHECK-LABEL: func.func @torch_order
// CHECK-NEXT: %[[G:.*]] = nn.gelu %arg0 : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @torch_order(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = nn.constant dense<5.000000e-01> : tensor<f32>
  %one = nn.constant dense<1.000000e+00> : tensor<f32>
  %sqrt2 = nn.constant dense<1.41421354> : tensor<f32>
  %d = nn.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = nn.erf %d : tensor<2x8xf32>
  %a = nn.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = nn.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = nn.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// The Hugging Face order, x * 0.5 * (1.0 + erf(x / sqrt(2))), operands
// of the commutative ops either way round.
// CHECK-LABEL: func.func @hf_order
// CHECK-NEXT: %[[G:.*]] = nn.gelu %arg0 : tensor<4xf32>
// CHECK-NEXT: return %[[G]]
func.func @hf_order(%x: tensor<4xf32>) -> tensor<4xf32> {
  %half = nn.constant dense<5.000000e-01> : tensor<f32>
  %one = nn.constant dense<1.000000e+00> : tensor<f32>
  %sqrt2 = nn.constant dense<1.41421354> : tensor<f32>
  %h = nn.mul %half, %x : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %d = nn.div %x, %sqrt2 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %e = nn.erf %d : tensor<4xf32>
  %a = nn.add %one, %e : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %y = nn.mul %h, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Not GELU: erf of x / 2 (another constant), and x times the erf term of
// another value. Nothing changes.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: nn.gelu
// CHECK: return
func.func @not_gelu(%x: tensor<4xf32>, %z: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %half = nn.constant dense<5.000000e-01> : tensor<f32>
  %one = nn.constant dense<1.000000e+00> : tensor<f32>
  %two = nn.constant dense<2.000000e+00> : tensor<f32>
  %sqrt2 = nn.constant dense<1.41421354> : tensor<f32>
  %d = nn.div %x, %two : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %e = nn.erf %d : tensor<4xf32>
  %a = nn.add %e, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %m = nn.mul %x, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %y = nn.mul %m, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %d2 = nn.div %z, %sqrt2 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %e2 = nn.erf %d2 : tensor<4xf32>
  %a2 = nn.add %e2, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %m2 = nn.mul %x, %a2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %y2 = nn.mul %m2, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %y, %y2 : tensor<4xf32>, tensor<4xf32>
}

// -----

// An intermediate value used elsewhere stays for that use.
// CHECK-LABEL: func.func @shared_term
// CHECK: %[[E:.*]] = nn.erf
// CHECK: %[[G:.*]] = nn.gelu %arg0 : tensor<4xf32>
// CHECK: return %[[G]], %[[E]]
func.func @shared_term(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %half = nn.constant dense<5.000000e-01> : tensor<f32>
  %one = nn.constant dense<1.000000e+00> : tensor<f32>
  %sqrt2 = nn.constant dense<1.41421354> : tensor<f32>
  %d = nn.div %x, %sqrt2 : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %e = nn.erf %d : tensor<4xf32>
  %a = nn.add %e, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %m = nn.mul %x, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %y = nn.mul %m, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %y, %e : tensor<4xf32>, tensor<4xf32>
}

// -----

// GPT-2's tanh approximation ("gelu_new"), as torch.onnx writes
// 0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
// CHECK-LABEL: func.func @tanh_form
// CHECK-NEXT: %[[G:.*]] = nn.gelu %arg0 {approximate = "tanh"} : tensor<4xf32>
// CHECK-NEXT: return %[[G]]
func.func @tanh_form(%x: tensor<4xf32>) -> tensor<4xf32> {
  %half = nn.constant dense<5.000000e-01> : tensor<f32>
  %one = nn.constant dense<1.000000e+00> : tensor<f32>
  %three = nn.constant dense<3.000000e+00> : tensor<f32>
  %c = nn.constant dense<4.471500e-02> : tensor<f32>
  %k = nn.constant dense<0.797884583> : tensor<f32>
  %h = nn.mul %half, %x : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %p = nn.pow %x, %three : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %m = nn.mul %c, %p : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %s = nn.add %x, %m : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %t = nn.mul %k, %s : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %th = nn.tanh %t : tensor<4xf32>
  %a = nn.add %one, %th : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %y = nn.mul %h, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
