//! API keys on the inference routes. With keys configured (`api_keys`, `--api-key`,
//! `api_keys_file`), every route but health, readiness, `/metrics` (unless `auth_metrics`)
//! and the admin API (its own token) requires `Authorization: Bearer KEY`, compared in
//! constant time. A refusal is a 401 with `WWW-Authenticate: Bearer`, in the error shape of
//! the route's own API, and counted by route family.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, header};
use http_body_util::Full;

use super::AppState;
use super::errors::{cohere_error, error_response, openai_error, tei_error};
use crate::config::{ApiKey, Config};
use crate::error::ApiError;
use crate::metrics as names;

/// The APIs tandem speaks, each with its own error shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V2,
    OpenAi,
    Tei,
    Cohere,
    Metrics,
}

impl Family {
    fn as_str(self) -> &'static str {
        match self {
            Family::V2 => "v2",
            Family::OpenAi => "openai",
            Family::Tei => "tei",
            Family::Cohere => "cohere",
            Family::Metrics => "metrics",
        }
    }

    fn error(self, e: ApiError) -> Response<Full<Bytes>> {
        match self {
            Family::OpenAi => openai_error(&e),
            Family::Tei => tei_error(&e),
            Family::Cohere => cohere_error(&e),
            Family::V2 | Family::Metrics => error_response(&e),
        }
    }
}

/// The family of a route that needs a key, or `None` for one that stays open.
pub fn family(method: &Method, segments: &[&str], auth_metrics: bool) -> Option<Family> {
    match segments {
        ["admin", ..] | ["v2", "health", ..] | ["health"] => None,
        [""] if method == Method::GET || method == Method::HEAD => None,
        ["metrics"] => auth_metrics.then_some(Family::Metrics),
        ["v1" | "v2", "rerank" | "embed"] => Some(Family::Cohere),
        ["v1", ..] | ["embeddings"] => Some(Family::OpenAi),
        ["v2", ..] => Some(Family::V2),
        _ => Some(Family::Tei),
    }
}

/// Whether `headers` carry one of `keys` as a bearer token; true when there are none. Every
/// key is compared whole, so the time taken tells nothing of how much of one matched.
pub fn authorized(keys: &[ApiKey], headers: &HeaderMap) -> bool {
    authorized_by(keys, authorization(headers))
}

/// `Authorization`'s value, where it is text.
fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// [`authorized`], given the `authorization` value (gRPC's metadata holds it too).
pub fn authorized_by(keys: &[ApiKey], authorization: Option<&str>) -> bool {
    if keys.is_empty() {
        return true;
    }
    let Some(presented) = authorization.and_then(bearer_token) else {
        return false;
    };
    keys.iter().fold(false, |found, key| {
        found | constant_time_eq(presented.as_bytes(), key.as_bytes())
    })
}

/// Whether a request may use the admin API (and the repository's load and unload): the
/// admin token as a bearer token where one is set, else only from loopback.
pub fn authorize_admin(
    state: &AppState,
    headers: &HeaderMap,
    peer: std::net::SocketAddr,
) -> Result<(), ApiError> {
    authorize_admin_by(state, authorization(headers), peer)
}

/// [`authorize_admin`], given the `authorization` value.
pub fn authorize_admin_by(
    state: &AppState,
    authorization: Option<&str>,
    peer: std::net::SocketAddr,
) -> Result<(), ApiError> {
    match &state.config().admin.token {
        Some(token) => {
            let presented = authorization.and_then(bearer_token);
            if presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes())) {
                Ok(())
            } else {
                Err(ApiError::Unauthorized(
                    "a valid `Authorization: Bearer <token>` is required".into(),
                ))
            }
        }
        // A dual-stack listener (`[::]:PORT`) sees an IPv4 loopback client as
        // `::ffff:127.0.0.1`: compare the canonical address.
        None if peer.ip().to_canonical().is_loopback() => Ok(()),
        None => Err(ApiError::Forbidden(format!(
            "only loopback clients may use it (you are {}); set [admin] token to allow others",
            peer.ip().to_canonical()
        ))),
    }
}

/// The token of `Bearer TOKEN`; the scheme's name is case-insensitive (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// Equal bytes, compared over the longer of the two whatever they hold, so that the time
/// taken tells neither how much matched nor (past the presented length) the key's length.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let differ = (0..n).fold(u8::from(a.len() != b.len()), |acc, i| {
        acc | (a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0))
    });
    std::hint::black_box(differ) == 0
}

/// The 401 of a request to a route of `family` without a valid key, counted.
pub fn refuse(family: Family) -> Response<Full<Bytes>> {
    metrics::counter!(names::HTTP_UNAUTHORIZED, "family" => family.as_str()).increment(1);
    let e = ApiError::Unauthorized(
        "a valid API key is required: send `Authorization: Bearer <key>`".into(),
    );
    let mut response = family.error(e);
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// `None` if the request may go on, else its 401.
pub fn check(
    config: &Config,
    method: &Method,
    segments: &[&str],
    headers: &HeaderMap,
) -> Option<Response<Full<Bytes>>> {
    let family = family(method, segments, config.auth_metrics)?;
    (!authorized(&config.api_keys, headers)).then(|| refuse(family))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    }

    #[test]
    fn a_bearer_key_among_the_configured_ones_is_authorized() {
        let keys = [ApiKey::new("alpha"), ApiKey::new("beta")];
        assert!(authorized(&[], &headers(None)), "no keys: open");
        assert!(authorized(&keys, &headers(Some("Bearer beta"))));
        assert!(!authorized(&keys, &headers(Some("Bearer bet"))));
        assert!(!authorized(&keys, &headers(Some("Bearer betaa"))));
        assert!(!authorized(&keys, &headers(Some("beta"))));
        assert!(
            authorized(&keys, &headers(Some("bearer beta"))),
            "scheme case"
        );
        assert!(!authorized(&keys, &headers(Some("Bearer "))));
        assert!(!authorized(&keys, &headers(Some("Bearer alph"))));
        assert!(!authorized(&keys, &headers(Some("Basic beta"))));
        assert!(!authorized(&keys, &headers(None)));
    }

    #[test]
    fn health_admin_and_metrics_stay_open_and_every_api_has_its_family() {
        let get = Method::GET;
        let post = Method::POST;
        for open in [
            &["v2", "health", "ready"][..],
            &["health"],
            &["admin", "slo"],
            &[""],
        ] {
            assert_eq!(family(&get, open, false), None, "{open:?}");
        }
        assert_eq!(family(&get, &["metrics"], false), None);
        assert_eq!(family(&get, &["metrics"], true), Some(Family::Metrics));
        let cases: [(&[&str], Family); 8] = [
            (&["v2", "models", "m", "infer"], Family::V2),
            (&["v2", "models"], Family::V2),
            (&["v1", "embeddings"], Family::OpenAi),
            (&["embeddings"], Family::OpenAi),
            (&["v1", "rerank"], Family::Cohere),
            (&["v2", "embed"], Family::Cohere),
            (&["embed"], Family::Tei),
            (&[""], Family::Tei),
        ];
        for (segments, expected) in cases {
            assert_eq!(
                family(&post, segments, false),
                Some(expected),
                "{segments:?}"
            );
        }
    }
}
