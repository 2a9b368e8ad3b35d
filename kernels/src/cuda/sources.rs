//! Our CUDA kernel sources, one `.cu` file per op family under `kernels/cuda/`, embedded at
//! build time and compiled by NVRTC at run time (once per device, see [`super::CudaDevice`]).

use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::KernelError;

/// One `.cu` file and the `extern "C"` kernels it defines.
#[derive(Debug)]
pub struct KernelSource {
    pub name: &'static str,
    pub code: &'static str,
    pub functions: &'static [&'static str],
}

pub const CONVERT: KernelSource = KernelSource {
    name: "convert",
    code: include_str!("../../cuda/convert.cu"),
    functions: &["f32_to_f16", "f32_to_bf16"],
};

pub const BIAS_ACT: KernelSource = KernelSource {
    name: "bias_act",
    code: include_str!("../../cuda/bias_act.cu"),
    functions: &["bias_act_f32", "bias_act_to_f16", "bias_act_to_bf16"],
};

pub const TRAIN: KernelSource = KernelSource {
    name: "train",
    code: include_str!("../../cuda/train.cu"),
    functions: &["relu_backward", "softmax_xent", "column_sums", "adam_step"],
};

pub const ENCODER: KernelSource = KernelSource {
    name: "encoder",
    code: include_str!("../../cuda/encoder.cu"),
    functions: &[
        "embed",
        "add_layer_norm",
        "bias_gelu",
        "attention",
        "pool",
        "add_in_place",
        "gelu_gate",
        "rotary",
    ],
};

/// Every source, so that a test can compile them all (CI does, without a GPU).
pub const ALL: &[&KernelSource] = &[&CONVERT, &BIAS_ACT, &TRAIN, &ENCODER];

/// Whether NVRTC can be loaded. cudarc panics on a call into a library that is absent, so
/// every path that compiles checks this first.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library under its known names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles one source to PTX for `arch` (for example `sm_90`).
pub fn compile(source: &KernelSource, arch: &str) -> Result<Ptx, KernelError> {
    if !nvrtc_available() {
        return Err(KernelError::CudaUnavailable(
            "NVRTC (libnvrtc.so.13) was not found; install nvidia-cuda-nvrtc or add its lib folder to LD_LIBRARY_PATH".into(),
        ));
    }
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        name: Some(format!("{}.cu", source.name)),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source.code, opts).map_err(|e| KernelError::Compile {
        module: source.name,
        arch: arch.to_string(),
        log: e.to_string(),
    })
}
