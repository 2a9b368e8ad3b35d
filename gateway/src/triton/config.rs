//! The parts of Triton's `ModelConfig` tandem acts on, read from the message's proto3 JSON
//! form (proto field names, enums by name). Everything else in a config.pbtxt is parsed,
//! kept in the JSON form it is served in, and warned about ([`super::mapping`]).

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ModelConfig {
    pub name: String,
    pub platform: String,
    pub backend: String,
    pub max_batch_size: i32,
    pub input: Vec<ModelInput>,
    pub output: Vec<ModelOutput>,
    pub version_policy: Option<VersionPolicy>,
    pub dynamic_batching: Option<DynamicBatching>,
    pub instance_group: Vec<InstanceGroup>,
    pub default_model_filename: String,
    pub parameters: BTreeMap<String, Parameter>,
    pub optimization: Option<Optimization>,
    pub response_cache: Option<ResponseCache>,
    pub model_warmup: Vec<Warmup>,
    pub sequence_batching: Option<serde_json::Value>,
    pub ensemble_scheduling: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ModelInput {
    pub name: String,
    /// `TYPE_FP32`, ...
    pub data_type: String,
    pub dims: Vec<i64>,
    pub reshape: Option<Reshape>,
    pub optional: bool,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ModelOutput {
    pub name: String,
    pub data_type: String,
    pub dims: Vec<i64>,
    pub reshape: Option<Reshape>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Reshape {
    pub shape: Vec<i64>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum VersionPolicy {
    Latest {
        #[serde(default)]
        num_versions: u32,
    },
    All {},
    Specific {
        #[serde(default)]
        versions: Vec<i64>,
    },
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct DynamicBatching {
    pub preferred_batch_size: Vec<i32>,
    pub max_queue_delay_microseconds: u64,
    pub priority_levels: u64,
    pub default_priority_level: u64,
    pub default_queue_policy: Option<QueuePolicy>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct QueuePolicy {
    pub default_timeout_microseconds: u64,
    pub max_queue_size: u32,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct InstanceGroup {
    pub count: i32,
    /// `KIND_AUTO`, `KIND_CPU`, `KIND_GPU`, `KIND_MODEL`.
    pub kind: String,
    pub gpus: Vec<i32>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Parameter {
    pub string_value: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Optimization {
    pub graph: Option<Graph>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Graph {
    pub level: i32,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ResponseCache {
    pub enable: bool,
}

/// Requests run before a version is ready (Triton's `model_warmup`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Warmup {
    pub name: String,
    /// Rows of each input (0 or 1 where the model does not batch).
    pub batch_size: u32,
    pub inputs: BTreeMap<String, WarmupInput>,
    /// How many times it runs (0 means once).
    pub count: u32,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct WarmupInput {
    pub data_type: String,
    pub dims: Vec<i64>,
    pub zero_data: bool,
    pub random_data: bool,
    /// A file of the input's raw bytes in the model's `warmup/` folder.
    pub input_data_file: String,
}
