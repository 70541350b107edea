// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-split-forward-backward --gpipe-split-backward-weights | FileCheck %s
// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-split-forward-backward=recompute=always --gpipe-split-backward-weights | FileCheck %s --check-prefix=RECOMPUTE
// RUN: not gpipe-opt %s --gpipe-split-backward-weights 2>&1 | FileCheck %s --check-prefix=NOBW

// A middle stage: act:x (from the previous stage) -> gemm(w1) -> relu ->
// gemm(w2) -> act:y (to the next). Its input gradient needs the gradient
// of the gemm's output through relu (dh) and w1; the weight gradients
// need dh too (dW1 = dh^T x), so B computes dh once and carries it to W,
// which reads x and relu's input from the stash and w2's gradient from
// the seed.

// CHECK-LABEL: func.func @forward
// CHECK-LABEL: func.func @backward_input
// CHECK-SAME: (%{{[^:]*}}: tensor<2x4xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>}, %[[H:[^:]*]]: tensor<2x4xf32> {gpipe.name = "stash:1", gpipe.role = #gpipe.role<stash>}, %{{[^:]*}}: tensor<2x3xf32> {gpipe.name = "stash:2", gpipe.role = #gpipe.role<stash>}, %[[G:[^:]*]]: tensor<2x5xf32> {gpipe.name = "output_grad:act:y", gpipe.role = #gpipe.role<output_grad>})
// CHECK-SAME: -> (tensor<2x3xf32> {gpipe.name = "input_grad:act:x", gpipe.role = #gpipe.role<input_grad>}, tensor<2x4xf32> {gpipe.name = "carry:0", gpipe.role = #gpipe.role<carry>})
// CHECK-DAG: %[[W1:.*]] = gpipe.get_parameter @w1
// CHECK-DAG: %[[W2:.*]] = gpipe.get_parameter @w2
// CHECK: %[[DR:.*]] = nn.gemm %[[G]], %[[W2]] :
// CHECK: %[[DH:.*]] = nn.relu_grad %[[DR]], %[[H]]
// CHECK: %[[DX:.*]] = nn.gemm %[[DH]], %[[W1]] :
// CHECK-NEXT: return %[[DX]], %[[DH]]
// W reads relu's output (stash:0) and x (stash:2) by name, the seed, and
// the carried dh; it computes neither relu_grad nor dx again.
// CHECK-LABEL: func.func @backward_weight
// CHECK-SAME: (%[[R:[^:]*]]: tensor<2x4xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>}, %[[X:[^:]*]]: tensor<2x3xf32> {gpipe.name = "stash:2", gpipe.role = #gpipe.role<stash>}, %[[WG:[^:]*]]: tensor<2x5xf32> {gpipe.name = "output_grad:act:y", gpipe.role = #gpipe.role<output_grad>}, %[[C:[^:]*]]: tensor<2x4xf32> {gpipe.name = "carry:0", gpipe.role = #gpipe.role<carry>})
// CHECK-SAME: -> (tensor<4x3xf32> {gpipe.name = "grad:w1", gpipe.role = #gpipe.role<param_grad>}, tensor<5x4xf32> {gpipe.name = "grad:w2", gpipe.role = #gpipe.role<param_grad>})
// CHECK-NOT: relu_grad
// CHECK-NOT: get_parameter
// CHECK-DAG: %[[DW2:.*]] = nn.gemm %[[WG]], %[[R]] {trans_a = true}
// CHECK-DAG: %[[DW1:.*]] = nn.gemm %[[C]], %[[X]] {trans_a = true}
// CHECK: return %[[DW1]], %[[DW2]]
// CHECK-NOT: func.func @backward(

// With recompute, B runs the forward again from x as far as it needs
// (the gemm, for relu_grad) and carries h and dh; W runs relu again on
// the carried h for w2's gradient.
// RECOMPUTE-LABEL: func.func @backward_input
// RECOMPUTE-SAME: (%[[X:[^:]*]]: tensor<2x3xf32> {gpipe.name = "act:x", gpipe.role = #gpipe.role<activation>}
// RECOMPUTE-SAME: carry:1
// RECOMPUTE: %[[H:.*]] = nn.gemm %[[X]], %{{.*}} {gpipe.recompute, trans_b = true}
// RECOMPUTE-NOT: nn.relu %
// RECOMPUTE: %[[DH:.*]] = nn.relu_grad %{{.*}}, %[[H]]
// RECOMPUTE: return %{{.*}}, %[[H]], %[[DH]]
// RECOMPUTE-LABEL: func.func @backward_weight
// RECOMPUTE-SAME: (%[[WX:[^:]*]]: tensor<2x3xf32> {gpipe.name = "act:x", gpipe.role = #gpipe.role<activation>}, %[[WG:[^:]*]]: tensor<2x5xf32> {{.*}}, %[[CH:[^:]*]]: tensor<2x4xf32> {gpipe.name = "carry:0", {{.*}}}, %[[CDH:[^:]*]]: tensor<2x4xf32> {gpipe.name = "carry:1", {{.*}}})
// RECOMPUTE: %[[R:.*]] = nn.relu %[[CH]] {gpipe.recompute}
// RECOMPUTE-DAG: nn.gemm %[[WG]], %[[R]] {trans_a = true}
// RECOMPUTE-DAG: nn.gemm %[[CDH]], %[[WX]] {trans_a = true}

// NOBW: error: no @backward to split (run gpipe-split-forward-backward)

gpipe.parameter @w1 trainable = dense<0.5> : tensor<4x3xf32>
gpipe.parameter @w2 trainable = dense<0.25> : tensor<5x4xf32>
func.func @forward(%x: tensor<2x3xf32> {gpipe.name = "act:x", gpipe.role = #gpipe.role<activation>}) -> (tensor<2x5xf32> {gpipe.name = "act:y", gpipe.role = #gpipe.role<activation>}) {
  %w1 = gpipe.get_parameter @w1 : tensor<4x3xf32>
  %h = nn.gemm %x, %w1 {trans_b = true} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %r = nn.relu %h : tensor<2x4xf32>
  %w2 = gpipe.get_parameter @w2 : tensor<5x4xf32>
  %y = nn.gemm %r, %w2 {trans_b = true} : (tensor<2x4xf32>, tensor<5x4xf32>) -> tensor<2x5xf32>
  return %y : tensor<2x5xf32>
}
