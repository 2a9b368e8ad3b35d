//! Cohere's embed API, `POST /v1/embed` and `POST /v2/embed`, for a text encoder: what
//! Cohere's SDK (`Client.embed`, `ClientV2.embed`, and so LangChain's and LlamaIndex's
//! Cohere embeddings) posts.
//! - `texts` in; each text's embedding out, as the model's folder says to normalise it.
//! - `truncate`: `END` (the default) cuts an over-long text's end off, `START` its start,
//!   `NONE` refuses it.
//! - `input_type` picks the folder's prompt of that name, or of its short name (`query` for
//!   `search_query`; `document` or `passage` for `search_document`); where the folder has
//!   neither, its default prompt applies, as to a request that names none.
//! - `embedding_types`: `float`, `base64` (the f32s' bytes), `binary` and `ubinary` (each
//!   embedding's signs packed eight to a byte, as NumPy's `packbits` packs them).
//!   `int8` and `uint8` need calibration ranges a folder does not have, so they are refused.
//! - Version 1 without `embedding_types` answers `embeddings_floats`; otherwise
//!   `embeddings_by_type`.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::ApiVersion;
use crate::error::ApiError;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::cohere_error;
use crate::http::text_handler::{Named, Received, Served, read_named, respond};
use crate::http::{AppState, content_coding};
use crate::infer::dimensions::Asked;
use crate::infer::input::{Input, MAX_TEXTS};
use crate::infer::text::{Task, TextAnswer, TextRequest, run};
use crate::infer::tokenize::text_model;
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::base64::encode_base64;
use crate::protocol::bounded::Bounded;
use crate::protocol::text_inputs::Inputs;

#[derive(Deserialize)]
pub(crate) struct EmbedRequest {
    /// The model; without it, the one text model loaded.
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    texts: Option<Bounded<String>>,
    #[serde(default)]
    input_type: Option<String>,
    #[serde(default)]
    pub(crate) embedding_types: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) truncate: Option<String>,
    /// Version 2's per-text limit: served only where it is no tighter than the model's.
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    output_dimension: Option<u64>,
    /// Cohere's multimodal fields: refused, as only texts are embedded here.
    #[serde(default)]
    images: Option<Value>,
    #[serde(default)]
    inputs: Option<Value>,
}

/// One of the kinds of embedding a request may ask for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Float,
    Base64,
    Binary,
    Ubinary,
}

impl Kind {
    fn parse(name: &str) -> Result<Kind, ApiError> {
        Ok(match name {
            "float" => Kind::Float,
            "base64" => Kind::Base64,
            "binary" => Kind::Binary,
            "ubinary" => Kind::Ubinary,
            "int8" | "uint8" => {
                return Err(ApiError::invalid(format!(
                    "embedding_types {name:?} needs calibration ranges this model does not \
                     have; ask for float, base64, binary or ubinary"
                )));
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "embedding_types {other:?}: float, base64, binary or ubinary"
                )));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Float => "float",
            Kind::Base64 => "base64",
            Kind::Binary => "binary",
            Kind::Ubinary => "ubinary",
        }
    }

    fn encode(self, embedding: &[f32]) -> Value {
        match self {
            Kind::Float => json!(embedding),
            Kind::Base64 => json!(encode_base64(embedding)),
            Kind::Ubinary => json!(packed_signs(embedding)),
            Kind::Binary => {
                let signed: Vec<i16> = packed_signs(embedding)
                    .into_iter()
                    .map(|b| b as i16 - 128)
                    .collect();
                json!(signed)
            }
        }
    }
}

/// Each value's sign (1 where it is above zero), eight to a byte, the first value in the
/// highest bit: NumPy's `packbits`, the last byte padded with zeros.
fn packed_signs(embedding: &[f32]) -> Vec<u8> {
    embedding
        .chunks(8)
        .map(|eight| {
            (eight.iter().enumerate())
                .filter(|(_, v)| **v > 0.0)
                .fold(0u8, |byte, (i, _)| byte | (0x80 >> i))
        })
        .collect()
}

/// `POST /v1/embed` and `POST /v2/embed`.
pub async fn embed(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    api: ApiVersion,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let result = match read_named(state, req, clock, "embed", started).await {
        Err(e) => Err(e),
        Ok(read) => embed_on(state, &read.version, read.received, read.request, api).await,
    };
    respond(result, coding, cohere_error).await
}

