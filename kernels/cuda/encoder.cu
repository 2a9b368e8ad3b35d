// The parts of a BERT encoder layer around cuBLAS's matrix products: embeddings, layer norm
// (with the residual and the dense layer's bias folded in), bias + GELU, multi-head
// attention over sequences packed end to end, and pooling; and ModernBERT's: rotary
// positions, a gated GELU, a residual sum, and attention within a sliding window.
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

// x[t] = word[ids[t]] + position[positions[t]] + token_type[types[t]]; a null position or
// token type table adds nothing (ModernBERT has neither). One block per token.
extern "C" __global__ void embed(const unsigned int* __restrict__ ids,
                                 const unsigned int* __restrict__ types,
                                 const unsigned int* __restrict__ positions,
                                 const float* __restrict__ word,
                                 const float* __restrict__ position,
                                 const float* __restrict__ token_type, float* __restrict__ x,
                                 unsigned int hidden) {
    unsigned int t = blockIdx.x;
    const float* w = word + (size_t)ids[t] * hidden;
    const float* p = position ? position + (size_t)positions[t] * hidden : 0;
    const float* k = token_type ? token_type + (size_t)types[t] * hidden : 0;
    float* out = x + (size_t)t * hidden;
    for (unsigned int c = threadIdx.x; c < hidden; c += blockDim.x) {
        float v = w[c];
        if (p) v += p[c];
        if (k) v += k[c];
        out[c] = v;
    }
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

// x += y over rows * cols values.
extern "C" __global__ void add_in_place(float* __restrict__ x, const float* __restrict__ y,
                                        unsigned int rows, unsigned int cols) {
    size_t n = (size_t)rows * cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x) {
        x[i] += y[i];
    }
}

// gated[r, c] = gelu(up[r, c]) * up[r, inter + c] (exact GELU): ModernBERT's feed-forward,
// whose input projection gives each row the half through GELU, then the gate.
extern "C" __global__ void gelu_gate(const float* __restrict__ up, float* __restrict__ gated,
                                     unsigned int rows, unsigned int inter) {
    size_t n = (size_t)rows * inter;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x) {
        size_t r = i / inter, c = i % inter;
        float a = up[r * 2 * inter + c], g = up[r * 2 * inter + inter + c];
        gated[i] = 0.5f * a * (1.0f + erff(a * 0.70710678118654752f)) * g;
    }
}

// Rotary positions: turns each head's query and key of token t (the first 2 * hidden values
// of its qkv row) by positions[t], value j of a head's first half with value j of its
// second (transformers' rotate_half), by the angle whose cosine and sine are
// cosines/sines[position * (d / 2) + j]. One block per token.
extern "C" __global__ void rotary(float* __restrict__ qkv,
                                  const unsigned int* __restrict__ positions,
                                  const float* __restrict__ cosines,
                                  const float* __restrict__ sines, unsigned int hidden,
                                  unsigned int d) {
    unsigned int t = blockIdx.x, half = d / 2;
    float* row = qkv + (size_t)t * 3 * hidden;
    const float* c = cosines + (size_t)positions[t] * half;
    const float* s = sines + (size_t)positions[t] * half;
    // hidden pairs: 2 * heads heads (queries, then keys) of `half` pairs each.
    for (unsigned int i = threadIdx.x; i < hidden; i += blockDim.x) {
        unsigned int head = i / half, j = i % half;
        float* a = row + head * d + j;
        float* b = a + half;
        float x = *a, y = *b;
        *a = x * c[j] - y * s[j];
        *b = y * c[j] + x * s[j];
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
// with span = 0, bias is not read. A query attends only to the keys at most `window`
// positions from it (ModernBERT's local layers); the block walks only the key tiles its
// queries' windows reach. NO_WINDOW: every key.
#define NO_WINDOW 0xffffffffu
extern "C" __global__ void attention(const float* __restrict__ qkv,
                                     const unsigned int* __restrict__ offsets,
                                     float* __restrict__ ctx, unsigned int hidden,
                                     unsigned int d, float scale,
                                     const float* __restrict__ bias, unsigned int span,
                                     unsigned int window) {
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
    // The keys this block's windows reach, from the start of a tile.
    unsigned int first_key = 0, end_key = len;
    if (window < len) {
        first_key = q0 > window ? (q0 - window) / ATT_KEYS * ATT_KEYS : 0;
        end_key = min(len, q0 + nq + window);
    }
    for (unsigned int k0 = first_key; k0 < end_key; k0 += ATT_KEYS) {
        const unsigned int nk = min(ATT_KEYS, end_key - k0);
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
            // Keys lo..hi of the sequence are within this query's window; of this tile,
            // keys k0 + from .. k0 + to - 1. All four are the same in every lane, so a warp
            // skips a tile, and runs the shuffles below, as one.
            const unsigned int i = q0 + q;
            const unsigned int lo = window < i ? i - window : 0;
            const unsigned int hi = window < len - i ? i + window : len - 1;
            if (hi < k0 || lo >= k0 + nk) continue;
            const unsigned int from = max(lo, k0) - k0, to = min(hi + 1, k0 + nk) - k0;
            // This query's biases: row[j - i] for key j of the sequence.
            const float* row = span ? bias + head * (2 * span - 1) + (span - 1) : 0;
            // Lane scores keys lane and lane + 32 of the tile.
            float s0 = NEG_INF, s1 = NEG_INF;
            if (lane >= from && lane < to) {
                float s = 0.0f;
                for (unsigned int c = 0; c < d; ++c) s += qr[c] * keys[lane * dp + c];
                s0 = row ? s + row[(int)(k0 + lane) - (int)i] : s;
            }
            if (lane + WARP >= from && lane + WARP < to) {
                float s = 0.0f;
                for (unsigned int c = 0; c < d; ++c) s += qr[c] * keys[(lane + WARP) * dp + c];
                s1 = row ? s + row[(int)(k0 + lane + WARP) - (int)i] : s;
            }
            // Finite: the tile holds at least one key of the window.
            float m_new = fmaxf(m[r], warp_max(fmaxf(s0, s1)));
            float correction = expf(m[r] - m_new);  // 0 on the first tile (m = -inf)
            float p0 = s0 == NEG_INF ? 0.0f : expf(s0 - m_new);
            float p1 = s1 == NEG_INF ? 0.0f : expf(s1 - m_new);
            l[r] = l[r] * correction + warp_sum(p0 + p1);
            m[r] = m_new;
            for (int x = 0; x < ATT_MAX_COLS; ++x) acc[r][x] *= correction;
            for (unsigned int j = from; j < to; ++j) {
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
