//! Models tandem can serve and train, behind one small trait.
//!
//! [`Model`] is the seam the gateway sees: metadata (tensor names, datatypes, shapes), what
//! it takes ([`InputKind`]: dense rows, or texts), and a synchronous `forward` on a
//! [`Batch`]. It is owned by one worker thread at a time, so `forward` takes `&mut self`
//! and may keep scratch buffers without locks.
//!
//! [`Mlp`] is the multilayer perceptron read from safetensors ([`checkpoint`]), run on the
//! CPU or a GPU through `kernels`.

pub mod checkpoint;
pub mod decoder;
pub(crate) mod dense;
pub mod device;
pub mod encoder;
mod error;
pub mod folder;
pub mod mlp;
pub mod rng;
pub mod text;
pub mod train;

pub use checkpoint::{Checkpoint, LayerWeights, WeightData};
pub use encoder::{
    EncodeError, Encoder, PackedTokens, TextTokenizer, Truncation, l2_normalize_rows,
};
pub use error::{LoadError, ModelError};
pub use kernels::cpu::MatmulPrecision;
pub use kernels::{DType, Device, DeviceSpec, KernelError, Selection};
pub use mlp::Mlp;

/// A named tensor of a model's signature, in the Open Inference Protocol's terms.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TensorSpec {
    pub name: String,
    /// `FP32`, `BYTES`, ...: the protocol's datatype names.
    pub datatype: &'static str,
    /// `-1` marks a variable dimension (the batch's, a sequence's).
    pub shape: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelMetadata {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

/// The name of the MLP's only input and output, as docs/api.md gives them to clients.
pub const INPUT_NAME: &str = "input-0";
pub const OUTPUT_NAME: &str = "output-0";
/// A text encoder's input (BYTES, one text per row) and output (FP32, one embedding per
/// row, or a classifier's logits).
pub const TEXT_INPUT_NAME: &str = "text";
/// A classifier's optional second input: the second text of each pair (BYTES).
pub const TEXT_PAIR_INPUT_NAME: &str = "text_pair";
pub const EMBEDDING_OUTPUT_NAME: &str = "embedding";
pub const LOGITS_OUTPUT_NAME: &str = "logits";

/// What a model takes, which decides how requests to it are decoded and batched.
#[derive(Clone, Debug, PartialEq)]
pub enum InputKind {
    /// Rows of `width` FP32 values.
    Dense { width: usize },
    /// Texts, tokenized by the gateway and packed: at most `max_seq_len` tokens each.
    Text(TextInput),
    /// Named, typed tensors (an ONNX graph's): run with [`Model::forward_tensors`].
    Tensors(seam::Signature),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TextInput {
    pub max_seq_len: usize,
    /// Token ids must be below this: the rows of the model's word embeddings.
    pub vocab_size: usize,
    /// Token type ids must be below this: 2 for BERT (a pair's two texts), 1 for RoBERTa;
    /// 0 for a model that reads none (a GTE without a token type table).
    pub type_vocab_size: usize,
    /// Whether embeddings are L2-normalised unless a request says otherwise.
    pub normalize_by_default: bool,
    /// How token states become the embedding (TEI's `/info` reports it).
    pub pooling: encoder::Pooling,
    /// The precision its matrices run in (TEI's `/info` reports it).
    pub precision: kernels::DType,
    /// A sequence of `n` tokens costs `n + pairs × attention_per_token_pair` token-units of
    /// compute: the dense layers per token, attention per pair of tokens it scores (`n²`,
    /// fewer in layers with a sliding window).
    pub attention_per_token_pair: f64,
    /// The layers that attend within a window, if any.
    pub sliding_window: Option<SlidingWindow>,
    /// A classifier's labels in output order; empty for an encoder of embeddings.
    pub labels: Vec<String>,
    /// A classifier's labels are scored each alone (a sigmoid each), not against each other.
    pub multi_label: bool,
    /// Whether it answers a text with its every token's state (TEI's `/embed_all`).
    pub token_states: bool,
    /// A sparse encoder (SPLADE): its embeddings have a weight a vocabulary entry, most of
    /// them zero (TEI's `/embed_sparse`).
    pub sparse: bool,
}

impl TextInput {
    /// Whether the model classifies (one logit per label) rather than embeds.
    pub fn is_classifier(&self) -> bool {
        !self.labels.is_empty()
    }

    /// The compute of one sequence of `tokens`, in token-units.
    pub fn units(&self, tokens: usize) -> f64 {
        let square = (tokens * tokens) as f64;
        let pairs = match self.sliding_window {
            None => square,
            Some(s) => (1.0 - s.share) * square + s.share * s.pairs(tokens) as f64,
        };
        tokens as f64 + pairs * self.attention_per_token_pair
    }
}

/// Layers whose tokens attend only to the tokens near them (ModernBERT's local layers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlidingWindow {
    /// A token attends to those at most this many positions away.
    pub window: usize,
    /// The fraction of the layers that do; the others attend to the whole sequence.
    pub share: f64,
}

impl SlidingWindow {
    /// The pairs of tokens (a token with itself included) at most `window` apart in a
    /// sequence of `n`: the scores such a layer weighs.
    pub fn pairs(&self, n: usize) -> u64 {
        if n == 0 {
            return 0;
        }
        let m = self.window.min(n - 1) as u64;
        let n = n as u64;
        n + m * (2 * n - m - 1)
    }
}

/// A batch as a model runs it.
#[derive(Clone, Copy, Debug)]
pub enum Batch<'a> {
    /// Row-major `[rows, width]`.
    Dense { values: &'a [f32], rows: usize },
    /// Sequences packed end to end: one output row each, or one a token for a sequence
    /// that keeps its every state.
    Tokens(&'a PackedTokens),
}

impl Batch<'_> {
    /// Output rows the batch makes.
    pub fn rows(&self) -> usize {
        match self {
            Batch::Dense { rows, .. } => *rows,
            Batch::Tokens(t) => t.output_rows(),
        }
    }
}

/// A model replica. One worker thread owns it and calls `forward` with whole batches.
pub trait Model: Send {
    fn metadata(&self) -> &ModelMetadata;

    /// Where it runs, as `cpu` or `cuda:N`.
    fn device(&self) -> &Device;

    fn input(&self) -> InputKind;

    /// Values per output row.
    fn output_width(&self) -> usize;

    /// Runs `batch` and writes `[batch.rows(), output_width]` into `output`.
    fn forward(&mut self, batch: Batch<'_>, output: &mut [f32]) -> Result<(), ModelError>;

    /// Runs named input tensors (a batch's rows joined along the first dimension where the
    /// signature batches) and returns the outputs named in `outputs`, in that order. Only
    /// models of [`InputKind::Tensors`] have it.
    fn forward_tensors(
        &mut self,
        inputs: &[seam::Tensor],
        outputs: &[&str],
    ) -> Result<Vec<seam::Tensor>, ModelError> {
        let _ = (inputs, outputs);
        Err(ModelError::WrongInput(
            "this model takes rows or texts, not named tensors".into(),
        ))
    }

    /// Whether its forward passes split layers over the threads of the rayon pool they run
    /// in: that pool's threads are then best kept one to a core
    /// ([`kernels::cpu::affinity::pin_pool_one_thread_per_core`]).
    fn splits_layers_over_threads(&self) -> bool {
        false
    }
}

/// How a model is placed, beyond its device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The precision of a model's dense layers' products on the CPU (a text encoder's
    /// transformer layers, the MLP's layers); bf16 needs a CPU with AVX-512 BF16 and bf16x3
    /// one with AMX ([`MatmulPrecision::available`]); each is a load error elsewhere. A text
    /// encoder's classifier head and Dense modules stay f32, and so does attention but with
    /// bf16 products on AMX.
    pub cpu_precision: MatmulPrecision,
}

/// Loads whatever a version folder or file holds: a sentence-transformers folder (or its
/// `model.safetensors`) as an [`Encoder`], any other safetensors file (or a folder holding
/// `model.safetensors`) as an [`Mlp`].
pub fn load(path: &std::path::Path, device: &Device) -> Result<Box<dyn Model>, LoadError> {
    load_with(path, device, LoadOptions::default())
}

/// [`load`], placed as `options` say.
pub fn load_with(
    path: &std::path::Path,
    device: &Device,
    options: LoadOptions,
) -> Result<Box<dyn Model>, LoadError> {
    let file = if path.is_dir() {
        path.join("model.safetensors")
    } else {
        path.to_path_buf()
    };
    let folder = file
        .parent()
        .filter(|_| file.ends_with("model.safetensors"));
    match folder {
        Some(dir) if encoder::is_encoder_dir(dir) => {
            Ok(Box::new(Encoder::load_with(dir, device, options)?))
        }
        _ => Ok(Box::new(Mlp::load_with(&file, device, options)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::SlidingWindow;

    #[test]
    fn window_pairs_count_every_pair_within_reach() {
        for window in [0, 1, 4, 64] {
            let s = SlidingWindow { window, share: 0.5 };
            for n in [0usize, 1, 2, 4, 5, 9, 64, 65, 200] {
                let brute = (0..n)
                    .flat_map(|i| (0..n).map(move |j| (i, j)))
                    .filter(|(i, j): &(usize, usize)| i.abs_diff(*j) <= window)
                    .count() as u64;
                assert_eq!(s.pairs(n), brute, "window {window}, {n} tokens");
            }
        }
    }
}
