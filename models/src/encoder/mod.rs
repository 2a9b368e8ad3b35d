//! BERT-family sentence encoders served from a sentence-transformers folder: text in,
//! one embedding per text out; or, for a sequence classifier (a cross-encoder, say), one
//! logit per label out; or, for a sparse encoder (SPLADE), one weight per vocabulary entry.
//!
//! - [`family`]: what sets BERT, DistilBERT, MPNet, RoBERTa, ModernBERT and NomicBERT apart;
//! - [`config`]: what the folder's JSON files say (architecture, limits, pooling,
//!   normalisation), refusing what tandem would run differently;
//! - `modules`: `modules.json` and the pooling and Dense modules' configs;
//! - [`weights`]: `model.safetensors`, validated against the config;
//! - [`tokenizer`]: `tokenizer.json` through the `tokenizers` crate, with tandem's padding
//!   (none) and truncation (the model's limit, or a refusal);
//! - `head`: a classifier's pooler and classifier, on the host;
//! - `sparse`: a sparse encoder's masked-language head and SPLADE pooling, on the host;
//! - [`projection`]: sentence-transformers Dense modules after pooling, on the host;
//! - [`packed`]: a batch as sequences packed end to end, the only input the encoder runs;
//! - [`modern`]: ModernBERT's windows, rotary bases and weights, and `nomic` and `gte`:
//!   NomicBERT's and GTE's, read into the same form;
//! - `cpu` and `cuda`: the forward pass on each device, and `modern_cpu` and `modern_cuda`,
//!   ModernBERT's (with `rotary`, its position tables; NomicBERT's and GTE's on the CPU
//!   only). Every
//!   dense layer runs once over all the tokens of a batch and attention runs per sequence on
//!   its own length, so a batch costs what its tokens cost: no padding.
//!
//! Tokenization is separate from the model ([`TextTokenizer`] is `Send + Sync`, the encoder
//! is owned by one worker thread), so that the gateway can tokenize where it validates.

pub mod config;
pub(crate) mod cpu;
mod cuda;
pub mod dense_module;
pub mod family;
mod groups;
mod gte;
mod head;
mod load;
pub mod modern;
pub(crate) mod modern_cpu;
mod modern_cuda;
pub(crate) mod modules;
mod nomic;
pub mod projection;
mod serving;
mod sparse;
pub mod spec;
#[cfg(any(test, feature = "test-support"))]
pub mod synthetic;
pub mod weights;

use std::path::Path;

use family::Family;
use kernels::Device;

pub use crate::text::packed::PackedTokens;
pub use crate::text::pooling::{Pooling, SparsePooling};
pub use crate::text::prompts::Prompts;
pub use crate::text::tokenizer::{
    EncodeError, Encoded, PairPart, TOKEN_COUNT_LIMIT, TextTokenizer, Token, Truncation,
};
pub use spec::EncoderConfig;
pub use weights::EncoderWeights;

use crate::{LoadError, LoadOptions, MatmulPrecision, ModelError};

/// A sentence encoder placed on one device, ready to run packed batches.
pub struct Encoder {
    config: EncoderConfig,
    device: Device,
    backend: Backend,
    /// What its matrices run in: on the CPU f32, or bf16 where its options ask for bf16
    /// products; their stored precision on a GPU.
    precision: kernels::DType,
    /// Its signature, for the model seam (`serving`).
    metadata: crate::ModelMetadata,
    /// A classifier's head, and the pooled states it reads.
    head: Option<(head::ClassifierHead, Vec<f32>)>,
    /// An encoder's Dense modules, and the pooled states they read.
    projection: Option<(projection::Projection, Vec<f32>)>,
    /// A sparse encoder's masked-language head and pooling.
    sparse: Option<sparse::SparseHead>,
}

enum Backend {
    Cpu(Box<cpu::CpuEncoder>),
    ModernCpu(Box<modern_cpu::ModernCpuEncoder>),
    Cuda(Box<cuda::CudaEncoder>),
    ModernCuda(Box<modern_cuda::ModernCudaEncoder>),
    DecoderCpu(Box<crate::decoder::cpu::DecoderCpu>),
}

