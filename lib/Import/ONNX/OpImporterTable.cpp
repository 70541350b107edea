//===- OpImporterTable.cpp - ONNX op importers by type and opset ----------===//
#include "OpImporterTable.h"

#include <algorithm>
#include <set>

using namespace gpipe::onnx_import;

void OpImporterTable::add(llvm::StringRef opType, int sinceVersion,
                          OpImportFn fn, llvm::StringRef domain) {
  entries.push_back({domain.str(), opType.str(), sinceVersion, fn});
}

const OpImporter *OpImporterTable::lookup(llvm::StringRef domain,
                                          llvm::StringRef opType,
                                          int64_t opset) const {
  const OpImporter *best = nullptr;
  for (const OpImporter &e : entries)
    if (e.domain == domain && e.opType == opType && e.sinceVersion <= opset &&
        (!best || e.sinceVersion > best->sinceVersion))
      best = &e;
  return best;
}

int OpImporterTable::minVersion(llvm::StringRef domain,
                                llvm::StringRef opType) const {
  int version = -1;
  for (const OpImporter &e : entries)
    if (e.domain == domain && e.opType == opType &&
        (version < 0 || e.sinceVersion < version))
      version = e.sinceVersion;
  return version;
}

std::string OpImporterTable::supportedOps() const {
  std::set<std::string> names;
  for (const OpImporter &e : entries)
    names.insert(e.domain.empty() ? e.opType : e.domain + "." + e.opType);
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

const OpImporterTable &gpipe::onnx_import::getOpImporterTable() {
  static const OpImporterTable table = [] {
    OpImporterTable t;
    registerElementwiseImporters(t);
    registerLogicalImporters(t);
    registerLossImporters(t);
    registerLinearImporters(t);
    registerNormalizationImporters(t);
    registerPoolingImporters(t);
    registerShapeImporters(t);
    registerResizeImporters(t);
    registerRecurrentImporters(t);
    registerConstantImporters(t);
    return t;
  }();
  return table;
}
