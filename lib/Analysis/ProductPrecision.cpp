//===- ProductPrecision.cpp - Values only multiplied in bfloat16 ----------===//
#include "Analysis/ProductPrecision.h"

#include "NN/IR/NNOps.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace gpipe {

namespace {

/// Whether `use` rounds its value to bfloat16 before multiplying it.
bool roundsToBf16(OpOperand &use) {
  Operation *op = use.getOwner();
  auto product = dyn_cast<nn::ComputeTypeOpInterface>(op);
  if (!product || product.getComputeType() != "bf16")
    return false;
  // A gemm's c is added in float32; every operand of a matmul multiplies.
  if (isa<nn::GemmOp>(op))
    return use.getOperandNumber() < 2;
  return isa<nn::MatMulOp>(op);
}

bool onlyRounded(Value v, function_ref<bool(Operation *)> counts) {
  for (OpOperand &use : v.getUses()) {
    Operation *op = use.getOwner();
    if (counts && !counts(op))
      continue;
    if (isa<nn::ReshapeOp, nn::TransposeOp>(op)) {
      if (!onlyRounded(op->getResult(0), nullptr))
        return false;
      continue;
    }
    if (!roundsToBf16(use))
      return false;
  }
  return true;
}

/// Whether `use` is the weight of a bfloat16 convolution kernel: 1 for an
/// nn.conv, 2 for an nn.conv_grad_input, 0 otherwise.
int bf16ConvWeight(OpOperand &use) {
  Operation *op = use.getOwner();
  auto product = dyn_cast<nn::ComputeTypeOpInterface>(op);
  if (!product || product.getComputeType() != "bf16" ||
      use.getOperandNumber() != 1)
    return 0;
  return isa<nn::ConvOp>(op) ? 1 : isa<nn::ConvGradInputOp>(op) ? 2 : 0;
}

/// Records in `product` and `convs` (bit 0: nn.conv, bit 1:
/// nn.conv_grad_input) the bfloat16 kernels reading `v`, through reshapes
/// and transposes.
void bf16Readers(Value v, bool &product, unsigned &convs) {
  for (OpOperand &use : v.getUses()) {
    Operation *op = use.getOwner();
    if (isa<nn::ReshapeOp, nn::TransposeOp>(op))
      bf16Readers(op->getResult(0), product, convs);
    else if (roundsToBf16(use))
      product = true;
    else if (int conv = bf16ConvWeight(use))
      convs |= conv;
  }
}

} // namespace

int64_t bf16CopyBytes(ArrayRef<Value> reads, int64_t bytes,
                      bool convGradInput) {
  bool product = false;
  unsigned convs = 0;
  for (Value v : reads)
    bf16Readers(v, product, convs);
  if (convGradInput && (convs & 1))
    convs |= 2;
  int copies =
      (product ? 1 : 0) + ((convs & 1) ? 1 : 0) + ((convs & 2) ? 1 : 0);
  return copies * bf16StashBytes(bytes);
}

bool onlyMultipliedInBf16(Value v, function_ref<bool(Operation *)> counts) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !type.getElementType().isF32())
    return false;
  return onlyRounded(v, counts);
}

} // namespace gpipe
