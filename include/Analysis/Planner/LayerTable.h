//===- LayerTable.h - The layers of @forward as the planner weighs them -*- C++
//-*-===//
//
// The planner's view of a model: its layers (the ops of @forward other than
// parameters and constants, in order) with their work, the bytes they
// keep and the bytes crossing each possible cut, measured on the shapes the
// module was imported with (`rows` per micro-batch) and scaled to other
// micro-batch sizes: FLOPs and activations grow with the rows, the bytes of
// parameters an op reads do not. The partitioner and the plan search both
// read it, so that a plan the search weighs is the plan the partitioner
// cuts.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_PLANNER_LAYERTABLE_H
#define GPIPE_ANALYSIS_PLANNER_LAYERTABLE_H

#include "Analysis/CostModel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace gpipe {

/// The properties of `family` in common/'s kernel family table
/// (gpipe/common/KernelFamily.h); false for a name it does not hold.
/// Whether its kernels are timed by their FLOPs and bytes rather than by
/// their bytes alone.
bool timedByFlops(llvm::StringRef family);
/// Whether its fit's work is the op's getFlops (the FLOPs of matmuls and
/// convolutions, a pooling's taps: KernelTiming::Flops and Taps) rather
/// than the bytes it moves.
bool workIsOpFlops(llvm::StringRef family);
/// Whether its ops are gpipe's generated loops, timed by one fit of their
/// bytes forward and backward.
bool isGeneratedLoop(llvm::StringRef family);
/// Whether its kernels loop over feature maps or stacked matrices: their
/// fits price the result's planes (LayerTable::planes), what they loop
/// over (KernelPlanes).
bool pricesPlanes(llvm::StringRef family);
/// Whether its kernels convert their parameters to a layout of their own
/// once a step, the other micro-batches reusing it.
bool convertsParameters(llvm::StringRef family);

struct LayerTable {
  llvm::SmallVector<mlir::Operation *> layers;
  /// Rows of the micro-batch the shapes describe (the batch dimension of
  /// @forward's first ranked input; 0 when unknown: nothing is scaled).
  int64_t rows = 0;
  /// Per layer, at `rows`: FLOPs, bytes moved (CostOpInterface), of which
  /// parameters and constants read, and the bytes of its results.
  llvm::SmallVector<double> flops, bytesMoved, constantBytes, activationBytes;
  /// Per layer, at `rows`: bytes its gradient moves
  /// (CostOpInterface::getBackwardBytesMoved).
  llvm::SmallVector<double> backwardBytesMoved;
  /// Per layer: bytes of the parameters it reads first (trainable ones
  /// with their gradient and optimizer state, and the bfloat16 copies of
  /// them that bf16 products read: bf16CopyBytes), and of those trainable.
  llvm::SmallVector<double> paramBytes, trainableBytes;
  /// Per layer: of trainableBytes, the weights a product multiplies as its
  /// right operand (a Gemm's B, a MatMul's right-hand side), whose
  /// gradient product the CPU runtime has add into the step's sum itself
  /// (one read of the sum a micro-batch, not a sum pass's three touches).
  llvm::SmallVector<double> productSummedBytes;
  /// A parameter that several layers read (a GPT's tied embedding and LM
  /// head): a stage holding a later reader but not the first holds a copy
  /// of its own (SharedParameter::bytesIn).
  struct SharedParameter {
    llvm::SmallVector<int64_t> readers; // layers, increasing
    double bytes = 0;                   // as paramBytes counts it
    double trainableBytes = 0;          // 0 for a frozen one
    /// What a stage of layers [begin, end) holds beyond paramBytes'
    /// prefix sums: the copy where its first reader is before `begin`, and
    /// where a copy is trained on several stages, the runtime's host copy
    /// of its gradient and a message to each other copy (about two copies
    /// of the parameter). Adds the copy's trainable bytes to `trainable`.
    double bytesIn(int64_t begin, int64_t end, double &trainable) const;
  };
  llvm::SmallVector<SharedParameter> shared;
  /// Per cut position c in [0, n], at `rows`: bytes of the tensors
  /// crossing it.
  llvm::SmallVector<double> crossBytes;
  /// Per cut position, at `rows`: bytes of the activation message across
  /// it, a tensor the model only multiplies in bfloat16 at half its bytes
  /// (ProductPrecision.h; the compiler sends such a tensor so where the
  /// receiving stage only multiplies it, which this counts from the
  /// tensor's every use: it may price a message larger than it is).
  llvm::SmallVector<double> crossMessageBytes;
  /// Per layer result: the position of its last user (n: the return).
  llvm::DenseMap<mlir::Value, int64_t> lastUse;
  /// Per layer: the share of its gradient the backward computes. 0 where
  /// no operand depends on a trainable parameter (nothing to
  /// differentiate: a mask computed from the data), 1/2 for a matmul or
  /// convolution that reads the data itself (only its weights' gradient,
  /// no input gradient: the first layer), else 1; of a narrow convolution
  /// (whose family's backward fit is a first layer's, its weights'
  /// gradient alone) 1 as a first layer and 2 deeper.
  llvm::SmallVector<double> backwardShare;
  /// Per layer: the share of its backward that computes its weights'
  /// gradient (a zero-bubble schedule's W; the rest, the input's gradient,
  /// is its B): a product's or convolution's second of its two (half), a
  /// first layer's whole backward, 0 without trainable parameters or where
  /// one kernel computes both (a normalization's).
  llvm::SmallVector<double> weightShare;
  /// Per layer: whether its backward computes its input's gradient (it
  /// reads an activation, not only the data and parameters).
  llvm::SmallVector<bool> inputGradient;
  /// Per layer, at `rows`: the planes of its first result (its elements
  /// over those of its innermost dimensions: the two of a feature map, the
  /// last of a matrix or a sequence, the two of a stack's matrices for a
  /// family that loops over them; kernelFeatures).
  llvm::SmallVector<double> planes;
  /// Per layer: its kernel family and its gradient's
  /// (CostOpInterface::getKernelFamily, getBackwardKernelFamily).
  llvm::SmallVector<std::string> family, backwardFamily;
  /// Measured seconds at `rows` (--cost-table), where the table has them.
  llvm::SmallVector<std::optional<OpCost>> measured;
  /// A value the backward reads from the forward (without recompute, a
  /// stage keeps it for each micro-batch): the layer defining it (-1: an
  /// input of the model), the last layer reading it in the forward (n: a
  /// result of the model) and its bytes at `rows`.
  struct StashedValue {
    int64_t layer, lastUse;
    double bytes;
  };
  /// Records the stashed values, as whoever differentiated the model
  /// found them (the plan search); until then stashBytes knows nothing.
  void setStash(llvm::ArrayRef<StashedValue> values);

