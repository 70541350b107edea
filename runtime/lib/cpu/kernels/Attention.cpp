// Scaled dot-product attention and its gradient as tiled kernels (flash
// attention on the CPU): the scores of a block of queries against a block
// of keys are a tile that lives in the thread's cache, never the whole
// Tq x Tk matrix. Products of tiles are oneDNN's sgemm; a causal mask
// skips the tiles after the diagonal.
#include "Families.h"

#include "DropoutRows.h"
#include "ParallelFor.h"
#include "Random.h"
#include "SmallGemm.h"
#include "SoftmaxRows.h"
#include "VectorClones.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpipe::runtime::cpu {

namespace {

/// Row-major C = op(A) op(B) + beta C on one thread (inside the kernels'
/// parallel loop): the AVX-512 loop for small tiles, oneDNN's sgemm for
/// the rest.
void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float *a,
          int64_t lda, const float *b, int64_t ldb, float beta, float *c,
          int64_t ldc) {
  tileGemm("attention", ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

/// ds[c] = p[c] (ds[c] - delta) scale: a row of the scores' gradient from
/// the probabilities' (ds holds dP on entry).
GPIPE_VECTOR_CLONES void scoreGradientRow(float *ds, const float *p,
                                          int64_t cols, float delta,
                                          float scale) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c)
    ds[c] = p[c] * (ds[c] - delta) * scale;
}

/// The shapes of an attention: S stacked problems (batch x heads) of Tq
/// queries and Tk keys of D features, values of Dv; the additive mask's
/// offset per problem and its row and column strides (0 where it
/// broadcasts).
struct Geometry {
  int64_t stack = 1, tq = 0, tk = 0, d = 0, dv = 0;
  /// The blocks of queries and of keys (attentionBlock, the contract's,
  /// which the compiler's cost counts): tiles of at most 64 x 64 scores
  /// (16 KiB), with a head of 64 the tile's queries, keys and values too
  /// in the L1 and L2 caches.
  int64_t bq = 1, bk = 1;
  float scale = 1;
  bool causal = false;
  const float *mask = nullptr;
  std::vector<int64_t> maskOffset;
  int64_t maskRow = 0, maskCol = 0;
  /// Dropout on the weights: its ratio (0: none), its stream, and the
  /// stage's random state and evaluation flag (KernelMemory).
  float dropout = 0;
  int64_t stream = -1;
  const RandomState *random = nullptr;
  const bool *updateState = nullptr;

  /// Whether this run drops weights out (training; evaluation runs
  /// without), and the stream's key now.
  bool dropping(bool backward) const {
    return dropout > 0 && (backward || !updateState || *updateState);
  }
  uint64_t key() const { return randomStreamKey(*random, stream); }
  /// Drops out `cols` weights of query i of problem s from key j0 (into
  /// `out`, which may be `in`): element (s Tq + i) Tk + j of the stream.
  void drop(const float *in, float *out, int64_t s, int64_t i, int64_t j0,
            int64_t cols, uint64_t key) const {
    dropoutRange(in, out, cols, (s * tq + i) * tk + j0, key, dropout,
                 1.0f / (1.0f - dropout));
  }

  /// The tile's first key block past every query of [i0, i0 + rows).
  int64_t keyEnd(int64_t i0, int64_t rows) const {
    return causal ? std::min(tk, i0 + rows) : tk;
  }
  /// Scales the products of query i of problem s with keys [j0, j0 +
  /// cols) in `row`, adds the mask, hides the keys after i when causal;
  /// returns the row's maximum.
  float scores(int64_t s, int64_t i, int64_t j0, int64_t cols,
               float *row) const {
    int64_t visible = causal ? std::clamp<int64_t>(i - j0 + 1, 0, cols) : cols;
    const float *m =
        mask ? mask + maskOffset[s] + i * maskRow + j0 * maskCol : nullptr;
    // The mask's last axis is the keys' (step 1) or broadcast (step 0:
    // one value for the row).
    if (m && maskCol == 0)
      return scaleRow(row, cols, visible, scale, *m, nullptr);
    return scaleRow(row, cols, visible, scale, 0.0f, m);
  }
};

