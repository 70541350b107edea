// RUN: gpipe-opt %s -split-input-file -verify-diagnostics

func.func @broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{'nn.add' operands 'tensor<2x3xf32>' and 'tensor<4xf32>' are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @element_types(%a: tensor<2xf32>, %b: tensor<2xf64>) {
  // expected-error @+2 {{'nn.mul' operands must have the same element type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.mul %a, %b : (tensor<2xf32>, tensor<2xf64>) -> tensor<2xf32>
  return
}

// -----

func.func @wrong_result(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.add %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @gemm_inner(%a: tensor<8x16xf32>, %b: tensor<15x4xf32>) {
  // expected-error @+2 {{'nn.gemm' inner dimensions differ: 16 vs 15}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gemm %a, %b : (tensor<8x16xf32>, tensor<15x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @gemm_rank(%a: tensor<8x16x1xf32>, %b: tensor<16x4xf32>) {
  // expected-error @+2 {{'nn.gemm' operands must be 2-D}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gemm %a, %b : (tensor<8x16x1xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @gemm_bias(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>, %c: tensor<5xf32>) {
  // expected-error @+2 {{'nn.gemm' operand c of type 'tensor<5xf32>' does not broadcast to 8x4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gemm %a, %b, %c : (tensor<8x16xf32>, tensor<16x4xf32>, tensor<5xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @matmul_k(%a: tensor<2x5x16xf32>, %b: tensor<2x15x7xf32>) {
  // expected-error @+2 {{'nn.matmul' contracting dimensions differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b : (tensor<2x5x16xf32>, tensor<2x15x7xf32>) -> tensor<2x5x7xf32>
  return
}

// -----

func.func @conv_channels(%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) {
  // expected-error @+2 {{'nn.conv' input has 3 channels but weight 'tensor<4x2x3x3xf32>' with group 1 expects 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv_strides(%x: tensor<1x2x8x8xf32>, %w: tensor<4x2x3x3xf32>) {
  // expected-error @+2 {{'nn.conv' attribute 'strides' must have 2 entries, got 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : (tensor<1x2x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv_zero_stride(%x: tensor<1x2x8x8xf32>, %w: tensor<4x2x3x3xf32>) {
  // expected-error @+2 {{'nn.conv' kernel, strides and dilations must be positive}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.conv %x, %w {strides = array<i64: 0, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : (tensor<1x2x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv_window(%x: tensor<1x2x2x2xf32>, %w: tensor<4x2x3x3xf32>) {
  // expected-error @+2 {{'nn.conv' window of extent 3 does not fit the padded size 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : (tensor<1x2x2x2xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x1x1xf32>
  return
}

// -----

func.func @conv_bias(%x: tensor<1x2x8x8xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{'nn.conv' bias must be 1-D of size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : (tensor<1x2x8x8xf32>, tensor<4x2x3x3xf32>, tensor<3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @batch_norm(%x: tensor<2x4x3x3xf32>, %c: tensor<4xf32>, %d: tensor<5xf32>) {
  // expected-error @+2 {{'nn.batch_norm' scale, bias, mean and var must be 1-D of size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.batch_norm %x, %c, %c, %d, %c : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<5xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @layer_norm(%x: tensor<2x5x6xf32>, %g: tensor<5xf32>) {
  // expected-error @+2 {{'nn.layer_norm' scale/bias of type 'tensor<5xf32>' do not broadcast to the normalized shape}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.layer_norm %x, %g : (tensor<2x5x6xf32>, tensor<5xf32>) -> tensor<2x5x6xf32>
  return
}

// -----

func.func @softmax_axis(%x: tensor<2x5xf32>) {
  // expected-error @+2 {{'nn.softmax' axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.softmax %x {axis = 2 : i64} : (tensor<2x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @cumsum_axis(%x: tensor<2x5xi64>) {
  // expected-error @+2 {{'nn.cumsum' axis -3 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cumsum %x {axis = -3 : i64} : (tensor<2x5xi64>) -> tensor<2x5xi64>
  return
}

// -----

func.func @pool_pads(%x: tensor<1x2x8x8xf32>) {
  // expected-error @+2 {{'nn.max_pool' attribute 'pads' must have 4 entries, got 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1, 1>}
      : (tensor<1x2x8x8xf32>) -> tensor<1x2x4x4xf32>
  return
}

// -----

func.func @global_pool(%x: tensor<2x8xf32>) {
  // expected-error @+2 {{'nn.global_avg_pool' input must have rank >= 3}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.global_avg_pool %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @pad_mode(%x: tensor<3xf32>) {
  // expected-error @+2 {{'nn.pad' mode must be constant, reflect or edge, got 'wrap'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.pad %x {pads = array<i64: 1, 1>, mode = "wrap"} : (tensor<3xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @pad_reflect(%x: tensor<3xf32>) {
  // expected-error @+2 {{'nn.pad' reflect padding of axis 0 must be smaller than its size}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.pad %x {pads = array<i64: 3, 0>, mode = "reflect"} : (tensor<3xf32>) -> tensor<6xf32>
  return
}

// -----

func.func @reshape_count(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{'nn.reshape' cannot reshape 'tensor<2x3xf32>' (6 elements) to 8 elements}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.reshape %x {shape = array<i64: 2, 4>} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @transpose_perm(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{'nn.transpose' perm is not a permutation of [0, 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.transpose %x {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @reduce_axes(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{'nn.reduce_mean' axes must be sorted, unique and in [0, 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.reduce_mean %x {axes = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<1x1xf32>
  return
}

// -----

func.func @concat_shapes(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error @+2 {{'nn.concat' inputs differ on axis 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @slice_zero_step(%x: tensor<4xf32>) {
  // expected-error @+2 {{'nn.slice' step of axis 0 is zero}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.slice %x {starts = array<i64: 0>, ends = array<i64: 4>, steps = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @split_sizes(%x: tensor<4xf32>) {
  // expected-error @+2 {{'nn.split' sizes add up to 3 but axis 0 has size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = nn.split %x {axis = 0 : i64, sizes = array<i64: 1, 2>} : (tensor<4xf32>) -> (tensor<1xf32>, tensor<2xf32>)
  return
}

// -----

func.func @gather_indices(%x: tensor<4xf32>, %i: tensor<2xf32>) {
  // expected-error @+2 {{'nn.gather' indices must be i32 or i64, got 'f32'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gather %x, %i {axis = 0 : i64} : (tensor<4xf32>, tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @gelu_mode(%x: tensor<4xf32>) {
  // expected-error @+1 {{approximate must be "none" or "tanh", got "fast"}}
  %0 = nn.gelu %x {approximate = "fast"} : tensor<4xf32>
  return
}

// -----

func.func @dropout_ratio(%x: tensor<4xf32>) {
  // expected-error @+1 {{ratio must be in [0, 1), got 1}}
  %0 = nn.dropout %x {ratio = 1.0 : f32} : tensor<4xf32>
  return
}

// -----

func.func @unary_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "nn.relu"(%x) : (tensor<4xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @conv_grad_input(%g: tensor<2x8x5x5xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{grad_input channels must equal weight input channels times group}}
  %0 = nn.conv_grad_input %g, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x8x5x5xf32>, tensor<8x4x3x3xf32>) -> tensor<2x3x5x5xf32>
  return
}

// -----

func.func @batch_norm_grad(%g: tensor<2x8x5x5xf32>, %c: tensor<8xf32>, %d: tensor<7xf32>) {
  // expected-error @+1 {{per-channel operands and results must be 1-D of size 8}}
  %0:3 = nn.batch_norm_grad %g, %g, %c, %c, %c : (tensor<2x8x5x5xf32>, tensor<2x8x5x5xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x5x5xf32>, tensor<7xf32>, tensor<8xf32>)
  return
}

// -----

func.func @gather_grad_shape(%g: tensor<3x4xf32>, %i: tensor<2xi64>) -> tensor<5x4xf32> {
  // expected-error @+1 {{grad_output 'tensor<3x4xf32>' is not the gather of 'tensor<5x4xf32>' by 'tensor<2xi64>'}}
  %0 = nn.gather_grad %g, %i {axis = 0 : i64} : (tensor<3x4xf32>, tensor<2xi64>) -> tensor<5x4xf32>
  return %0 : tensor<5x4xf32>
}

// -----

func.func @where_condition(%c: tensor<2xf32>, %x: tensor<2xf32>) {
  // expected-error @+2 {{'nn.where' condition must be an i1 tensor, got 'tensor<2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.where %c, %x, %x : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @logic_on_floats(%x: tensor<2xf32>) {
  // expected-error @+2 {{'nn.and' operands must be i1 tensors, got 'tensor<2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.and %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @float_mod(%x: tensor<2xf32>) {
  // expected-error @+1 {{'nn.mod' op on floating-point tensors needs fmod = true}}
  %0 = nn.mod %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @conv_grad_input_spatial(%g: tensor<2x8x3x3xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{is not the input of a convolution with output 'tensor<2x8x3x3xf32>' (spatial axis 0)}}
  %0 = nn.conv_grad_input %g, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<2x8x3x3xf32>, tensor<8x4x3x3xf32>) -> tensor<2x4x7x5xf32>
  return
}

// -----

func.func @compute_type(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{'nn.matmul' op has compute_type 'f16'; expected "f32" or "bf16"}}
  %0 = nn.matmul %a, %b {compute_type = "f16"} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return
}
