// The epilogue of a dense layer: add the bias, apply the activation, and, for a following
// layer whose weights are 16-bit, write its input in that format.
//
// y is a row-major [rows, cols] f32 matrix (cuBLAS wrote it as column-major [cols, rows]),
// bias has `cols` values. `relu` is 0 or 1.

__device__ __forceinline__ float bias_act(float v, float b, int relu) {
    v += b;
    return relu ? fmaxf(v, 0.0f) : v;
}

extern "C" __global__ void bias_act_f32(float* __restrict__ y, const float* __restrict__ bias,
                                        unsigned int rows, unsigned int cols, int relu) {
    unsigned int n = rows * cols;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        y[i] = bias_act(y[i], bias[i % cols], relu);
    }
}

extern "C" __global__ void bias_act_to_f16(const float* __restrict__ y,
                                           const float* __restrict__ bias,
                                           unsigned short* __restrict__ out, unsigned int rows,
                                           unsigned int cols, int relu) {
    unsigned int n = rows * cols;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        float v = bias_act(y[i], bias[i % cols], relu);
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        out[i] = h;
    }
}

extern "C" __global__ void bias_act_to_bf16(const float* __restrict__ y,
                                            const float* __restrict__ bias,
                                            unsigned short* __restrict__ out, unsigned int rows,
                                            unsigned int cols, int relu) {
    unsigned int n = rows * cols;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        float v = bias_act(y[i], bias[i % cols], relu);
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        out[i] = h;
    }
}
