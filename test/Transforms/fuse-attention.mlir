// RUN: gpipe-opt %s --split-input-file --gpipe-fuse-attention=min-keys=1 | FileCheck %s
// RUN: gpipe-opt %s --split-input-file --gpipe-fuse-attention | FileCheck %s --check-prefix=SHORT

// Below 128 keys (the default min-keys) nothing is fused.
// SHORT-NOT: nn.attention

// A GPT block's attention as torch.onnx writes it: the heads' transposes,
// q k^T by a constant, masked_fill(tril == 0, -inf) from a constant
// buffer, Softmax, times v. The mask hides exactly the keys after each
// query: causal, no mask operand; the keys are the reshaped [B, T, H, D]
// tensor with one transpose (0, 2, 3, 1 then the last two swapped).
// CHECK-LABEL: func.func @gpt_causal
// CHECK: %[[K:.*]] = nn.transpose %arg1 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[O:.*]], %{{.*}} = nn.attention %arg0, %[[K]], %arg2 {causal = true, scale = 0.353553385 : f32}
// CHECK-NOT: nn.softmax
// CHECK-NOT: nn.where
// CHECK: return %[[O]]
func.func @gpt_causal(%q: tensor<2x4x3x8xf32>, %k: tensor<2x3x4x8xf32>, %v: tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32> {
  %scale = nn.constant dense<0.353553385> : tensor<f32>
  %hidden = nn.constant dense<[[[[false, true, true], [false, false, true], [false, false, false]]]]> : tensor<1x1x3x3xi1>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %kt = nn.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x3x4x8xf32>) -> tensor<2x4x8x3xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x3x8xf32>, tensor<2x4x8x3xf32>) -> tensor<2x4x3x3xf32>
  %m = nn.mul %s, %scale : (tensor<2x4x3x3xf32>, tensor<f32>) -> tensor<2x4x3x3xf32>
  %w = nn.where %hidden, %ninf, %m : (tensor<1x1x3x3xi1>, tensor<f32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %p = nn.softmax %w {axis = 3 : i64} : (tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x3x3xf32>, tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32>
  return %o : tensor<2x4x3x8xf32>
}

// -----

// Where(keep, scores, -inf) hides where the constant is false; this one
// also hides key 0 of query 2: not causal, so the mask stays an operand,
// 0 where seen and -inf where hidden. The scale divides.
// CHECK-LABEL: func.func @kept_where_true
// CHECK-DAG: %[[NINF:.*]] = nn.constant dense<0xFF800000> : tensor<f32>
// CHECK-DAG: %[[ZERO:.*]] = nn.constant dense<0.000000e+00> : tensor<f32>
// CHECK-DAG: %[[MASK:.*]] = nn.where %{{.*}}, %[[ZERO]], %[[NINF]] : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
// CHECK-DAG: %[[KT:.*]] = nn.transpose %arg1 {perm = array<i64: 0, 2, 1>}
// CHECK: nn.attention %arg0, %[[KT]], %arg2, %[[MASK]] {scale = 2.500000e-01 : f32}
func.func @kept_where_true(%q: tensor<2x3x4xf32>, %kt: tensor<2x4x3xf32>, %v: tensor<2x3x5xf32>) -> tensor<2x3x5xf32> {
  %four = nn.constant dense<4.0> : tensor<f32>
  %keep = nn.constant dense<[[true, false, false], [true, true, false], [false, true, true]]> : tensor<3x3xi1>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %s = nn.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %d = nn.div %s, %four : (tensor<2x3x3xf32>, tensor<f32>) -> tensor<2x3x3xf32>
  %w = nn.where %keep, %d, %ninf : (tensor<3x3xi1>, tensor<2x3x3xf32>, tensor<f32>) -> tensor<2x3x3xf32>
  %p = nn.softmax %w : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %o = nn.matmul %p, %v : (tensor<2x3x3xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  return %o : tensor<2x3x5xf32>
}

// -----

// A padding mask from the data (a boolean argument): its -inf fill as an
// additive mask. The scale on the queries (nn.MultiheadAttention's export)
// folds into the op's; an added constant mask is the operand as it is.
// CHECK-LABEL: func.func @padding_and_added_masks
// CHECK: %[[PAD:.*]] = nn.where %arg3, %{{.*}}, %{{.*}} : (tensor<2x1x1x3xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x3xf32>
// CHECK: nn.attention %arg0, %{{.*}}, %arg2, %[[PAD]] {scale = 5.000000e-01 : f32}
// CHECK: nn.attention %arg0, %{{.*}}, %arg2, %{{.*}} : (tensor<2x2x3x4xf32>, tensor<2x2x3x4xf32>, tensor<2x2x3x4xf32>, tensor<3x3xf32>)
func.func @padding_and_added_masks(%q: tensor<2x2x3x4xf32>, %kt: tensor<2x2x4x3xf32>, %v: tensor<2x2x3x4xf32>, %pad: tensor<2x1x1x3xi1>) -> (tensor<2x2x3x4xf32>, tensor<2x2x3x4xf32>) {
  %half = nn.constant dense<0.5> : tensor<f32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %qs = nn.mul %q, %half : (tensor<2x2x3x4xf32>, tensor<f32>) -> tensor<2x2x3x4xf32>
  %s = nn.matmul %qs, %kt : (tensor<2x2x3x4xf32>, tensor<2x2x4x3xf32>) -> tensor<2x2x3x3xf32>
  %w = nn.where %pad, %ninf, %s : (tensor<2x1x1x3xi1>, tensor<f32>, tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = nn.softmax %w {axis = -1 : i64} : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %o = nn.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32>
  %bias = nn.constant dense<[[0.0, -1.0, 0xFF800000], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]> : tensor<3x3xf32>
  %s2 = nn.matmul %q, %kt : (tensor<2x2x3x4xf32>, tensor<2x2x4x3xf32>) -> tensor<2x2x3x3xf32>
  %a2 = nn.add %s2, %bias : (tensor<2x2x3x3xf32>, tensor<3x3xf32>) -> tensor<2x2x3x3xf32>
  %p2 = nn.softmax %a2 : (tensor<2x2x3x3xf32>) -> tensor<2x2x3x3xf32>
  %o2 = nn.matmul %p2, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32>
  return %o, %o2 : tensor<2x2x3x4xf32>, tensor<2x2x3x4xf32>
}

// -----

// Dropout on the weights (training nn.TransformerEncoder): the op's own,
// with the dropout's stream when it has one.
// CHECK-LABEL: func.func @dropout_on_the_weights
// CHECK: nn.attention %arg0, %{{.*}}, %arg2 {dropout_ratio = 1.000000e-01 : f32}
// CHECK: nn.attention %arg0, %{{.*}}, %arg2 {dropout_ratio = 2.000000e-01 : f32, stream = 7 : i64}
// CHECK-NOT: nn.dropout
func.func @dropout_on_the_weights(%q: tensor<2x3x4xf32>, %kt: tensor<2x4x3xf32>, %v: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %s = nn.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %p = nn.softmax %s : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %dp = nn.dropout %p {ratio = 0.1 : f32, training = true} : tensor<2x3x3xf32>
  %o = nn.matmul %dp, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %s2 = nn.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %p2 = nn.softmax %s2 : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %dp2 = nn.dropout %p2 {ratio = 0.2 : f32, training = true, stream = 7 : i64} : tensor<2x3x3xf32>
  %o2 = nn.matmul %dp2, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %o, %o2 : tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// -----

// Left unfused: weights read by another op too (a model that returns
// them); a softmax over the queries; a mask added from a trained value.
// CHECK-LABEL: func.func @unfused
// CHECK-NOT: nn.attention
// CHECK: return
func.func @unfused(%q: tensor<2x3x4xf32>, %kt: tensor<2x4x3xf32>, %v: tensor<2x3x4xf32>, %b: tensor<3x3xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x3xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %s2 = nn.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %p2 = nn.softmax %s2 : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %o2 = nn.matmul %p2, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %s3 = nn.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %p3 = nn.softmax %s3 {axis = 1 : i64} : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %o3 = nn.matmul %p3, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %s4 = nn.matmul %q, %kt : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  %a4 = nn.add %s4, %b : (tensor<2x3x3xf32>, tensor<3x3xf32>) -> tensor<2x3x3xf32>
  %p4 = nn.softmax %a4 : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %o4 = nn.matmul %p4, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %o2, %p2, %o3, %o4 : tensor<2x3x4xf32>, tensor<2x3x3xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}
