//! An ONNX graph on the model seam: one ONNX Runtime session per replica, its signature
//! from config.pbtxt checked against the graph (or the graph's own), and Triton's
//! `reshape` applied between the shapes clients send and the shapes the graph takes.

use std::collections::HashMap;
use std::path::Path;

use models::Device;
use models::{Batch, InputKind, ModelError, ModelMetadata};
use seam::{Signature, Tensor, TensorSpec};

use super::{OnnxOptions, warmup};
use crate::triton::config::Warmup;
use crate::triton::{ModelConfig, mapping};

pub struct OnnxBackend {
    model: onnx::OnnxModel,
    signature: Signature,
    /// Inputs whose shape in the graph differs from the served one (Triton's `reshape`):
    /// the graph's shape, without the batch dimension.
    input_reshape: HashMap<String, Vec<i64>>,
    /// Outputs the graph gives in another shape: the served dims, without the batch one.
    output_reshape: HashMap<String, Vec<i64>>,
    metadata: ModelMetadata,
    device: Device,
}

impl OnnxBackend {
    pub fn load(
        path: &Path,
        device: &Device,
        options: &OnnxOptions,
    ) -> Result<OnnxBackend, String> {
        onnx::runtime::init(options.runtime_lib.as_deref()).map_err(|e| e.to_string())?;
        let given = options.config.clone();
        if let Some(c) = &given {
            mapping::check_servable(c)?;
        }
        let mut settings = match &given {
            Some(c) => mapping::session_settings(c)?,
            None => onnx::SessionSettings::default(),
        };
        if settings.intra_op_threads == 0 {
            settings.intra_op_threads = options.cpu_threads;
        }
        let device = placed(device, given.as_ref());
        if let Device::Cuda(_) = &device {
            let label = device.label();
            settings.cuda_device = label.strip_prefix("cuda:").and_then(|n| n.parse().ok());
        }
        let model = onnx::OnnxModel::load(path, &settings).map_err(|e| e.to_string())?;
        let config = given.unwrap_or_else(|| completed(&model, options.max_batch_size));
        let signature = mapping::signature(&config, model.inputs(), model.outputs())?;
        let (input_reshape, output_reshape) = reshapes(&config);
        let metadata = metadata(&signature);
        let mut backend = OnnxBackend {
            model,
            signature,
            input_reshape,
            output_reshape,
            metadata,
            device,
        };
        let model_dir = path.parent().and_then(Path::parent).unwrap_or(path);
        backend.run_warmup(&config.model_warmup, model_dir)?;
        Ok(backend)
    }