Geometry geometry(const KernelSpec &spec, const KernelMemory &mem,
                  OneDnn &dnn) {
  Geometry g;
  const std::vector<int64_t> &q = spec.operand("query").shape;
  const std::vector<int64_t> &v = spec.operand("value").shape;
  size_t rank = q.size();
  if (rank < 2)
    spec.fail("query must have rank 2 or more");
  g.tq = q[rank - 2];
  g.d = q[rank - 1];
  g.tk = v[rank - 2];
  g.dv = v[rank - 1];
  g.bq = std::max<int64_t>(attentionBlock(g.tq), 1);
  g.bk = std::max<int64_t>(attentionBlock(g.tk), 1);
  for (size_t a = 0; a + 2 < rank; ++a)
    g.stack *= q[a];
  g.scale = static_cast<float>(spec.number("scale"));
  g.causal = spec.flag("causal");
  g.dropout = static_cast<float>(spec.number("dropout_ratio"));
  if (g.dropout > 0) {
    if (!(g.dropout < 1))
      spec.fail("dropout_ratio must be in [0, 1)");
    if (!mem.random)
      spec.fail("the stage has no random state");
    g.stream = static_cast<int64_t>(spec.number("stream"));
    g.random = mem.random;
    g.updateState = mem.updateState;
  }
  if (const TensorSlot *mask = spec.optionalOperand("mask")) {
    g.mask = static_cast<const float *>(
        bindSlot(spec, *mask, mem, dnn).get_data_handle());
    dims shape = padLeft(mask->shape, rank);
    // Strides of the mask as stored, 0 along the axes it broadcasts.
    std::vector<int64_t> stride(rank, 0);
    int64_t step = 1;
    for (size_t a = rank; a-- > 0;) {
      stride[a] = shape[a] == 1 ? 0 : step;
      step *= shape[a];
    }
    g.maskRow = stride[rank - 2];
    g.maskCol = stride[rank - 1];
    g.maskOffset.assign(g.stack, 0);
    for (int64_t s = 0; s < g.stack; ++s) {
      int64_t rest = s, offset = 0;
      for (size_t a = rank - 2; a-- > 0;) {
        offset += (rest % q[a]) * stride[a];
        rest /= q[a];
      }
      g.maskOffset[s] = offset;
    }
  }
  return g;
}

const float *input(const KernelSpec &spec, const char *name,
                   const KernelMemory &mem, OneDnn &dnn) {
  return static_cast<const float *>(
      bindSlot(spec, spec.operand(name), mem, dnn).get_data_handle());
}

float *output(const KernelSpec &spec, const char *name, const KernelMemory &mem,
              OneDnn &dnn) {
  return static_cast<float *>(
      bindSlot(spec, spec.result(name), mem, dnn).get_data_handle());
}

/// Forward: for each block of queries, the keys block by block with a
/// running maximum and sum per query (the online softmax); the output is
/// the weighted values over the sum, logsumexp = maximum + log(sum).
class AttentionKernel : public Kernel {
public:
  AttentionKernel(Geometry g, const float *q, const float *k, const float *v,
                  float *out, float *lse)
      : g(std::move(g)), q(q), k(k), v(v), out(out), lse(lse) {}

  void run() override {
    int64_t blocks = (g.tq + g.bq - 1) / g.bq;
    bool dropping = g.dropping(/*backward=*/false);
    uint64_t key = dropping ? g.key() : 0;
    parallelChunks(g.stack * blocks, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scores(g.bq * g.bk), maximum(g.bq), sum(g.bq);
      for (int64_t task = begin; task < end; ++task)
        block(task / blocks, task % blocks * g.bq, scores.data(),
              maximum.data(), sum.data(), dropping, key);
    });
  }

