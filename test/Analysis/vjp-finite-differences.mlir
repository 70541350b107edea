// Every VJP rule against central finite differences in float64: each
// function is one case (its float arguments are drawn at random, its result
// is contracted with a random cotangent, autodiff differentiates it, and
// gpipe-check-vjp compares every derivative with (L(x+h) - L(x-h)) / 2h).
// RUN: gpipe-check-vjp %s --seed=1 | FileCheck %s
// RUN: gpipe-check-vjp %s --seed=2 | FileCheck %s
// CHECK-NOT: FAIL

// Activations.
// CHECK: relu: ok
func.func @relu(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.relu %x : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: sigmoid: ok
func.func @sigmoid(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.sigmoid %x : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: tanh: ok
func.func @tanh(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.tanh %x : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: erf: ok
func.func @erf(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.erf %x : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: sqrt: ok
func.func @sqrt(%x: tensor<3x5xf64> {check.positive}) -> tensor<3x5xf64> {
  %0 = nn.sqrt %x : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: gelu: ok
func.func @gelu(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.gelu %x : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: gelu_tanh: ok
func.func @gelu_tanh(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.gelu %x {approximate = "tanh"} : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: dropout_ratio_0: ok
func.func @dropout_ratio_0(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.dropout %x {ratio = 0.0 : f32, training = true} : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}

// Arithmetic with broadcasting (the rules sum gradients back to each
// operand's shape).
// CHECK: add_broadcast: ok
func.func @add_broadcast(%a: tensor<2x3x4xf64>, %b: tensor<3x1xf64>) -> tensor<2x3x4xf64> {
  %0 = nn.add %a, %b : (tensor<2x3x4xf64>, tensor<3x1xf64>) -> tensor<2x3x4xf64>
  return %0 : tensor<2x3x4xf64>
}
// CHECK: sub_broadcast: ok
func.func @sub_broadcast(%a: tensor<4xf64>, %b: tensor<2x4xf64>) -> tensor<2x4xf64> {
  %0 = nn.sub %a, %b : (tensor<4xf64>, tensor<2x4xf64>) -> tensor<2x4xf64>
  return %0 : tensor<2x4xf64>
}
// CHECK: mul_broadcast: ok
func.func @mul_broadcast(%a: tensor<2x3x4xf64>, %b: tensor<1x3x1xf64>) -> tensor<2x3x4xf64> {
  %0 = nn.mul %a, %b : (tensor<2x3x4xf64>, tensor<1x3x1xf64>) -> tensor<2x3x4xf64>
  return %0 : tensor<2x3x4xf64>
}
// CHECK: div_broadcast: ok
func.func @div_broadcast(%a: tensor<2x3xf64>, %b: tensor<3xf64> {check.positive}) -> tensor<2x3xf64> {
  %0 = nn.div %a, %b : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
// CHECK: pow_constant_exponent: ok
func.func @pow_constant_exponent(%a: tensor<2x3xf64> {check.positive}) -> tensor<2x3xf64> {
  %e = nn.constant dense<2.5> : tensor<f64>
  %0 = nn.pow %a, %e : (tensor<2x3xf64>, tensor<f64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}

// Linear algebra.
// CHECK: gemm: ok
func.func @gemm(%a: tensor<3x4xf64>, %b: tensor<5x4xf64>, %c: tensor<5xf64>) -> tensor<3x5xf64> {
  %0 = nn.gemm %a, %b, %c {alpha = 0.5 : f32, beta = 2.0 : f32, trans_b = true} : (tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>) -> tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: gemm_trans_a: ok
func.func @gemm_trans_a(%a: tensor<4x3xf64>, %b: tensor<4x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.gemm %a, %b {trans_a = true} : (tensor<4x3xf64>, tensor<4x5xf64>) -> tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: matmul_batched: ok
func.func @matmul_batched(%a: tensor<2x3x4xf64>, %b: tensor<2x4x5xf64>) -> tensor<2x3x5xf64> {
  %0 = nn.matmul %a, %b : (tensor<2x3x4xf64>, tensor<2x4x5xf64>) -> tensor<2x3x5xf64>
  return %0 : tensor<2x3x5xf64>
}
// CHECK: matmul_shared_weight: ok
func.func @matmul_shared_weight(%a: tensor<2x3x4xf64>, %b: tensor<4x5xf64>) -> tensor<2x3x5xf64> {
  %0 = nn.matmul %a, %b : (tensor<2x3x4xf64>, tensor<4x5xf64>) -> tensor<2x3x5xf64>
  return %0 : tensor<2x3x5xf64>
}
// CHECK: matmul_broadcast_batch: ok
func.func @matmul_broadcast_batch(%a: tensor<1x3x4xf64>, %b: tensor<2x4x2xf64>) -> tensor<2x3x2xf64> {
  %0 = nn.matmul %a, %b : (tensor<1x3x4xf64>, tensor<2x4x2xf64>) -> tensor<2x3x2xf64>
  return %0 : tensor<2x3x2xf64>
}

// Convolution and pooling.
// CHECK: conv_bias_stride_pad: ok
func.func @conv_bias_stride_pad(%x: tensor<2x3x6x5xf64>, %w: tensor<4x3x3x2xf64>, %b: tensor<4xf64>) -> tensor<2x4x3x3xf64> {
  %0 = nn.conv %x, %w, %b {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 0>, strides = array<i64: 2, 2>} : (tensor<2x3x6x5xf64>, tensor<4x3x3x2xf64>, tensor<4xf64>) -> tensor<2x4x3x3xf64>
  return %0 : tensor<2x4x3x3xf64>
}
// CHECK: conv_grouped_dilated: ok
func.func @conv_grouped_dilated(%x: tensor<1x4x7x7xf64>, %w: tensor<6x2x2x2xf64>) -> tensor<1x6x5x5xf64> {
  %0 = nn.conv %x, %w {dilations = array<i64: 2, 2>, group = 2 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x7x7xf64>, tensor<6x2x2x2xf64>) -> tensor<1x6x5x5xf64>
  return %0 : tensor<1x6x5x5xf64>
}
// A transposed convolution (ONNX ConvTranspose) is conv_grad_input in the
// forward: with output padding (a row and a column no window reaches) and
// grouped, dilated.
// CHECK: conv_transpose_stride_output_padding: ok
func.func @conv_transpose_stride_output_padding(%x: tensor<2x3x3x3xf64>, %w: tensor<3x2x3x3xf64>) -> tensor<2x2x6x5xf64> {
  %0 = nn.conv_grad_input %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x3x3x3xf64>, tensor<3x2x3x3xf64>) -> tensor<2x2x6x5xf64>
  return %0 : tensor<2x2x6x5xf64>
}
// CHECK: conv_transpose_grouped_dilated: ok
func.func @conv_transpose_grouped_dilated(%x: tensor<1x4x5x5xf64>, %w: tensor<4x3x2x2xf64>) -> tensor<1x6x7x7xf64> {
  %0 = nn.conv_grad_input %x, %w {dilations = array<i64: 2, 2>, group = 2 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x4x5x5xf64>, tensor<4x3x2x2xf64>) -> tensor<1x6x7x7xf64>
  return %0 : tensor<1x6x7x7xf64>
}
// CHECK: max_pool: ok
func.func @max_pool(%x: tensor<2x2x5x5xf64>) -> tensor<2x2x3x3xf64> {
  %0 = nn.max_pool %x {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x2x5x5xf64>) -> tensor<2x2x3x3xf64>
  return %0 : tensor<2x2x3x3xf64>
}
// CHECK: avg_pool: ok
func.func @avg_pool(%x: tensor<2x2x4x4xf64>) -> tensor<2x2x2x2xf64> {
  %0 = nn.avg_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x2x4x4xf64>) -> tensor<2x2x2x2xf64>
  return %0 : tensor<2x2x2x2xf64>
}
// CHECK: avg_pool_padded: ok
func.func @avg_pool_padded(%x: tensor<1x2x4x4xf64>) -> tensor<1x2x4x4xf64> {
  %0 = nn.avg_pool %x {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf64>) -> tensor<1x2x4x4xf64>
  return %0 : tensor<1x2x4x4xf64>
}
// CHECK: global_avg_pool: ok
func.func @global_avg_pool(%x: tensor<2x3x4x4xf64>) -> tensor<2x3x1x1xf64> {
  %0 = nn.global_avg_pool %x : (tensor<2x3x4x4xf64>) -> tensor<2x3x1x1xf64>
  return %0 : tensor<2x3x1x1xf64>
}

// Normalization and softmax.
// CHECK: batch_norm_training: ok
func.func @batch_norm_training(%x: tensor<3x2x2x3xf64>, %s: tensor<2xf64>, %b: tensor<2xf64>) -> tensor<3x2x2x3xf64> {
  %m = nn.constant dense<[0.1, -0.2]> : tensor<2xf64>
  %v = nn.constant dense<[1.5, 0.5]> : tensor<2xf64>
  %0:3 = nn.batch_norm %x, %s, %b, %m, %v {training = true} : (tensor<3x2x2x3xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>) -> (tensor<3x2x2x3xf64>, tensor<2xf64>, tensor<2xf64>)
  return %0#0 : tensor<3x2x2x3xf64>
}
// CHECK: batch_norm_running_stats: ok
func.func @batch_norm_running_stats(%x: tensor<3x2x2x3xf64>, %s: tensor<2xf64>, %b: tensor<2xf64>) -> tensor<3x2x2x3xf64> {
  %m = nn.constant dense<[0.1, -0.2]> : tensor<2xf64>
  %v = nn.constant dense<[1.5, 0.5]> : tensor<2xf64>
  %0:3 = nn.batch_norm %x, %s, %b, %m, %v : (tensor<3x2x2x3xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>, tensor<2xf64>) -> (tensor<3x2x2x3xf64>, tensor<2xf64>, tensor<2xf64>)
  return %0#0 : tensor<3x2x2x3xf64>
}
// CHECK: layer_norm: ok
func.func @layer_norm(%x: tensor<2x3x6xf64>, %s: tensor<6xf64>, %b: tensor<6xf64>) -> tensor<2x3x6xf64> {
  %0 = nn.layer_norm %x, %s, %b : (tensor<2x3x6xf64>, tensor<6xf64>, tensor<6xf64>) -> tensor<2x3x6xf64>
  return %0 : tensor<2x3x6xf64>
}
// CHECK: softmax: ok
func.func @softmax(%x: tensor<2x3x5xf64>) -> tensor<2x3x5xf64> {
  %0 = nn.softmax %x {axis = 1 : i64} : (tensor<2x3x5xf64>) -> tensor<2x3x5xf64>
  return %0 : tensor<2x3x5xf64>
}
// CHECK: log_softmax: ok
func.func @log_softmax(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.log_softmax %x : (tensor<3x5xf64>) -> tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: fused_attention: ok
func.func @fused_attention(%q: tensor<2x2x3x4xf64>, %k: tensor<2x2x5x4xf64>, %v: tensor<2x2x5x3xf64>) -> tensor<2x2x3x3xf64> {
  %0:2 = nn.attention %q, %k, %v {scale = 0.5 : f32} : (tensor<2x2x3x4xf64>, tensor<2x2x5x4xf64>, tensor<2x2x5x3xf64>) -> (tensor<2x2x3x3xf64>, tensor<2x2x3xf64>)
  return %0#0 : tensor<2x2x3x3xf64>
}
// CHECK: fused_attention_causal: ok
func.func @fused_attention_causal(%q: tensor<2x4x3xf64>, %k: tensor<2x4x3xf64>, %v: tensor<2x4x2xf64>) -> tensor<2x4x2xf64> {
  %0:2 = nn.attention %q, %k, %v {causal = true, scale = 0.577 : f32} : (tensor<2x4x3xf64>, tensor<2x4x3xf64>, tensor<2x4x2xf64>) -> (tensor<2x4x2xf64>, tensor<2x4xf64>)
  return %0#0 : tensor<2x4x2xf64>
}
// A mask broadcast over the batch and heads, -inf where a key is hidden.
// CHECK: fused_attention_mask: ok
func.func @fused_attention_mask(%q: tensor<2x2x3x4xf64>, %k: tensor<2x2x4x4xf64>, %v: tensor<2x2x4x2xf64>) -> tensor<2x2x3x2xf64> {
  %m = nn.constant dense<[[[[0.0, 0xFFF0000000000000, -0.5, 0.0], [0.0, 0.0, 0xFFF0000000000000, 1.0], [0xFFF0000000000000, 0.25, 0.0, 0.0]]]]> : tensor<1x1x3x4xf64>
  %0:2 = nn.attention %q, %k, %v, %m : (tensor<2x2x3x4xf64>, tensor<2x2x4x4xf64>, tensor<2x2x4x2xf64>, tensor<1x1x3x4xf64>) -> (tensor<2x2x3x2xf64>, tensor<2x2x3xf64>)
  return %0#0 : tensor<2x2x3x2xf64>
}
// CHECK: softmax_cross_entropy: ok
func.func @softmax_cross_entropy(%x: tensor<4x5xf64>) -> tensor<f64> {
  %l = nn.constant dense<[3, 0, 4, 1]> : tensor<4xi64>
  %0 = nn.softmax_cross_entropy %x, %l : (tensor<4x5xf64>, tensor<4xi64>) -> tensor<f64>
  return %0 : tensor<f64>
}

// Shape, data movement and reductions.
// CHECK: reshape: ok
func.func @reshape(%x: tensor<2x6xf64>) -> tensor<3x4xf64> {
  %0 = nn.reshape %x {shape = array<i64: 3, 4>} : (tensor<2x6xf64>) -> tensor<3x4xf64>
  return %0 : tensor<3x4xf64>
}
// CHECK: transpose: ok
func.func @transpose(%x: tensor<2x3x4xf64>) -> tensor<4x2x3xf64> {
  %0 = nn.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf64>) -> tensor<4x2x3xf64>
  return %0 : tensor<4x2x3xf64>
}
// CHECK: slice: ok
func.func @slice(%x: tensor<4x6xf64>) -> tensor<2x3xf64> {
  %0 = nn.slice %x {ends = array<i64: 3, 5>, starts = array<i64: 1, 2>, steps = array<i64: 1, 1>} : (tensor<4x6xf64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
// Strided: x[0::2, 1:5:3] of a 5x6 (rows 0, 2 and 4: spread over 6 rows
// and trimmed to 5; columns 1 and 4) and PatchMerging's every other
// position of a map.
// CHECK: slice_strided: ok
func.func @slice_strided(%x: tensor<5x6xf64>) -> tensor<3x2xf64> {
  %0 = nn.slice %x {ends = array<i64: 5, 5>, starts = array<i64: 0, 1>, steps = array<i64: 2, 3>} : (tensor<5x6xf64>) -> tensor<3x2xf64>
  return %0 : tensor<3x2xf64>
}
// CHECK: slice_every_other: ok
func.func @slice_every_other(%x: tensor<2x4x4x3xf64>) -> tensor<2x2x2x3xf64> {
  %0 = nn.slice %x {ends = array<i64: 2, 4, 4, 3>, starts = array<i64: 0, 0, 1, 0>, steps = array<i64: 1, 2, 2, 1>} : (tensor<2x4x4x3xf64>) -> tensor<2x2x2x3xf64>
  return %0 : tensor<2x2x2x3xf64>
}
// CHECK: concat: ok
func.func @concat(%a: tensor<2x3xf64>, %b: tensor<2x2xf64>) -> tensor<2x5xf64> {
  %0 = nn.concat %a, %b {axis = -1 : i64} : (tensor<2x3xf64>, tensor<2x2xf64>) -> tensor<2x5xf64>
  return %0 : tensor<2x5xf64>
}
// CHECK: split: ok
func.func @split(%x: tensor<5x2xf64>) -> tensor<2x2xf64> {
  %0:2 = nn.split %x {axis = 0 : i64, sizes = array<i64: 3, 2>} : (tensor<5x2xf64>) -> (tensor<3x2xf64>, tensor<2x2xf64>)
  %1 = nn.slice %0#0 {ends = array<i64: 2, 2>, starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : (tensor<3x2xf64>) -> tensor<2x2xf64>
  %2 = nn.mul %1, %0#1 : (tensor<2x2xf64>, tensor<2x2xf64>) -> tensor<2x2xf64>
  return %2 : tensor<2x2xf64>
}
// CHECK: pad_constant: ok
func.func @pad_constant(%x: tensor<2x3xf64>) -> tensor<3x6xf64> {
  %0 = nn.pad %x {pads = array<i64: 1, 2, 0, 1>, value = 0.5 : f64} : (tensor<2x3xf64>) -> tensor<3x6xf64>
  return %0 : tensor<3x6xf64>
}
// CHECK: reduce_mean: ok
func.func @reduce_mean(%x: tensor<2x3x4xf64>) -> tensor<3xf64> {
  %0 = nn.reduce_mean %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf64>) -> tensor<3xf64>
  return %0 : tensor<3xf64>
}
// CHECK: reduce_sum: ok
func.func @reduce_sum(%x: tensor<2x3x4xf64>) -> tensor<2x1x4xf64> {
  %0 = nn.reduce_sum %x {axes = array<i64: 1>} : (tensor<2x3x4xf64>) -> tensor<2x1x4xf64>
  return %0 : tensor<2x1x4xf64>
}

// A value used twice (gradients accumulate) through a small attention block.
// CHECK: attention: ok
func.func @attention(%x: tensor<2x3x4xf64>, %w: tensor<4x4xf64>) -> tensor<2x3x4xf64> {
  %q = nn.matmul %x, %w : (tensor<2x3x4xf64>, tensor<4x4xf64>) -> tensor<2x3x4xf64>
  %kt = nn.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<2x3x4xf64>) -> tensor<2x4x3xf64>
  %s = nn.matmul %q, %kt : (tensor<2x3x4xf64>, tensor<2x4x3xf64>) -> tensor<2x3x3xf64>
  %p = nn.softmax %s : (tensor<2x3x3xf64>) -> tensor<2x3x3xf64>
  %o = nn.matmul %p, %x : (tensor<2x3x3xf64>, tensor<2x3x4xf64>) -> tensor<2x3x4xf64>
  return %o : tensor<2x3x4xf64>
}

// Rules added for parameters that models slice, index and cast.
// CHECK: leaky_relu: ok
func.func @leaky_relu(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.leaky_relu %x {alpha = 0.2 : f32} : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// Repeated and negative indices: the gradient of a row adds up.
// CHECK: gather_rows: ok
func.func @gather_rows(%table: tensor<5x3xf64>) -> tensor<2x3x3xf64> {
  %i = nn.constant dense<[[4, 0, 4], [-1, 2, 1]]> : tensor<2x3xi64>
  %0 = nn.gather %table, %i {axis = 0 : i64} : (tensor<5x3xf64>, tensor<2x3xi64>) -> tensor<2x3x3xf64>
  return %0 : tensor<2x3x3xf64>
}
// CHECK: gather_middle_axis: ok
func.func @gather_middle_axis(%x: tensor<2x4x3xf64>) -> tensor<2x2x3xf64> {
  %i = nn.constant dense<[3, 3]> : tensor<2xi64>
  %0 = nn.gather %x, %i {axis = 1 : i64} : (tensor<2x4x3xf64>, tensor<2xi64>) -> tensor<2x2x3xf64>
  return %0 : tensor<2x2x3xf64>
}
// CHECK: broadcast: ok
func.func @broadcast(%x: tensor<3x1xf64>) -> tensor<2x3x4xf64> {
  %0 = nn.broadcast %x {shape = array<i64: 2, 3, 4>} : (tensor<3x1xf64>) -> tensor<2x3x4xf64>
  return %0 : tensor<2x3x4xf64>
}
// CHECK: cast: ok
func.func @cast(%x: tensor<3x5xf64>) -> tensor<3x5xf32> {
  %0 = nn.cast %x : tensor<3x5xf64> to tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}
// CHECK: neg: ok
func.func @neg(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.neg %x : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: clip: ok
func.func @clip(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.clip %x {min = -0.5 : f32, max = 0.7 : f32} : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: hard_sigmoid: ok
func.func @hard_sigmoid(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.hard_sigmoid %x {alpha = 0.6 : f32, beta = 0.5 : f32} : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: hard_swish: ok
func.func @hard_swish(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %s = nn.constant dense<3.0> : tensor<f64>
  %y = nn.mul %x, %s : (tensor<3x5xf64>, tensor<f64>) -> tensor<3x5xf64>
  %0 = nn.hard_swish %y : tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}

// Masks: `where` passes the gradient to the branch each element took (a
// constant causal mask, a mask compared from data, broadcast branches) and
// nothing through the condition; fmod's gradient in both operands.
// CHECK: where_causal: ok
func.func @where_causal(%x: tensor<2x3x3xf64>) -> tensor<2x3x3xf64> {
  %mask = nn.constant dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
  %fill = nn.constant dense<-1.0e+09> : tensor<f64>
  %0 = nn.where %mask, %x, %fill : (tensor<3x3xi1>, tensor<2x3x3xf64>, tensor<f64>) -> tensor<2x3x3xf64>
  %1 = nn.softmax %0 {axis = 2 : i64} : (tensor<2x3x3xf64>) -> tensor<2x3x3xf64>
  return %1 : tensor<2x3x3xf64>
}
// CHECK: where_compared: ok
func.func @where_compared(%x: tensor<4x5xf64>, %y: tensor<5xf64>) -> tensor<4x5xf64> {
  %zero = nn.constant dense<0.0> : tensor<f64>
  %c = nn.greater %x, %zero : (tensor<4x5xf64>, tensor<f64>) -> tensor<4x5xi1>
  %n = nn.not %c : tensor<4x5xi1>
  %0 = nn.where %n, %y, %x : (tensor<4x5xi1>, tensor<5xf64>, tensor<4x5xf64>) -> tensor<4x5xf64>
  return %0 : tensor<4x5xf64>
}
// CHECK: fmod: ok
func.func @fmod(%a: tensor<3x4xf64>, %b: tensor<4xf64> {check.positive}) -> tensor<3x4xf64> {
  %0 = nn.mod %a, %b {fmod = true} : (tensor<3x4xf64>, tensor<4xf64>) -> tensor<3x4xf64>
  return %0 : tensor<3x4xf64>
}

// Running sums: the gradient is the running sum of the cotangent in the
// other direction (exclusive stays exclusive).
// CHECK: cumsum: ok
func.func @cumsum(%x: tensor<3x5xf64>) -> tensor<3x5xf64> {
  %0 = nn.cumsum %x {axis = 1 : i64} : (tensor<3x5xf64>) -> tensor<3x5xf64>
  return %0 : tensor<3x5xf64>
}
// CHECK: cumsum_exclusive_reverse: ok
func.func @cumsum_exclusive_reverse(%x: tensor<4x3xf64>) -> tensor<4x3xf64> {
  %0 = nn.cumsum %x {axis = 0 : i64, exclusive = true, reverse = true} : (tensor<4x3xf64>) -> tensor<4x3xf64>
  return %0 : tensor<4x3xf64>
}
