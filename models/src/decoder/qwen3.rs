//! Qwen3 (`"qwen3"`: Qwen3-Embedding, Qwen3-Reranker's base): pre-norm layers of RMSNorm,
//! grouped-query attention with an RMSNorm over each head's queries and keys before the
//! rotation, no biases, a SwiGLU feed-forward; `head_dim` may make the attention wider than
//! the residual stream (0.6B: 16 heads of 128 over a hidden size of 1024).

use super::Architecture;
use crate::encoder::family::Family;

pub(super) const QWEN3: Architecture = Architecture {
    model_type: "qwen3",
    family: Family::Qwen3,
    architectures: &["Qwen3Model", "Qwen3ForCausalLM"],
    qkv_bias: false,
    qk_norm: true,
};
