//! The encoder behind the [`Model`] seam: texts in (`text`, BYTES), one embedding per text
//! out (`embedding`, FP32) or a classifier's logits (`logits`, FP32), batches of packed
//! token sequences.

use kernels::Device;

use super::Encoder;
use crate::{
    Batch, EMBEDDING_OUTPUT_NAME, InputKind, LOGITS_OUTPUT_NAME, Model, ModelError, ModelMetadata,
    TEXT_INPUT_NAME, TEXT_PAIR_INPUT_NAME, TensorSpec, TextInput,
};

impl Encoder {
    /// The signature the gateway validates against: texts as `[-1]` (or `[-1, 1]`, as
    /// tritonclient sends them), embeddings as `[-1, width]` (the hidden size, or the last
    /// Dense module's) or logits as `[-1, labels]`.
    pub fn signature(&self) -> ModelMetadata {
        let text = |name: &str| TensorSpec {
            name: name.into(),
            datatype: "BYTES",
            shape: vec![-1],
        };
        let (inputs, output) = match self.config().is_classifier() {
            // `text_pair` is optional: without it each text is scored alone.
            true => (
                vec![text(TEXT_INPUT_NAME), text(TEXT_PAIR_INPUT_NAME)],
                LOGITS_OUTPUT_NAME,
            ),
            false => (vec![text(TEXT_INPUT_NAME)], EMBEDDING_OUTPUT_NAME),
        };
        ModelMetadata {
            inputs,
            outputs: vec![TensorSpec {
                name: output.into(),
                datatype: "FP32",
                shape: vec![-1, self.output_width() as i64],
            }],
        }
    }

    /// What a sequence costs: per layer, the dense layers take
    /// [`EncoderConfig::dense_flops_per_token`] and attention
    /// [`EncoderConfig::attention_flops_per_pair`] a pair of tokens it scores (scores and the
    /// weighted sum; a causal layer scores about half the pairs).
    pub fn text_input(&self) -> TextInput {
        let c = self.config();
        let causal = c.decoder.as_ref().is_some_and(|d| d.causal);
        let pair = c.attention_flops_per_pair() as f64 * if causal { 0.5 } else { 1.0 };
        let per_token = c.dense_flops_per_token() as f64;
        // Faster dense layers make a pair of tokens in attention weigh more against a token.
        // A decoder's attention is its own f32 kernel: only its dense layers speed up.
        let pair_weight = match c.decoder {
            Some(_) => self.cpu_precision().dense_speedup(),
            None => super::pair_weight(self.cpu_precision(), c.head_dim()),
        };
        TextInput {
            max_seq_len: c.max_seq_len,
            vocab_size: c.vocab_size,
            type_vocab_size: c.type_vocab_size,
            normalize_by_default: c.normalize,
            pooling: c.pooling,
            precision: self.precision(),
            attention_per_token_pair: pair / per_token * pair_weight,
            sliding_window: c.sliding_window(),
            labels: c.labels.clone(),
            multi_label: c.multi_label,
            token_states: self.serves_token_states(),
            sparse: self.is_sparse(),
        }
    }
}

impl Model for Encoder {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn device(&self) -> &Device {
        Encoder::device(self)
    }

    fn input(&self) -> InputKind {
        InputKind::Text(self.text_input())
    }

    fn output_width(&self) -> usize {
        Encoder::output_width(self)
    }

    fn forward(&mut self, batch: Batch<'_>, output: &mut [f32]) -> Result<(), ModelError> {
        match batch {
            Batch::Tokens(tokens) => self.forward_packed(tokens, output),
            Batch::Dense { .. } => Err(ModelError::WrongInput(
                "a text encoder takes token sequences, not rows of numbers".into(),
            )),
        }
    }

    fn splits_layers_over_threads(&self) -> bool {
        self.splits_layers_over_threads()
    }
}