private:
  void block(int64_t s, int64_t i0, float *scores, float *maximum, float *sum,
             bool dropping, uint64_t key) const {
    const float inf = std::numeric_limits<float>::infinity();
    int64_t rows = std::min(g.bq, g.tq - i0);
    const float *qs = q + (s * g.tq + i0) * g.d;
    const float *ks = k + s * g.tk * g.d;
    const float *vs = v + s * g.tk * g.dv;
    float *acc = out + (s * g.tq + i0) * g.dv;
    std::fill(maximum, maximum + rows, -inf);
    std::fill(sum, sum + rows, 0.0f);
    std::fill(acc, acc + rows * g.dv, 0.0f);
    for (int64_t j0 = 0, end = g.keyEnd(i0, rows); j0 < end; j0 += g.bk) {
      int64_t cols = std::min(g.bk, g.tk - j0);
      gemm('N', 'T', rows, cols, g.d, qs, g.d, ks + j0 * g.d, g.d, 0.0f, scores,
           cols);
      for (int64_t r = 0; r < rows; ++r) {
        float *row = scores + r * cols;
        float m = std::max(maximum[r], g.scores(s, i0 + r, j0, cols, row));
        if (m == -inf) { // every key so far masked out
          std::fill(row, row + cols, 0.0f);
          continue;
        }
        float rescale = expApprox(maximum[r] - m);
        // The sum of the weights before dropout: the softmax's.
        sum[r] = sum[r] * rescale + expShiftedRow(row, cols, m);
        if (dropping)
          g.drop(row, row, s, i0 + r, j0, cols, key);
        maximum[r] = m;
        if (rescale != 1.0f)
          for (float *a = acc + r * g.dv, *e = a + g.dv; a < e; ++a)
            *a *= rescale;
      }
      gemm('N', 'N', rows, g.dv, cols, scores, cols, vs + j0 * g.dv, g.dv, 1.0f,
           acc, g.dv);
    }
    for (int64_t r = 0; r < rows; ++r) {
      // A row with every key masked out is 0 / 0, NaN, as softmax gives.
      float inverse = 1.0f / sum[r];
      for (float *a = acc + r * g.dv, *e = a + g.dv; a < e; ++a)
        *a *= inverse;
      lse[s * g.tq + i0 + r] = maximum[r] + std::log(sum[r]);
    }
  }

  Geometry g;
  const float *q, *k, *v;
  float *out, *lse;
};

/// Backward: per problem, the keys block by block and within each the
/// query blocks that see them; each tile's probabilities P = exp(scores -
/// logsumexp) come back from the forward's logsumexp, then dV += P^T dO,
/// dP = dO V^T, dS = P (dP - rowsum(dO O)) scale, dQ += dS K, dK += dS^T Q.
class AttentionGradKernel : public Kernel {
public:
  AttentionGradKernel(Geometry g, const float *dOut, const float *q,
                      const float *k, const float *v, const float *out,
                      const float *lse, float *dq, float *dk, float *dv)
      : g(std::move(g)), dOut(dOut), q(q), k(k), v(v), out(out), lse(lse),
        dq(dq), dk(dk), dv(dv) {}

  void run() override {
    bool dropping = g.dropping(/*backward=*/true);
    uint64_t key = dropping ? g.key() : 0;
    parallelChunks(g.stack, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> p(g.bq * g.bk), dp(g.bq * g.bk), delta(g.tq),
          kept(dropping ? g.bq * g.bk : 0);
      for (int64_t s = begin; s < end; ++s)
        problem(s, p.data(), dp.data(), delta.data(),
                dropping ? kept.data() : nullptr, key);
    });
  }

