/* SPDX-License-Identifier: Apache-2.0 */
// cu_pad.cu - the CUDA plugin's box copy between two 4-D tensors of different sizes: it pads
// (the destination larger, the rest filled) and crops (the destination smaller) with one
// kernel. k_dnn.c uses it to give cuDNN the odd row / column of TensorFlow's SAME padding,
// which cuDNN (symmetric padding only) cannot add itself. Launcher declared in cu_kernels.h.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cu_kernels.h"

namespace {

constexpr int kThreads = 256;

// Grid-stride launches: enough blocks to fill the GPU, never more than the work needs.
inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65536) b = 65536;
  return (unsigned)(b < 1 ? 1 : b);
}

inline int launched() { return (int)cudaGetLastError(); }

#define GRID_LOOP(i, n)                                                                      \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                 \
       i += (int64_t)gridDim.x * blockDim.x)

// Dims and offsets by value: a launch argument, no device copy of the host arrays.
struct Box {
  int64_t src[4], dst[4], off[4];
  int64_t n; // destination elements
};

// One thread per destination element (row-major, dim 3 innermost): its source index is the
// destination's minus off, read where it lies inside src and filled elsewhere.
template <typename T>
__global__ void pad_copy_k(Box b, const T *src, T *dst, T fill) {
  GRID_LOOP(e, b.n) {
    int64_t rem = e, at = 0, stride = 1;
    bool inside = true;
    for (int d = 3; d >= 0; d--) {
      int64_t i = rem % b.dst[d] - b.off[d];
      rem /= b.dst[d];
      inside = inside && i >= 0 && i < b.src[d];
      at += i * stride;
      stride *= b.src[d];
    }
    dst[e] = inside ? src[at] : fill;
  }
}

template <typename T>
int launch(CuStream s, const Box &b, const void *src, void *dst, uint64_t fill) {
  pad_copy_k<T><<<blocks_for(b.n), kThreads, 0, s>>>(b, (const T *)src, (T *)dst, (T)fill);
  return launched();
}

} // namespace

extern "C" int cu_pad_copy4(CuStream s, int elem_size, const int64_t *src_dims, const void *src,
                            const int64_t *dst_dims, void *dst, const int64_t *off,
                            uint64_t fill) {
  Box b;
  b.n = 1;
  for (int d = 0; d < 4; d++) {
    b.src[d] = src_dims[d];
    b.dst[d] = dst_dims[d];
    b.off[d] = off[d];
    b.n *= dst_dims[d];
  }
  if (b.n == 0) return 0;
  switch (elem_size) {
  case 1: return launch<uint8_t>(s, b, src, dst, fill);
  case 2: return launch<uint16_t>(s, b, src, dst, fill);
  case 4: return launch<uint32_t>(s, b, src, dst, fill);
  case 8: return launch<uint64_t>(s, b, src, dst, fill);
  default: return CU_UNSUPPORTED;
  }
}
