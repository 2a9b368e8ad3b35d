//! TEI's endpoints for a sequence classifier (`BertForSequenceClassification`), answered as
//! TEI answers them, on the same inference core as embeddings:
//! - `POST /predict` (and `POST /` for a classifier, as TEI routes it; what
//!   `huggingface_hub`'s `InferenceClient.text_classification` posts): `inputs` as a text,
//!   a pair `[a, b]`, or an array of either; every label with its score, best first;
//! - `POST /rerank`: a `query` and `texts`, each text scored as the pair `(query, text)` by
//!   a cross-encoder (a classifier with one label); `{index, score}` best first.
//!
//! Scores are as TEI gives them: the sigmoid of a single logit (as sentence-transformers'
//! `CrossEncoder` gives it too), the softmax of several; the sigmoid of each for a
//! multi-label model (`problem_type`), as transformers' pipeline does. `raw_scores: true`
//! gives the logits.

mod request;

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::inputs::{Input, MAX_TEXTS};
use super::text_common::{served_text_version, tei_error, truncation};
use super::text_request::{Answered, Ask, Outputs, Received, Served, Task, receive, run};
use super::{AppState, content_coding};
use crate::error::ApiError;
use crate::protocol::json_de;
use crate::registry::ModelVersion;
pub(crate) use request::{Bounded, Document, PredictInputs, PredictRequest, RerankRequest};
use request::{Parameters, Sequence};

/// How logits become scores.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Activation {
    Sigmoid,
    Softmax,
    None,
}

/// `POST /predict`, and `POST /` for a classifier.
pub async fn predict(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    handle(state, req, clock, answer_predict).await
}

/// `POST /rerank`.
pub async fn rerank(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    handle(state, req, clock, answer_rerank).await
}

/// Reads the body, runs `answer` on it, and answers (and counts) in TEI's shapes.
async fn handle(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    answer: impl AsyncFnOnce(&AppState, Received) -> Answer,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let (version, result) = match receive(state, req, clock, started).await {
        Err(e) => (None, Err(e)),
        Ok(received) => answer(state, received).await,
    };
    let answer = Answered {
        version,
        result,
        started,
    };
    answer.respond(coding, tei_error).await
}

type Answer = (Option<Arc<ModelVersion>>, Result<Served, ApiError>);

async fn answer_predict(state: &AppState, received: Received) -> Answer {
    let request: PredictRequest = match parse(&received.body, "predict") {
        Ok(r) => r,
        Err(e) => return (None, Err(e)),
    };
    let version = match served_text_version(state, request.model.as_deref()) {
        Ok(v) => v,
        Err(e) => return (None, Err(e)),
    };
    let result = predict_on(state, &version, received, request).await;
    (Some(version), result)
}

