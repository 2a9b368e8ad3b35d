//! One ONNX Runtime session: a replica of a model, owned by one worker thread.

use std::path::Path;

use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use seam::{Tensor, TensorSpec};

use crate::{OnnxError, convert, runtime};

/// How a session is made: Triton's ONNX Runtime `parameters` and `instance_group` mapped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionSettings {
    /// Threads inside one operator (0: ONNX Runtime's default, one per core).
    pub intra_op_threads: usize,
    /// Threads across independent operators (0: ONNX Runtime's default).
    pub inter_op_threads: usize,
    /// Triton's `optimization { graph { level } }`: -1 basic, 1 extended, else all.
    pub graph_level: Option<i32>,
    /// The GPU to run on through the CUDA execution provider; `None` runs on the CPU.
    pub cuda_device: Option<i32>,
    /// A bound on the CUDA execution provider's memory arena, in bytes.
    pub gpu_mem_limit: Option<usize>,
    /// ONNX Runtime's own session configuration entries (`session.intra_op.allow_spinning`,
    /// ...), applied as given.
    pub config_entries: Vec<(String, String)>,
}

pub struct OnnxModel {
    session: Session,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
}

fn load_error(path: &Path, e: impl std::fmt::Display) -> OnnxError {
    OnnxError::Load {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl OnnxModel {
    /// Makes a session of `path`; the runtime must have been loaded ([`runtime::init`]).
    pub fn load(path: &Path, settings: &SessionSettings) -> Result<OnnxModel, OnnxError> {
        let environment = runtime::environment()?;
        let mut builder = Session::builder(environment).map_err(|e| load_error(path, e))?;
        // Triton's levels: -1 basic, 1 extended, anything else every optimisation.
        let level = match settings.graph_level {
            Some(-1) => GraphOptimizationLevel::Level1,
            Some(1) => GraphOptimizationLevel::Level2,
            _ => GraphOptimizationLevel::All,
        };
        builder = builder
            .with_optimization_level(level)
            .map_err(|e| load_error(path, e))?;
        if settings.intra_op_threads > 0 {
            builder = builder
                .with_intra_threads(settings.intra_op_threads)
                .map_err(|e| load_error(path, e))?;
        }
        if settings.inter_op_threads > 0 {
            builder = builder
                .with_inter_threads(settings.inter_op_threads)
                .map_err(|e| load_error(path, e))?;
        }
        for (key, value) in &settings.config_entries {
            builder = builder
                .with_config_entry(key, value)
                .map_err(|e| load_error(path, e))?;
        }
        if let Some(device) = settings.cuda_device {
            let mut cuda = ort::ep::CUDA::default().with_device_id(device);
            if let Some(limit) = settings.gpu_mem_limit {
                cuda = cuda.with_memory_limit(limit);
            }
            builder = builder
                .with_execution_providers([cuda.build().error_on_failure()])
                .map_err(|e| load_error(path, e))?;
        }
        let session = builder
            .commit_from_file(path)
            .map_err(|e| load_error(path, e))?;
        let specs = |outlets: &[ort::value::Outlet], role| {
            outlets
                .iter()
                .map(|o| convert::spec(o.name(), o.dtype(), role))
                .collect::<Result<Vec<_>, _>>()
        };
        let inputs = specs(session.inputs(), "input")?;
        let outputs = specs(session.outputs(), "output")?;
        Ok(OnnxModel {
            session,
            inputs,
            outputs,
        })
    }

    /// The graph's inputs, with their whole shapes (a batch dimension included).
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    /// Runs the graph on `inputs`, each read in the shape of `shapes` at its index (its own,
    /// or another of as many elements), and returns the outputs named in `wanted`, in that
    /// order.
    pub fn run(
        &mut self,
        inputs: &[Tensor],
        shapes: &[Vec<usize>],
        wanted: &[&str],
    ) -> Result<Vec<Tensor>, OnnxError> {
        let values = inputs
            .iter()
            .zip(shapes)
            .map(|(t, shape)| Ok((t.name.as_str(), convert::input(t, shape)?)))
            .collect::<Result<Vec<_>, OnnxError>>()?;
        let outputs = self
            .session
            .run(values)
            .map_err(|e| OnnxError::Run(e.to_string()))?;
        wanted
            .iter()
            .map(|name| {
                let value = outputs
                    .get(name)
                    .ok_or_else(|| OnnxError::Run(format!("the graph gave no output {name:?}")))?;
                convert::output(name, value)
            })
            .collect()
    }
}
