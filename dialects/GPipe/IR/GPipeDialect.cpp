//===- GPipeDialect.cpp - The gpipe dialect -------------------------------===//
#include "GPipe/IR/GPipeDialect.h"
#include "GPipe/IR/GPipeOps.h"

using namespace mlir;
using namespace gpipe;

#include "GPipe/IR/GPipeDialect.cpp.inc"

void GPipeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "GPipe/IR/GPipeOps.cpp.inc"
      >();
}