    /// Runs the configuration's `model_warmup` requests, each `count` times: a version is
    /// ready only once they have run.
    fn run_warmup(&mut self, warmups: &[Warmup], model_dir: &Path) -> Result<(), String> {
        let outputs: Vec<String> = self
            .signature
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .collect();
        let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
        for (i, w) in warmups.iter().enumerate() {
            let why = |e: String| format!("model_warmup {i} ({:?}): {e}", w.name);
            let inputs = w
                .inputs
                .iter()
                .map(|(name, input)| {
                    warmup::tensor(name, input, w.batch_size, self.signature.batched, model_dir)
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(why)?;
            if w.count > warmup::MAX_COUNT {
                return Err(why(format!(
                    "count {} is more than {}",
                    w.count,
                    warmup::MAX_COUNT
                )));
            }
            for _ in 0..w.count.max(1) {
                models::Model::forward_tensors(self, &inputs, &outputs)
                    .map_err(|e| why(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// `t`'s shape as `dims` give it past the batch dimension, a `-1` among them standing for
    /// whatever the elements of a row leave.
    fn shape_as(&self, t: &Tensor, dims: &[i64]) -> Result<Vec<usize>, ModelError> {
        let (rows, rest) = match (self.signature.batched, t.shape.split_first()) {
            (true, Some((rows, rest))) => (Some(*rows), rest),
            _ => (None, &t.shape[..]),
        };
        let per_row = rest.iter().product();
        let resolved = resolve(dims, per_row).ok_or_else(|| {
            ModelError::Backend(format!(
                "{:?}: shape {:?} cannot take the shape {dims:?} (config.pbtxt's reshape)",
                t.name, t.shape
            ))
        })?;
        Ok(rows.into_iter().chain(resolved).collect())
    }
}

/// Where the model runs: the server's device, but the CPU where every `instance_group` of
/// its configuration says `KIND_CPU` (Triton places those on the CPU whatever GPUs exist).
fn placed(device: &Device, config: Option<&ModelConfig>) -> Device {
    let groups = config.map_or(&[][..], |c| c.instance_group.as_slice());
    match !groups.is_empty() && groups.iter().all(|g| g.kind == "KIND_CPU") {
        true => Device::Cpu,
        false => device.clone(),
    }
}

/// A configuration for a model without config.pbtxt, as Triton completes one: a batching
/// model when every input and output leads with a variable dimension.
fn completed(model: &onnx::OnnxModel, max_batch_size: usize) -> ModelConfig {
    let leads_variable = |t: &[TensorSpec]| t.iter().all(|s| s.dims.first() == Some(&-1));
    let batches = leads_variable(model.inputs()) && leads_variable(model.outputs());
    ModelConfig {
        max_batch_size: if batches {
            max_batch_size.max(1) as i32
        } else {
            0
        },
        ..ModelConfig::default()
    }
}

/// `dims` for `per_row` elements: as given where they hold exactly that many, with a single
/// `-1` standing for what the others leave.
fn resolve(dims: &[i64], per_row: usize) -> Option<Vec<usize>> {
    let known = dims
        .iter()
        .filter(|&&d| d >= 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d as usize))?;
    let free = match dims.iter().filter(|&&d| d < 0).count() {
        0 if known == per_row => None,
        1 if known > 0 && per_row.is_multiple_of(known) => Some(per_row / known),
        _ => return None,
    };
    Some(
        dims.iter()
            .map(|&d| if d < 0 { free.unwrap_or(0) } else { d as usize })
            .collect(),
    )
}

/// The graph's shapes of reshaped inputs; the served dims of reshaped outputs, which the
/// graph's output is reshaped back to.
type Reshapes = HashMap<String, Vec<i64>>;

fn reshapes(config: &ModelConfig) -> (Reshapes, Reshapes) {
    let inputs = config
        .input
        .iter()
        .filter_map(|i| Some((i.name.clone(), i.reshape.as_ref()?.shape.clone())));
    let outputs = config
        .output
        .iter()
        .filter(|o| o.reshape.is_some())
        .map(|o| (o.name.clone(), o.dims.clone()));
    (inputs.collect(), outputs.collect())
}

fn metadata(signature: &Signature) -> ModelMetadata {
    let specs = |t: &[TensorSpec]| {
        t.iter()
            .map(|s| models::TensorSpec {
                name: s.name.clone(),
                datatype: s.dtype.name(),
                shape: s.protocol_shape(signature.batched),
            })
            .collect()
    };
    ModelMetadata {
        inputs: specs(&signature.inputs),
        outputs: specs(&signature.outputs),
    }
}

impl models::Model for OnnxBackend {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn input(&self) -> InputKind {
        InputKind::Tensors(self.signature.clone())
    }

    fn output_width(&self) -> usize {
        self.signature.outputs.len()
    }

    fn forward(&mut self, _: Batch<'_>, _: &mut [f32]) -> Result<(), ModelError> {
        Err(ModelError::WrongInput(
            "an ONNX model runs named tensors, not rows or texts".into(),
        ))
    }

    fn forward_tensors(
        &mut self,
        inputs: &[Tensor],
        outputs: &[&str],
    ) -> Result<Vec<Tensor>, ModelError> {
        let shapes = inputs
            .iter()
            .map(|t| match self.input_reshape.get(&t.name) {
                Some(dims) => self.shape_as(t, dims),
                None => Ok(t.shape.clone()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let results = self
            .model
            .run(inputs, &shapes, outputs)
            .map_err(|e| ModelError::Backend(e.to_string()))?;
        results
            .into_iter()
            .map(|mut t| {
                if let Some(dims) = self.output_reshape.get(&t.name) {
                    t.shape = self.shape_as(&t, dims)?;
                }
                Ok(t)
            })
            .collect()
    }
}
