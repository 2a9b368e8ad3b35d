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

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use serde_json::json;
use tokio::time::Instant;

use super::request::{
    Parameters, PredictInputs, PredictRequest, RerankRequest, Sequence, truncation,
};
use crate::error::ApiError;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::tei_error;
use crate::http::text_handler::{Received, Served, read_named, respond};
use crate::http::{AppState, content_coding};
use crate::infer::input::Input;
use crate::infer::scores::{self, Activation, checked, labelled, pairs, require_one_label};
use crate::infer::text::{TextAnswer, classify};
use crate::infer::tokenize::text_model;
use crate::lifecycle::registry::ModelVersion;

/// `POST /predict`, and `POST /` for a classifier.
pub async fn predict(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let result = match read_named(state, req, clock, "predict", started).await {
        Err(e) => Err(e),
        Ok(read) => predict_on(state, &read.version, read.received, read.request).await,
    };
    respond(result, coding, tei_error).await
}

/// `POST /rerank`.
pub async fn rerank(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let result = match read_named(state, req, clock, "rerank", started).await {
        Err(e) => Err(e),
        Ok(read) => rerank_on(state, &read.version, read.received, read.request).await,
    };
    respond(result, coding, tei_error).await
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
    let out = run(state, version, &received, inputs, truncation).await?;
    let labels = &text_model(version)?.input.labels;
    let top_k = request.parameters.top_k.unwrap_or(labels.len());
    let answers: Vec<serde_json::Value> = out
        .values
        .chunks_exact(out.width.max(1))
        .map(|logits| {
            json!(
                labelled(logits, activation, labels, top_k)
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

async fn rerank_on(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: RerankRequest,
) -> Result<Served, ApiError> {
    let truncation = truncation(request.truncate, request.truncation_direction.as_deref())?;
    require_one_label(version)?;
    let inputs = rerank_inputs(&request)?;
    let out = run(state, version, &received, inputs, truncation).await?;
    let activation = match request.raw_scores {
        true => Activation::None,
        false => Activation::Sigmoid,
    };
    let answer: Vec<serde_json::Value> = scores::rerank_scores(&out.values, activation)
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

/// The texts and pairs of a predict request, in order, checked by [`checked`].
pub(crate) fn predict_inputs(inputs: PredictInputs) -> Result<Vec<Input>, ApiError> {
    let input = |sequence| match sequence {
        Sequence::Text(t) => Input::Text(t),
        Sequence::Pair(a, b) => Input::Pair(a.into(), b),
    };
    let inputs = match inputs {
        PredictInputs::One(s) => vec![input(s)],
        PredictInputs::Many(list) => list.into_iter().map(input).collect(),
        PredictInputs::TooMany(n) => return Err(scores::too_many(n)),
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

/// Runs `inputs` on the classifier `version`: their logits.
async fn run(
    state: &AppState,
    version: &ModelVersion,
    received: &Received,
    inputs: Vec<Input>,
    truncation: Truncation,
) -> Result<TextAnswer, ApiError> {
    classify(
        version,
        &received.arrival,
        inputs,
        truncation,
        state.request_timeout(),
    )
    .await
}

/// The activation a request asks for: logits with `raw_scores` or `function_to_apply:
/// "none"`, else the one `function_to_apply` names, else the model's (sigmoid for one
/// label or a multi-label model, softmax otherwise).
fn activation(
    version: &ModelVersion,
    raw_scores: bool,
    parameters: &Parameters,
) -> Result<Activation, ApiError> {
    let default = Activation::of(&text_model(version)?.input);
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
