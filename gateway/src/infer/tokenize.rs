//! What every text request (v2 with BYTES, OpenAI's embeddings, TEI's and Cohere's routes)
//! does with its inputs: tokenize texts (off the runtime's threads when they are long),
//! check token ids sent as they are, and size both in token-units for the batcher.

use std::time::Duration;

use models::{EncodeError, PackedTokens, TextInput, TextTokenizer, Truncation};

use crate::batching::Payload;
use crate::error::ApiError;
use crate::infer::Submission;
use crate::lifecycle::registry::{ModelVersion, TextModel};
use crate::metrics as names;

use super::input::{Input, MAX_IDS, TokenIds};

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
            continues: false,
        }
    }
}

/// The version's text model, or an invalid request for a model that takes numbers.
pub fn text_model(version: &ModelVersion) -> Result<&TextModel, ApiError> {
    version.text.as_ref().ok_or_else(|| {
        ApiError::invalid(format!(
            "model {:?} takes rows of numbers, not texts",
            version.name
        ))
    })
}

/// Tokenizes the texts of `inputs`, each after the prompt `prompt_name` names (or the
/// model's default), and checks their token ids: each input cut at the model's limit, or
/// refused, as `truncation` says; the whole request refused past `max_batch_tokens`, as
/// it runs in one batch.
pub async fn tokenize(
    version: &ModelVersion,
    inputs: Vec<Input>,
    truncation: Truncation,
    prompt_name: Option<&str>,
) -> Result<Tokenized, ApiError> {
    let tokens = tokenize_all(version, inputs, truncation, prompt_name).await?;
    let model = &text_model(version)?.input;
    let units: f64 = tokens.lengths().map(|n| model.units(n).ceil()).sum();
    let units = units as usize;
    let limit = version.settings().max_batch_tokens;
    if units > limit {
        return Err(ApiError::too_large(format!(
            "the request's {} tokens come to {units} token-units (attention included), more \
             than the model's max_batch_tokens of {limit}; send fewer or shorter texts",
            tokens.tokens()
        )));
    }
    Ok(Tokenized {
        count: tokens.tokens(),
        units,
        tokens,
    })
}

/// As [`tokenize`], for a request that may run as several batches: its inputs in order,
/// cut into runs of at most `max_batch_size` inputs and `max_batch_tokens` token-units
/// each. Only an input that alone comes to more than `max_batch_tokens` is refused.
pub async fn tokenize_in_batches(
    version: &ModelVersion,
    inputs: Vec<Input>,
    truncation: Truncation,
    prompt_name: Option<&str>,
) -> Result<Vec<Tokenized>, ApiError> {
    let tokens = tokenize_all(version, inputs, truncation, prompt_name).await?;
    let model = &text_model(version)?.input;
    let settings = version.settings();
    let (max_inputs, max_units) = (settings.max_batch_size.max(1), settings.max_batch_tokens);
    let mut batches = Vec::new();
    let (mut start, mut units) = (0, 0);
    for (i, n) in tokens.lengths().enumerate() {
        let these = model.units(n).ceil() as usize;
        if these > max_units {
            return Err(ApiError::too_large(format!(
                "input {i}'s {n} tokens come to {these} token-units (attention included), \
                 more than the model's max_batch_tokens of {max_units}"
            )));
        }
        if i > start && (i - start == max_inputs || units + these > max_units) {
            batches.push(tokenized(&tokens, start..i, units));
            (start, units) = (i, 0);
        }
        units += these;
    }
    batches.push(tokenized(&tokens, start..tokens.sequences(), units));
    Ok(batches)
}

fn tokenized(tokens: &PackedTokens, range: std::ops::Range<usize>, units: usize) -> Tokenized {
    let tokens = tokens.sequences_in(range);
    Tokenized {
        count: tokens.tokens(),
        units,
        tokens,
    }
}

