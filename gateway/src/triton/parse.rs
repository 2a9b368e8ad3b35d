//! config.pbtxt text into a [`ModelConfig`]: prost-reflect's text-format parser over the
//! compiled `inference.ModelConfig` message, then its proto3 JSON form into typed settings.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};

use super::config::ModelConfig;

/// The compiled descriptors of proto/model_config.proto (see build.rs).
static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/model_config.bin"));

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("config.pbtxt line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("config.pbtxt: {0}")]
    Invalid(String),
}

/// `inference.ModelConfig`, from the descriptors build.rs compiled (a test checks that
/// they hold it).
fn model_config_message() -> Result<&'static MessageDescriptor, ConfigError> {
    static MESSAGE: OnceLock<Option<MessageDescriptor>> = OnceLock::new();
    MESSAGE
        .get_or_init(|| {
            DescriptorPool::decode(DESCRIPTORS)
                .ok()
                .and_then(|pool| pool.get_message_by_name("inference.ModelConfig"))
        })
        .as_ref()
        .ok_or_else(|| ConfigError::Invalid("this build holds no ModelConfig message".into()))
}

/// The line (1-based) of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The text with a `:` between a field name and the `[` of a list that follows it.
/// Protobuf's text format makes that colon optional before a list of messages (`input [ {
/// ... } ]`, the form every Triton config uses), and prost-reflect's parser requires it.
/// Strings and `#` comments are copied as they are; no newline is added or removed, so a
/// syntax error's line is the line in the file.
fn colon_before_lists(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    // The last character outside whitespace, strings and comments, and whether it ended an
    // identifier (a run of letters, digits and `_` that began with a letter or `_`).
    let mut after_ident = false;
    let mut in_ident = false;
    while let Some(c) = chars.next() {
        match c {
            '#' => {
                out.push(c);
                while let Some(&n) = chars.peek() {
                    if n == '\n' {
                        break;
                    }
                    out.push(n);
                    chars.next();
                }
                in_ident = false;
            }
            '"' | '\'' => {
                out.push(c);
                while let Some(n) = chars.next() {
                    out.push(n);
                    if n == '\\' {
                        if let Some(escaped) = chars.next() {
                            out.push(escaped);
                        }
                    } else if n == c {
                        break;
                    }
                }
                after_ident = false;
                in_ident = false;
            }
            '[' => {
                if after_ident {
                    out.push(':');
                }
                out.push(c);
                after_ident = false;
                in_ident = false;
            }
            c if c.is_whitespace() => {
                out.push(c);
                in_ident = false;
            }
            c => {
                out.push(c);
                let word = c.is_ascii_alphanumeric() || c == '_';
                in_ident = word && (in_ident || c.is_ascii_alphabetic() || c == '_');
                after_ident = in_ident;
            }
        }
    }
    out
}

/// Parses a config.pbtxt. The typed settings come back with Triton's JSON form of the same
/// message (every field, proto field names), which `/v2/models/{m}/config` serves.
pub fn parse(text: &str) -> Result<(ModelConfig, serde_json::Value), ConfigError> {
    let text = &colon_before_lists(text);
    let message = DynamicMessage::parse_text_format(model_config_message()?.clone(), text)
        .map_err(|e| {
            let offset = miette::Diagnostic::labels(&e)
                .and_then(|mut labels| labels.next())
                .map_or(text.len(), |l| l.offset());
            ConfigError::Syntax {
                line: line_of(text, offset),
                message: e.to_string(),
            }
        })?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .stringify_64_bit_integers(false)
        .skip_default_fields(false);
    let json = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let config: ModelConfig =
        serde_json::from_value(json.clone()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    Ok((config, json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_triton_config_parses_with_its_comments_and_enums() {
        let text = r#"
# A ResNet as Triton serves it.
name: "resnet"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "input", data_type: TYPE_FP32, dims: [ 3, 224, 224 ] }
]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
instance_group [ { count: 2, kind: KIND_CPU } ]
"#;
        let (config, json) = parse(text).unwrap();
        assert_eq!(config.name, "resnet");
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input[0].dims, vec![3, 224, 224]);
        assert_eq!(config.input[0].data_type, "TYPE_FP32");
        let batching = config.dynamic_batching.as_ref().unwrap();
        assert_eq!(batching.preferred_batch_size, vec![4, 8]);
        assert_eq!(batching.max_queue_delay_microseconds, 100);
        assert_eq!(config.instance_group[0].kind, "KIND_CPU");
        assert_eq!(json["output"][0]["dims"], serde_json::json!([1000]));
    }

    #[test]
    fn lists_take_a_colon_only_where_none_is_written() {
        assert_eq!(
            colon_before_lists("input [ { dims: [ 3 ] } ]\n# a [ comment\nname: \"a [b\"\nx [1]"),
            "input :[ { dims: [ 3 ] } ]\n# a [ comment\nname: \"a [b\"\nx :[1]"
        );
        assert_eq!(colon_before_lists("v: 8 [x]"), "v: 8 [x]");
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let text = "name: \"m\"\nmax_batch_size: 8\ninput [ { name: \"x\" data_type: TYPE_FP32 dims: [ 3, ] } ]\n";
        match parse(text) {
            Err(ConfigError::Syntax { line, .. }) => assert_eq!(line, 3),
            other => panic!("expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn an_unknown_field_or_enum_value_is_an_error() {
        let err = parse("name: \"m\"\nmax_batch: 8\n").unwrap_err();
        assert!(
            matches!(&err, ConfigError::Syntax { line: 2, message } if message.contains("max_batch")),
            "{err:?}"
        );
        let err = parse("input [ { name: \"x\" data_type: TYPE_FLOAT } ]").unwrap_err();
        assert!(err.to_string().contains("TYPE_FLOAT"), "{err}");
    }
}
