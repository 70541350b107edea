//===- Passes.h - gpipe passes ----------------------------------*- C++ -*-===//
#ifndef GPIPE_TRANSFORMS_PASSES_H
#define GPIPE_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace gpipe {

#define GEN_PASS_DECL
#include "Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Transforms/Passes.h.inc"

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_PASSES_H