/// Every input tokenized (or its ids checked), with the prompt applied, counted in the
/// request-tokens histogram.
async fn tokenize_all(
    version: &ModelVersion,
    mut inputs: Vec<Input>,
    truncation: Truncation,
    prompt_name: Option<&str>,
) -> Result<PackedTokens, ApiError> {
    let text = text_model(version)?;
    apply_prompt(text, &mut inputs, prompt_name)?;
    let bytes: usize = inputs.iter().map(text_bytes).sum();
    let (tokenizer, model) = (text.tokenizer.clone(), text.input.clone());
    let tokens = inline_or_blocking(bytes, move || {
        encode_all(&tokenizer, &model, &inputs, truncation)
    })
    .await?;
    metrics::histogram!(names::REQUEST_TOKENS, "model" => version.name.clone())
        .record(tokens.tokens() as f64);
    Ok(tokens)
}

/// Runs `work` on this thread for texts of `bytes` in all up to [`INLINE_TOKENIZE_BYTES`],
/// on the blocking pool for longer ones.
pub(crate) async fn inline_or_blocking<T: Send + 'static>(
    bytes: usize,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    if bytes <= INLINE_TOKENIZE_BYTES {
        return work();
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ApiError::Tokenizer("the model's tokenizer failed (it panicked)".into()))?
}

/// Puts the prompt a request names (or the model's default) before each of its texts. Token
/// ids are taken as they are, so a prompt named for them is refused rather than ignored;
/// prompts are for embeddings, and pairs (a classifier's) get none.
pub(crate) fn apply_prompt(
    text: &TextModel,
    inputs: &mut [Input],
    name: Option<&str>,
) -> Result<(), ApiError> {
    let Some(prompt) = text.prompts.text(name).map_err(ApiError::invalid)? else {
        return Ok(());
    };
    if name.is_some() && inputs.iter().any(|i| matches!(i, Input::Ids(_))) {
        return Err(ApiError::invalid(
            "prompt_name applies to texts; token ids are taken as they are, so put the \
             prompt's ids in them",
        ));
    }
    for input in inputs {
        if let Input::Text(t) = input {
            t.insert_str(0, prompt);
        }
    }
    Ok(())
}

pub(crate) fn text_bytes(input: &Input) -> usize {
    match input {
        Input::Text(t) => t.len(),
        Input::Pair(a, b) => a.len() + b.len(),
        Input::Ids(_) => 0,
    }
}

/// Every input tokenized (a text) or checked (ids), packed in order.
pub(crate) fn encode_all(
    tokenizer: &TextTokenizer,
    model: &TextInput,
    inputs: &[Input],
    truncation: Truncation,
) -> Result<PackedTokens, ApiError> {
    let mut packed = PackedTokens::with_capacity(inputs.len(), inputs.len() * 16);
    // The first text of the pairs last seen, tokenized once for all the pairs sharing it.
    let mut first: Option<(&std::sync::Arc<str>, models::encoder::PairPart)> = None;
    for (i, input) in inputs.iter().enumerate() {
        match input {
            Input::Text(text) => {
                packed.push(&encoded(i, tokenizer.encode(text, truncation))?);
            }
            Input::Pair(a, b) => {
                let part = match first.take() {
                    Some((shared, part)) if std::sync::Arc::ptr_eq(shared, a) => part,
                    _ => tokenizer
                        .pair_part(a, truncation)
                        .map_err(|e| tokenizer_failed(i, e))?,
                };
                let second = tokenizer
                    .pair_part(b, truncation)
                    .map_err(|e| tokenizer_failed(i, e))?;
                packed.push(&encoded(i, tokenizer.encode_parts(&part, &second))?);
                first = Some((a, part));
            }
            Input::Ids(ids) => {
                let ids = checked_ids(tokenizer, model, i, ids, truncation)?;
                packed.push_ids(&ids, &vec![0; ids.len()]);
            }
        }
    }
    Ok(packed)
}

