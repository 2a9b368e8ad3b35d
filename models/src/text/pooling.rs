//! How a text model's token states become one vector per sequence.

/// How token states become one vector per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token of the sequence, special tokens included.
    Mean,
    /// The state of the first token (`[CLS]`).
    Cls,
    /// The state of the last token: a decoder's, which alone has read the whole sequence
    /// (the end of text the tokenizer appends).
    LastToken,
}

/// How a sparse encoder (SPLADE) turns its masked-language head's logits into one weight a
/// vocabulary entry: `log(1 + relu(logit))` of every token, then their maximum or their sum
/// over the sequence (sentence-transformers' `SpladePooling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SparsePooling {
    Max,
    Sum,
}