impl Named for EmbedRequest {
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

async fn embed_on(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: EmbedRequest,
    api: ApiVersion,
) -> Result<Served, ApiError> {
    let kinds = kinds(request.embedding_types.as_deref(), api)?;
    check_limits(version, &request)?;
    let ask = TextRequest {
        inputs: texts(&request)?,
        truncation: truncation(request.truncate.as_deref())?,
        normalize: None,
        prompt_name: prompt_for(version, request.input_type.as_deref())?,
        task: Task::Embed,
        dimensions: Asked {
            field: "output_dimension",
            size: request.output_dimension,
        },
    };
    let e = run(version, &received.arrival, ask, state.request_timeout()).await?;
    let meta = e.meta;
    let texts = request.texts.map(|t| t.items).unwrap_or_default();
    let body = body(e, &texts, kinds, api).to_string().into_bytes();
    Ok(Served { body, meta })
}

/// The texts a request embeds: `texts`, 1 to [`MAX_TEXTS`] of them, none empty.
pub(crate) fn texts(request: &EmbedRequest) -> Result<Vec<Input>, ApiError> {
    let texts = (request.texts.as_ref()).ok_or_else(|| ApiError::invalid("texts is required"))?;
    let listed = match texts.count {
        n if n > MAX_TEXTS => Inputs::TooMany(n),
        _ => Inputs::List(texts.items.iter().cloned().map(Input::Text).collect()),
    };
    listed.checked("texts")
}

/// What a request asks for: `None` for version 1's plain floats.
pub(crate) fn kinds(
    names: Option<&[String]>,
    api: ApiVersion,
) -> Result<Option<Vec<Kind>>, ApiError> {
    match (names, api) {
        (None, ApiVersion::V1) => Ok(None),
        (None, ApiVersion::V2) => Ok(Some(vec![Kind::Float])),
        (Some([]), _) => Err(ApiError::invalid("embedding_types is empty")),
        (Some(names), _) => {
            let mut kinds = Vec::new();
            for name in names {
                let kind = Kind::parse(name)?;
                // Each kind once: the answer has one array per kind.
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            Ok(Some(kinds))
        }
    }
}

/// Refuses what only Cohere's own service does: images, a tighter token limit than the
/// model's. (Another embedding size is [`crate::infer::dimensions`]' to judge.)
fn check_limits(version: &ModelVersion, request: &EmbedRequest) -> Result<(), ApiError> {
    if request.images.is_some() || request.inputs.is_some() {
        return Err(ApiError::invalid(
            "this server embeds texts: send them in \"texts\"",
        ));
    }
    let model = &text_model(version)?.input;
    if let Some(n) = request.max_tokens.filter(|&n| n < model.max_seq_len) {
        return Err(ApiError::invalid(format!(
            "max_tokens {n}: the model cuts texts at its limit of {} tokens; leave it out or \
             send at least that",
            model.max_seq_len
        )));
    }
    Ok(())
}

/// Cohere's `truncate`: `END` (the default) cuts the end off, `START` the start.
pub(crate) fn truncation(truncate: Option<&str>) -> Result<Truncation, ApiError> {
    match truncate {
        None | Some("END" | "end") => Ok(Truncation::Right),
        Some("START" | "start") => Ok(Truncation::Left),
        Some("NONE" | "none") => Ok(Truncation::Refuse),
        Some(other) => Err(ApiError::invalid(format!(
            "truncate {other:?}: END cuts an over-long text's end off, START its start, NONE \
             refuses it"
        ))),
    }
}

/// The folder's prompt for `input_type`: one of that name, or of its short name. Without
/// one, the folder's default prompt applies, as to a request that names none.
fn prompt_for(
    version: &ModelVersion,
    input_type: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let names: &[&str] = match input_type {
        None => &[],
        Some("search_query") => &["search_query", "query"],
        Some("search_document") => &["search_document", "document", "passage"],
        Some("classification") => &["classification"],
        Some("clustering") => &["clustering"],
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "input_type {other:?}: this server embeds texts, as search_query, \
                 search_document, classification or clustering"
            )));
        }
    };
    let prompts = &text_model(version)?.prompts;
    let known: Vec<&str> = prompts.names().collect();
    Ok(names
        .iter()
        .find(|n| known.contains(n))
        .map(|n| n.to_string()))
}

/// Cohere's answer: `id`, the embeddings, the texts they are of, and the tokens billed.
fn body(e: TextAnswer, texts: &[String], kinds: Option<Vec<Kind>>, api: ApiVersion) -> Value {
    let rows = e.values.chunks_exact(e.width.max(1));
    let (response_type, embeddings) = match kinds {
        None => ("embeddings_floats", json!(rows.collect::<Vec<_>>())),
        Some(kinds) => {
            let by_kind: serde_json::Map<String, Value> = kinds
                .iter()
                .map(|k| {
                    let encoded: Vec<Value> = rows.clone().map(|r| k.encode(r)).collect();
                    (k.name().to_string(), Value::Array(encoded))
                })
                .collect();
            ("embeddings_by_type", Value::Object(by_kind))
        }
    };
    json!({
        "id": response_id(),
        "response_type": response_type,
        "embeddings": embeddings,
        "texts": texts,
        "meta": {"api_version": {"version": api.as_str()},
                 "billed_units": {"input_tokens": e.meta.tokens}},
    })
}

/// An id for each answer, unique within this process's life.
fn response_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{now:016x}-{:08x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_are_packed_as_numpy_packbits_packs_them() {
        let v = [0.5, -1.0, 0.0, 2.0, -0.1, 0.1, 0.0, 3.0, 1.0];
        // 1 0 0 1 0 1 0 1 | 1 (padded with zeros)
        assert_eq!(packed_signs(&v), vec![0b1001_0101, 0b1000_0000]);
        assert_eq!(Kind::Binary.encode(&v), json!([0b1001_0101 - 128, 0]));
        assert_eq!(Kind::Ubinary.encode(&v), json!([149, 128]));
    }

    #[test]
    fn cohere_truncate_names_the_side_cut_off() {
        assert_eq!(truncation(None).unwrap(), Truncation::Right);
        assert_eq!(truncation(Some("START")).unwrap(), Truncation::Left);
        assert_eq!(truncation(Some("NONE")).unwrap(), Truncation::Refuse);
        assert!(truncation(Some("MIDDLE")).is_err());
    }
}
