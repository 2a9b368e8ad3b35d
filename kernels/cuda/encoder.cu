// The parts of a BERT encoder layer around cuBLAS's matrix products: embeddings, layer norm
// (with the residual and the dense layer's bias folded in), bias + GELU, multi-head
// attention over sequences packed end to end, and pooling.
//
// Activations are row-major f32 `[tokens, width]`. A batch is described by `offsets`
// (sequences + 1 entries, sequence s is tokens offsets[s]..offsets[s+1]) and, per token, a
// word id, a token type id and a position. No CUDA headers: NVRTC's built-in math only.

#define WARP 32
#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// The sum of `v` over the block (blockDim.x a multiple of 32, at most 1024), in every thread.
__device__ float block_sum(float v, float* shared) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    v = warp_sum(v);
    __syncthreads();  // `shared` may still be read from a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    int warps = blockDim.x / WARP;
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += shared[w];
    return total;
}

// x[t] = word[ids[t]] + position[positions[t]] + token_type[types[t]]. One block per token.
extern "C" __global__ void embed(const unsigned int* __restrict__ ids,
                                 const unsigned int* __restrict__ types,
                                 const unsigned int* __restrict__ positions,
                                 const float* __restrict__ word,
                                 const float* __restrict__ position,
                                 const float* __restrict__ token_type, float* __restrict__ x,
                                 unsigned int hidden) {
    unsigned int t = blockIdx.x;
    const float* w = word + (size_t)ids[t] * hidden;
    const float* p = position + (size_t)positions[t] * hidden;
    const float* k = token_type + (size_t)types[t] * hidden;
    float* out = x + (size_t)t * hidden;
    for (unsigned int c = threadIdx.x; c < hidden; c += blockDim.x) out[c] = w[c] + p[c] + k[c];
}

// x[r] = LayerNorm(x[r] + add[r] + add_bias) * gamma + beta, in place, one block per row.
// `add` and `add_bias` may be null (the embeddings' norm has neither). Two passes over the
// row (mean, then the variance around it), in f32.
extern "C" __global__ void add_layer_norm(float* __restrict__ x, const float* __restrict__ add,
                                          const float* __restrict__ add_bias,
                                          const float* __restrict__ gamma,
                                          const float* __restrict__ beta, unsigned int width,
                                          float eps) {
    __shared__ float shared[32];
    float* row = x + (size_t)blockIdx.x * width;
    const float* a = add ? add + (size_t)blockIdx.x * width : 0;
    float sum = 0.0f;
    for (unsigned int c = threadIdx.x; c < width; c += blockDim.x) {
        float v = row[c];
        if (a) v += a[c];
        if (add_bias) v += add_bias[c];
        row[c] = v;
        sum += v;
    }
    float mean = block_sum(sum, shared) / width;
    float sq = 0.0f;
    for (unsigned int c = threadIdx.x; c < width; c += blockDim.x) {
        float d = row[c] - mean;
        sq += d * d;
    }
    float inv = rsqrtf(block_sum(sq, shared) / width + eps);
    for (unsigned int c = threadIdx.x; c < width; c += blockDim.x) {
        row[c] = (row[c] - mean) * inv * gamma[c] + beta[c];
    }
}

