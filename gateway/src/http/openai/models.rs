//! OpenAI's `GET /v1/models` and `GET /v1/models/{model}`: the models `/v1/embeddings`
//! serves (the text encoders), each as OpenAI's model object, so that clients and tools that
//! discover models through the `openai` client's `models.list()` find them. Errors on these
//! routes are OpenAI's error object, as on every `/v1` path.

use std::time::UNIX_EPOCH;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::http::AppState;
use crate::http::errors::json_response;
use crate::lifecycle::registry::{LookupError, ModelVersion};

/// `GET /v1/models`: every text encoder loaded, by name.
pub fn list(state: &AppState) -> Response<Full<Bytes>> {
    let data: Vec<Value> = state
        .registry
        .model_names()
        .iter()
        .filter_map(|m| state.registry.resolve(m, None).ok())
        .filter(|v| v.text.is_some())
        .map(|v| model_object(&v))
        .collect();
    let body = json!({"object": "list", "data": data});
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

/// `GET /v1/models/{model}`: a 404 for a model that is not loaded, and for one that takes
/// rows of numbers (v2 serves it; `/v1/embeddings` does not).
pub fn retrieve(state: &AppState, model: &str) -> Result<Response<Full<Bytes>>, ApiError> {
    let version = state.registry.resolve(model, None)?;
    if version.text.is_none() {
        let model = model.to_string();
        return Err(LookupError::UnknownModel { model }.into());
    }
    let body = model_object(&version).to_string().into_bytes();
    Ok(json_response(StatusCode::OK, body))
}

/// OpenAI's model object; `created` is when its newest version became ready.
fn model_object(version: &ModelVersion) -> Value {
    let created = version
        .loaded_at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({"id": version.name, "object": "model", "created": created, "owned_by": "tandem"})
}
