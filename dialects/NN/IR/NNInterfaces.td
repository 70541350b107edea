//===- NNInterfaces.td - Interfaces of nn ops --------------*- tablegen -*-===//
//
// Every forward nn op implements CostOpInterface; the partitioner's cost
// model (roofline over a device profile) reads FLOPs and bytes from it.
//
//===----------------------------------------------------------------------===//

#ifndef GPIPE_NN_INTERFACES
#define GPIPE_NN_INTERFACES

include "mlir/IR/OpBase.td"

def NN_CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    The compute and memory cost of one execution of an op on its static
    shapes: floating point operations and bytes read plus written. Used by the
    cost model to predict per-stage times.
  }];
  let cppNamespace = "::gpipe::nn";
  let methods = [
    InterfaceMethod<
      /*desc=*/"Floating point operations of one execution (multiply-add = 2).",
      /*retTy=*/"int64_t", /*methodName=*/"getFlops", /*args=*/(ins),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::gpipe::nn::detail::defaultFlops($_op.getOperation());
      }]>,
    InterfaceMethod<
      /*desc=*/"Bytes read from operands plus bytes written to results.",
      /*retTy=*/"int64_t", /*methodName=*/"getBytesMoved", /*args=*/(ins),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::gpipe::nn::detail::defaultBytesMoved($_op.getOperation());
      }]>,
    InterfaceMethod<
      /*desc=*/[{Bytes the op's gradient (the ops its VJP rule builds)
                 reads plus writes: twice the forward's by default (the
                 gradients of its operands from the result's gradient and
                 what the forward kept); 0 where the gradient is passed
                 on unchanged (a reshape, an addition without broadcast).}],
      /*retTy=*/"int64_t", /*methodName=*/"getBackwardBytesMoved",
      /*args=*/(ins), /*methodBody=*/"",
      /*defaultImplementation=*/[{ return 2 * $_op.getBytesMoved(); }]>,
    InterfaceMethod<
      /*desc=*/[{The family of kernels that runs the op, whose measured
                 speed (gpipe-opt --calibrate) the cost model applies to
                 it: one of the table in common/'s KernelFamily.h
                 ("matmul", "conv", "batch_norm", "elementwise", ...),
                 which says what its fit is a function of. The verifier
                 rejects a name the table does not hold.}],
      /*retTy=*/"::llvm::StringRef", /*methodName=*/"getKernelFamily",
      /*args=*/(ins), /*methodBody=*/"",
      /*defaultImplementation=*/[{ return "elementwise"; }]>,
    InterfaceMethod<
      /*desc=*/[{The family that runs the op's gradient (the ops its VJP
                 rule builds): the forward's unless the rule builds other
                 ops (a global average pool's gradient is a broadcast, a
                 generated loop, where its forward is a library kernel).}],
      /*retTy=*/"::llvm::StringRef", /*methodName=*/"getBackwardKernelFamily",
      /*args=*/(ins), /*methodBody=*/"",
      /*defaultImplementation=*/[{ return $_op.getKernelFamily(); }]>,
  ];
  let verify = [{
    return ::gpipe::nn::detail::verifyKernelFamilies($_op);
  }];
}

def NN_ElementwiseOpInterface : OpInterface<"ElementwiseOpInterface"> {
  let description = [{
    An op that applies a scalar function to each element of its (broadcast)
    operands. Its scalar semantics are declared with the op, so that one
    conversion turns every element-wise op into a linalg.generic.
  }];
  let cppNamespace = "::gpipe::nn";
  let methods = [
    InterfaceMethod<
      /*desc=*/[{Builds the scalar computation of one output element from
                 one element of each operand; returns null (after emitting
                 an error) for element types the op cannot compute.}],
      /*retTy=*/"::mlir::Value", /*methodName=*/"buildScalar",
      /*args=*/(ins "::mlir::OpBuilder &":$builder, "::mlir::Location":$loc,
                    "::mlir::ValueRange":$operands)>,
    InterfaceMethod<
      /*desc=*/[{Whether this instance computes each element from the operand
                 elements alone; false for instances that need more (random
                 dropout draws from the step's random stream) and run as
                 runtime kernels instead.}],
      /*retTy=*/"bool", /*methodName=*/"hasScalarForm", /*args=*/(ins),
      /*methodBody=*/"", /*defaultImplementation=*/"return true;">,
  ];
}

def NN_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let description = [{
    The reverse-mode derivative rule of a forward op: given the gradients of
    its results (null where a result does not reach the loss), build the
    gradients of its operands. gpipe-autodiff calls it on every op of the
    forward function, last to first.
  }];
  let cppNamespace = "::gpipe::nn";
  let methods = [
    InterfaceMethod<
      /*desc=*/[{Builds operand gradients (one Value per operand; null for
                 operands that get none, e.g. integer labels). Fails after
                 emitting an error if the rule cannot handle this op.}],
      /*retTy=*/"::mlir::LogicalResult", /*methodName=*/"buildVJP",
      /*args=*/(ins "::mlir::OpBuilder &":$builder,
                    "::mlir::ValueRange":$resultGrads,
                    "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
    InterfaceMethod<
      /*desc=*/[{Whether result `index` is differentiated: its gradient is
                 expected whenever the op reaches the loss. Results that are
                 not (e.g. statistics saved for the backward) get none.}],
      /*retTy=*/"bool", /*methodName=*/"isDifferentiableResult",
      /*args=*/(ins "unsigned":$index), /*methodBody=*/"",
      /*defaultImplementation=*/"return true;">,
  ];
}

def NN_ComputeTypeOpInterface : OpInterface<"ComputeTypeOpInterface"> {
  let description = [{
    An op whose work is products of matrices (a Gemm, a MatMul, a
    convolution and the convolution's gradients): its operands may be
    multiplied in a narrower type, the products summed in float32. The
    `compute_type` attribute says which: "f32" (the default) or "bf16"
    (operands rounded to bfloat16, sums and result in float32: what
    `torch.autocast` does to these ops, less the result's rounding). Its
    tensors stay float32; gpipe-set-precision sets it, the backends' kernels
    read it from the kernel table.
  }];
  let cppNamespace = "::gpipe::nn";
  let methods = [
    InterfaceMethod<
      /*desc=*/"The type the operands are multiplied in: \"f32\" or \"bf16\".",
      /*retTy=*/"::llvm::StringRef", /*methodName=*/"getComputeType",
      /*args=*/(ins)>,
    InterfaceMethod<
      /*desc=*/"Sets the type the operands are multiplied in.",
      /*retTy=*/"void", /*methodName=*/"setComputeType",
      /*args=*/(ins "::llvm::StringRef":$type)>,
  ];
  let verify = [{
    return ::gpipe::nn::detail::verifyComputeType($_op);
  }];
}

#endif // GPIPE_NN_INTERFACES
