//! The admin API: live latency budgets per model, and the log filter.
//!
//! `GET /admin/models` and `GET /admin/models/{m}/slo` show the settings each model runs
//! with; `PUT /admin/models/{m}/slo` with any of `policy`, `p99_ms`, `max_batch_size`,
//! `max_queue_delay_us`, `queue_capacity` changes them for every loaded version (and for
//! versions loaded later): the batcher takes the new policy before its next batch. `GET/PUT
//! /admin/log` reads and replaces the process's log filter (`{"filter": "..."}`, as
//! `TANDEM_LOG`), at once and until the next change or restart. `DELETE
//! /admin/models/{m}/cache` drops every answer the response cache holds for the model's
//! loaded versions: no request after it sees them. Answers
//! loopback clients only — or, when `[admin] token` is set, any client that presents it as
//! `Authorization: Bearer <token>` (and only those).

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::errors::json_response;
use crate::config::{ModelOverrides, ModelSettings, PolicyKind};
use crate::error::ApiError;

/// What a PUT may change.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SloChange {
    policy: Option<PolicyKind>,
    p99_ms: Option<f64>,
    max_batch_size: Option<usize>,
    max_queue_delay_us: Option<u64>,
    queue_capacity: Option<usize>,
}

impl SloChange {
    pub(crate) fn overrides(&self) -> ModelOverrides {
        ModelOverrides {
            policy: self.policy,
            p99_ms: self.p99_ms,
            max_batch_size: self.max_batch_size,
            max_queue_delay_us: self.max_queue_delay_us,
            queue_capacity: self.queue_capacity,
            ..Default::default()
        }
    }
}

pub async fn handle(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    peer: std::net::SocketAddr,
    segments: &[String],
) -> Result<Response<Full<Bytes>>, ApiError> {
    super::auth::authorize_admin(state, req.headers(), peer)?;
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (req.method().clone(), segs.as_slice()) {
        (Method::GET, ["admin", "models"]) => Ok(list(state)),
        (Method::GET, ["admin", "models", m, "slo"]) => show(state, m),
        (Method::PUT, ["admin", "models", m, "slo"]) => {
            let m = m.to_string();
            let body = super::body::read_admin_body(state, req).await?;
            change(state, &m, &body)
        }
        (Method::DELETE, ["admin", "models", m, "cache"]) => clear_cache(state, m),
        (Method::GET, ["admin", "log"]) => show_log_filter(),
        (Method::PUT, ["admin", "log"]) => {
            let body = super::body::read_admin_body(state, req).await?;
            change_log_filter(&body)
        }
        (method, ["admin", "models"]) => Err(ApiError::MethodNotAllowed {
            method: method.to_string(),
            path: format!("/{}", segments.join("/")),
            allow: "GET, HEAD",
        }),
        (method, ["admin", "models", _, "cache"]) => Err(ApiError::MethodNotAllowed {
            method: method.to_string(),
            path: format!("/{}", segments.join("/")),
            allow: "DELETE",
        }),
        (method, ["admin", "models", _, "slo"] | ["admin", "log"]) => {
            Err(ApiError::MethodNotAllowed {
                method: method.to_string(),
                path: format!("/{}", segments.join("/")),
                allow: "GET, HEAD, PUT",
            })
        }
        (method, _) => Err(ApiError::NotFound {
            method: method.to_string(),
            path: format!("/{}", segments.join("/")),
        }),
    }
}

/// Drops the model's answers from the response cache, every loaded version's.
fn clear_cache(state: &AppState, model: &str) -> Result<Response<Full<Bytes>>, ApiError> {
    let versions = state.registry.versions(model);
    if versions.is_empty() {
        return Err(crate::lifecycle::registry::LookupError::UnknownModel {
            model: model.to_string(),
        }
        .into());
    }
    let mut cleared = Vec::new();
    for number in versions {
        let Ok(v) = state.registry.resolve(model, Some(&number.to_string())) else {
            continue;
        };
        if let Some(cache) = &v.cache {
            cache.clear();
            cleared.push(number.to_string());
        }
    }
    // Entries are unseen from now on; their memory is freed as the store gets to them,
    // which an idle server would not: now, off the runtime.
    if let Some(store) = state.registry.cache() {
        tokio::task::spawn_blocking(move || store.settle());
    }
    let body = json!({ "model": model, "cleared_versions": cleared });
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

/// What `PUT /admin/log` takes: tracing's filter directives, as `TANDEM_LOG` spells them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogChange {
    pub(crate) filter: String,
}