// y = gelu(y + bias) with the exact error function, over `rows` rows of `cols`.
extern "C" __global__ void bias_gelu(float* __restrict__ y, const float* __restrict__ bias,
                                     unsigned int rows, unsigned int cols) {
    size_t n = (size_t)rows * cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x) {
        float v = y[i] + bias[i % cols];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// Attention tiles: a block of ATT_WARPS warps takes ATT_QUERIES queries of one head of one
// sequence, and walks the sequence's keys ATT_KEYS at a time through shared memory with an
// online softmax (a running maximum and sum per query), so any length fits. Each lane owns
// value columns lane, lane + 32 (head_dim <= 32 * ATT_MAX_COLS = 64, as in BERT-base and
// -large; the shared memory then stays under the 48 KB a launch gets without opting in).
#define ATT_WARPS 4
#define ATT_QUERIES 16
#define ATT_KEYS 64
#define ATT_MAX_COLS 2
#define ATT_MAX_DIM (WARP * ATT_MAX_COLS)

// ctx[t, head * d + c] for the queries of this block. qkv is [tokens, 3 * hidden]: queries,
// keys, then values, head h at columns h * d. grid = (query tiles of the longest sequence,
// heads, sequences); dynamic shared memory: (2 * ATT_KEYS * (d + 1) + ATT_QUERIES * d) floats.
// With span > 0, query i's score for key j of a sequence gains MPNet's bias by relative
// position, bias[head * (2 * span - 1) + span - 1 + j - i] (span >= the longest sequence);
// with span = 0, bias is not read.
extern "C" __global__ void attention(const float* __restrict__ qkv,
                                     const unsigned int* __restrict__ offsets,
                                     float* __restrict__ ctx, unsigned int hidden,
                                     unsigned int d, float scale,
                                     const float* __restrict__ bias, unsigned int span) {
    extern __shared__ float smem[];
    const unsigned int seq = blockIdx.z, head = blockIdx.y;
    const unsigned int start = offsets[seq], len = offsets[seq + 1] - start;
    const unsigned int q0 = blockIdx.x * ATT_QUERIES;
    if (q0 >= len) return;  // a tile past this sequence's end: the whole block leaves
    const unsigned int stride = 3 * hidden, dp = d + 1;  // +1: no bank conflicts by key
    float* keys = smem;                        // [ATT_KEYS][d + 1]
    float* values = keys + ATT_KEYS * dp;      // [ATT_KEYS][d + 1]
    float* queries = values + ATT_KEYS * dp;   // [ATT_QUERIES][d], scaled
    const unsigned int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const unsigned int nq = min(ATT_QUERIES, len - q0);

    for (unsigned int i = threadIdx.x; i < nq * d; i += blockDim.x) {
        unsigned int r = i / d, c = i % d;
        queries[r * d + c] = qkv[(size_t)(start + q0 + r) * stride + head * d + c] * scale;
    }
    // Per query this warp owns (rows warp, warp + ATT_WARPS, ...): running max, sum, output.
    const int per_warp = ATT_QUERIES / ATT_WARPS;
    float m[per_warp], l[per_warp], acc[per_warp][ATT_MAX_COLS];
    for (int r = 0; r < per_warp; ++r) {
        m[r] = NEG_INF;
        l[r] = 0.0f;
        for (int x = 0; x < ATT_MAX_COLS; ++x) acc[r][x] = 0.0f;
    }
    for (unsigned int k0 = 0; k0 < len; k0 += ATT_KEYS) {
        const unsigned int nk = min(ATT_KEYS, len - k0);
        __syncthreads();  // the previous tile is no longer read (and the queries are written)
        for (unsigned int i = threadIdx.x; i < nk * d; i += blockDim.x) {
            unsigned int j = i / d, c = i % d;
            size_t row = (size_t)(start + k0 + j) * stride + head * d + c;
            keys[j * dp + c] = qkv[row + hidden];
            values[j * dp + c] = qkv[row + 2 * hidden];
        }
        __syncthreads();
        for (int r = 0; r < per_warp; ++r) {
            unsigned int q = warp + r * ATT_WARPS;
            if (q >= nq) break;
            const float* qr = queries + q * d;
            // The biases of this query's keys: row[j] for key j of the sequence.
            const float* row = span ? bias + head * (2 * span - 1) + span - 1 - (q0 + q) : 0;
            // Lane scores keys lane and lane + 32 of the tile.
            float s0 = NEG_INF, s1 = NEG_INF;
            if (lane < nk) {
                float s = 0.0f;
                for (unsigned int c = 0; c < d; ++c) s += qr[c] * keys[lane * dp + c];
                s0 = row ? s + row[k0 + lane] : s;
            }
            if (lane + WARP < nk) {
                float s = 0.0f;
                for (unsigned int c = 0; c < d; ++c) s += qr[c] * keys[(lane + WARP) * dp + c];
                s1 = row ? s + row[k0 + lane + WARP] : s;
            }
            float m_new = fmaxf(m[r], warp_max(fmaxf(s0, s1)));
            float correction = expf(m[r] - m_new);  // 0 on the first tile (m = -inf)
            float p0 = lane < nk ? expf(s0 - m_new) : 0.0f;
            float p1 = lane + WARP < nk ? expf(s1 - m_new) : 0.0f;
            l[r] = l[r] * correction + warp_sum(p0 + p1);
            m[r] = m_new;
            for (int x = 0; x < ATT_MAX_COLS; ++x) acc[r][x] *= correction;
            for (unsigned int j = 0; j < nk; ++j) {
                float p = __shfl_sync(FULL_MASK, j < WARP ? p0 : p1, j % WARP);
                for (int x = 0; x < ATT_MAX_COLS; ++x) {
                    unsigned int c = lane + x * WARP;
                    if (c < d) acc[r][x] += p * values[j * dp + c];
                }
            }
        }
    }
    for (int r = 0; r < per_warp; ++r) {
        unsigned int q = warp + r * ATT_WARPS;
        if (q >= nq) break;
        float* out = ctx + (size_t)(start + q0 + q) * hidden + head * d;
        for (int x = 0; x < ATT_MAX_COLS; ++x) {
            unsigned int c = lane + x * WARP;
            if (c < d) out[c] = acc[r][x] / l[r];
        }
    }
}

// out[s] = the mean of the sequence's rows of x (cls = 0), or its first row (cls = 1).
// One block per sequence.
extern "C" __global__ void pool(const float* __restrict__ x,
                                const unsigned int* __restrict__ offsets,
                                float* __restrict__ out, unsigned int hidden, int cls) {
    unsigned int s = blockIdx.x;
    unsigned int start = offsets[s], end = cls ? offsets[s] + 1 : offsets[s + 1];
    float inv = 1.0f / (end - start);
    for (unsigned int c = threadIdx.x; c < hidden; c += blockDim.x) {
        float sum = 0.0f;
        for (unsigned int t = start; t < end; ++t) sum += x[(size_t)t * hidden + c];
        out[(size_t)s * hidden + c] = sum * inv;
    }
}
