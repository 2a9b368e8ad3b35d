//! The v2 protocol's read-only routes: server and model metadata, readiness, Triton's model
//! configuration and statistics, and `/metrics`.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use serde_json::json;

use crate::config::PolicyKind;
use crate::error::ApiError;
use crate::http::AppState;
use crate::http::errors::json_response;
use crate::lifecycle::registry::LookupError;
use crate::metrics as names;

pub fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

pub fn metrics(state: &AppState) -> Response<Full<Bytes>> {
    let loaded: Vec<(String, u64)> = state
        .registry
        .all()
        .iter()
        .map(|v| (v.name.clone(), v.version))
        .collect();
    let mut text = state.metrics.render();
    text.push_str(&names::render_float_counters());
    text.push_str(&names::render_loaded_versions(&loaded));
    let mut r = Response::new(Full::new(Bytes::from(text)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

pub fn server_metadata() -> Response<Full<Bytes>> {
    let body = json!({
        "name": "tandem",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    });
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

/// The protocol extensions tandem speaks, as server metadata names them.
pub const EXTENSIONS: [&str; 4] = [
    "binary_tensor_data",
    "model_configuration",
    "model_repository",
    "statistics",
];

fn json_ok(body: &serde_json::Value) -> Response<Full<Bytes>> {
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

pub fn health_ready(state: &AppState) -> Result<Response<Full<Bytes>>, ApiError> {
    if state.draining.load(std::sync::atomic::Ordering::Acquire) {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    if !state.is_ready() {
        return Err(ApiError::Unavailable(
            "models are still loading and warming up".into(),
        ));
    }
    Ok(empty(StatusCode::OK))
}

pub fn model_metadata(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    metadata_json(state, model, version).map(|body| json_ok(&body))
}

/// A model's metadata in the protocol's JSON form (gRPC reads the same into its message).
pub fn metadata_json(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<serde_json::Value, ApiError> {
    let v = state.registry.resolve(model, version)?;
    let versions: Vec<String> = match version {
        Some(_) => vec![v.version.to_string()],
        None => state
            .registry
            .versions(model)
            .iter()
            .map(|v| v.to_string())
            .collect(),
    };
    let meta = &v.info.metadata;
    let body = json!({
        "name": v.name,
        "versions": versions,
        "platform": platform(&v.info.input),
        "inputs": meta.inputs,
        "outputs": meta.outputs,
    });
    Ok(body)
}

/// `GET /v2/models[/{m}[/versions/{v}]]/stats`: Triton's statistics of every loaded
/// version, of every version of one model, or of one version ([`crate::stats`]).
pub fn statistics(
    state: &AppState,
    model: Option<&str>,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    statistics_json(state, model, version).map(|body| json_ok(&body))
}

/// [`statistics`]' answer in Triton's JSON form.
pub fn statistics_json(
    state: &AppState,
    model: Option<&str>,
    version: Option<&str>,
) -> Result<serde_json::Value, ApiError> {
    let versions = match (model, version) {
        (None, _) => state.registry.all(),
        (Some(m), Some(v)) => vec![state.registry.resolve(m, Some(v))?],
        (Some(m), None) => {
            let all: Vec<_> = state
                .registry
                .all()
                .into_iter()
                .filter(|v| v.name == m)
                .collect();
            if all.is_empty() {
                return Err(LookupError::UnknownModel {
                    model: m.to_string(),
                }
                .into());
            }
            all
        }
    };
    let model_stats: Vec<serde_json::Value> = versions
        .iter()
        .map(|v| v.stats.to_json(&v.name, v.version))
        .collect();
    Ok(json!({ "model_stats": model_stats }))
}

/// `GET /v2/models/{m}[/versions/{v}]/config`: the settings a version serves with, in the
/// shape of Triton's model configuration, for `tritonclient`'s `get_model_config` and the
/// tools that read `max_batch_size` and the tensors' dims from it (dims without the batch
/// dimension, as Triton gives them when `max_batch_size` > 0). What Triton's schema has no
/// field for (the policy, the p99 budget) is under `parameters`, as Triton's string
/// parameters.
pub fn model_config(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    config_json(state, model, version).map(|body| json_ok(&body))
}

/// [`model_config`]'s answer in Triton's JSON form of `ModelConfig`.
pub fn config_json(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<serde_json::Value, ApiError> {
    let v = state.registry.resolve(model, version)?;
    let s = v.settings();
    let meta = &v.info.metadata;
    let text = |value: String| json!({ "string_value": value });
    let policy = match s.policy {
        PolicyKind::Adaptive => "adaptive",
        PolicyKind::Static => "static",
    };
    let kind = if v.info.device.starts_with("cuda") {
        "KIND_GPU"
    } else {
        "KIND_CPU"
    };
    let batched = match &v.info.input {
        models::InputKind::Tensors(signature) => signature.batched,
        _ => true,
    };
    let tensors = |specs: &[models::TensorSpec]| -> Vec<serde_json::Value> {
        specs.iter().map(|t| triton_tensor(t, batched)).collect()
    };
    let body = json!({
        "name": v.name,
        "platform": platform(&v.info.input),
        "backend": backend(&v.info.input),
        "max_batch_size": if batched { s.max_batch_size } else { 0 },
        "input": tensors(&meta.inputs),
        "output": tensors(&meta.outputs),
        "instance_group": [{"name": v.name, "kind": kind, "count": s.replicas}],
        "dynamic_batching": {
            "max_queue_delay_microseconds": s.max_queue_delay_us,
            "priority_levels": s.priority_levels,
            "default_priority_level": s.default_priority,
            "default_queue_policy": {
                "default_timeout_microseconds": s.default_timeout_us,
                "max_queue_size": s.queue_capacity,
            },
        },
        "parameters": {
            "policy": text(policy.to_string()),
            "p99_ms": text(s.p99_ms.to_string()),
            "device": text(v.info.device.clone()),
            "version": text(v.version.to_string()),
            "max_batch_tokens": text(s.max_batch_tokens.to_string()),
        },
    });
    Ok(match &v.triton {
        Some(t) => served_over_file(t.json.clone(), body),
        None => body,
    })
}

/// A config.pbtxt's fields with what the version serves with written over them, field by
/// field (tensors matched by name): the file's other fields (a reshape, warm-up requests,
/// parameters of its own) read back as it gave them.
fn served_over_file(file: serde_json::Value, served: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (file, served) {
        (Value::Object(mut given), Value::Object(ours)) => {
            for (key, value) in ours {
                let merged = match given.remove(&key) {
                    Some(old) => served_over_file(old, value),
                    None => value,
                };
                given.insert(key, merged);
            }
            Value::Object(given)
        }
        (Value::Array(given), Value::Array(ours)) => {
            let name = |v: &Value| v.get("name").cloned();
            let merged = ours
                .into_iter()
                .map(|o| {
                    match given
                        .iter()
                        .find(|g| name(g).is_some() && name(g) == name(&o))
                    {
                        Some(g) => served_over_file(g.clone(), o),
                        None => o,
                    }
                })
                .collect();
            Value::Array(merged)
        }
        (_, served) => served,
    }
}

/// Who runs the model, in Triton's `backend` field.
fn backend(input: &models::InputKind) -> &'static str {
    match input {
        models::InputKind::Tensors(_) => "onnxruntime",
        _ => "tandem",
    }
}

/// `tandem_mlp` or `tandem_encoder`: what a model metadata's `platform` says.
pub fn platform(input: &models::InputKind) -> &'static str {
    match input {
        models::InputKind::Dense { .. } => "tandem_mlp",
        models::InputKind::Text(_) => "tandem_encoder",
        models::InputKind::Tensors(_) => "onnxruntime_onnx",
    }
}

/// A tensor as Triton's model configuration gives it: its dims without the batch
/// dimension (`[1]` for a BYTES input of one text per row), BYTES as `TYPE_STRING`.
fn triton_tensor(t: &models::TensorSpec, batched: bool) -> serde_json::Value {
    let data_type = match t.datatype {
        "BYTES" => "TYPE_STRING".to_string(),
        other => format!("TYPE_{other}"),
    };
    let mut dims: Vec<i64> = t.shape.iter().skip(batched as usize).copied().collect();
    if dims.is_empty() {
        dims.push(1);
    }
    json!({"name": t.name, "data_type": data_type, "format": "FORMAT_NONE", "dims": dims})
}

pub fn model_ready(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    state.registry.resolve(model, version)?;
    Ok(empty(StatusCode::OK))
}