impl Backend {
    /// `[output rows, hidden]` pooled states of validated `tokens` (every state of a
    /// sequence that keeps them).
    fn forward(&mut self, tokens: &PackedTokens, output: &mut [f32]) -> Result<(), ModelError> {
        match self {
            Backend::Cpu(m) => m.forward(tokens, output),
            Backend::ModernCpu(m) => m.forward(tokens, output),
            Backend::Cuda(m) => m.forward(tokens, output),
            Backend::ModernCuda(m) => m.forward(tokens, output),
            Backend::DecoderCpu(m) => m.forward(tokens, output),
        }
    }

    /// What the CPU's layers' products run in; `None` on a GPU.
    fn cpu_precision(&self) -> Option<MatmulPrecision> {
        match self {
            Backend::Cpu(m) => Some(m.precision),
            Backend::ModernCpu(m) => Some(m.precision),
            Backend::DecoderCpu(m) => Some(m.precision),
            Backend::Cuda(_) | Backend::ModernCuda(_) => None,
        }
    }

    /// How many threads of the current rayon pool the host's work may use.
    fn threads(&self) -> usize {
        match self {
            Backend::Cpu(m) => m.threads,
            Backend::ModernCpu(m) => m.threads,
            Backend::DecoderCpu(m) => m.threads,
            Backend::Cuda(_) | Backend::ModernCuda(_) => rayon::current_num_threads(),
        }
    }

    /// ModernBERT's (and NomicBERT's) layers or BERT's, on the CPU (with products in
    /// `cpu_precision`) or a GPU.
    fn new(
        config: &EncoderConfig,
        mut weights: EncoderWeights,
        device: &Device,
        cpu_precision: MatmulPrecision,
    ) -> Result<Backend, LoadError> {
        if let (Some(decoder), Some(params)) = (weights.decoder.take(), &config.decoder) {
            refuse_cpu_only_on_gpu(config, device)?;
            return Ok(Backend::DecoderCpu(Box::new(
                crate::decoder::cpu::DecoderCpu::new(config, params, decoder, cpu_precision)?,
            )));
        }
        match (device, weights.modern.take(), &config.modern) {
            (Device::Cpu, Some(modern), Some(params)) => Ok(Backend::ModernCpu(Box::new(
                modern_cpu::ModernCpuEncoder::new(
                    config,
                    params,
                    weights.embeddings,
                    modern,
                    cpu_precision,
                )?,
            ))),
            (Device::Cuda(d), Some(modern), Some(params)) => Ok(Backend::ModernCuda(Box::new(
                modern_cuda::ModernCudaEncoder::new(
                    config,
                    params,
                    &weights.embeddings,
                    &modern,
                    d.clone(),
                )?,
            ))),
            (Device::Cpu, _, _) => Ok(Backend::Cpu(Box::new(cpu::CpuEncoder::new(
                config,
                weights,
                cpu_precision,
            )?))),
            (Device::Cuda(d), _, _) => Ok(Backend::Cuda(Box::new(cuda::CudaEncoder::new(
                config,
                &weights,
                d.clone(),
            )?))),
        }
    }
}

/// How much faster the CPU's dense layers run with `precision`'s products than with f32's,
/// for the cost models that weigh a token's dense layers against attention
/// ([`MatmulPrecision::dense_speedup`]).
pub(crate) fn dense_speedup(precision: MatmulPrecision) -> f64 {
    precision.dense_speedup()
}

/// How many times more a pair of tokens in attention weighs against a token's dense layers
/// with `precision`'s products than with f32's: the dense layers' speedup over attention's
/// (`kernels::cpu::attention_speedup`), for heads of `head_dim` values.
pub(crate) fn pair_weight(precision: MatmulPrecision, head_dim: usize) -> f64 {
    precision.dense_speedup() / kernels::cpu::attention_speedup(precision, head_dim)
}

/// Whether `dir` looks like a text encoder's folder (rather than, say, an MLP version):
/// it holds `config.json` and `model.safetensors`.
pub fn is_encoder_dir(dir: &Path) -> bool {
    dir.join("config.json").is_file() && dir.join("model.safetensors").is_file()
}

impl Encoder {
    /// Reads, validates and places the encoder of a sentence-transformers folder. The
    /// folder must also hold `tokenizer.json` (read by [`TextTokenizer::from_dir`]).
    pub fn load(dir: &Path, device: &Device) -> Result<Encoder, LoadError> {
        Encoder::load_with(dir, device, LoadOptions::default())
    }

