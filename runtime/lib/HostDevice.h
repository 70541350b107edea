// GPIPE_HD marks functions that both the host compiler and nvcc compile:
// __host__ __device__ under nvcc, nothing for the host compiler. Code
// shared by the CPU and the GPU (the random numbers, the CUDA backend's
// kernel bodies, which tests also run on the host) uses it.
#ifndef GPIPE_RUNTIME_HOSTDEVICE_H
#define GPIPE_RUNTIME_HOSTDEVICE_H

#ifdef __CUDACC__
#define GPIPE_HD __host__ __device__
#else
#define GPIPE_HD
#endif

#endif // GPIPE_RUNTIME_HOSTDEVICE_H
