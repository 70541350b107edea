// RUN: gpipe-opt %s --split-input-file "--gpipe-append-optimizer=optimizer=sgd momentum=true nesterov=true" | FileCheck %s --check-prefix=SGD
// RUN: gpipe-opt %s --split-input-file --gpipe-append-optimizer=optimizer=adamw | FileCheck %s --check-prefix=ADAMW
// RUN: not gpipe-opt %s --split-input-file --gpipe-append-optimizer=optimizer=rmsprop 2>&1 | FileCheck %s --check-prefix=BAD

// SGD with Nesterov momentum: a state parameter per trained one, the
// update written back; the frozen parameter is left alone.
// SGD: gpipe.parameter @w trainable
// SGD-NEXT: gpipe.parameter @"__opt.momentum:w" optimizer_state = dense<0.000000e+00> : tensor<2x3xf32>
// SGD-NOT: __opt.momentum:frozen
// SGD-LABEL: func.func @optimizer
// SGD-SAME: (%[[G:.*]]: tensor<2x3xf32> {gpipe.name = "grad:w", gpipe.role = #gpipe.role<param_grad>}, %[[LR:.*]]: tensor<f32> {gpipe.name = "hyper:lr", gpipe.role = #gpipe.role<hyper>}, %[[WD:.*]]: tensor<f32> {gpipe.name = "hyper:weight_decay", gpipe.role = #gpipe.role<hyper>}, %[[MU:.*]]: tensor<f32> {gpipe.name = "hyper:momentum", gpipe.role = #gpipe.role<hyper>})
// SGD: %[[P:.*]] = gpipe.get_parameter @w
// SGD: %[[DECAY:.*]] = nn.mul %[[WD]], %[[P]]
// SGD: %[[D:.*]] = nn.add %[[G]], %[[DECAY]]
// SGD: %[[BUF:.*]] = gpipe.get_parameter @"__opt.momentum:w"
// SGD: %[[MB:.*]] = nn.mul %[[MU]], %[[BUF]]
// SGD: %[[NEXT:.*]] = nn.add %[[MB]], %[[D]]
// SGD: gpipe.assign_parameter @"__opt.momentum:w", %[[NEXT]]
// SGD: %[[LOOK:.*]] = nn.mul %[[MU]], %[[NEXT]]
// SGD: %[[STEP:.*]] = nn.add %[[D]], %[[LOOK]]
// SGD: %[[SCALED:.*]] = nn.mul %[[LR]], %[[STEP]]
// SGD: %[[NEW:.*]] = nn.sub %[[P]], %[[SCALED]]
// SGD: gpipe.assign_parameter @w, %[[NEW]]
// SGD-NEXT: return

// AdamW: two moments, decoupled decay, bias corrections from the runtime.
// ADAMW-DAG: gpipe.parameter @"__opt.m:w" optimizer_state
// ADAMW-DAG: gpipe.parameter @"__opt.v:w" optimizer_state
// ADAMW-LABEL: func.func @optimizer
// ADAMW-SAME: {gpipe.name = "hyper:step_size", gpipe.role = #gpipe.role<hyper>}, %{{.*}}: tensor<f32> {gpipe.name = "hyper:bias_correction2", gpipe.role = #gpipe.role<hyper>})
// ADAMW: gpipe.assign_parameter @"__opt.m:w"
// ADAMW: gpipe.assign_parameter @"__opt.v:w", %[[V:.*]] :
// ADAMW: nn.sqrt %[[V]]
// ADAMW: gpipe.assign_parameter @w

// BAD: error: optimizer must be sgd, adam or adamw, not 'rmsprop'
gpipe.parameter @w trainable = dense<0.5> : tensor<2x3xf32>
gpipe.parameter @frozen = dense<1.0> : tensor<3xf32>
