// The loops of the CPU backend's 2-D convolutions of few input channels at
// stride 1 (an image model's first layer on grey or RGB images), over
// plain NCHW tensors: an image's planes are copied into zero-padded planes
// of width wp (the padding around them), so that every tap of the kernel
// reads a contiguous run and an output row is a sum of shifted rows; the
// weights' gradient is, for each tap, a dot product of the output
// gradient's plane (laid out at the padded width, zeros past its rows)
// with the padded input shifted by the tap. kNarrowConvChannels output
// channels at a time share each load of the input. The loops are written
// with GCC's vector types, each output's taps summed in the same order on
// every CPU, and compiled once per instruction set (AVX-512, AVX2 with FMA
// or baseline x86-64 code, VectorClones.h), with the vector its registers
// hold; with FMA a product and its sum round once. The weights'
// gradient's lanes are the vector's, so its float partial sums, and its
// last bits, differ between instruction sets (not between runs or thread
// counts on one CPU).
#ifndef GPIPE_RUNTIME_CPU_KERNELS_NARROWCONVPLANES_H
#define GPIPE_RUNTIME_CPU_KERNELS_NARROWCONVPLANES_H

#include <cstdint>

namespace gpipe::runtime::cpu {

/// Output channels computed at once.
constexpr int64_t kNarrowConvChannels = 4;

/// Floats a pass computes at once along a row (a forward pass reads this
/// far past a row's end, a tap's dot product past the plane's end: the
/// padded buffers end in that many zeros more than the kernel's width).
constexpr int64_t kNarrowConvLanes = 32;

/// Floats of a lane's sum before it moves to double.
constexpr int64_t kNarrowConvBlock = 1024;

/// For c < kNarrowConvChannels: out[c plane + y ow + x] = bias[c] + sum over
/// t < taps of weights[c taps + t] padded[y wp + x + offsets[t]], for y <
/// oh and x < ow (each output's sum in tap order), the planes of
/// `channels` <= kNarrowConvChannels channels written (`weights` and
/// `bias` hold kNarrowConvChannels channels' values all the same).
void narrowConvPlanes(const float *padded, int64_t wp, const int64_t *offsets,
                      const float *weights, int64_t taps, const float *bias,
                      int64_t channels, float *out, int64_t plane, int64_t oh,
                      int64_t ow);

/// For c < kNarrowConvChannels and t < taps: sums[c taps + t] += sum over
/// i < count of g[c count + i] padded[offsets[t] + i]; count a multiple of
/// kNarrowConvLanes. Each lane's products summed in float over blocks of
/// kNarrowConvBlock floats, the blocks in double.
void narrowConvTapSums(const float *g, int64_t count, const float *padded,
                       const int64_t *offsets, int64_t taps, double *sums);

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_NARROWCONVPLANES_H
