//! OpenAI's API: `POST /v1/embeddings`, and `GET /v1/models` with each model.

mod embeddings;
mod models;

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use embeddings::OpenAiRequest;
pub use embeddings::openai as embeddings;
pub use models::{list, retrieve};
