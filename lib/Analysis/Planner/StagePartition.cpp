//===- StagePartition.cpp - Cutting the layers into stages ----------------===//
#include "Analysis/Planner/StagePartition.h"
#include "Analysis/Planner/ScheduleGenerator.h"

#include <algorithm>
#include <limits>

using namespace gpipe;

StagePartitioner::StagePartitioner(const LayerTable &table,
                                   const PipelinePlan &plan,
                                   llvm::ArrayRef<DeviceProfile> profiles,
                                   int64_t rows)
    : table(table), plan(plan), profiles(profiles), rows(rows) {
  int64_t n = table.size();
  double s = table.scale(rows);
  for (const DeviceProfile &p : profiles) {
    llvm::SmallVector<double> f(n + 1, 0), b(n + 1, 0), cf(n + 1, 0),
        cb(n + 1, 0), st(n + 1, 0), w(n + 1, 0), sb(n + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      f[i + 1] = f[i] + table.forwardSeconds(i, p, rows);
      b[i + 1] = b[i] + table.backwardSeconds(i, p, rows);
      w[i + 1] = w[i] + table.weightGradientSeconds(i, p, rows);
      cf[i + 1] = cf[i] + table.conversionSeconds(i, p, /*backward=*/false);
      cb[i + 1] = cb[i] + table.conversionSeconds(i, p, /*backward=*/true);
      double threads = p.gradientSumThreads(table.trainableBytes[i]);
      st[i + 1] = st[i] + table.trainableBytes[i] / threads;
      // The weights whose gradient a product adds into the sum itself: the
      // CPU's kernels do (LayerTable::productSummedBytes).
      sb[i + 1] =
          sb[i] +
          (p.name == "cuda" ? 0.0 : table.productSummedBytes[i] / threads);
    }
    forward.push_back(std::move(f));
    backward.push_back(std::move(b));
    backwardWeight.push_back(std::move(w));
    forwardConversion.push_back(std::move(cf));
    backwardConversion.push_back(std::move(cb));
    sumThreadBytes.push_back(std::move(st));
    sumBytes.push_back(std::move(sb));
  }
  for (int64_t stage = 0; stage < plan.numStages(); ++stage)
    alive.push_back(plan.alive(stage));
  // The prefix sums rise layer by layer (solve()'s bound) unless a fit
  // prices a layer below zero.
  for (size_t p = 0; p < forward.size(); ++p)
    for (int64_t i = 0; i < n; ++i)
      layerTimesNonNegative &= forward[p][i + 1] >= forward[p][i] &&
                               backward[p][i + 1] >= backward[p][i];
  params.assign(n + 1, 0);
  trainable.assign(n + 1, 0);
  activations.assign(n + 1, 0);
  weightedResults.assign(n + 1, 0);
  forwardBytes.assign(n + 1, 0);
  backwardBytes.assign(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    params[i + 1] = params[i] + table.paramBytes[i];
    trainable[i + 1] = trainable[i] + table.trainableBytes[i];
    activations[i + 1] = activations[i] + table.activationBytes[i] * s;
    weightedResults[i + 1] =
        weightedResults[i] +
        (table.weightShare[i] > 0 ? table.activationBytes[i] * s : 0.0);
    // What the fitted ops move (a measured op's time holds its memory's):
    // every byte of those whose time goes with their bytes; of the
    // products and convolutions, whose streams of activations run as fast
    // in a pass beyond the caches, the parameters they read (and, in the
    // backward, their gradients they write).
    double fwd = 0, bwd = 0;
    if (!table.family[i].empty() && !table.measured[i]) {
      fwd = timedByFlops(table.family[i]) ? table.constantBytes[i]
                                          : table.bytes(i, rows);
      bwd = timedByFlops(table.backwardFamily[i])
                ? 2 * table.constantBytes[i]
                : table.backwardBytes(i, rows);
    }
    forwardBytes[i + 1] = forwardBytes[i] + fwd;
    backwardBytes[i + 1] = backwardBytes[i] + bwd;
  }
}

StageSlice StagePartitioner::slice(int64_t stage, int64_t begin,
                                   int64_t end) const {
  if (plan.recompute != RecomputePolicy::Auto)
    return slice(stage, begin, end, plan.recomputes(stage));
  StageSlice keep = slice(stage, begin, end, /*recomputes=*/false);
  if (keep.memory <= profiles[stage].memoryCapacity)
    return keep;
  return slice(stage, begin, end, /*recomputes=*/true);
}

