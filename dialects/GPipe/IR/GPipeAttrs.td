//===- GPipeAttrs.td - Attributes of the gpipe dialect -----*- tablegen -*-===//
//
// The role of a stage phase's input or output. Its cases are the contract's
// (common/include/gpipe/common/Role.h): the attribute holds that enum, so
// the compiler and the runtime share one definition.
//
//===----------------------------------------------------------------------===//

#ifndef GPIPE_GPIPE_ATTRS
#define GPIPE_GPIPE_ATTRS

include "mlir/IR/AttrTypeBase.td"

class GPipe_Attr<string name, string attrMnemonic>
    : AttrDef<GPipe_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def GPipe_RoleAttr : GPipe_Attr<"Role", "role"> {
  let summary = "What a stage phase's input or output is for";
  let description = [{
    Set on function arguments and results as `gpipe.role`: `data`, `output`,
    `loss`, `loss_grad`, `activation`, `output_grad`, `input_grad`, `stash`,
    `param_grad` or `hyper`. The bundle's manifest carries it, and the runtime
    connects stages by it.

    ```mlir
    func.func @forward(%x: tensor<4x8xf32> {gpipe.name = "act:0",
                                            gpipe.role = #gpipe.role<activation>})
    ```
  }];
  let parameters = (ins "::gpipe::Role":$value);
  let hasCustomAssemblyFormat = 1;
}

#endif // GPIPE_GPIPE_ATTRS
