//===- NNDialect.cpp - The nn dialect -------------------------------------===//
#include "NN/IR/NNDialect.h"
#include "NN/IR/NNOps.h"

using namespace mlir;
using namespace gpipe::nn;

#include "NN/IR/NNDialect.cpp.inc"
#include "NN/IR/NNInterfaces.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "NN/IR/NNOps.cpp.inc"
      >();
}