llvm::SmallVector<bool>
StagePartitioner::recomputeChoices(llvm::ArrayRef<int64_t> cuts) const {
  llvm::SmallVector<int64_t> bounds{0};
  llvm::append_range(bounds, cuts);
  bounds.push_back(table.size());
  llvm::SmallVector<bool> out;
  for (int64_t s = 0; s + 1 < static_cast<int64_t>(bounds.size()); ++s)
    out.push_back(slice(s, bounds[s], bounds[s + 1]).recomputes);
  return out;
}

StageSlice StagePartitioner::slice(int64_t stage, int64_t begin, int64_t end,
                                   bool recomputes) const {
  StageSlice c;
  c.recomputes = recomputes;
  c.forward = forward[stage][end] - forward[stage][begin];
  if (plan.inference) {
    // Pipelined inference: a micro-batch's forward, its input received
    // and its output sent; its parameters (converted once, not once a
    // step), one micro-batch's results and the message out held.
    double s = table.scale(rows);
    c.inMessageBytes = table.crossMessageBytes[begin] * s;
    c.outMessageBytes = table.crossMessageBytes[end] * s;
    c.transfer =
        (c.inMessageBytes + c.outMessageBytes) / profiles[stage].linkBandwidth;
    double acts = activations[end] - activations[begin];
    // params counts a trainable weight with its gradient (no optimizer
    // state here): the weights' own bytes once.
    double weights =
        params[end] - params[begin] - (trainable[end] - trainable[begin]);
    c.memory = weights + acts + c.outMessageBytes;
    return c;
  }
  c.backward = backward[stage][end] - backward[stage][begin];
  c.backwardWeight = backwardWeight[stage][end] - backwardWeight[stage][begin];
  c.forwardConversion =
      forwardConversion[stage][end] - forwardConversion[stage][begin];
  c.backwardConversion =
      backwardConversion[stage][end] - backwardConversion[stage][begin];
  // Recompute runs the forward once more in the backward (its kernels
  // convert the parameters for themselves).
  if (recomputes) {
    c.backward += c.forward;
    c.backwardConversion += c.forwardConversion;
  }
  double s = table.scale(rows);
  double in = table.crossBytes[begin] * s, out = table.crossBytes[end] * s;
  // Activations one way (as sent), their gradients the other.
  c.inMessageBytes = table.crossMessageBytes[begin] * s;
  c.outMessageBytes = table.crossMessageBytes[end] * s;
  c.transfer = (c.inMessageBytes + in + c.outMessageBytes + out) /
               profiles[stage].linkBandwidth;
  double acts = activations[end] - activations[begin];
  // Kept per micro-batch: the stage input with recompute, else the stash
  // where it is known (LayerTable::setStash), every result otherwise. The
  // arena the forward and the backward share holds one micro-batch's
  // results (the forward's working set) or, in the backward, the
  // micro-batch's parameter gradients, written before they are added to
  // the step's (params counts the parameters, the step's gradients and the
  // optimizer state): the larger of the two; with recompute both at once
  // (the recomputed results stay while the gradients are written). GPT
  // 4x256, stage 0 of two at M = 4: 43 MiB estimated against a plan of
  // 37; ResNet-18's stage 1 (most parameters) 113 against 113; a GPT of 8
  // layers of d 512 recomputing, stage 0 of two: 199 against 196.
  std::optional<double> stash = table.stashBytes(begin, end, rows);
  double kept = recomputes ? in : stash.value_or(acts);
  // A backward in two parts keeps, from its input part to its weight part,
  // the output gradients of the layers with weights (what their weights'
  // gradients read besides the stash) and, recomputing, the results the
  // input part computed again; on the first stage, whose input part
  // computes nothing (below), the received gradients alone (the README's
  // MLP in two stages at M = 2: 96 bytes of the runtime's stash more
  // under zb-h1 than under 1f1b, the gradient received, where its two
  // products' output gradients are 192).
  if (scheduleKindInfo(plan.schedule).splitsBackward) {
    if (begin == 0)
      kept += out;
    else if (recomputes)
      kept += acts;
    else
      kept += weightedResults[end] - weightedResults[begin];
  }
  c.kept = kept;
  double grads = trainable[end] - trainable[begin];
  // Parameters read by several layers: a later reader's stage holds a copy
  // (a GPT's LM head tied to its embedding), and the copies exchange their
  // gradients.
  double sharedBytes = 0;
  for (const LayerTable::SharedParameter &p : table.shared)
    sharedBytes += p.bytesIn(begin, end, grads);
  double working = recomputes ? acts + grads
                   : stash    ? std::max(acts, grads)
                              : 0;
  c.memory = params[end] - params[begin] + sharedBytes + alive[stage] * kept +
             working + out;
  // A micro-batch's pass over the stage touches its parameters and every
  // result; beyond the last cache level, it comes from memory.
  double pass = params[end] - params[begin] + acts;
  double fb = forwardBytes[end] - forwardBytes[begin];
  double bb = backwardBytes[end] - backwardBytes[begin] + (recomputes ? fb : 0);
  c.forward += profiles[stage].beyondLastLevelSeconds(fb, pass);
  c.backward += profiles[stage].beyondLastLevelSeconds(bb, pass);
  // The first stage sends no input gradient, so a split backward's input
  // part computes nothing there (SplitBackwardWeights keeps in it only
  // what input gradients need) and its weight part all of it: the
  // balanced MLP's stage 0 measured B 0.055 and W 6.24 ms a micro-batch,
  // where half and half had been priced (3.03 and 3.15).
  if (begin == 0)
    c.backwardWeight = c.backward;
  c.trainableBytes = trainable[end] - trainable[begin];
  double all = sumThreadBytes[stage][end] - sumThreadBytes[stage][begin];
  c.productSummedShare =
      all > 0 ? (sumBytes[stage][end] - sumBytes[stage][begin]) / all : 0;
  return c;
}

