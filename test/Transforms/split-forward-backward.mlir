// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-split-forward-backward | FileCheck %s --check-prefix=NEVER
// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-split-forward-backward=recompute=always | FileCheck %s --check-prefix=ALWAYS
// RUN: gpipe-opt %s --gpipe-autodiff --gpipe-split-forward-backward=recompute=except-last | FileCheck %s --check-prefix=NEVER
// RUN: gpipe-opt %s --gpipe-autodiff "--gpipe-split-forward-backward=recompute=except-last last-stage=false" | FileCheck %s --check-prefix=ALWAYS
// RUN: not gpipe-opt %s --gpipe-autodiff --gpipe-split-forward-backward=recompute=sometimes 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not gpipe-opt %s --gpipe-split-forward-backward 2>&1 | FileCheck %s --check-prefix=NOFB

// x -> gemm(w) -> relu -> mean: the backward needs x (for dW) and the
// gemm's output (for relu's gradient).

// NEVER-LABEL: func.func @forward
// NEVER-SAME: (%[[X:.*]]: tensor<2x3xf32> {gpipe.name = "x"})
// NEVER-SAME: -> (tensor<f32>, tensor<2x4xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>}, tensor<2x3xf32> {gpipe.name = "stash:1", gpipe.role = #gpipe.role<stash>})
// NEVER: %[[H:.*]] = nn.gemm %[[X]]
// NEVER: return %{{.*}}, %[[H]], %[[X]]
// NEVER-LABEL: func.func @backward
// NEVER-SAME: (%[[SH:.*]]: tensor<2x4xf32> {gpipe.name = "stash:0", gpipe.role = #gpipe.role<stash>}, %[[SX:.*]]: tensor<2x3xf32> {gpipe.name = "stash:1", gpipe.role = #gpipe.role<stash>}, %{{.*}}: tensor<f32> {gpipe.name = "loss_grad", gpipe.role = #gpipe.role<loss_grad>})
// NEVER-SAME: -> (tensor<4x3xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>})
// NEVER-NOT: nn.relu %
// NEVER: nn.relu_grad %{{.*}}, %[[SH]]
// NEVER: nn.gemm %{{.*}}, %[[SX]] {trans_a = true}
// NEVER-NOT: nn.relu %

// ALWAYS-LABEL: func.func @forward
// ALWAYS-SAME: -> tensor<f32>
// ALWAYS-LABEL: func.func @backward
// ALWAYS-SAME: (%[[X:.*]]: tensor<2x3xf32> {gpipe.name = "x"}, %{{.*}}: tensor<f32> {gpipe.name = "loss_grad", gpipe.role = #gpipe.role<loss_grad>})
// ALWAYS: %[[H:.*]] = nn.gemm %[[X]], %{{.*}} {gpipe.recompute, trans_b = true}
// ALWAYS: nn.relu_grad %{{.*}}, %[[H]]
// ALWAYS: return

// BAD: error: recompute must be never, always or except-last, not 'sometimes'
// NOFB: error: no @forward_backward to split (run gpipe-autodiff)

gpipe.parameter @w trainable = dense<0.5> : tensor<4x3xf32>
func.func @forward(%x: tensor<2x3xf32> {gpipe.name = "x"}) -> tensor<f32> {
  %w = gpipe.get_parameter @w : tensor<4x3xf32>
  %h = nn.gemm %x, %w {trans_b = true} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %r = nn.relu %h : tensor<2x4xf32>
  %m = nn.reduce_mean %r {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  return %m : tensor<f32>
}
