// The loops of the CPU backend's batch normalization over plain NCHW
// (N, C, inner...) tensors: a channel's statistics and gradient sums, and
// its normalization and input gradient, as one function per loop over a
// contiguous run of one channel's elements (a plane of a feature map).
// Sums go through float blocks of kBatchNormBlock elements into double, so
// that a channel of 32 x 112 x 112 elements loses no digits to the sum's
// length. Each loop is vectorized for the CPU it runs on (AVX-512, AVX2 or
// baseline x86-64 code, picked when the runtime loads).
#ifndef GPIPE_RUNTIME_CPU_KERNELS_BATCHNORMPLANES_H
#define GPIPE_RUNTIME_CPU_KERNELS_BATCHNORMPLANES_H

#include <cstdint>

namespace gpipe::runtime::cpu {

/// Elements summed in float before the sum moves to double.
constexpr int64_t kBatchNormBlock = 256;

/// Adds sum (x[i] - pivot) and sum (x[i] - pivot)^2 over i < n to `sum`
/// and `squares`. The pivot (an element of the channel) keeps the
/// variance's sum free of the cancellation of sum x^2 - n mean^2 when the
/// mean is large against the spread.
void addShiftedSums(const float *x, int64_t n, float pivot, double &sum,
                    double &squares);

/// Adds sum dy[i] and sum dy[i] (x[i] - mean) over i < n to `sumDy` and
/// `sumDyX`.
void addGradientSums(const float *dy, const float *x, int64_t n, float mean,
                     double &sumDy, double &sumDyX);

/// y[i] = (x[i] - mean) scale + shift for i < n (y may be x).
void normalizePlane(const float *x, float *y, int64_t n, float mean,
                    float scale, float shift);

/// dx[i] = scale (dy[i] - meanDy - (x[i] - mean) slope) for i < n: the
/// input gradient of a normalization by the batch's statistics (slope =
/// invstd^2 sum dy (x - mean) / count, meanDy = sum dy / count), or by
/// fixed ones with meanDy = slope = 0.
void gradientPlane(const float *dy, const float *x, float *dx, int64_t n,
                   float scale, float meanDy, float mean, float slope);

/// The same loops across the channels of one sample's row (a channel's
/// elements too few to loop over: BatchNorm1d's [N, C], 1x1 maps), one
/// value per column j < n in the arrays: sum[j] += x[j] - pivot[j] and
/// squares[j] += (x[j] - pivot[j])^2; ...
void addColumnSums(const float *x, int64_t n, const float *pivot, double *sum,
                   double *squares);
/// sumDy[j] += dy[j], sumDyX[j] += dy[j] (x[j] - mean[j]);
void addColumnGradientSums(const float *dy, const float *x, int64_t n,
                           const float *mean, double *sumDy, double *sumDyX);
/// y[j] = (x[j] - mean[j]) scale[j] + shift[j];
void normalizeColumns(const float *x, float *y, int64_t n, const float *mean,
                      const float *scale, const float *shift);
/// dx[j] = scale[j] (dy[j] - meanDy[j] - (x[j] - mean[j]) slope[j]).
void gradientColumns(const float *dy, const float *x, float *dx, int64_t n,
                     const float *scale, const float *meanDy, const float *mean,
                     const float *slope);

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_BATCHNORMPLANES_H
