//! Qwen2 (`"qwen2"`: gte-Qwen2): pre-norm layers of RMSNorm, grouped-query attention whose
//! query, key and value projections add biases, a SwiGLU feed-forward; `head_dim` is
//! `hidden / heads`.

use super::Architecture;
use crate::encoder::family::Family;

pub(super) const QWEN2: Architecture = Architecture {
    model_type: "qwen2",
    family: Family::Qwen2,
    architectures: &["Qwen2Model", "Qwen2ForCausalLM"],
    qkv_bias: true,
    qk_norm: false,
};
