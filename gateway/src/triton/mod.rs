//! Triton's model configuration (`DIR/<model>/config.pbtxt`): parsed with a protobuf
//! text-format parser over `proto/model_config.proto` ([`parse`]), held as typed settings
//! ([`config`]), completed from the model itself and mapped onto tandem's own settings
//! ([`mapping`]). A syntax error names its line; a field the messages lack is an error; a
//! field tandem reads but does not act on is a warning that names it.

pub mod config;
pub mod mapping;
pub mod parse;

pub use config::ModelConfig;
pub use parse::{ConfigError, parse};

/// A model's config.pbtxt as read: its typed settings and the JSON form served back.
#[derive(Clone, Debug, PartialEq)]
pub struct TritonConfig {
    pub config: ModelConfig,
    pub json: serde_json::Value,
}

impl TritonConfig {
    /// Reads `DIR/<model>/config.pbtxt`.
    pub fn read(path: &std::path::Path) -> Result<TritonConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let (config, json) = parse(&text).map_err(|e| e.to_string())?;
        Ok(TritonConfig { config, json })
    }

    /// The version folder's model file: `default_model_filename`, else `model.onnx`.
    pub fn model_file(&self) -> &str {
        match self.config.default_model_filename.as_str() {
            "" => "model.onnx",
            name => name,
        }
    }
}

/// The file Triton reads a model's configuration from.
pub const CONFIG_FILE: &str = "config.pbtxt";
