//! `POST /v2/models/{m}[/versions/{v}]/infer`: read the head, read the body, admit before
//! parsing, decode, validate, submit, encode. Each step is a function below; admission,
//! submission and the wait belong to the version's inference core ([`crate::infer`]).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::batching::Completed;
use crate::error::ApiError;
use crate::http::AppState;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::error_response;
use crate::http::head::{BINARY_HEADER, CACHE_HEADER, Head, arrival_of, read_head};
use crate::http::{body, content_coding};
use crate::infer::validated::{self, Served};
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::response::{self, EncodedResponse, ResponseFields};
use crate::protocol::{InferRequest, binary, json_de, tensor_response};
use crate::validate::{ValidRequest, validate};

/// Answers one infer request (the router counts it, [`crate::http::count`]).
pub async fn infer(
    state: &AppState,
    model: &str,
    version: Option<String>,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    match state.registry.resolve(model, version.as_deref()) {
        Ok(v) => {
            crate::http::count::serving(&v);
            let response = infer_on(state, &v, req, clock, started).await;
            response.unwrap_or_else(|e| error_response(&e))
        }
        Err(e) => error_response(&e.into()),
    }
}

async fn infer_on(
    state: &AppState,
    version: &ModelVersion,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    started: Instant,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let head = read_head(req.headers())?;
    let config = state.config();
    let limit = config.limits.max_body_bytes;
    let body = body::read_body(req.into_body(), limit, config.limits.body_read_timeout()).await?;
    let arrival = arrival_of(started, clock, &head);
    // Before any decompression or parsing (validated::admit).
    let admitted = validated::admit(version, &arrival)?;
    let body = content_coding::decode(body, head.coding, limit).await?;
    let valid = decode(&body, &head, version)?;
    drop(body);
    let wait = config.limits.request_timeout();
    let served = validated::serve(version, valid, arrival, admitted, wait).await?;
    let Served {
        id, outputs, ran, ..
    } = &served;
    let encoded = match &version.info.input {
        models::InputKind::Tensors(_) => {
            encode_tensors(version, id.as_deref(), outputs, &ran.completed)?
        }
        _ => encode(version, id.as_deref(), outputs, ran.rows, &ran.completed)?,
    };
    let mut response = respond(encoded, head.answer_coding).await;
    if let Some(outcome) = served.record(version) {
        let value = http::HeaderValue::from_static(outcome.as_str());
        response.headers_mut().insert(CACHE_HEADER, value);
    }
    Ok(response)
}

/// The JSON header (and binary section) into a request the model can run.
fn decode(body: &[u8], head: &Head, version: &ModelVersion) -> Result<ValidRequest, ApiError> {
    let (json_part, binary_part) = match head.binary_header_len {
        Some(n) => binary::split(body, n)?,
        None => (body, &[][..]),
    };
    let request: InferRequest = json_de::from_slice(json_part)
        .map_err(|e| ApiError::malformed(format!("invalid inference request JSON: {e}")))?;
    let settings = version.settings();
    Ok(validate(
        request,
        binary_part,
        &version.signature(),
        &settings,
    )?)
}

fn encode(
    version: &ModelVersion,
    id: Option<&str>,
    outputs: &[response::OutputRequest],
    rows: usize,
    completed: &Completed,
) -> Result<EncodedResponse, ApiError> {
    let version_label = version.version.to_string();
    let fields = ResponseFields {
        model_name: &version.name,
        model_version: &version_label,
        id,
        rows,
        width: version.info.output_width,
    };
    Ok(response::encode(&fields, outputs, &completed.output)?)
}

fn encode_tensors(
    version: &ModelVersion,
    id: Option<&str>,
    outputs: &[response::OutputRequest],
    completed: &Completed,
) -> Result<EncodedResponse, ApiError> {
    let version_label = version.version.to_string();
    let who = tensor_response::Identity {
        model_name: &version.name,
        model_version: &version_label,
        id,
    };
    Ok(tensor_response::encode(&who, outputs, &completed.tensors)?)
}

/// The response, compressed when the client asked for it and it is worth it. The binary
/// header's length counts the uncompressed body, as Triton's does.
async fn respond(
    encoded: EncodedResponse,
    coding: content_coding::Coding,
) -> Response<Full<Bytes>> {
    let content_type = match encoded.header_len {
        Some(_) => "application/octet-stream",
        None => "application/json",
    };
    let mut resp = content_coding::respond(encoded.body, content_type, coding).await;
    if let Some(n) = encoded.header_len {
        resp.headers_mut().insert(BINARY_HEADER, n.into());
    }
    resp
}
