//! Qwen2 (`"qwen2"`: gte-Qwen2): pre-norm layers of RMSNorm, grouped-query attention whose
//! query, key and value projections add biases, a SwiGLU feed-forward; `head_dim` is
//! `hidden / heads`. Its keys are Qwen3's (`qwen3::qwen_params`).

use super::qwen3::{QwenForm, qwen_params};
use super::{Architecture, Defaults};
use crate::encoder::family::Family;

pub(super) const QWEN2: Architecture = Architecture {
    model_type: "qwen2",
    family: Family::Qwen2,
    architectures: &["Qwen2Model", "Qwen2ForCausalLM"],
    params: |path, json, sizes| qwen_params(path, json, sizes, QWEN2_FORM),
    defaults: Defaults {
        kv_heads: 32,
        head_dim: None,
        max_positions: 32_768,
    },
};

const QWEN2_FORM: QwenForm = QwenForm {
    qkv_bias: true,
    both_ways_key: "is_causal",
};
