#include "BatchNormPlanes.h"

#include "VectorClones.h"

#include <algorithm>

// `omp simd` lets the float sums of a block be reassociated into vector
// lanes (the order is fixed for a given CPU, so a result does not depend
// on threads).

namespace gpipe::runtime::cpu {

GPIPE_VECTOR_CLONES
void addShiftedSums(const float *x, int64_t n, float pivot, double &sum,
                    double &squares) {
  for (int64_t b = 0; b < n; b += kBatchNormBlock) {
    int64_t end = std::min(n, b + kBatchNormBlock);
    float s = 0, q = 0;
#pragma omp simd reduction(+ : s, q)
    for (int64_t i = b; i < end; ++i) {
      float d = x[i] - pivot;
      s += d;
      q += d * d;
    }
    sum += s;
    squares += q;
  }
}

GPIPE_VECTOR_CLONES
void addGradientSums(const float *dy, const float *x, int64_t n, float mean,
                     double &sumDy, double &sumDyX) {
  for (int64_t b = 0; b < n; b += kBatchNormBlock) {
    int64_t end = std::min(n, b + kBatchNormBlock);
    float s = 0, p = 0;
#pragma omp simd reduction(+ : s, p)
    for (int64_t i = b; i < end; ++i) {
      s += dy[i];
      p += dy[i] * (x[i] - mean);
    }
    sumDy += s;
    sumDyX += p;
  }
}

GPIPE_VECTOR_CLONES
void normalizePlane(const float *x, float *y, int64_t n, float mean,
                    float scale, float shift) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = (x[i] - mean) * scale + shift;
}

GPIPE_VECTOR_CLONES
void gradientPlane(const float *dy, const float *x, float *dx, int64_t n,
                   float scale, float meanDy, float mean, float slope) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    dx[i] = scale * (dy[i] - meanDy - (x[i] - mean) * slope);
}

GPIPE_VECTOR_CLONES
void addColumnSums(const float *x, int64_t n, const float *pivot, double *sum,
                   double *squares) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    double d = x[j] - pivot[j];
    sum[j] += d;
    squares[j] += d * d;
  }
}

GPIPE_VECTOR_CLONES
void addColumnGradientSums(const float *dy, const float *x, int64_t n,
                           const float *mean, double *sumDy, double *sumDyX) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    sumDy[j] += dy[j];
    sumDyX[j] += double(dy[j]) * (x[j] - mean[j]);
  }
}

GPIPE_VECTOR_CLONES
void normalizeColumns(const float *x, float *y, int64_t n, const float *mean,
                      const float *scale, const float *shift) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    y[j] = (x[j] - mean[j]) * scale[j] + shift[j];
}

GPIPE_VECTOR_CLONES
void gradientColumns(const float *dy, const float *x, float *dx, int64_t n,
                     const float *scale, const float *meanDy, const float *mean,
                     const float *slope) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    dx[j] = scale[j] * (dy[j] - meanDy[j] - (x[j] - mean[j]) * slope[j]);
}

} // namespace gpipe::runtime::cpu