/// Input `i` as the tokenizer gave it, or why not as a client's error.
fn encoded(
    i: usize,
    result: Result<models::encoder::Encoded, EncodeError>,
) -> Result<models::encoder::Encoded, ApiError> {
    match result {
        // A tokenizer with no special tokens of its own gives none for blank text.
        Ok(encoded) if encoded.is_empty() => {
            Err(ApiError::empty(format!("text {i} gives no tokens")))
        }
        Ok(encoded) => Ok(encoded),
        Err(EncodeError::TooLong {
            tokens,
            max,
            counted_all,
        }) => {
            let more = if counted_all { "" } else { "more than " };
            Err(ApiError::too_large(format!(
                "text {i} has {more}{tokens} tokens, at most {max} fit; send it shorter \
                 or with truncate on"
            )))
        }
        Err(e @ EncodeError::Tokenizer(_)) => Err(tokenizer_failed(i, e)),
    }
}

/// A tokenizer's failure on input `i`: a fault of the model's folder, not of the text.
fn tokenizer_failed(i: usize, e: EncodeError) -> ApiError {
    let why = match e {
        EncodeError::Tokenizer(why) => why,
        other => other.to_string(),
    };
    ApiError::Tokenizer(format!("the model's tokenizer failed on text {i}: {why}"))
}

/// Token ids as the model runs them. They must be what the model's tokenizer gives, special
/// tokens included (`[CLS] ... [SEP]` for BERT): ids made by another tokenizer (a client
/// that counts with OpenAI's tiktoken, say) would embed as meaningless text, and their
/// ends tell them apart. Each id is below the vocabulary's size; past `max_seq_len` they are
/// cut as the tokenizer cuts a text ([`cut_ids`]), or refused.
fn checked_ids(
    tokenizer: &TextTokenizer,
    model: &TextInput,
    i: usize,
    ids: &TokenIds,
    truncation: Truncation,
) -> Result<Vec<u32>, ApiError> {
    // Past MAX_IDS the ids were only counted, so no longer model takes more.
    let max = model.max_seq_len.min(MAX_IDS);
    if ids.count == 0 {
        return Err(ApiError::empty(format!("input {i} holds no token ids")));
    }
    let (prefix, suffix) = tokenizer.special_ends();
    if !ids.ids.starts_with(prefix)
        || !ids.ends_with(suffix)
        || ids.count < prefix.len() + suffix.len()
    {
        return Err(ApiError::invalid(format!(
            "input {i}: token ids must be the model's own, as its tokenizer gives them: \
             starting with {prefix:?} and ending with {suffix:?} (its special tokens); \
             ids from another tokenizer embed as meaningless text, so send such texts as text"
        )));
    }
    let kept = cut_ids(i, ids, max, truncation, (prefix, suffix))?;
    if let Some(id) = kept.iter().find(|&&id| id as usize >= model.vocab_size) {
        return Err(ApiError::invalid(format!(
            "input {i}: token id {id} is past the model's vocabulary of {}; send ids from \
             the model's own tokenizer",
            model.vocab_size
        )));
    }
    Ok(kept)
}

/// At most `max` of `ids`, cut as the tokenizer cuts a text: the end cut off and the
/// closing ids put back (`Right`), or the start cut off and the opening ids put back
/// (`Left`, which needs every id: past [`MAX_IDS`] they were only counted); or refused.
fn cut_ids(
    i: usize,
    ids: &TokenIds,
    max: usize,
    truncation: Truncation,
    (prefix, suffix): (&[u32], &[u32]),
) -> Result<Vec<u32>, ApiError> {
    if ids.count <= max {
        return Ok(ids.ids.clone());
    }
    // The tokenizer leaves room for more than its special tokens (`TextTokenizer::from_dir`).
    let kept = match truncation {
        Truncation::Refuse => {
            return Err(ApiError::too_large(format!(
                "input {i} has {} token ids, at most {max} fit; send it shorter or with \
                 truncate on",
                ids.count
            )));
        }
        Truncation::Right => [&ids.ids[..max.saturating_sub(suffix.len())], suffix].concat(),
        Truncation::Left if ids.count == ids.ids.len() => [
            prefix,
            &ids.ids[ids.count - max.saturating_sub(prefix.len())..],
        ]
        .concat(),
        Truncation::Left => {
            return Err(ApiError::too_large(format!(
                "input {i} has {} token ids, and only the first {MAX_IDS} are kept: cutting \
                 the start off needs them all, so send at most {MAX_IDS}",
                ids.count
            )));
        }
    };
    Ok(kept)
}
