//! The routing table: method and path to handler, with HEAD routed as GET, 405 with `Allow`
//! where a path takes other methods, and percent-decoded path segments.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;

use super::arrival::ArrivalClock;
use super::errors::{error_response, openai_error, tei_error};
use super::v2 as models;
use super::{AppState, cohere, count, openai, tei, v2};
use crate::error::ApiError;

/// Routes a request: its path's segments percent-decoded, HEAD answered as GET, and a 405
/// with `Allow` where the path takes other methods.
pub async fn handle(
    state: Arc<AppState>,
    mut req: Request<Limited<Incoming>>,
    metrics_only: bool,
    peer: std::net::SocketAddr,
    arrival: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    // Segments as the client meant them: tritonclient percent-encodes a model named `a b`
    // as `a%20b`.
    let decoded: Vec<String> = match path
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect()
    {
        Ok(d) => d,
        Err(e) => return error_response(&e),
    };
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    if let Some(refused) = super::auth::check(&state.config(), &method, &segments, req.headers()) {
        return refused;
    }
    // HEAD is GET without the body (RFC 9110 §9.3.2): routed as GET, and hyper, which
    // remembers the method it parsed, sends the headers and holds the body back.
    if method == Method::HEAD {
        *req.method_mut() = Method::GET;
    }
    let result = if req.method() == Method::GET {
        get(&state, metrics_only, &segments)
    } else {
        None
    };
    let result = match result {
        Some(r) => r,
        None if metrics_only => Err(not_found(&method, &path)),
        None => match post(&state, req, peer, arrival, &segments).await {
            Some(r) => r,
            None => Err(match allowed_methods(&segments) {
                Some(allow) => ApiError::MethodNotAllowed {
                    method: method.to_string(),
                    path: path.clone(),
                    allow,
                },
                None => not_found(&method, &path),
            }),
        },
    };
    // OpenAI's clients read errors on its routes in OpenAI's shape, a 404 or 405 included.
    result.unwrap_or_else(|e| match segments.first() {
        Some(&"v1" | &"embeddings") => openai_error(&e),
        _ => error_response(&e),
    })
}

type Answer = Result<Response<Full<Bytes>>, ApiError>;

/// The GET routes (`None`: not one of them). A metrics-only listener answers `/metrics`
/// alone.
fn get(state: &AppState, metrics_only: bool, segments: &[&str]) -> Option<Answer> {
    Some(match (metrics_only, segments) {
        (_, ["metrics"]) => Ok(models::metrics(state)),
        (true, _) => return None,
        (_, ["v2"]) => Ok(models::server_metadata()),
        (_, ["v2", "health", "live"]) => Ok(models::empty(StatusCode::OK)),
        (_, ["v2", "health", "ready"]) => models::health_ready(state),
        (_, ["v2", "models", "stats"]) => models::statistics(state, None, None),
        (_, ["v2", "models", m, "stats"]) => models::statistics(state, Some(m), None),
        (_, ["v2", "models", m, "versions", v, "stats"]) => {
            models::statistics(state, Some(m), Some(v))
        }
        (_, ["v2", "models", m]) => models::model_metadata(state, m, None),
        (_, ["v2", "models", m, "versions", v]) => models::model_metadata(state, m, Some(v)),
        (_, ["v2", "models", m, "config"]) => models::model_config(state, m, None),
        (_, ["v2", "models", m, "versions", v, "config"]) => {
            models::model_config(state, m, Some(v))
        }
        (_, ["info"]) => Ok(answer_or_tei_error(tei::info(state))),
        (_, ["health"] | [""]) => Ok(answer_or_tei_error(models::health_ready(state))),
        (_, ["v1", "models"]) => Ok(openai::list(state)),
        (_, ["v1", "models", m]) => openai::retrieve(state, m),
        (_, ["v2", "models", m, "ready"]) => models::model_ready(state, m, None),
        (_, ["v2", "models", m, "versions", v, "ready"]) => models::model_ready(state, m, Some(v)),
        _ => return None,
    })
}

/// Inference, the repository extension and the admin API (`None`: no such route).
async fn post(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    peer: std::net::SocketAddr,
    arrival: &ArrivalClock,
    segments: &[&str],
) -> Option<Answer> {
    let post = req.method() == Method::POST;
    if post && let Some(route) = Inference::of(segments) {
        return Some(Ok(
            count::counted(inference(state, req, arrival, route)).await
        ));
    }
    Some(match (post, segments) {
        (true, ["tokenize"]) => Ok(tei::tokenize(state, req, arrival).await),
        (true, ["decode"]) => Ok(tei::decode(state, req, arrival).await),
        (true, ["v2", "repository", "index"]) => v2::index(state, req).await,
        (true, ["v2", "repository", "models", m, "load"]) => v2::load(state, m, req, peer).await,
        (true, ["v2", "repository", "models", m, "unload"]) => {
            v2::unload(state, m, req, peer).await
        }
        (_, ["admin", ..]) => {
            let segments: Vec<String> = segments.iter().map(|s| s.to_string()).collect();
            super::admin::handle(state, req, peer, &segments).await
        }
        _ => return None,
    })
}

