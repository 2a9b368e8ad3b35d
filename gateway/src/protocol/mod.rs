//! The wire formats: the Open Inference Protocol v2's request DTOs as they arrive (JSON, or JSON
//! plus Triton's binary tensor extension) and responses as they leave. Nothing here knows
//! a model: [`crate::validate`] turns a decoded request into a `ValidRequest`.

pub mod base64;
pub mod binary;
pub mod bounded;
pub mod datatype;
mod error;
mod input_tensor;
pub mod json;
pub mod json_de;
pub mod response;
pub mod tensor_response;
pub mod text_inputs;
pub mod visit;

use serde::Deserialize;

pub use datatype::Datatype;
pub use error::RequestError;
pub use json::JsonData;

/// `POST .../infer`, as decoded from its JSON header.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferRequest {
    #[serde(default)]
    pub id: Option<String>,
    pub inputs: Vec<InputTensor>,
    #[serde(default)]
    pub outputs: Option<Vec<RequestedOutput>>,
    #[serde(default)]
    pub parameters: RequestParameters,
}

/// One input. Deserialized by hand (`input_tensor`) so that `data` after `shape` — the
/// order every client writes — is read no further than the count the shape declares.
#[derive(Debug)]
pub struct InputTensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub parameters: TensorParameters,
    /// Absent when the tensor travels in the binary extension.
    pub data: Option<JsonData>,
}

#[derive(Debug, Default, Deserialize)]
pub struct TensorParameters {
    /// Set on inputs whose bytes follow the JSON header.
    #[serde(default)]
    pub binary_data_size: Option<u64>,
    /// Set on requested outputs that should come back as bytes.
    #[serde(default)]
    pub binary_data: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestedOutput {
    pub name: String,
    #[serde(default)]
    pub parameters: TensorParameters,
}

/// Request-level parameters tandem acts on; others (a client's own keys) are accepted and
/// ignored, as Triton does.
#[derive(Debug, Default, Deserialize)]
pub struct RequestParameters {
    /// 1 is the highest priority; 0 or absent means the model's default.
    #[serde(default)]
    pub priority: Option<u64>,
    /// Microseconds the client is willing to wait, as Triton names it.
    #[serde(default)]
    pub timeout: Option<u64>,
    /// All outputs as binary when no `outputs` are listed (tritonclient's default).
    #[serde(default)]
    pub binary_data_output: Option<bool>,
    /// Text models: cut an over-long text at the model's limit (the default), or refuse it.
    #[serde(default)]
    pub truncate: Option<bool>,
    /// Text models: L2-normalise the embeddings (by default, as the model's folder says).
    #[serde(default)]
    pub normalize: Option<bool>,
    /// Text models: the prompt put before each text, by its name in the model's folder.
    #[serde(default)]
    pub prompt_name: Option<String>,
    /// `false`: the response cache is neither looked up nor written for this request.
    #[serde(default)]
    pub cache: Option<bool>,
}
