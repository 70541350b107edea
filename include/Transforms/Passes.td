//===- Passes.td - gpipe passes ----------------------------*- tablegen -*-===//
#ifndef GPIPE_TRANSFORMS_PASSES
#define GPIPE_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def AnnotateCost : Pass<"gpipe-annotate-cost"> {
  let summary = "Attach each nn op's FLOPs and bytes moved as attributes";
  let description = [{
    Queries CostOpInterface on every op and sets `gpipe.flops` and
    `gpipe.bytes` (i64). The cost model and the partitioner read the same
    numbers; this pass makes them visible and testable.
  }];
}

#endif // GPIPE_TRANSFORMS_PASSES