/// The inference routes, each counted once by [`count::counted`] under the model that
/// answered it.
#[derive(Clone, Copy)]
enum Inference<'a> {
    /// v2's infer: the model and, if named, its version.
    V2(&'a str, Option<&'a str>),
    /// OpenAI's embeddings (TEI also serves it without `/v1`, for base URLs that lack it).
    OpenAi,
    Embed,
    EmbedAll,
    EmbedSparse,
    Similarity,
    Predict,
    Rerank,
    CohereRerank(cohere::ApiVersion),
    CohereEmbed(cohere::ApiVersion),
    /// TEI's `POST /`, and `/invocations`, SageMaker's name for it.
    Root,
}

impl<'a> Inference<'a> {
    fn of(segments: &[&'a str]) -> Option<Inference<'a>> {
        use cohere::ApiVersion::{V1, V2};
        Some(match *segments {
            ["v2", "models", m, "infer"] => Inference::V2(m, None),
            ["v2", "models", m, "versions", v, "infer"] => Inference::V2(m, Some(v)),
            ["v1", "embeddings"] | ["embeddings"] => Inference::OpenAi,
            ["embed"] => Inference::Embed,
            ["embed_all"] => Inference::EmbedAll,
            ["embed_sparse"] => Inference::EmbedSparse,
            ["similarity"] => Inference::Similarity,
            ["predict"] => Inference::Predict,
            ["rerank"] => Inference::Rerank,
            ["v1", "rerank"] => Inference::CohereRerank(V1),
            ["v2", "rerank"] => Inference::CohereRerank(V2),
            ["v1", "embed"] => Inference::CohereEmbed(V1),
            ["v2", "embed"] => Inference::CohereEmbed(V2),
            [""] | ["invocations"] => Inference::Root,
            _ => return None,
        })
    }
}

/// Answers a POST to an inference route.
async fn inference(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    arrival: &ArrivalClock,
    route: Inference<'_>,
) -> Response<Full<Bytes>> {
    match route {
        Inference::V2(m, v) => v2::infer(state, m, v.map(str::to_string), req, arrival).await,
        Inference::OpenAi => openai::embeddings(state, req, arrival).await,
        Inference::Embed => tei::post_embed(state, req, arrival).await,
        Inference::EmbedAll => tei::post_embed_all(state, req, arrival).await,
        Inference::EmbedSparse => tei::post_embed_sparse(state, req, arrival).await,
        Inference::Similarity => tei::post_similarity(state, req, arrival).await,
        Inference::Predict => tei::predict(state, req, arrival).await,
        Inference::Rerank => tei::rerank(state, req, arrival).await,
        Inference::CohereRerank(api) => cohere::rerank(state, req, arrival, api).await,
        Inference::CohereEmbed(api) => cohere::embed(state, req, arrival, api).await,
        Inference::Root => tei::post_root(state, req, arrival).await,
    }
}

/// A path segment with its `%XX` escapes decoded; the result must be UTF-8.
fn percent_decode(segment: &str) -> Result<String, ApiError> {
    if !segment.contains('%') {
        return Ok(segment.to_string());
    }
    let bad = || {
        ApiError::malformed(format!(
            "the path segment {segment:?} is not valid percent-encoded UTF-8"
        ))
    };
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let digit = |b: u8| (b as char).to_digit(16).ok_or_else(bad);
            out.push((digit(hex[0])? * 16 + digit(hex[1])?) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// The methods routed at this path, for a 405's `Allow` header; `None` where nothing is
/// (a 404). `/admin/` answers its own.
fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    const GET: &str = "GET, HEAD";
    match segments {
        ["metrics"] | ["v2"] | ["v2", "health", "live" | "ready"] => Some(GET),
        ["v1", "models"] | ["v1", "models", _] => Some(GET),
        ["v2", "repository", "index"] | ["v1", "embeddings"] | ["embed"] => Some("POST"),
        ["embed_all"] | ["embed_sparse"] => Some("POST"),
        ["embeddings"] | ["invocations"] | ["similarity"] => Some("POST"),
        ["tokenize"] | ["decode"] | ["predict"] | ["rerank"] => Some("POST"),
        ["v1" | "v2", "rerank" | "embed"] => Some("POST"),
        ["info"] | ["health"] => Some(GET),
        [""] => Some("GET, HEAD, POST"),
        ["v2", "repository", "models", _, "load" | "unload"] => Some("POST"),
        ["v2", "models", _] | ["v2", "models", _, "versions", _] => Some(GET),
        ["v2", "models", _, last] | ["v2", "models", _, "versions", _, last] => match *last {
            "infer" => Some("POST"),
            "ready" | "config" | "stats" => Some(GET),
            _ => None,
        },
        _ => None,
    }
}

fn not_found(method: &Method, path: &str) -> ApiError {
    ApiError::NotFound {
        method: method.to_string(),
        path: path.to_string(),
    }
}

/// TEI's answers other than embeddings: its error shape for whatever went wrong.
fn answer_or_tei_error(result: Result<Response<Full<Bytes>>, ApiError>) -> Response<Full<Bytes>> {
    result.unwrap_or_else(|e| tei_error(&e))
}
