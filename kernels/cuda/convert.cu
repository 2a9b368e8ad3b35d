// Element type conversions between f32 and the 16-bit formats.
//
// 16-bit values travel as raw `unsigned short` bits and are converted with PTX `cvt`
// instructions, so these sources need no CUDA headers and compile with NVRTC alone.
// f16 conversions need sm_53+, bf16 sm_80+; tandem targets sm_90.

__device__ __forceinline__ unsigned short f32_to_f16_bits(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ unsigned short f32_to_bf16_bits(float f) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

extern "C" __global__ void f32_to_f16(const float* __restrict__ x,
                                      unsigned short* __restrict__ y, unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        y[i] = f32_to_f16_bits(x[i]);
    }
}

extern "C" __global__ void f32_to_bf16(const float* __restrict__ x,
                                       unsigned short* __restrict__ y, unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        y[i] = f32_to_bf16_bits(x[i]);
    }
}
