//! A Triton configuration onto tandem: its batching, queue and instance fields onto
//! [`ModelOverrides`], its ONNX Runtime parameters onto [`onnx::SessionSettings`], and its
//! tensors checked against (or completed from) the model's graph into a [`Signature`].

use seam::{DataType, Signature, TensorSpec};

use super::config::{ModelConfig, ModelInput, ModelOutput};
use crate::config::ModelOverrides;

/// Triton's `TYPE_*` name of a datatype, and back.
pub fn triton_type(d: DataType) -> &'static str {
    match d {
        DataType::Bool => "TYPE_BOOL",
        DataType::Uint8 => "TYPE_UINT8",
        DataType::Uint16 => "TYPE_UINT16",
        DataType::Uint32 => "TYPE_UINT32",
        DataType::Uint64 => "TYPE_UINT64",
        DataType::Int8 => "TYPE_INT8",
        DataType::Int16 => "TYPE_INT16",
        DataType::Int32 => "TYPE_INT32",
        DataType::Int64 => "TYPE_INT64",
        DataType::Fp16 => "TYPE_FP16",
        DataType::Bf16 => "TYPE_BF16",
        DataType::Fp32 => "TYPE_FP32",
        DataType::Fp64 => "TYPE_FP64",
        DataType::Bytes => "TYPE_STRING",
    }
}

pub fn datatype(triton: &str) -> Option<DataType> {
    DataType::ALL
        .into_iter()
        .find(|d| triton_type(*d) == triton)
}

/// The fields tandem acts on, by path; any other field set in a config.pbtxt is warned
/// about by name.
const ACTED_ON: &[&str] = &[
    "name",
    "platform",
    "backend",
    "max_batch_size",
    "input.name",
    "input.data_type",
    "input.dims",
    "input.reshape",
    "input.optional",
    "output.name",
    "output.data_type",
    "output.dims",
    "output.reshape",
    "version_policy",
    "dynamic_batching.max_queue_delay_microseconds",
    "dynamic_batching.priority_levels",
    "dynamic_batching.default_priority_level",
    "dynamic_batching.default_queue_policy.default_timeout_microseconds",
    "dynamic_batching.default_queue_policy.max_queue_size",
    "instance_group.count",
    "instance_group.kind",
    "instance_group.gpus",
    "default_model_filename",
    "optimization.graph",
    "response_cache.enable",
    "model_warmup",
];

/// The `parameters` ONNX Runtime's sessions take; keys starting `session.` are ONNX
/// Runtime's own session configuration entries, passed as given.
const SESSION_PARAMETERS: &[&str] = &["intra_op_thread_count", "inter_op_thread_count"];

/// The fields set (to anything but their default) that tandem does not act on.
pub fn ignored_fields(json: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_ignored(json, "", &mut out);
    out.sort();
    out.dedup();
    out
}