std::optional<double> StagePartitioner::gradientSumPass(int64_t stage,
                                                        int64_t begin,
                                                        int64_t end) const {
  // A layer's parameters taken as one tensor.
  std::optional<double> rate =
      profiles[stage].gradientSumRate(2 * (trainable[end] - trainable[begin]));
  if (!rate)
    return std::nullopt;
  return (sumThreadBytes[stage][end] - sumThreadBytes[stage][begin]) / *rate;
}

mlir::FailureOr<llvm::SmallVector<int64_t>>
StagePartitioner::solve(bool withMemory) const {
  int64_t k = plan.numStages(), n = table.size();
  if (n < k)
    return mlir::failure();
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][e]: slowest stage of the best split of layers [0, e) into
  // stages 0..s; from[s][e]: where stage s begins in it.
  llvm::SmallVector<llvm::SmallVector<double>> best(
      k, llvm::SmallVector<double>(n + 1, inf));
  llvm::SmallVector<llvm::SmallVector<int64_t>> from(
      k, llvm::SmallVector<int64_t>(n + 1, -1));
  // Stage s beginning at b, from the last layer down: its kernels' time
  // alone (the prefix sums; slice() only adds to it) is a lower bound on
  // its time that grows as b falls, so once it exceeds the best found no
  // earlier b can do better; and a b whose stages before are already
  // slower than the best needs no slice. Both skip only what cannot win
  // or tie (ties keep the earliest b, as a forward scan would).
  for (int64_t s = 0; s < k; ++s)
    for (int64_t e = s + 1; e <= n - (k - 1 - s); ++e)
      for (int64_t b = e - 1; b >= s; --b) {
        double bound = forward[s][e] - forward[s][b] +
                       (plan.inference ? 0.0 : backward[s][e] - backward[s][b]);
        if (layerTimesNonNegative && bound > best[s][e])
          break;
        double before = s == 0 ? (b == 0 ? 0 : inf) : best[s - 1][b];
        if (before == inf || before > best[s][e])
          continue;
        StageSlice c = slice(s, b, e);
        if (withMemory && c.memory > profiles[s].memoryCapacity)
          continue;
        double value = std::max(before, c.time());
        if (value < best[s][e] || (value == best[s][e] && b < from[s][e])) {
          best[s][e] = value;
          from[s][e] = b;
        }
      }
  if (best[k - 1][n] == inf)
    return mlir::failure();
  llvm::SmallVector<int64_t> cuts;
  for (int64_t s = k - 1, e = n; s > 0; --s) {
    e = from[s][e];
    cuts.push_back(e);
  }
  std::reverse(cuts.begin(), cuts.end());
  return cuts;
}
