//! What every text endpoint (v2 with BYTES, OpenAI's embeddings, TEI's embed) does with its
//! texts: tokenize them (off the runtime's threads when they are long), size them in
//! token-units for the batcher, and normalise what comes back.

use std::time::Duration;

use models::{EncodeError, PackedTokens};

use crate::batching::Payload;
use crate::error::ApiError;
use crate::infer::Submission;
use crate::metrics as names;
use crate::registry::{ModelVersion, TextModel};

/// Texts longer than this in all are tokenized on the blocking pool: a few sentences cost
/// tens of microseconds, a book's worth milliseconds the runtime's threads owe others.
const INLINE_TOKENIZE_BYTES: usize = 4096;

/// Texts as the batcher takes them.
pub struct Tokenized {
    pub tokens: PackedTokens,
    /// Tokens in all, special tokens included: what `usage.prompt_tokens` reports.
    pub count: usize,
    /// Their cost in token-units (tokens, plus attention): the request's batch rows.
    pub units: usize,
}

impl Tokenized {
    pub fn submission(self, priority: u32, timeout: Option<Duration>) -> Submission {
        Submission {
            outputs: self.tokens.sequences(),
            rows: self.units,
            input: Payload::Tokens(Box::new(self.tokens)),
            priority,
            timeout,
        }
    }
}

/// The version's text model, or a 400 for a model that takes numbers.
pub fn text_model(version: &ModelVersion) -> Result<&TextModel, ApiError> {
    version.text.as_ref().ok_or_else(|| {
        ApiError::invalid(format!(
            "model {:?} takes rows of numbers, not texts",
            version.name
        ))
    })
}

/// Tokenizes `texts`: each cut at the model's limit, or refused when `truncate` is false;
/// the whole request refused past `max_batch_tokens`.
pub async fn tokenize(
    version: &ModelVersion,
    texts: Vec<String>,
    truncate: bool,
) -> Result<Tokenized, ApiError> {
    let text = text_model(version)?;
    let bytes: usize = texts.iter().map(String::len).sum();
    let tokenizer = text.tokenizer.clone();
    let encode = move || encode_all(&tokenizer, &texts, truncate);
    let tokens = if bytes <= INLINE_TOKENIZE_BYTES {
        encode()?
    } else {
        tokio::task::spawn_blocking(encode)
            .await
            .map_err(|_| ApiError::Internal("tokenization failed".into()))??
    };
    let units: f64 = tokens.lengths().map(|n| text.input.units(n).ceil()).sum();
    let units = units as usize;
    let limit = version.settings().max_batch_tokens;
    if units > limit {
        return Err(ApiError::invalid(format!(
            "the request's {} tokens come to {units} token-units (attention included), more \
             than the model's max_batch_tokens of {limit}; send fewer or shorter texts",
            tokens.tokens()
        )));
    }
    metrics::histogram!(names::REQUEST_TOKENS, "model" => version.name.clone())
        .record(tokens.tokens() as f64);
    Ok(Tokenized {
        count: tokens.tokens(),
        units,
        tokens,
    })
}

fn encode_all(
    tokenizer: &models::TextTokenizer,
    texts: &[String],
    truncate: bool,
) -> Result<PackedTokens, ApiError> {
    let mut packed = PackedTokens::with_capacity(texts.len(), texts.len() * 16);
    for (i, text) in texts.iter().enumerate() {
        match tokenizer.encode(text, truncate) {
            // A tokenizer with no special tokens of its own gives none for blank text.
            Ok(encoded) if encoded.is_empty() => {
                return Err(ApiError::invalid(format!("text {i} gives no tokens")));
            }
            Ok(encoded) => packed.push(&encoded),
            Err(EncodeError::TooLong {
                tokens,
                max,
                counted_all,
            }) => {
                let more = if counted_all { "" } else { "more than " };
                return Err(ApiError::invalid(format!(
                    "text {i} has {more}{tokens} tokens, at most {max} fit; send it shorter \
                     or with truncate on"
                )));
            }
            Err(EncodeError::Tokenizer(why)) => {
                return Err(ApiError::Internal(format!(
                    "the model's tokenizer failed on text {i}: {why}"
                )));
            }
        }
    }
    Ok(packed)
}

/// L2-normalises each embedding (rows of `width`), when asked to.
pub fn normalized(mut embeddings: Vec<f32>, width: usize, normalize: bool) -> Vec<f32> {
    if normalize {
        models::l2_normalize_rows(&mut embeddings, width);
    }
    embeddings
}