fn collect_ignored(value: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    use serde_json::Value;
    if ACTED_ON.contains(&path) {
        return;
    }
    if let (true, Some(keys)) = (path == "parameters", value.as_object()) {
        let unknown = keys
            .keys()
            .filter(|k| !SESSION_PARAMETERS.contains(&k.as_str()) && !k.starts_with("session."));
        out.extend(unknown.map(|k| format!("parameters.{k}")));
        return;
    }
    match value {
        Value::Object(fields) => {
            for (k, v) in fields {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                collect_ignored(v, &child, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_ignored(v, path, out)),
        Value::Null | Value::Bool(false) => {}
        Value::Number(n) if n.as_f64() == Some(0.0) => {}
        Value::String(s) if s.is_empty() || s.ends_with("_NONE") || s == "KIND_AUTO" => {}
        Value::String(s) if s == "PRIORITY_DEFAULT" || s == "REJECT" => {}
        _ => out.push(path.to_string()),
    }
}

/// Whether the configuration is one this backend serves: ONNX Runtime, not an ensemble or
/// a sequence model.
pub fn check_servable(config: &ModelConfig) -> Result<(), String> {
    let onnx = config.platform == "onnxruntime_onnx" || config.backend == "onnxruntime";
    let unset = config.platform.is_empty() && config.backend.is_empty();
    if !onnx && !unset {
        return Err(format!(
            "platform {:?} / backend {:?}: tandem serves ONNX models (platform \
             \"onnxruntime_onnx\" or backend \"onnxruntime\")",
            config.platform, config.backend
        ));
    }
    if config.sequence_batching.is_some() || config.ensemble_scheduling.is_some() {
        return Err("sequence_batching and ensemble_scheduling are not served".into());
    }
    if config.max_batch_size < 0 {
        return Err(format!(
            "max_batch_size {} is negative",
            config.max_batch_size
        ));
    }
    Ok(())
}

/// The settings a Triton configuration sets, under whatever tandem's own configuration
/// and a repository `config.toml` set.
pub fn overrides(config: &ModelConfig) -> ModelOverrides {
    let mut o = ModelOverrides {
        // A model without a batch dimension runs each request alone, as given.
        max_batch_size: Some((config.max_batch_size.max(1)) as usize),
        ..ModelOverrides::default()
    };
    if let Some(b) = &config.dynamic_batching {
        if b.max_queue_delay_microseconds > 0 {
            o.max_queue_delay_us = Some(b.max_queue_delay_microseconds);
        }
        if b.priority_levels > 0 {
            o.priority_levels = Some(u32::try_from(b.priority_levels).unwrap_or(u32::MAX));
        }
        if b.default_priority_level > 0 {
            o.default_priority = Some(u32::try_from(b.default_priority_level).unwrap_or(u32::MAX));
        }
        if let Some(q) = &b.default_queue_policy {
            if q.default_timeout_microseconds > 0 {
                o.default_timeout_us = Some(q.default_timeout_microseconds);
            }
            if q.max_queue_size > 0 {
                o.queue_capacity = Some(q.max_queue_size as usize);
            }
        }
    }
    o.cache = config.response_cache.as_ref().map(|c| c.enable);
    let instances: i64 = config
        .instance_group
        .iter()
        .map(|g| i64::from(g.count.max(1)) * g.gpus.len().max(1) as i64)
        .sum();
    if instances > 0 {
        // Out of range, the settings' own check refuses it with the bound.
        o.replicas = Some(usize::try_from(instances).unwrap_or(usize::MAX));
    }
    o
}

/// ONNX Runtime's session options from Triton's onnxruntime backend parameters.
pub fn session_settings(config: &ModelConfig) -> Result<onnx::SessionSettings, String> {
    let number =
        |key: &str| -> Result<usize, String> {
            match config.parameters.get(key) {
                None => Ok(0),
                Some(p) => p.string_value.trim().parse().map_err(|_| {
                    format!("parameters {key:?}: {:?} is not a count", p.string_value)
                }),
            }
        };
    Ok(onnx::SessionSettings {
        intra_op_threads: number("intra_op_thread_count")?,
        inter_op_threads: number("inter_op_thread_count")?,
        graph_level: config
            .optimization
            .as_ref()
            .and_then(|o| o.graph.as_ref())
            .map(|g| g.level),
        cuda_device: None,
        gpu_mem_limit: None,
        config_entries: config
            .parameters
            .iter()
            .filter(|(key, _)| key.starts_with("session."))
            .map(|(key, p)| (key.clone(), p.string_value.clone()))
            .collect(),
    })
}

/// The served signature: the configuration's tensors checked against the graph's, or the
/// graph's own where the configuration lists none. A batching model's graph tensors lead
/// with a batch dimension the configuration's dims leave out.
pub fn signature(
    config: &ModelConfig,
    graph_inputs: &[TensorSpec],
    graph_outputs: &[TensorSpec],
) -> Result<Signature, String> {
    let batched = config.max_batch_size > 0;
    let inputs = match config.input.is_empty() {
        true => from_graph(graph_inputs, batched, "input")?,
        false => {
            for g in graph_inputs {
                if !config.input.iter().any(|i| i.name == g.name) {
                    return Err(format!(
                        "the model's input {:?} is not in config.pbtxt",
                        g.name
                    ));
                }
            }
            let spec = |i: &ModelInput| {
                tensor(
                    &i.name,
                    &i.data_type,
                    &i.dims,
                    &i.reshape,
                    graph_inputs,
                    batched,
                    "input",
                )
                .map(|t| TensorSpec {
                    optional: i.optional,
                    ..t
                })
            };
            config.input.iter().map(spec).collect::<Result<_, _>>()?
        }
    };
    let outputs = match config.output.is_empty() {
        true => from_graph(graph_outputs, batched, "output")?,
        false => {
            let spec = |o: &ModelOutput| {
                tensor(
                    &o.name,
                    &o.data_type,
                    &o.dims,
                    &o.reshape,
                    graph_outputs,
                    batched,
                    "output",
                )
            };
            config.output.iter().map(spec).collect::<Result<_, _>>()?
        }
    };
    Ok(Signature {
        inputs,
        outputs,
        batched,
    })
}

/// The graph's tensors as served: without their batch dimension where the model batches.
fn from_graph(graph: &[TensorSpec], batched: bool, role: &str) -> Result<Vec<TensorSpec>, String> {
    graph
        .iter()
        .map(|g| {
            let dims = match (batched, g.dims.split_first()) {
                (false, _) => g.dims.clone(),
                (true, Some((-1, rest))) => rest.to_vec(),
                (true, _) => {
                    return Err(format!(
                        "{role} {:?} has shape {:?}: with max_batch_size > 0 its first dimension \
                         must be variable (-1)",
                        g.name, g.dims
                    ));
                }
            };
            Ok(TensorSpec { dims, ..g.clone() })
        })
        .collect()
}

/// One configured tensor, checked against the graph's of the same name.
fn tensor(
    name: &str,
    data_type: &str,
    dims: &[i64],
    reshape: &Option<super::config::Reshape>,
    graph: &[TensorSpec],
    batched: bool,
    role: &str,
) -> Result<TensorSpec, String> {
    let g = graph.iter().find(|g| g.name == name).ok_or_else(|| {
        let names: Vec<&str> = graph.iter().map(|g| g.name.as_str()).collect();
        format!("{role} {name:?} of config.pbtxt is not in the model, whose {role}s are {names:?}")
    })?;
    let dtype = datatype(data_type)
        .ok_or_else(|| format!("{role} {name:?}: data_type {data_type:?} is not served"))?;
    if dtype != g.dtype {
        return Err(format!(
            "{role} {name:?}: config.pbtxt says {data_type}, the model has {}",
            triton_type(g.dtype)
        ));
    }
    let model_dims = reshape.as_ref().map_or(dims, |r| r.shape.as_slice());
    let full: Vec<i64> = batched
        .then_some(-1)
        .into_iter()
        .chain(model_dims.iter().copied())
        .collect();
    let agrees =
        full.len() == g.dims.len() && full.iter().zip(&g.dims).all(|(c, m)| *c == *m || *m < 0);
    if !agrees {
        return Err(format!(
            "{role} {name:?}: config.pbtxt gives shape {full:?} (the batch dimension first when \
             max_batch_size > 0), the model has {:?}",
            g.dims
        ));
    }
    if let Some(r) = reshape {
        // A -1 stands for what the other dims leave (at most one in a reshape); fixed shapes
        // must hold the same number of elements.
        let fixed = |d: &[i64]| {
            d.iter().all(|&x| x >= 0).then(|| {
                d.iter()
                    .try_fold(1i64, |n, &x| n.checked_mul(x))
                    .unwrap_or(-1)
            })
        };
        let free = r.shape.iter().filter(|&&d| d < 0).count();
        let differ = matches!((fixed(dims), fixed(&r.shape)), (Some(a), Some(b)) if a != b);
        if free > 1 || differ {
            return Err(format!(
                "{role} {name:?}: reshape {:?} does not hold the elements of dims {dims:?}",
                r.shape
            ));
        }
    }
    Ok(TensorSpec {
        name: name.to_string(),
        dtype,
        dims: dims.to_vec(),
        optional: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triton::parse;

    fn graph(name: &str, dtype: DataType, dims: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dtype,
            dims: dims.to_vec(),
            optional: false,
        }
    }

    const CONFIG: &str = r#"
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, -1 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4 ]
  max_queue_delay_microseconds: 300
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy { default_timeout_microseconds: 5000 max_queue_size: 64 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "2" } }
optimization { graph { level: 1 } priority: PRIORITY_MAX }
model_warmup [ { name: "w" batch_size: 1 } ]
"#;

    #[test]
    fn triton_settings_map_onto_tandems() {
        let (config, json) = parse(CONFIG).unwrap();
        check_servable(&config).unwrap();
        let o = overrides(&config);
        assert_eq!(o.max_batch_size, Some(8));
        assert_eq!(o.max_queue_delay_us, Some(300));
        assert_eq!((o.priority_levels, o.default_priority), (Some(3), Some(2)));
        assert_eq!(
            (o.default_timeout_us, o.queue_capacity),
            (Some(5000), Some(64))
        );
        assert_eq!(o.replicas, Some(2));
        let s = session_settings(&config).unwrap();
        assert_eq!((s.intra_op_threads, s.graph_level), (2, Some(1)));
        assert_eq!(
            ignored_fields(&json),
            vec![
                "dynamic_batching.preferred_batch_size",
                "optimization.priority",
            ]
        );
    }

    #[test]
    fn the_config_is_checked_against_the_graph() {
        let (config, _) = parse(CONFIG).unwrap();
        let inputs = [graph("image", DataType::Fp32, &[-1, 3, -1])];
        let outputs = [graph("probs", DataType::Fp32, &[-1, 10])];
        let s = signature(&config, &inputs, &outputs).unwrap();
        assert!(s.batched);
        assert_eq!(s.inputs[0].dims, vec![3, -1]);
        let wrong_type = [graph("image", DataType::Fp16, &[-1, 3, -1])];
        let err = signature(&config, &wrong_type, &outputs).unwrap_err();
        assert!(
            err.contains("TYPE_FP32") && err.contains("TYPE_FP16"),
            "{err}"
        );
        let wrong_dims = [graph("probs", DataType::Fp32, &[-1, 9])];
        assert!(
            signature(&config, &inputs, &wrong_dims)
                .unwrap_err()
                .contains("[-1, 10]")
        );
        let fixed_batch = [graph("image", DataType::Fp32, &[1, 3, -1])];
        assert!(signature(&config, &fixed_batch, &outputs).is_err());
        let extra = [inputs[0].clone(), graph("other", DataType::Int64, &[-1])];
        assert!(
            signature(&config, &extra, &outputs)
                .unwrap_err()
                .contains("\"other\"")
        );
        let renamed = [graph("pixels", DataType::Fp32, &[-1, 3, -1])];
        assert!(signature(&config, &renamed, &outputs).is_err());
    }

    #[test]
    fn what_is_not_served_is_refused() {
        for text in [
            "platform: \"tensorrt_plan\"",
            "backend: \"python\"",
            "ensemble_scheduling { step [ { model_name: \"a\" } ] }",
            "max_batch_size: -1",
        ] {
            let (config, _) = parse(text).unwrap();
            assert!(check_servable(&config).is_err(), "{text}");
        }
    }
}