private:
  /// `kept`: a tile for the weights after dropout (null: no dropout).
  /// With dropout D (the mask over 1 - ratio), O = (P o D) V: dV takes
  /// the dropped weights, dP = (dO V^T) o D, and rowsum(P dP) =
  /// rowsum(dO O) still.
  void problem(int64_t s, float *p, float *dp, float *delta, float *kept,
               uint64_t key) const {
    const float *qs = q + s * g.tq * g.d, *ks = k + s * g.tk * g.d,
                *vs = v + s * g.tk * g.dv, *dos = dOut + s * g.tq * g.dv,
                *os = out + s * g.tq * g.dv, *ls = lse + s * g.tq;
    float *dqs = dq + s * g.tq * g.d, *dks = dk + s * g.tk * g.d,
          *dvs = dv + s * g.tk * g.dv;
    for (int64_t i = 0; i < g.tq; ++i) {
      float d = 0;
      for (int64_t c = 0; c < g.dv; ++c)
        d += dos[i * g.dv + c] * os[i * g.dv + c];
      delta[i] = d;
    }
    std::fill(dqs, dqs + g.tq * g.d, 0.0f);
    std::fill(dks, dks + g.tk * g.d, 0.0f);
    std::fill(dvs, dvs + g.tk * g.dv, 0.0f);
    for (int64_t j0 = 0; j0 < g.tk; j0 += g.bk) {
      int64_t cols = std::min(g.bk, g.tk - j0);
      // Causal: the first query block that sees key j0 (Tq = Tk, so the
      // query blocks are the key blocks).
      int64_t first = g.causal ? j0 / g.bq * g.bq : 0;
      for (int64_t i0 = first; i0 < g.tq; i0 += g.bq) {
        int64_t rows = std::min(g.bq, g.tq - i0);
        gemm('N', 'T', rows, cols, g.d, qs + i0 * g.d, g.d, ks + j0 * g.d, g.d,
             0.0f, p, cols);
        for (int64_t r = 0; r < rows; ++r) {
          g.scores(s, i0 + r, j0, cols, p + r * cols);
          expShiftedRow(p + r * cols, cols, ls[i0 + r]);
        }
        const float *weights = p;
        if (kept) {
          for (int64_t r = 0; r < rows; ++r)
            g.drop(p + r * cols, kept + r * cols, s, i0 + r, j0, cols, key);
          weights = kept;
        }
        // dV[j0 : j0 + cols] += P^T dO[i0 : i0 + rows]
        gemm('T', 'N', cols, g.dv, rows, weights, cols, dos + i0 * g.dv, g.dv,
             1.0f, dvs + j0 * g.dv, g.dv);
        // dP = dO V^T (through the dropout's mask), then dS = P (dP -
        // delta) scale in its place.
        gemm('N', 'T', rows, cols, g.dv, dos + i0 * g.dv, g.dv, vs + j0 * g.dv,
             g.dv, 0.0f, dp, cols);
        if (kept)
          for (int64_t r = 0; r < rows; ++r)
            g.drop(dp + r * cols, dp + r * cols, s, i0 + r, j0, cols, key);
        for (int64_t r = 0; r < rows; ++r)
          scoreGradientRow(dp + r * cols, p + r * cols, cols, delta[i0 + r],
                           g.scale);
        gemm('N', 'N', rows, g.d, cols, dp, cols, ks + j0 * g.d, g.d, 1.0f,
             dqs + i0 * g.d, g.d);
        gemm('T', 'N', cols, g.d, rows, dp, cols, qs + i0 * g.d, g.d, 1.0f,
             dks + j0 * g.d, g.d);
      }
    }
  }

  Geometry g;
  const float *dOut, *q, *k, *v, *out, *lse;
  float *dq, *dk, *dv;
};

std::unique_ptr<Kernel> createAttention(const KernelSpec &spec,
                                        const KernelMemory &mem, OneDnn &dnn) {
  return std::make_unique<AttentionKernel>(
      geometry(spec, mem, dnn), input(spec, "query", mem, dnn),
      input(spec, "key", mem, dnn), input(spec, "value", mem, dnn),
      output(spec, "output", mem, dnn), output(spec, "logsumexp", mem, dnn));
}

std::unique_ptr<Kernel> createAttentionGrad(const KernelSpec &spec,
                                            const KernelMemory &mem,
                                            OneDnn &dnn) {
  return std::make_unique<AttentionGradKernel>(
      geometry(spec, mem, dnn), input(spec, "grad_output", mem, dnn),
      input(spec, "query", mem, dnn), input(spec, "key", mem, dnn),
      input(spec, "value", mem, dnn), input(spec, "output", mem, dnn),
      input(spec, "logsumexp", mem, dnn), output(spec, "grad_query", mem, dnn),
      output(spec, "grad_key", mem, dnn), output(spec, "grad_value", mem, dnn));
}

} // namespace

std::vector<KernelFactoryEntry> attentionKernels() {
  return {{"attention", createAttention},
          {"attention_grad", createAttentionGrad}};
}

} // namespace gpipe::runtime::cpu
