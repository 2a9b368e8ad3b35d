//! TEI's `POST /similarity`: the cosine similarity of `inputs.source_sentence` with each of
//! `inputs.sentences`, from their embeddings, in the order given. `parameters` takes
//! `truncate`, `truncation_direction` and `prompt_name` as `/embed` does; `model` is
//! tandem's addition, as on TEI's other routes. `POST /` answers a body of this shape too,
//! which is where `huggingface_hub`'s `InferenceClient(model=URL).sentence_similarity`
//! posts it.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::request::truncation;
use crate::error::ApiError;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::tei_error;
use crate::http::text_handler::{Received, Served, receive, respond, served_text_version};
use crate::http::{AppState, content_coding};
use crate::infer::dimensions::Asked;
use crate::infer::input::{Input, MAX_TEXTS};
use crate::infer::text::{Task, TextRequest, run};
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::bounded::Bounded;
use crate::protocol::json_de;
use crate::protocol::text_inputs::Inputs;

/// TEI's similarity request; other fields are ignored, as TEI ignores them.
#[derive(Deserialize)]
pub(crate) struct SimilarityRequest {
    inputs: Sentences,
    #[serde(default)]
    parameters: Option<Parameters>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Deserialize)]
struct Sentences {
    source_sentence: String,
    sentences: Bounded<String>,
}

#[derive(Deserialize, Default)]
struct Parameters {
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Option<String>,
    #[serde(default)]
    prompt_name: Option<String>,
}

/// Reads `body` as a similarity request, if it is one.
pub(super) fn parse(body: &[u8]) -> Result<SimilarityRequest, ApiError> {
    json_de::from_slice(body).map_err(|e| ApiError::unreadable("similarity", e))
}

/// `POST /similarity`.
pub async fn post_similarity(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let read = match receive(state, req, clock, started).await {
        Ok(received) => parse(&received.body).map(|request| (received, request)),
        Err(e) => Err(e),
    };
    answer(state, coding, read).await
}

/// Answers a similarity request already read (`POST /` reads the body to tell which
/// request it is), and counts it.
pub(super) async fn answer(
    state: &AppState,
    coding: content_coding::Coding,
    read: Result<(Received, SimilarityRequest), ApiError>,
) -> Response<Full<Bytes>> {
    let resolved = read.and_then(|(received, request)| {
        let version = served_text_version(state, request.model.as_deref())?;
        Ok((received, request, version))
    });
    let result = match resolved {
        Err(e) => Err(e),
        Ok((received, request, version)) => similarities(state, &version, received, request).await,
    };
    respond(result, coding, tei_error).await
}

async fn similarities(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: SimilarityRequest,
) -> Result<Served, ApiError> {
    let Sentences {
        source_sentence,
        sentences,
    } = request.inputs;
    if sentences.count == 0 {
        return Err(ApiError::empty("inputs.sentences holds no text"));
    }
    if sentences.count + 1 > MAX_TEXTS {
        return Err(ApiError::too_large(format!(
            "inputs holds {} texts with the source sentence; a request takes at most {MAX_TEXTS}",
            sentences.count + 1
        )));
    }
    let texts = std::iter::once(source_sentence).chain(sentences.items);
    let parameters = request.parameters.unwrap_or_default();
    let direction = parameters.truncation_direction.as_deref();
    let ask = TextRequest {
        inputs: Inputs::List(texts.map(Input::Text).collect()).checked("inputs")?,
        truncation: truncation(parameters.truncate, direction)?,
        normalize: Some(true),
        prompt_name: parameters.prompt_name,
        task: Task::Embed,
        dimensions: Asked::NONE,
    };
    let e = run(version, &received.arrival, ask, state.request_timeout()).await?;
    let mut rows = e.values.chunks_exact(e.width.max(1));
    let source = rows.next().unwrap_or_default();
    let body = json!(cosines(source, rows)).to_string().into_bytes();
    Ok(Served { body, meta: e.meta })
}

/// The cosine of `source` with each row, all unit vectors: their dot products, summed in
/// f64.
fn cosines<'a>(source: &[f32], rows: impl Iterator<Item = &'a [f32]>) -> Vec<f32> {
    rows.map(|row| {
        let dot: f64 = source
            .iter()
            .zip(row)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum();
        dot as f32
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_similarity_body_reads_and_an_embed_body_does_not() {
        let body = br#"{"inputs": {"source_sentence": "a", "sentences": ["b", "c"]},
                        "parameters": {"truncate": false, "prompt_name": null}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.inputs.sentences.items, ["b", "c"]);
        assert_eq!(r.parameters.and_then(|p| p.truncate), Some(false));
        for embed in [&br#"{"inputs": "a"}"#[..], br#"{"inputs": ["a", "b"]}"#] {
            assert!(parse(embed).is_err());
        }
    }

    #[test]
    fn cosines_of_unit_rows_are_their_dot_products() {
        let rows = [[0.6f32, 0.8], [1.0, 0.0], [-0.6, -0.8]];
        let got = cosines(&rows[0], rows.iter().map(|r| &r[..]));
        assert_eq!(got, [1.0, 0.6, -1.0]);
    }
}
