//===- FreezeByName.cpp - Initializers the user freezes by name -----------===//

#include "FreezeByName.h"

#include "ConstTensor.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/GlobPattern.h"

using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

struct Pattern {
  std::string text;
  llvm::GlobPattern glob;
  bool used = false;
};

llvm::Expected<std::vector<Pattern>>
compile(const std::vector<std::string> &texts, llvm::StringRef flag) {
  std::vector<Pattern> out;
  for (const std::string &text : texts) {
    if (text.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--" + flag.str() +
                                         ": an empty name in the list");
    // No brace alternatives (the flags are comma-separated lists already).
    auto glob = llvm::GlobPattern::create(text);
    if (!glob)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--" + flag.str() + "=" + text + ": not a name pattern (" +
              llvm::toString(glob.takeError()) + "; use *, ? and [...])");
    out.push_back({text, std::move(*glob)});
  }
  return out;
}

bool matchAny(std::vector<Pattern> &patterns, llvm::StringRef name,
              std::string *which = nullptr) {
  bool any = false;
  for (Pattern &p : patterns)
    if (p.glob.match(name)) {
      if (which && !any)
        *which = p.text;
      p.used = any = true;
    }
  return any;
}

} // namespace

llvm::Expected<llvm::StringMap<std::string>>
gpipe::onnx_import::initializersFrozenByName(
    const onnx::GraphProto &graph, const std::vector<std::string> &freeze,
    const std::vector<std::string> &trainable) {
  auto freezePatterns = compile(freeze, "freeze");
  if (!freezePatterns)
    return freezePatterns.takeError();
  auto trainablePatterns = compile(trainable, "trainable");
  if (!trainablePatterns)
    return trainablePatterns.takeError();

  llvm::StringMap<std::string> frozen;
  std::vector<std::string> names;
  for (const onnx::TensorProto &t : graph.initializer()) {
    if (!isFloatDType(static_cast<DType>(t.data_type())))
      continue;
    names.push_back(t.name());
    std::string which;
    if (matchAny(*freezePatterns, t.name(), &which))
      frozen[t.name()] = "frozen by --freeze=" + which;
    // Every --trainable pattern is checked against every name, so that
    // one matching only frozen names is not reported as matching none.
    if (!trainable.empty() && !matchAny(*trainablePatterns, t.name()) &&
        !frozen.count(t.name()))
      frozen[t.name()] = "not named by --trainable";
  }
  for (auto [flag, patterns] :
       {std::make_pair("freeze", &*freezePatterns),
        std::make_pair("trainable", &*trainablePatterns)})
    for (const Pattern &p : *patterns) {
      if (p.used)
        continue;
      std::string known;
      for (size_t i = 0; i < names.size() && i < 8; ++i)
        known += (i ? ", " : "") + names[i];
      if (names.size() > 8)
        known += ", ... (" + std::to_string(names.size()) +
                 " in all; gpipe-opt --emit=summary lists them)";
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          std::string("--") + flag + "=" + p.text +
              " matches no floating-point initializer of the model (" +
              (names.empty() ? std::string("it has none")
                             : "its initializers: " + known) +
              ")");
    }
  if ((!freeze.empty() || !trainable.empty()) && !names.empty() &&
      frozen.size() == names.size())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--freeze and --trainable leave no initializer to train (of " +
            std::to_string(names.size()) + ")");
  return frozen;
}
