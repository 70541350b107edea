//===- OpImporterTable.h - ONNX op importers by type and opset --*- C++ -*-===//
//
// The importer is a table keyed by (domain, op type, since-version), the way
// onnx-mlir does it: a model of opset N uses, for each op type, the entry
// with the highest since-version <= N. Each Ops*.cpp file registers the
// importers of one op family.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_LIB_IMPORT_ONNX_OPIMPORTERTABLE_H
#define GPIPE_LIB_IMPORT_ONNX_OPIMPORTERTABLE_H

#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace gpipe::onnx_import {

class GraphImporter;

using OpImportFn = mlir::LogicalResult (*)(GraphImporter &);

struct OpImporter {
  std::string domain; // "" is the default ONNX domain
  std::string opType;
  int sinceVersion;
  OpImportFn import;
};

class OpImporterTable {
public:
  void add(llvm::StringRef opType, int sinceVersion, OpImportFn fn,
           llvm::StringRef domain = "");
  /// The importer for `opType` at `opset`, or null.
  const OpImporter *lookup(llvm::StringRef domain, llvm::StringRef opType,
                           int64_t opset) const;
  /// The lowest since-version registered for an op type, or -1.
  int minVersion(llvm::StringRef domain, llvm::StringRef opType) const;
  /// "Add, AveragePool, ..." (domain-qualified outside the default domain).
  std::string supportedOps() const;

private:
  std::vector<OpImporter> entries;
};

/// The table with every importer gpipe has, built on first use.
const OpImporterTable &getOpImporterTable();

// Registration of each op family (one per Ops*.cpp).
void registerElementwiseImporters(OpImporterTable &table);
void registerLogicalImporters(OpImporterTable &table);
void registerLossImporters(OpImporterTable &table);
void registerLinearImporters(OpImporterTable &table);
void registerNormalizationImporters(OpImporterTable &table);
void registerPoolingImporters(OpImporterTable &table);
void registerShapeImporters(OpImporterTable &table);
void registerResizeImporters(OpImporterTable &table);
void registerRecurrentImporters(OpImporterTable &table);
void registerConstantImporters(OpImporterTable &table);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_OPIMPORTERTABLE_H
