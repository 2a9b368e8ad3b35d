//! Models tandem can serve and train, behind one small trait.
//!
//! [`Model`] is the seam the gateway sees: metadata (tensor names, datatypes, shapes) and a
//! synchronous `forward` on a batch of rows. It is owned by one worker thread at a time, so
//! `forward` takes `&mut self` and may keep scratch buffers without locks.
//!
//! [`Mlp`] is the multilayer perceptron read from safetensors ([`checkpoint`]), run on the
//! CPU or a GPU through `kernels`.

pub mod checkpoint;
pub mod encoder;
mod error;
pub mod mlp;
pub mod rng;
pub mod train;

pub use checkpoint::{Checkpoint, LayerWeights, WeightData};
pub use encoder::{Encoder, PackedTokens, TextTokenizer, l2_normalize_rows};
pub use error::{LoadError, ModelError};
pub use kernels::{Device, DeviceSpec};
pub use mlp::Mlp;

/// A named tensor of a model's signature, in the Open Inference Protocol's terms.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TensorSpec {
    pub name: String,
    /// `FP32`, ...: the protocol's datatype names.
    pub datatype: &'static str,
    /// `-1` marks the batch dimension.
    pub shape: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelMetadata {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

/// The name of the MLP's only input and output, as DESIGN.md fixes them.
pub const INPUT_NAME: &str = "input-0";
pub const OUTPUT_NAME: &str = "output-0";

/// A model replica. One worker thread owns it and calls `forward` with whole batches.
pub trait Model: Send {
    fn metadata(&self) -> &ModelMetadata;

    /// Where it runs, as `cpu` or `cuda:N`.
    fn device(&self) -> &Device;

    /// Values per row of the input and of the output.
    fn input_width(&self) -> usize;
    fn output_width(&self) -> usize;

    /// Multiply-adds per row, for throughput and cost figures.
    fn macs_per_row(&self) -> u64;

    /// Runs `rows` rows of `input` (row-major `[rows, input_width]`) and writes
    /// `[rows, output_width]` into `output`.
    fn forward(&mut self, input: &[f32], rows: usize, output: &mut [f32])
    -> Result<(), ModelError>;
}