  /// Reads @forward; `table` may be null.
  static LayerTable build(mlir::func::FuncOp forward, int64_t optimizerSlots,
                          const CostTable *table);
  /// The rows of the micro-batch @forward's shapes describe: the batch
  /// dimension of its first ranked input (0 when unknown), as a cost
  /// table read for it is scaled to.
  static int64_t microBatchRows(mlir::func::FuncOp forward);

  int64_t size() const { return static_cast<int64_t>(layers.size()); }
  /// How much a per-row figure grows from `rows` to `r` rows.
  double scale(int64_t r) const {
    return rows > 0 && r > 0 ? static_cast<double>(r) / rows : 1.0;
  }
  /// Bytes layer i moves for `r` rows: its parameters' and constants' as
  /// they are, the rest scaled.
  double bytes(int64_t i, int64_t r) const;
  /// The planes of layer i's result for `r` rows.
  double planesAt(int64_t i, int64_t r) const { return planes[i] * scale(r); }
  /// Bytes layer i's gradient moves for `r` rows, scaled as its forward's.
  double backwardBytes(int64_t i, int64_t r) const;
  /// The work by which layer i's family is timed, for `r` rows: FLOPs for
  /// matmul and conv, a pooling's taps, bytes moved for the others.
  double work(int64_t i, int64_t r) const;
  /// Seconds of layer i's forward (backward) on `profile` for a
  /// micro-batch of `r` rows: the cost table's entry scaled to them, else
  /// the profile's fit of the layer's kernel family (gpipe-opt
  /// --calibrate), else the roofline of the scaled FLOPs and bytes.
  double forwardSeconds(int64_t i, const DeviceProfile &profile,
                        int64_t r) const;
  /// Of backwardSeconds, the weights' gradient (weightShare).
  double weightGradientSeconds(int64_t i, const DeviceProfile &profile,
                               int64_t r) const {
    return weightShare[i] * backwardSeconds(i, profile, r);
  }
  double backwardSeconds(int64_t i, const DeviceProfile &profile,
                         int64_t r) const;
  /// Seconds a step's first forward (`backward`) of layer i spends
  /// converting its parameters to its kernel's layout
  /// (DeviceProfile::conversionSeconds); none for a backward without an
  /// input gradient (its weight gradient converts nothing) and for a
  /// layer the cost table times (its entries are means over a step's
  /// runs).
  double conversionSeconds(int64_t i, const DeviceProfile &profile,
                           bool backward) const;
  /// Bytes a stage of layers [begin, end) keeps per micro-batch of `r`
  /// rows without recompute: the stashed values it defines or receives
  /// (defined before it, read by it); none when `stashed` is unknown.
  std::optional<double> stashBytes(int64_t begin, int64_t end, int64_t r) const;

private:
  /// Per layer position i in [0, n]: bytes of the stashed values defined
  /// by layers before i, and of those defined before i and read at or
  /// after it (empty: no stash recorded).
  llvm::SmallVector<double> stashDefinedBefore, stashCrossing;
  /// The backward of layer i as if it computed every gradient.
  double fullBackwardSeconds(int64_t i, const DeviceProfile &profile,
                             int64_t r) const;
};

} // namespace gpipe

#endif // GPIPE_ANALYSIS_PLANNER_LAYERTABLE_H
