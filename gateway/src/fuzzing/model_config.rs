//! The `model_config` target: a Triton config.pbtxt as the repository scan reads it.

use crate::config::ModelSettings;

/// A model's config.pbtxt, parsed and mapped: a configuration that parses maps onto
/// settings within their bounds or is refused, and is checked against a small graph (an
/// image input and a score output, as an ONNX model's) without a panic. Nothing it says may
/// allocate beyond the text's own size.
pub fn model_config(data: &[u8]) {
    use crate::triton::mapping;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((config, json)) = crate::triton::parse(text) else {
        return;
    };
    for field in mapping::ignored_fields(&json) {
        assert!(!field.is_empty());
    }
    if mapping::check_servable(&config).is_err() {
        return;
    }
    let settings = mapping::overrides(&config).apply(&ModelSettings::default());
    if settings.validate("fuzz").is_ok() {
        assert!(settings.max_batch_size >= 1);
    }
    let _ = mapping::session_settings(&config);
    let spec = |name: &str, dtype, dims: &[i64]| seam::TensorSpec {
        name: name.into(),
        dtype,
        dims: dims.to_vec(),
        optional: false,
    };
    let inputs = [spec("image", seam::DataType::Fp32, &[-1, 3, -1, -1])];
    let outputs = [spec("scores", seam::DataType::Fp32, &[-1, 10])];
    if let Ok(signature) = mapping::signature(&config, &inputs, &outputs) {
        assert_eq!(signature.inputs.len(), config.input.len().max(1));
        assert_eq!(signature.batched, config.max_batch_size > 0);
    }
}
