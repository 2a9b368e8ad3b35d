//! What every text model shares, encoders and the decoders to come alike: the tokenizer
//! (`tokenizer.json` through the `tokenizers` crate, with tandem's padding and truncation),
//! batches packed end to end ([`packed`]), instruction prompts ([`prompts`]), pooling
//! ([`pooling`]) and rotary position tables ([`rotary`]).

pub mod packed;
pub mod pooling;
pub mod prompts;
pub mod rotary;
pub mod tokenizer;
