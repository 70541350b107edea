// GPIPE_VECTOR_CLONES: one clone of a loop function per instruction set
// (AVX-512, AVX2, baseline x86-64), picked by the dynamic loader for the CPU
// at hand (GCC's function multi-versioning): the backend's own vector loops
// (BatchNormPlanes.cpp, NarrowConvPlanes.cpp) run at the CPU's width from
// one build. Empty elsewhere (other compilers, other architectures).
#ifndef GPIPE_RUNTIME_CPU_KERNELS_VECTORCLONES_H
#define GPIPE_RUNTIME_CPU_KERNELS_VECTORCLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPIPE_VECTOR_CLONES                                                    \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPIPE_VECTOR_CLONES
#endif

#endif // GPIPE_RUNTIME_CPU_KERNELS_VECTORCLONES_H
