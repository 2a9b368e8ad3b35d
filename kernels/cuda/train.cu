// Training kernels for the MLP: the backward pass around cuBLAS's matrix products, the loss,
// and the optimiser step. All tensors are row-major f32.

// dy[i] = 0 where the ReLU's output was not positive (in place on the gradient).
extern "C" __global__ void relu_backward(float* __restrict__ dy, const float* __restrict__ y,
                                         unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        if (y[i] <= 0.0f) dy[i] = 0.0f;
    }
}

// Softmax cross-entropy over `rows` rows of `cols` logits, one thread per row (cols is the
// number of classes, small). Writes the gradient of the mean loss into `grad`, the loss of
// each row into `loss`, and 1 into `correct` where the arg-max equals the label.
extern "C" __global__ void softmax_xent(const float* __restrict__ logits,
                                        const unsigned int* __restrict__ labels,
                                        float* __restrict__ grad, float* __restrict__ loss,
                                        float* __restrict__ correct, unsigned int rows,
                                        unsigned int cols, float scale) {
    for (unsigned int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += blockDim.x * gridDim.x) {
        const float* z = logits + (size_t)r * cols;
        float* g = grad + (size_t)r * cols;
        float mx = z[0];
        unsigned int arg = 0;
        for (unsigned int c = 1; c < cols; ++c) {
            if (z[c] > mx) { mx = z[c]; arg = c; }
        }
        float sum = 0.0f;
        for (unsigned int c = 0; c < cols; ++c) sum += expf(z[c] - mx);
        unsigned int label = labels[r];
        for (unsigned int c = 0; c < cols; ++c) {
            float p = expf(z[c] - mx) / sum;
            g[c] = (p - (c == label ? 1.0f : 0.0f)) * scale;
        }
        loss[r] = logf(sum) + mx - z[label];
        correct[r] = arg == label ? 1.0f : 0.0f;
    }
}

// out[c] (+)= sum over rows of x[r, c]: the bias gradient. One thread per column.
extern "C" __global__ void column_sums(const float* __restrict__ x, float* __restrict__ out,
                                       unsigned int rows, unsigned int cols, int accumulate) {
    for (unsigned int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols;
         c += blockDim.x * gridDim.x) {
        float s = 0.0f;
        for (unsigned int r = 0; r < rows; ++r) s += x[(size_t)r * cols + c];
        out[c] = accumulate ? out[c] + s : s;
    }
}

// One Adam step. `c1` and `c2` are the bias corrections 1 - beta^t.
extern "C" __global__ void adam_step(float* __restrict__ p, const float* __restrict__ g,
                                     float* __restrict__ m, float* __restrict__ v,
                                     unsigned int n, float lr, float beta1, float beta2,
                                     float eps, float c1, float c2) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += blockDim.x * gridDim.x) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
    }
}