impl LogChange {
    /// The directives, if tracing's parser can take them: it slices them by byte offsets
    /// and panics inside a multi-byte character (found by fuzzing), and no target, span,
    /// field or level needs one.
    pub(crate) fn directives(&self) -> Result<&str, ApiError> {
        if self.filter.is_ascii() {
            Ok(&self.filter)
        } else {
            Err(ApiError::invalid(format!(
                "invalid log filter {:?}: directives are ASCII",
                self.filter
            )))
        }
    }
}

fn log_filter() -> Result<&'static dyn crate::log_control::LogFilter, ApiError> {
    crate::log_control::filter()
        .ok_or_else(|| ApiError::Unavailable("this process has no changeable log filter".into()))
}

fn show_log_filter() -> Result<Response<Full<Bytes>>, ApiError> {
    let body = json!({ "filter": log_filter()?.current() });
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

fn change_log_filter(body: &[u8]) -> Result<Response<Full<Bytes>>, ApiError> {
    let filter = log_filter()?;
    let change: LogChange = crate::protocol::json_de::from_slice(body)
        .map_err(|e| ApiError::malformed(format!("invalid log filter change: {e}")))?;
    let directives = change.directives()?;
    let before = filter.current();
    // Logged under the filter it replaces, which is the one that shows it.
    tracing::info!(before = %before, after = %directives, "log filter changing through the admin API");
    filter
        .set(directives)
        .map_err(|e| ApiError::invalid(format!("invalid log filter {directives:?}: {e}")))?;
    let body = json!({ "filter": filter.current() });
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

fn settings_json(model: &str, versions: &[u64], s: &ModelSettings) -> serde_json::Value {
    json!({
        "model": model,
        "versions": versions.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
        "policy": s.policy,
        "p99_ms": s.p99_ms,
        "max_batch_size": s.max_batch_size,
        "max_queue_delay_us": s.max_queue_delay_us,
        "queue_capacity": s.queue_capacity,
    })
}

fn list(state: &AppState) -> Response<Full<Bytes>> {
    let models: Vec<serde_json::Value> = state
        .registry
        .model_names()
        .iter()
        .filter_map(|m| {
            let v = state.registry.resolve(m, None).ok()?;
            Some(settings_json(m, &state.registry.versions(m), &v.settings()))
        })
        .collect();
    json_response(
        StatusCode::OK,
        json!({ "models": models }).to_string().into_bytes(),
    )
}

fn show(state: &AppState, model: &str) -> Result<Response<Full<Bytes>>, ApiError> {
    let v = state.registry.resolve(model, None)?;
    let body = settings_json(model, &state.registry.versions(model), &v.settings());
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

fn change(state: &AppState, model: &str, body: &[u8]) -> Result<Response<Full<Bytes>>, ApiError> {
    let newest = state.registry.resolve(model, None)?;
    let change: SloChange = crate::protocol::json_de::from_slice(body)
        .map_err(|e| ApiError::malformed(format!("invalid SLO change: {e}")))?;
    let overrides = change.overrides();
    let versions = state.registry.versions(model);
    let mut updates = Vec::new();
    for n in &versions {
        let v = state.registry.resolve(model, Some(&n.to_string()))?;
        let new = overrides.apply(&v.settings());
        new.validate("slo")
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        updates.push((v, new));
    }
    state.registry.set_runtime_overrides(model, &overrides);
    for (v, new) in updates {
        v.apply(new)?;
    }
    let settings = newest.settings();
    tracing::info!(
        model,
        policy = ?settings.policy,
        p99_ms = settings.p99_ms,
        max_batch_size = settings.max_batch_size,
        max_queue_delay_us = settings.max_queue_delay_us,
        queue_capacity = settings.queue_capacity,
        "SLO changed through the admin API"
    );
    let body = settings_json(model, &versions, &settings);
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}
