//! The multilayer perceptron: ReLU between layers, none after the last.

mod cpu;
mod cuda;

use std::path::Path;

use kernels::Device;

use crate::{
    Batch, Checkpoint, INPUT_NAME, InputKind, LoadError, LoadOptions, Model, ModelError,
    ModelMetadata, OUTPUT_NAME, TensorSpec,
};

/// An MLP placed on one device, ready to run.
pub struct Mlp {
    metadata: ModelMetadata,
    device: Device,
    dims: Vec<usize>,
    backend: Backend,
}

enum Backend {
    Cpu(cpu::CpuMlp),
    Cuda(Box<cuda::CudaMlp>),
}

impl Mlp {
    /// Reads, validates and places a safetensors checkpoint.
    pub fn load(path: &Path, device: &Device) -> Result<Mlp, LoadError> {
        Mlp::load_with(path, device, LoadOptions::default())
    }

    /// [`Mlp::load`], placed as `options` say.
    pub fn load_with(path: &Path, device: &Device, options: LoadOptions) -> Result<Mlp, LoadError> {
        Mlp::with_options(&Checkpoint::read(path)?, device, options)
    }

    pub fn new(checkpoint: &Checkpoint, device: &Device) -> Result<Mlp, LoadError> {
        Mlp::with_options(checkpoint, device, LoadOptions::default())
    }

    /// [`Mlp::new`], placed as `options` say.
    pub fn with_options(
        checkpoint: &Checkpoint,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Mlp, LoadError> {
        let dims = checkpoint.dims();
        let backend = match device {
            Device::Cpu => Backend::Cpu(cpu::CpuMlp::new(checkpoint, options.cpu_precision)?),
            Device::Cuda(d) => Backend::Cuda(Box::new(cuda::CudaMlp::new(checkpoint, d.clone())?)),
        };
        let spec = |name: &str, width: usize| TensorSpec {
            name: name.to_string(),
            datatype: "FP32",
            shape: vec![-1, width as i64],
        };
        Ok(Mlp {
            metadata: ModelMetadata {
                inputs: vec![spec(INPUT_NAME, dims[0])],
                outputs: vec![spec(OUTPUT_NAME, dims[dims.len() - 1])],
            },
            device: device.clone(),
            dims,
            backend,
        })
    }

    /// `[in, hidden..., out]`.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// On the CPU, how many threads of the current rayon pool a forward pass may use.
    pub fn set_threads(&mut self, threads: usize) {
        if let Backend::Cpu(m) = &mut self.backend {
            m.threads = threads.max(1);
        }
    }
}

impl Mlp {
    /// Values per row of the input and of the output.
    pub fn input_width(&self) -> usize {
        self.dims[0]
    }

    pub fn output_width(&self) -> usize {
        self.dims[self.dims.len() - 1]
    }

    /// Multiply-adds per row, for throughput figures.
    pub fn macs_per_row(&self) -> u64 {
        self.dims.windows(2).map(|w| (w[0] * w[1]) as u64).sum()
    }

    /// Runs `rows` rows of `input` (row-major `[rows, input_width]`) and writes
    /// `[rows, output_width]` into `output`.
    pub fn forward_rows(
        &mut self,
        input: &[f32],
        rows: usize,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        let (inw, outw) = (self.input_width(), self.output_width());
        if input.len() != rows * inw {
            return Err(ModelError::InputSize {
                rows,
                width: inw,
                expected: rows * inw,
                given: input.len(),
            });
        }
        if output.len() != rows * outw {
            return Err(ModelError::OutputSize {
                expected: rows * outw,
                given: output.len(),
            });
        }
        if rows == 0 {
            return Ok(());
        }
        match &mut self.backend {
            Backend::Cpu(m) => m.forward(input, rows, output),
            Backend::Cuda(m) => m.forward(input, rows, output),
        }
    }
}

impl Model for Mlp {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn input(&self) -> InputKind {
        InputKind::Dense {
            width: self.input_width(),
        }
    }

    fn output_width(&self) -> usize {
        Mlp::output_width(self)
    }

    fn forward(&mut self, batch: Batch<'_>, output: &mut [f32]) -> Result<(), ModelError> {
        match batch {
            Batch::Dense { values, rows } => self.forward_rows(values, rows, output),
            Batch::Tokens(_) => Err(ModelError::WrongInput(
                "an MLP takes rows of numbers, not tokens".into(),
            )),
        }
    }
}

/// The activation after layer `i` of `n`: ReLU between layers, none after the last.
pub(crate) fn activation(i: usize, n: usize) -> kernels::Activation {
    if i + 1 < n {
        kernels::Activation::Relu
    } else {
        kernels::Activation::Identity
    }
}
