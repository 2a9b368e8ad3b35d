//! Text to token ids, with the folder's own `tokenizer.json` through the `tokenizers` crate
//! (the library Python's `tokenizers` wraps, so the ids are the same).
//!
//! The file's padding and truncation settings are replaced: batches are packed, never
//! padded, and the limit is the model's `max_seq_length`, not whatever the file was saved
//! with. An input is either truncated to the limit (longest first, for pairs, as
//! sentence-transformers does) or, when the caller asks not to truncate, refused with its
//! token count — never silently cut.

use std::fmt;
use std::path::Path;

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::config::required;
use crate::LoadError;

/// One tokenized input: ids and token type ids (0 for the first text, 1 for the second of
/// a pair), special tokens included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    /// The length before truncation; `ids.len()` when nothing was cut.
    pub full_len: usize,
}

impl Encoded {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn truncated(&self) -> bool {
        self.full_len > self.ids.len()
    }
}

/// Why a text could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// Longer than the model takes, and the caller asked not to truncate.
    TooLong { tokens: usize, max: usize },
    /// The tokenizer itself failed (a vocabulary without its unknown token, say): a fault
    /// of the model folder rather than of the text.
    Tokenizer(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::TooLong { tokens, max } => {
                write!(f, "the input has {tokens} tokens, at most {max} fit")
            }
            EncodeError::Tokenizer(reason) => write!(f, "tokenization failed: {reason}"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// A model's tokenizer with tandem's settings. Shared between threads: encoding takes
/// `&self`.
pub struct TextTokenizer {
    /// No truncation: gives the full length, and the ids whenever they fit.
    whole: Tokenizer,
    /// Truncating at `max_seq_len`: used only for inputs that do not fit.
    truncating: Tokenizer,
    max_seq_len: usize,
}

/// The fewest tokens a limit may allow: a pair's three special tokens and one of each text.
const MIN_SEQ_LEN: usize = 5;

impl TextTokenizer {
    /// Reads `dir/tokenizer.json` and sets it up for sequences of at most `max_seq_len`
    /// tokens, special tokens included.
    pub fn from_dir(dir: &Path, max_seq_len: usize) -> Result<TextTokenizer, LoadError> {
        let path = required(dir, "tokenizer.json")?;
        let invalid = |reason: String| LoadError::Tokenizer {
            path: path.clone(),
            reason,
        };
        if max_seq_len < MIN_SEQ_LEN {
            return Err(invalid(format!(
                "a limit of {max_seq_len} tokens leaves no room for text (at least {MIN_SEQ_LEN})"
            )));
        }
        let mut whole = Tokenizer::from_file(&path).map_err(|e| invalid(e.to_string()))?;
        whole.with_padding(None);
        whole
            .with_truncation(None)
            .map_err(|e| invalid(e.to_string()))?;
        let mut truncating = whole.clone();
        truncating
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_seq_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| invalid(e.to_string()))?;
        let tokenizer = TextTokenizer {
            whole,
            truncating,
            max_seq_len,
        };
        // A tokenizer that cannot encode plain text is a broken folder: say so at load.
        tokenizer
            .encode_pair("tandem checks its tokenizer", "[?]", true)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(tokenizer)
    }

    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// One text, with the model's special tokens. With `truncate` off, an input longer
    /// than [`TextTokenizer::max_seq_len`] is [`EncodeError::TooLong`].
    pub fn encode(&self, text: &str, truncate: bool) -> Result<Encoded, EncodeError> {
        self.run(text.into(), truncate)
    }

    /// A pair of texts (a query and a passage, say), as one sequence: `[CLS] a [SEP] b
    /// [SEP]` for BERT, with type ids 0 then 1. Truncation shortens the longer text first.
    pub fn encode_pair(&self, a: &str, b: &str, truncate: bool) -> Result<Encoded, EncodeError> {
        self.run((a, b).into(), truncate)
    }

    fn run(
        &self,
        input: tokenizers::EncodeInput<'_>,
        truncate: bool,
    ) -> Result<Encoded, EncodeError> {
        let failed = |e: tokenizers::Error| EncodeError::Tokenizer(e.to_string());
        let whole = self
            .whole
            .encode_fast(input.clone(), true)
            .map_err(failed)?;
        let full_len = whole.get_ids().len();
        let encoding = if full_len <= self.max_seq_len {
            whole
        } else if truncate {
            self.truncating.encode_fast(input, true).map_err(failed)?
        } else {
            return Err(EncodeError::TooLong {
                tokens: full_len,
                max: self.max_seq_len,
            });
        };
        Ok(Encoded {
            ids: encoding.get_ids().to_vec(),
            type_ids: encoding.get_type_ids().to_vec(),
            full_len,
        })
    }
}

impl fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("max_seq_len", &self.max_seq_len)
            .finish_non_exhaustive()
    }
}

/// The gateway tokenizes on several threads at once through one shared tokenizer.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<TextTokenizer>();
};