    /// [`Encoder::load`], placed as `options` say.
    pub fn load_with(
        dir: &Path,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Encoder, LoadError> {
        let config = EncoderConfig::read(dir)?;
        refuse_cpu_only_on_gpu(&config, device)?;
        crate::folder::required(dir, "tokenizer.json")?;
        let weights =
            EncoderWeights::read(&crate::folder::required(dir, "model.safetensors")?, &config)?;
        Encoder::with_options(config, weights, device, options)
    }

    /// Places weights already read and validated against `config`.
    pub fn new(
        config: EncoderConfig,
        weights: EncoderWeights,
        device: &Device,
    ) -> Result<Encoder, LoadError> {
        Encoder::with_options(config, weights, device, LoadOptions::default())
    }

    /// [`Encoder::new`], placed as `options` say.
    pub fn with_options(
        config: EncoderConfig,
        weights: EncoderWeights,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Encoder, LoadError> {
        let stored = (weights.layers.first()).map_or(kernels::DType::F32, |l| l.qkv.weight.dtype());
        let head = match &weights.classifier {
            Some(w) => Some((
                head::ClassifierHead::new(w, config.layer_norm_eps)?,
                Vec::new(),
            )),
            None => None,
        };
        let projection = match weights.dense.is_empty() {
            true => None,
            false => Some((
                projection::Projection::new(&config.dense, &weights.dense)?,
                Vec::new(),
            )),
        };
        check_matches(&config, &weights)?;
        refuse_cpu_only_on_gpu(&config, device)?;
        let sparse = match (&weights.masked_lm, config.sparse) {
            (Some(w), Some(pooling)) => {
                Some(sparse::SparseHead::new(w, config.layer_norm_eps, pooling)?)
            }
            _ => None,
        };
        let backend = Backend::new(&config, weights, device, options.cpu_precision)?;
        let precision = match backend.cpu_precision() {
            Some(MatmulPrecision::F32) => kernels::DType::F32,
            Some(MatmulPrecision::Bf16) => kernels::DType::BF16,
            // Its products keep 16 bits an operand, two thirds of f32's precision where
            // bf16 keeps a third: what a client asking for the dtype should expect is f32's.
            Some(MatmulPrecision::Bf16x3) => kernels::DType::F32,
            None => stored,
        };
        let mut encoder = Encoder {
            config,
            device: device.clone(),
            backend,
            precision,
            head,
            projection,
            sparse,
            metadata: crate::ModelMetadata {
                inputs: Vec::new(),
                outputs: Vec::new(),
            },
        };
        encoder.metadata = encoder.signature();
        Ok(encoder)
    }

    /// The precision its matrices run in.
    pub fn precision(&self) -> kernels::DType {
        self.precision
    }

    /// What its layers' products run in on the CPU (f32 on a GPU, where the weights' stored
    /// precision decides).
    pub fn cpu_precision(&self) -> MatmulPrecision {
        self.backend.cpu_precision().unwrap_or_default()
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn on_cpu(&self) -> bool {
        matches!(
            self.backend,
            Backend::Cpu(_) | Backend::ModernCpu(_) | Backend::DecoderCpu(_)
        )
    }

    /// Whether a forward pass on the CPU splits a long sequence's layers over more than one
    /// thread (on a GPU the host's threads only prepare and copy).
    pub fn splits_layers_over_threads(&self) -> bool {
        self.on_cpu() && self.backend.threads() > 1
    }

    /// Whether it answers a sequence with its every token's state (TEI's `/embed_all`):
    /// those are its outputs' width only where no classifier head or Dense module follows
    /// pooling, and only the CPU's encoders write them.
    pub fn serves_token_states(&self) -> bool {
        self.on_cpu() && self.head.is_none() && self.projection.is_none() && self.sparse.is_none()
    }

    /// Whether it is a sparse encoder: a weight a vocabulary entry, most of them zero.
    pub fn is_sparse(&self) -> bool {
        self.sparse.is_some()
    }

    /// Values per token state: the transformer's width (an embedding's too, unless Dense
    /// modules project it: see [`Encoder::output_width`]).
    pub fn hidden(&self) -> usize {
        self.config.hidden
    }

    /// Values per sequence out: an embedding's, a classifier's logits (one per label), or a
    /// sparse encoder's weights (one per vocabulary entry).
    pub fn output_width(&self) -> usize {
        if let Some(sparse) = &self.sparse {
            return sparse.vocabulary();
        }
        match (&self.head, &self.projection) {
            (Some((head, _)), _) => head.labels(),
            (None, Some((projection, _))) => projection.outputs(),
            (None, None) => self.config.hidden,
        }
    }

    /// The longest sequence a forward pass takes, in tokens, special tokens included.
    pub fn max_seq_len(&self) -> usize {
        self.config.max_seq_len
    }

    /// Whether the folder's modules end in `Normalize`, so that its embeddings are served
    /// L2-normalised unless a request says otherwise.
    pub fn normalize_by_default(&self) -> bool {
        self.config.normalize
    }

    /// On the CPU, how many threads of the current rayon pool a forward pass may use.
    pub fn set_threads(&mut self, threads: usize) {
        match &mut self.backend {
            Backend::Cpu(m) => m.threads = threads.max(1),
            Backend::ModernCpu(m) => m.threads = threads.max(1),
            Backend::DecoderCpu(m) => m.threads = threads.max(1),
            Backend::Cuda(_) | Backend::ModernCuda(_) => {}
        }
    }

    /// Floating-point operations of a forward pass over `tokens`: the dense layers per
    /// token and attention per pair of tokens a layer scores (the square of a sequence's
    /// length, or fewer within a sliding window).
    pub fn flops(&self, tokens: &PackedTokens) -> u64 {
        let c = &self.config;
        let layers = c.layers as u64;
        let dense = c.dense_flops_per_token() * tokens.tokens() as u64 * layers;
        let square = tokens.sum_squared_lengths();
        let pairs = match c.sliding_window() {
            Some(s) => {
                let local = c.local_layers() as u64;
                let windowed: u64 = tokens.lengths().map(|n| s.pairs(n)).sum();
                (layers - local) * square + local * windowed
            }
            None => layers * square,
        };
        // A causal layer scores each token against those up to it: about half the pairs.
        let pairs = match &c.decoder {
            Some(d) if d.causal => (pairs + layers * tokens.tokens() as u64) / 2,
            _ => pairs,
        };
        dense + c.attention_flops_per_pair() * pairs
    }

    /// Runs a packed batch and writes one row per sequence into `output` (`[sequences,
    /// output_width]`, row-major): its pooled embedding through any Dense modules, not
    /// normalised (see [`l2_normalize_rows`]), or a classifier's logits; or, for a sequence
    /// that keeps them, its every token's state, one row each (where
    /// [`Encoder::serves_token_states`]).
    pub fn forward_packed(
        &mut self,
        tokens: &PackedTokens,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        self.check(tokens, output)?;
        if tokens.is_empty() {
            return Ok(());
        }
        let threads = self.backend.threads();
        if let Some(sparse) = &mut self.sparse {
            let backend = &mut self.backend;
            return sparse.run(tokens, output, threads, |t, s| backend.forward(t, s));
        }
        let pooled_len = tokens.sequences() * self.config.hidden;
        match (&mut self.head, &mut self.projection) {
            (Some((head, cls)), _) => {
                cls.resize(pooled_len, 0.0);
                self.backend.forward(tokens, cls)?;
                head.apply(cls, output, threads)
            }
            (None, Some((projection, pooled))) => {
                pooled.resize(pooled_len, 0.0);
                self.backend.forward(tokens, pooled)?;
                projection.apply(pooled, output, threads)
            }
            (None, None) => self.backend.forward(tokens, output),
        }
    }

    /// Refuses a batch the forward pass could not run: malformed packing, empty or
    /// over-long sequences, ids outside the vocabularies, a wrongly sized output.
    fn check(&self, tokens: &PackedTokens, output: &mut [f32]) -> Result<(), ModelError> {
        let c = &self.config;
        let marks = tokens.states.len();
        if marks != 0 && marks != tokens.sequences() {
            return Err(ModelError::InvalidTokens(format!(
                "{marks} marks of kept states for {} sequences: none, or one each",
                tokens.sequences()
            )));
        }
        if tokens.keeps_any_states() && !self.serves_token_states() {
            return Err(ModelError::WrongInput(
                "this model does not answer with every token's state: that takes a text \
                 encoder on the CPU with no classifier head or Dense module"
                    .into(),
            ));
        }
        let expected = tokens.output_rows() * self.output_width();
        if output.len() != expected {
            return Err(ModelError::OutputSize {
                expected,
                given: output.len(),
            });
        }
        let invalid = |m: String| Err(ModelError::InvalidTokens(m));
        let o = &tokens.offsets;
        if o.first() != Some(&0)
            || o.last() != Some(&tokens.ids.len())
            || tokens.type_ids.len() != tokens.ids.len()
            || o.windows(2).any(|w| w[1] < w[0])
        {
            return invalid(format!(
                "offsets must run from 0 to the {} ids without decreasing, with as many type ids ({})",
                tokens.ids.len(),
                tokens.type_ids.len()
            ));
        }
        for (seq, len) in tokens.lengths().enumerate() {
            if len == 0 || len > c.max_seq_len {
                return invalid(format!(
                    "sequence {seq} has {len} tokens, expected 1 to {}",
                    c.max_seq_len
                ));
            }
        }
        if let Some(t) = tokens
            .ids
            .iter()
            .position(|&id| id as usize >= c.vocab_size)
        {
            return invalid(format!(
                "token id {} at packed position {t} is outside the vocabulary of {}",
                tokens.ids[t], c.vocab_size
            ));
        }
        let past_table = || {
            let mut ids = tokens.type_ids.iter();
            ids.position(|&k| k as usize >= c.type_vocab_size)
        };
        if c.type_vocab_size > 0
            && let Some(t) = past_table()
        {
            return invalid(format!(
                "token type id {} at packed position {t} is not below {}",
                tokens.type_ids[t], c.type_vocab_size
            ));
        }
        Ok(())
    }
}

/// Refuses weights that are not those `config` describes in what the encoder's parts take
/// on trust: the family's layers, the classifier's head, the Dense modules' widths.
fn check_matches(config: &EncoderConfig, weights: &EncoderWeights) -> Result<(), LoadError> {
    let mismatch = |what: &str| Err(LoadError::Inconsistent(what.into()));
    if config.modern.is_some() != weights.modern.is_some() {
        return mismatch("ModernBERT's parameters and layers come together");
    }
    if config.is_classifier() != weights.classifier.is_some() {
        return mismatch("a classifier has a head, and only a classifier");
    }
    if config.sparse.is_some() != weights.masked_lm.is_some() {
        return mismatch("a sparse encoder has a masked-language head, and only a sparse encoder");
    }
    if config.decoder.is_some() != weights.decoder.is_some() {
        return mismatch("a decoder's parameters and layers come together");
    }
    // Type ids go unread only where there is no table to read them from.
    let no_types = config.type_vocab_size == 0;
    let without_table = config.family == Family::Gte || config.decoder.is_some();
    if no_types && (!without_table || !weights.embeddings.token_type.is_empty()) {
        return mismatch("only a GTE without a token type table, or a decoder, reads no type ids");
    }
    let widths = config.dense.iter().map(|m| (m.in_features, m.out_features));
    let given = weights.dense.iter().map(|d| (d.inputs, d.outputs));
    let first = config
        .dense
        .first()
        .is_none_or(|m| m.in_features == config.hidden);
    if !widths.eq(given) || !first {
        return mismatch("the Dense modules' widths are those of their configuration");
    }
    Ok(())
}

/// A model [`EncoderConfig::cpu_only`] names is refused on a GPU, before its weights are
/// placed.
fn refuse_cpu_only_on_gpu(config: &EncoderConfig, device: &Device) -> Result<(), LoadError> {
    match (device, config.cpu_only()) {
        (Device::Cuda(_), Some(what)) => Err(LoadError::CpuOnly { what }),
        _ => Ok(()),
    }
}

/// Scales every row of `out` (rows of `width` values) to unit Euclidean length; a row of
/// zeros stays zeros.
pub fn l2_normalize_rows(out: &mut [f32], width: usize) {
    if width == 0 {
        return;
    }
    for row in out.chunks_exact_mut(width) {
        let norm = row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
        if norm > 0.0 {
            let inv = (1.0 / norm) as f32;
            row.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

/// A worker thread owns an encoder, moved there from the thread that loaded it.
const _: () = {
    const fn movable<T: Send>() {}
    movable::<Encoder>();
};
