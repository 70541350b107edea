# One precompiled header for the compiler's libraries and tools: the MLIR
# and LLVM headers nearly every translation unit of dialects/, lib/ and
# tools/ parses. Parsing them is most of a compile here (AppendLoss.cpp:
# 28 s of its 34 s is the front end, LLVMDialect.h alone 15 s); with the
# header precompiled once per build directory each unit starts from it.
# Only upstream headers are listed: the project's generated ones would
# tie the header to the dialects' TableGen targets.
#
# Every target below reuses the one header (REUSE_FROM): they share the
# compile options, definitions and include directories MLIRSetup.cmake
# sets. Where a compiler finds the header unusable it parses the text
# instead (correct, only slower). -DGPIPE_PCH=OFF turns it off.
option(GPIPE_PCH "Precompile the MLIR/LLVM headers the compiler shares" ON)

set(GPIPE_PCH_HEADERS
  <algorithm> <cmath> <functional> <map> <memory> <optional> <set> <string>
  <vector>
  <llvm/ADT/DenseMap.h> <llvm/ADT/STLExtras.h> <llvm/ADT/SmallVector.h>
  <llvm/ADT/StringMap.h> <llvm/ADT/StringSet.h> <llvm/ADT/TypeSwitch.h>
  <llvm/Support/CommandLine.h> <llvm/Support/FormatVariadic.h>
  <llvm/Support/raw_ostream.h>
  <mlir/IR/Builders.h> <mlir/IR/BuiltinOps.h> <mlir/IR/BuiltinTypes.h>
  <mlir/IR/IRMapping.h> <mlir/IR/MLIRContext.h> <mlir/IR/PatternMatch.h>
  <mlir/IR/Verifier.h>
  <mlir/Interfaces/InferTypeOpInterface.h>
  <mlir/Interfaces/SideEffectInterfaces.h>
  <mlir/Pass/Pass.h> <mlir/Pass/PassManager.h>
  <mlir/Transforms/GreedyPatternRewriteDriver.h>
  <mlir/Dialect/Arith/IR/Arith.h> <mlir/Dialect/Func/IR/FuncOps.h>
  <mlir/Dialect/LLVMIR/LLVMDialect.h> <mlir/Dialect/Linalg/IR/Linalg.h>
  <mlir/Dialect/Math/IR/Math.h> <mlir/Dialect/MemRef/IR/MemRef.h>
  <mlir/Dialect/SCF/IR/SCF.h> <mlir/Dialect/Tensor/IR/Tensor.h>)

# Adds the precompiled header to each TARGET (call after they exist).
function(gpipe_use_compiler_pch)
  if(NOT GPIPE_PCH)
    return()
  endif()
  if(NOT TARGET gpipe_compiler_pch)
    file(WRITE ${PROJECT_BINARY_DIR}/gpipe_compiler_pch.cpp
         "// The translation unit that builds the compiler's PCH.\n")
    add_library(gpipe_compiler_pch OBJECT
                ${PROJECT_BINARY_DIR}/gpipe_compiler_pch.cpp)
    target_precompile_headers(gpipe_compiler_pch PRIVATE ${GPIPE_PCH_HEADERS})
  endif()
  foreach(target ${ARGN})
    target_precompile_headers(${target} REUSE_FROM gpipe_compiler_pch)
  endforeach()
endfunction()