async fn predict_on(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: PredictRequest,
) -> Result<Served, ApiError> {
    let truncation = truncation(request.truncate, request.truncation_direction.as_deref())?;
    let activation = activation(version, request.raw_scores, &request.parameters)?;
    let one = matches!(request.inputs, PredictInputs::One(_));
    let inputs = predict_inputs(request.inputs)?;
    let out = classify(state, version, &received, inputs, truncation).await?;
    let labels = &super::text::text_model(version)?.input.labels;
    let top_k = request.parameters.top_k.unwrap_or(labels.len());
    let answers: Vec<serde_json::Value> = out
        .values
        .chunks_exact(out.width.max(1))
        .map(|logits| {
            let mut scored: Vec<(f32, &String)> =
                scores(logits, activation).into_iter().zip(labels).collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            scored.truncate(top_k);
            json!(
                scored
                    .iter()
                    .map(|(score, label)| json!({"score": score, "label": label}))
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    let body = if one {
        answers[0].clone()
    } else {
        json!(answers)
    };
    Ok(Served {
        body: body.to_string().into_bytes(),
        meta: out.meta,
    })
}

async fn answer_rerank(state: &AppState, received: Received) -> Answer {
    let request: RerankRequest = match parse(&received.body, "rerank") {
        Ok(r) => r,
        Err(e) => return (None, Err(e)),
    };
    let version = match served_text_version(state, request.model.as_deref()) {
        Ok(v) => v,
        Err(e) => return (None, Err(e)),
    };
    let result = rerank_on(state, &version, received, request).await;
    (Some(version), result)
}

async fn rerank_on(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: RerankRequest,
) -> Result<Served, ApiError> {
    let truncation = truncation(request.truncate, request.truncation_direction.as_deref())?;
    require_one_label(version)?;
    let inputs = rerank_inputs(&request)?;
    let out = classify(state, version, &received, inputs, truncation).await?;
    let activation = match request.raw_scores {
        true => Activation::None,
        false => Activation::Sigmoid,
    };
    let answer: Vec<serde_json::Value> = rerank_scores(&out.values, activation)
        .into_iter()
        .map(|(index, score)| match request.return_text {
            true => json!({"index": index, "score": score, "text": request.texts.items[index]}),
            false => json!({"index": index, "score": score}),
        })
        .collect();
    Ok(Served {
        body: json!(answer).to_string().into_bytes(),
        meta: out.meta,
    })
}

/// Refuses a classifier of several labels: reranking takes one score per pair. (A model
/// of embeddings is refused where it runs: `Task::Classify`.)
pub(super) fn require_one_label(version: &ModelVersion) -> Result<(), ApiError> {
    let labels = super::text::text_model(version)?.input.labels.len();
    if labels > 1 {
        return Err(ApiError::invalid(format!(
            "model {:?} has {labels} labels; reranking takes a cross-encoder, a classifier \
             with one score (use /predict for its labels)",
            version.name
        )));
    }
    Ok(())
}

/// `(index, score)` of each pair from its one logit, best first (ties in the order given).
pub(super) fn rerank_scores(logits: &[f32], activation: Activation) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(usize, f32)> = logits
        .iter()
        .map(|&logit| scores(&[logit], activation)[0])
        .enumerate()
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
}

fn parse<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    json_de::from_slice(body).map_err(|e| ApiError::unreadable(what, e))
}

/// The texts and pairs of a predict request, in order, checked by [`checked`].
pub(crate) fn predict_inputs(inputs: PredictInputs) -> Result<Vec<Input>, ApiError> {
    let input = |sequence| match sequence {
        Sequence::Text(t) => Input::Text(t),
        Sequence::Pair(a, b) => Input::Pair(a.into(), b),
    };
    let inputs = match inputs {
        PredictInputs::One(s) => vec![input(s)],
        PredictInputs::Many(list) => list.into_iter().map(input).collect(),
        PredictInputs::TooMany(n) => return Err(too_many(n)),
        PredictInputs::Invalid => {
            return Err(ApiError::invalid(
                "inputs must be a text, a pair of texts [a, b], or an array of texts and pairs",
            ));
        }
    };
    checked(inputs)
}

/// The pairs `(query, text)` a rerank request scores, in the order of its texts, checked
/// by [`checked`].
pub(crate) fn rerank_inputs(request: &RerankRequest) -> Result<Vec<Input>, ApiError> {
    let texts = &request.texts;
    pairs(&request.query, texts.items.iter().cloned(), texts.count)
}

/// The pairs of `query` and each of `texts` (`count` of them sent, of which these were
/// kept), checked by [`checked`]. They share one copy of the query.
pub(super) fn pairs(
    query: &str,
    texts: impl Iterator<Item = String>,
    count: usize,
) -> Result<Vec<Input>, ApiError> {
    if count > MAX_TEXTS {
        return Err(too_many(count));
    }
    let query: Arc<str> = query.into();
    checked(texts.map(|t| Input::Pair(query.clone(), t)).collect())
}

fn too_many(n: usize) -> ApiError {
    let refusal = match n {
        0 => ApiError::empty,
        _ => ApiError::too_large,
    };
    refusal(format!(
        "a request scores 1 to {MAX_TEXTS} texts or pairs, this one {n}"
    ))
}

/// Admits, tokenizes and runs `inputs` on the classifier `version`: their logits.
pub(super) async fn classify(
    state: &AppState,
    version: &ModelVersion,
    received: &Received,
    inputs: Vec<Input>,
    truncation: Truncation,
) -> Result<Outputs, ApiError> {
    let ask = Ask {
        inputs,
        truncation,
        normalize: Some(false),
        prompt_name: None,
        task: Task::Classify,
        dimensions: super::matryoshka::Asked::NONE,
    };
    run(state, version, &received.arrival, ask).await
}

/// `inputs` if there are 1 to [`MAX_TEXTS`] of them and none is empty (a pair is empty
/// when both its texts are, as TEI has it: one empty document must not fail a rerank).
fn checked(inputs: Vec<Input>) -> Result<Vec<Input>, ApiError> {
    if inputs.is_empty() || inputs.len() > MAX_TEXTS {
        return Err(too_many(inputs.len()));
    }
    let empty = |input: &Input| match input {
        Input::Text(t) => t.is_empty(),
        Input::Pair(a, b) => a.is_empty() && b.is_empty(),
        Input::Ids(_) => false,
    };
    match inputs.iter().position(empty) {
        Some(i) => Err(ApiError::empty(format!("input {i} holds an empty text"))),
        None => Ok(inputs),
    }
}

/// The activation a request asks for: logits with `raw_scores` or `function_to_apply:
/// "none"`, else the one `function_to_apply` names, else the model's (sigmoid for one
/// label or a multi-label model, softmax otherwise).
fn activation(
    version: &ModelVersion,
    raw_scores: bool,
    parameters: &Parameters,
) -> Result<Activation, ApiError> {
    let input = &super::text::text_model(version)?.input;
    let default = match input.labels.len() == 1 || input.multi_label {
        true => Activation::Sigmoid,
        false => Activation::Softmax,
    };
    if raw_scores {
        return Ok(Activation::None);
    }
    match parameters.function_to_apply.as_deref() {
        None => Ok(default),
        Some("sigmoid") => Ok(Activation::Sigmoid),
        Some("softmax") => Ok(Activation::Softmax),
        Some("none") => Ok(Activation::None),
        Some(other) => Err(ApiError::invalid(format!(
            "parameters.function_to_apply {other:?}: expected \"sigmoid\", \"softmax\" or \
             \"none\""
        ))),
    }
}

/// One sequence's scores from its logits.
fn scores(logits: &[f32], activation: Activation) -> Vec<f32> {
    match activation {
        Activation::None => logits.to_vec(),
        Activation::Sigmoid => logits.iter().map(|&x| sigmoid(x)).collect(),
        Activation::Softmax => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exp: Vec<f64> = logits.iter().map(|&x| ((x - max) as f64).exp()).collect();
            let sum: f64 = exp.iter().sum();
            exp.iter().map(|e| (e / sum) as f32).collect()
        }
    }
}

fn sigmoid(x: f32) -> f32 {
    (1.0 / (1.0 + (-(x as f64)).exp())) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_sigmoid_softmax_or_the_logits() {
        assert_eq!(scores(&[0.0], Activation::Sigmoid), vec![0.5]);
        let s = scores(&[1.0, 1.0, 1.0 + 2f32.ln()], Activation::Softmax);
        let want = [0.25, 0.25, 0.5];
        assert!(
            s.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{s:?}"
        );
        // Large logits neither overflow nor lose the order.
        let s = scores(&[1000.0, 999.0], Activation::Softmax);
        assert!(s[0] > s[1] && s.iter().all(|v| v.is_finite()), "{s:?}");
        assert_eq!(scores(&[-3.5, 2.0], Activation::None), vec![-3.5, 2.0]);
    }
}
