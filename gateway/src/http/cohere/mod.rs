//! Cohere's API: rerank (`POST /v1/rerank`, `POST /v2/rerank`) and embed (`POST /v1/embed`,
//! `POST /v2/embed`), its errors in Cohere's shape.

mod document;
mod embed;
mod rerank;

pub use embed::embed;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use embed::{EmbedRequest, kinds, texts, truncation};
pub use rerank::rerank;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use rerank::{CohereRequest, rerank_inputs};

/// Which of Cohere's API versions a request came through, for `meta.api_version`.
#[derive(Clone, Copy)]
pub enum ApiVersion {
    V1,
    V2,
}

impl ApiVersion {
    /// As `meta.api_version.version` gives it.
    fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1 => "1",
            ApiVersion::V2 => "2",
        }
    }
}
