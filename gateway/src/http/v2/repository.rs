//! Triton's model repository extension over HTTP:
//!
//! - `POST /v2/repository/index` (body `{}`, `{"ready": true}` or empty): every version the
//!   repository holds, `READY` or `UNAVAILABLE` with the reason;
//! - `POST /v2/repository/models/{m}/unload`: the model stops serving (requests already
//!   queued are answered) and stays out of service, new versions included, until loaded;
//! - `POST /v2/repository/models/{m}/load`: the model is let back in and the repository
//!   scanned at once; the answer comes when its versions are loaded and warmed up.
//!
//! Load and unload change what is served, so they answer whom the admin API answers
//! (loopback, or the bearer token). The model's files and `config.toml` stay the source of
//! truth: a load that carries a configuration or files of its own is refused.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;

use crate::error::ApiError;
use crate::http::AppState;
use crate::http::errors::json_response;
use crate::lifecycle::registry::LookupError;
use crate::lifecycle::repository_control::{IndexEntry, RepositoryControl, VersionState};

#[derive(Debug, Default, Deserialize)]
struct IndexRequest {
    #[serde(default)]
    ready: bool,
}

/// What `load` and `unload` may carry: Triton's `parameters`.
#[derive(Debug, Default, Deserialize)]
struct ChangeRequest {
    #[serde(default)]
    parameters: serde_json::Map<String, serde_json::Value>,
}

pub async fn index(
    state: &AppState,
    req: Request<Limited<Incoming>>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let body = crate::http::body::read_admin_body(state, req).await?;
    let request: IndexRequest = parse_optional(&body, "repository index request")?;
    let body = serde_json::to_vec(&index_entries(state, request.ready))
        .map_err(|e| ApiError::Internal(format!("cannot encode the index: {e}")))?;
    Ok(json_response(StatusCode::OK, body))
}

/// Every version the repository holds (only the ready ones, with `ready`), and the models
/// given as single files, by name and version.
pub fn index_entries(state: &AppState, ready: bool) -> Vec<IndexEntry> {
    let mut entries = state
        .repository
        .as_ref()
        .map(|c| c.index())
        .unwrap_or_default();
    // Models given as single files (`--model NAME=PATH`) are in no repository folder.
    for name in state.registry.model_names() {
        if !entries.iter().any(|e| e.name == name) {
            for v in state.registry.versions(&name) {
                entries.push(IndexEntry {
                    name: name.clone(),
                    version: v,
                    state: VersionState::Ready,
                    reason: String::new(),
                });
            }
        }
    }
    entries.sort_by(|a, b| (&a.name, a.version).cmp(&(&b.name, b.version)));
    if ready {
        entries.retain(|e| e.state == VersionState::Ready);
    }
    entries
}

pub async fn unload(
    state: &AppState,
    model: &str,
    req: Request<Limited<Incoming>>,
    peer: std::net::SocketAddr,
) -> Result<Response<Full<Bytes>>, ApiError> {
    // `unload_dependents` names ensembles, which tandem does not have: read, then moot.
    let _ = read_change(state, req, peer, "unload request").await?;
    unload_model(state, model).await?;
    Ok(json_response(StatusCode::OK, b"{}".to_vec()))
}

/// Takes `model` out of service until it is loaded again (the caller is authorized).
pub async fn unload_model(state: &AppState, model: &str) -> Result<(), ApiError> {
    let control = repository_for(state, model)?;
    let known = !state.registry.versions(model).is_empty()
        || control.index().iter().any(|e| e.name == model);
    if !known {
        return Err(LookupError::UnknownModel {
            model: model.to_string(),
        }
        .into());
    }
    control.hold(model);
    control.pass_now().await?;
    tracing::info!(model, "model unloaded through the repository API");
    Ok(())
}

pub async fn load(
    state: &AppState,
    model: &str,
    req: Request<Limited<Incoming>>,
    peer: std::net::SocketAddr,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let request = read_change(state, req, peer, "load request").await?;
    let parameters = request.parameters.keys().map(String::as_str);
    load_model(state, model, parameters).await?;
    Ok(json_response(StatusCode::OK, b"{}".to_vec()))
}

/// Lets `model` back in and loads its versions (the caller is authorized); `parameters`
/// are the names of the load's parameters, none of which tandem takes.
pub async fn load_model<'a>(
    state: &AppState,
    model: &str,
    mut parameters: impl Iterator<Item = &'a str>,
) -> Result<(), ApiError> {
    if let Some(key) = parameters.next() {
        return Err(ApiError::invalid(format!(
            "load parameter {key:?} is not supported: a model loads from its repository folder \
             (weights in <version>/model.safetensors, settings in config.toml)"
        )));
    }
    let control = repository_for(state, model)?;
    control.release(model);
    control.pass_now().await?;
    let versions = state.registry.versions(model);
    if !versions.is_empty() {
        tracing::info!(model, ?versions, "model loaded through the repository API");
        return Ok(());
    }
    let reasons: Vec<String> = control
        .index()
        .into_iter()
        .filter(|e| e.name == model)
        .map(|e| format!("version {}: {}", e.version, e.reason))
        .collect();
    if reasons.is_empty() {
        return Err(LookupError::UnknownModel {
            model: model.to_string(),
        }
        .into());
    }
    Err(ApiError::invalid(format!(
        "model {model:?} has no version that loads ({})",
        reasons.join("; ")
    )))
}

/// A load or unload from a client the admin API would answer.
async fn read_change(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    peer: std::net::SocketAddr,
    what: &str,
) -> Result<ChangeRequest, ApiError> {
    crate::http::auth::authorize_admin(state, req.headers(), peer)?;
    let body = crate::http::body::read_admin_body(state, req).await?;
    parse_optional(&body, what)
}

/// The repository control, if `model` is one the repository may load or unload.
fn repository_for<'a>(state: &'a AppState, model: &str) -> Result<&'a RepositoryControl, ApiError> {
    let control = state.repository.as_deref().ok_or_else(|| {
        ApiError::invalid("no model repository is configured: models are loaded at start-up only")
    })?;
    if state
        .config()
        .models
        .get(model)
        .is_some_and(|m| m.path.is_some())
    {
        return Err(ApiError::invalid(format!(
            "model {model:?} is served from a file named at start-up (--model), not from the \
             repository; it cannot be loaded or unloaded"
        )));
    }
    Ok(control)
}

/// An empty body reads as the request's defaults, as `tritonclient` sends for the index.
fn parse_optional<T: Default + serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    crate::protocol::json_de::from_slice(body)
        .map_err(|e| ApiError::malformed(format!("invalid {what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_may_be_empty_or_json() {
        let r: IndexRequest = parse_optional(b"", "x").unwrap();
        assert!(!r.ready);
        let r: IndexRequest = parse_optional(b"{\"ready\": true}", "x").unwrap();
        assert!(r.ready);
        let r: ChangeRequest =
            parse_optional(br#"{"parameters": {"unload_dependents": false}}"#, "x").unwrap();
        assert_eq!(r.parameters.len(), 1);
        let err = parse_optional::<IndexRequest>(b"{\"ready\": 1", "index").unwrap_err();
        assert!(err.to_string().contains("invalid index"), "{err}");
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
    }
}
