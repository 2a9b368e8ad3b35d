//! TEI's `POST /tokenize` and `POST /decode`, answered as TEI does: a text model's tokens
//! for texts, each with its bytes of the text, and texts for token ids. With them a client
//! that sends token ids needs no tokenizer of its own. Both serve the text model `/embed`
//! serves (or the one a `model` field names), and neither runs the model.
//!
//! Bounded as the embedding routes are: the body's size, [`MAX_TEXTS`] inputs, and at most
//! [`TOKEN_COUNT_LIMIT`] tokens in all, in the answer or among the ids.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::encoder::{EncodeError, TOKEN_COUNT_LIMIT, TextTokenizer, Token};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::error::ApiError;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::tei_error;
use crate::http::text_handler::{receive, served_text_version};
use crate::http::{AppState, content_coding};
use crate::infer::input::{Input, MAX_TEXTS, TokenIds};
use crate::infer::tokenize;
use crate::protocol::json_de;
use crate::protocol::text_inputs::Inputs;

fn yes() -> bool {
    true
}

/// TEI's tokenize request (texts only), with tandem's `model`; other fields are ignored,
/// as TEI ignores them.
#[derive(Deserialize)]
pub(crate) struct TokenizeRequest {
    inputs: Inputs,
    #[serde(default = "yes")]
    add_special_tokens: bool,
    #[serde(default)]
    prompt_name: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

/// TEI's decode request: one array of ids or several, with tandem's `model`; other fields
/// are ignored.
#[derive(Deserialize)]
pub(crate) struct DecodeRequest {
    ids: Inputs,
    #[serde(default = "yes")]
    skip_special_tokens: bool,
    #[serde(default)]
    model: Option<String>,
}

/// `POST /tokenize`: for each text, its tokens.
pub async fn tokenize(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let coding = content_coding::accepted(req.headers());
    respond(answer_tokenize(state, req, clock).await, coding).await
}

/// `POST /decode`: for each array of ids, its text.
pub async fn decode(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let coding = content_coding::accepted(req.headers());
    respond(answer_decode(state, req, clock).await, coding).await
}

/// The answer in the coding the client accepts, or the error in TEI's shape.
async fn respond(
    result: Result<Vec<u8>, ApiError>,
    coding: content_coding::Coding,
) -> Response<Full<Bytes>> {
    match result {
        Ok(body) => content_coding::respond(body, "application/json", coding).await,
        Err(e) => tei_error(&e),
    }
}

async fn answer_tokenize(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Result<Vec<u8>, ApiError> {
    let body = receive(state, req, clock, Instant::now()).await?.body;
    let request: TokenizeRequest =
        json_de::from_slice(&body).map_err(|e| ApiError::unreadable("tokenize", e))?;
    let version = served_text_version(state, request.model.as_deref())?;
    let model = tokenize::text_model(&version)?;
    let mut inputs = texts_only(request.inputs)?;
    tokenize::apply_prompt(model, &mut inputs, request.prompt_name.as_deref())?;
    let bytes = inputs.iter().map(tokenize::text_bytes).sum();
    let tokenizer = model.tokenizer.clone();
    let special = request.add_special_tokens;
    let answer = move || every_token(&tokenizer, &inputs, special);
    tokenize::inline_or_blocking(bytes, answer).await
}

/// The inputs, which must be texts (an empty one is only its special tokens): at least one,
/// at most [`MAX_TEXTS`].
fn texts_only(inputs: Inputs) -> Result<Vec<Input>, ApiError> {
    match inputs {
        Inputs::List(list)
            if list.iter().all(|i| matches!(i, Input::Text(_))) && !list.is_empty() =>
        {
            Ok(list)
        }
        Inputs::List(list) if list.is_empty() => Err(ApiError::empty("inputs holds no text")),
        Inputs::TooMany(n) => Err(ApiError::too_large(format!(
            "inputs holds {n} texts; a request takes at most {MAX_TEXTS}"
        ))),
        _ => Err(ApiError::invalid(
            "inputs must be a string or an array of strings, at least one: token ids are what \
             /tokenize gives",
        )),
    }
}

/// The tokens of every text, as TEI's JSON, at most [`TOKEN_COUNT_LIMIT`] in all.
fn every_token(
    tokenizer: &TextTokenizer,
    inputs: &[Input],
    special: bool,
) -> Result<Vec<u8>, ApiError> {
    let mut answer = Vec::with_capacity(inputs.len());
    let mut count = 0;
    for (i, input) in inputs.iter().enumerate() {
        let Input::Text(text) = input else { continue };
        let tokens = tokenizer
            .tokens(text, special)
            .map_err(|e| refused("text", i, e))?;
        count += tokens.len();
        if count > TOKEN_COUNT_LIMIT {
            return Err(ApiError::too_large(format!(
                "the texts have more than {TOKEN_COUNT_LIMIT} tokens in all; /tokenize \
                 answers at most that many"
            )));
        }
        answer.push(Value::Array(tokens.iter().map(token_json).collect()));
    }
    Ok(Value::Array(answer).to_string().into_bytes())
}

fn token_json(t: &Token) -> Value {
    json!({"id": t.id, "text": t.text, "special": t.special, "start": t.start, "stop": t.stop})
}

/// A refusal of input `i` (`what`: a text or ids): too long, or a fault of the tokenizer.
fn refused(what: &str, i: usize, e: EncodeError) -> ApiError {
    match e {
        EncodeError::TooLong { max, .. } => ApiError::too_large(format!(
            "{what} {i} has more than {max} tokens; /tokenize answers at most that many"
        )),
        EncodeError::Tokenizer(why) => {
            ApiError::Tokenizer(format!("the model's tokenizer failed on {what} {i}: {why}"))
        }
    }
}

async fn answer_decode(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Result<Vec<u8>, ApiError> {
    let body = receive(state, req, clock, Instant::now()).await?.body;
    let request: DecodeRequest =
        json_de::from_slice(&body).map_err(|e| ApiError::unreadable("decode", e))?;
    let version = served_text_version(state, request.model.as_deref())?;
    let model = tokenize::text_model(&version)?;
    let sequences = ids_only(request.ids, model.input.vocab_size)?;
    let (tokenizer, skip) = (model.tokenizer.clone(), request.skip_special_tokens);
    let bytes = sequences.iter().map(|ids| 4 * ids.ids.len()).sum();
    tokenize::inline_or_blocking(bytes, move || every_text(&tokenizer, &sequences, skip)).await
}

/// The text of every array of ids, as TEI's JSON.
fn every_text(
    tokenizer: &TextTokenizer,
    sequences: &[TokenIds],
    skip_special_tokens: bool,
) -> Result<Vec<u8>, ApiError> {
    let mut texts = Vec::with_capacity(sequences.len());
    for (i, ids) in sequences.iter().enumerate() {
        let text = tokenizer
            .decode(&ids.ids, skip_special_tokens)
            .map_err(|e| refused("ids", i, e))?;
        texts.push(text);
    }
    Ok(json!(texts).to_string().into_bytes())
}

/// The ids, which must be arrays of token ids below `vocab_size`, at most
/// [`TOKEN_COUNT_LIMIT`] in all.
fn ids_only(ids: Inputs, vocab_size: usize) -> Result<Vec<TokenIds>, ApiError> {
    let not_ids = || {
        ApiError::invalid(
            "ids must be an array of token ids or an array of such arrays (integers from 0)",
        )
    };
    let list = match ids {
        Inputs::List(list) if list.is_empty() => {
            return Err(ApiError::empty("ids holds no token ids"));
        }
        Inputs::List(list) => list,
        Inputs::TooMany(n) => {
            return Err(ApiError::too_large(format!(
                "ids holds {n} arrays; a request takes at most {MAX_TEXTS}"
            )));
        }
        _ => return Err(not_ids()),
    };
    let mut sequences = Vec::with_capacity(list.len());
    let mut count = 0;
    for (i, input) in list.into_iter().enumerate() {
        let Input::Ids(ids) = input else {
            return Err(not_ids());
        };
        count += ids.count;
        if count > TOKEN_COUNT_LIMIT {
            return Err(ApiError::too_large(format!(
                "ids holds more than {TOKEN_COUNT_LIMIT} in all; /decode takes at most that many"
            )));
        }
        if let Some(id) = ids.ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(ApiError::invalid(format!(
                "ids {i}: token id {id} is past the model's vocabulary of {vocab_size}"
            )));
        }
        sequences.push(ids);
    }
    Ok(sequences)
}
