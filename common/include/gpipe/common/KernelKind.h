// The heavy ops a stage's code hands to the runtime as kernels: for each
// kind, its operands and results in order and the attributes the compiler
// always writes. The compiler (LowerStage) emits kernel table entries that
// follow it, the runtime checks each entry against it when it loads a
// bundle, and a backend's kernels read operands and attributes by these
// names, never by position or with defaults of their own.
#ifndef GPIPE_COMMON_KERNELKIND_H
#define GPIPE_COMMON_KERNELKIND_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpipe {

/// Queries and keys of the CPU attention kernels' tiles: at most 64, and
/// a sequence of `length` is cut into ceil(length / 64) blocks of equal
/// size (the last smaller), ceil(length / blocks) each: no sliver of one
/// token (ViT's 65) as a tile of its own. A causal attention scores the
/// tiles that hold a key at or before one of their queries (the compiler
/// counts those pairs as the op's work).
constexpr int64_t kAttentionTile = 64;
constexpr int64_t attentionBlock(int64_t length) {
  int64_t blocks = (length + kAttentionTile - 1) / kAttentionTile;
  return blocks <= 1 ? length : (length + blocks - 1) / blocks;
}

/// A batch normalization over feature maps of fewer elements than this (a
/// sample's map of one channel: 1x1, 2x2 and 3x3 maps, BatchNorm1d's
/// [N, C]) runs along each sample's row over the channels, one accumulator
/// an element, where longer maps run as a loop a plane: the CPU kernel
/// picks its loops by it, and the compiler prices the two as two kernel
/// families ("batch_norm_columns" and "batch_norm").
constexpr int64_t kBatchNormColumnsBelow = 16;

/// A 2-D convolution of one group, at stride 1 without dilation, whose
/// input has at most this many channels (an image model's first layer on
/// grey or RGB images) runs as the CPU backend's own loops over the plain
/// tensors, where others run as oneDNN's: the compiler prices those as
/// the kernel family "narrow_conv", the rest as oneDNN's families.
constexpr int64_t kNarrowConvChannelsAtMost = 4;
/// Whether a 2-D convolution is one the CPU backend runs as its own loops
/// (the family "narrow_conv"), by its input channels, groups, strides and
/// dilations; the backend asks also that its tensors are float32 and its
/// padding fits the loops' padded planes.
constexpr bool isNarrowConv2d(int64_t inChannels, int64_t group,
                              int64_t strideH, int64_t strideW,
                              int64_t dilationH, int64_t dilationW) {
  return inChannels >= 1 && inChannels <= kNarrowConvChannelsAtMost &&
         group == 1 && strideH == 1 && strideW == 1 && dilationH == 1 &&
         dilationW == 1;
}

struct KernelKind {
  std::string_view name; // the nn op's name without "nn.": "conv", ...
  /// Operand names in order; the last `optionalOperands` may be absent.
  const std::string_view *operands;
  size_t numOperands;
  size_t optionalOperands;
  const std::string_view *results;
  size_t numResults;
  /// Attributes every entry of this kind carries.
  const std::string_view *attributes;
  size_t numAttributes;

  /// The position of the operand or result named `name`, or nullopt.
  std::optional<size_t> operandIndex(std::string_view name) const;
  std::optional<size_t> resultIndex(std::string_view name) const;
};

/// The kind named `name`, or null: that op is not run as a kernel.
const KernelKind *findKernelKind(std::string_view name);

/// Checks an entry's arity and attributes against its kind: an empty string
/// if it conforms, else what is wrong ("needs 5 operands, has 3", "has no
/// attribute 'epsilon'"). `hasAttribute` answers for one name.
template <typename HasAttribute>
std::string checkKernelEntry(const KernelKind &kind, size_t operands,
                             size_t results, HasAttribute hasAttribute) {
  size_t least = kind.numOperands - kind.optionalOperands;
  if (operands < least || operands > kind.numOperands)
    return "needs " +
           (least == kind.numOperands ? std::to_string(least)
                                      : std::to_string(least) + " to " +
                                            std::to_string(kind.numOperands)) +
           " operands, has " + std::to_string(operands);
  if (results != kind.numResults)
    return "needs " + std::to_string(kind.numResults) + " results, has " +
           std::to_string(results);
  for (size_t i = 0; i < kind.numAttributes; ++i)
    if (!hasAttribute(kind.attributes[i]))
      return "has no attribute '" + std::string(kind.attributes[i]) + "'";
  return "";
}

} // namespace gpipe

#endif // GPIPE_COMMON_KERNELKIND_H
