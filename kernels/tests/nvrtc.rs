//! Every `.cu` source compiles for the GPUs we target. NVRTC needs no GPU, so this runs in CI
//! (which installs NVIDIA's NVRTC wheel and sets TANDEM_REQUIRE_NVRTC=1 so that a missing
//! library fails rather than skips).

use kernels::cuda::sources::{ALL, compile, nvrtc_available};

#[test]
fn every_kernel_source_compiles_for_sm_90() {
    if !nvrtc_available() {
        assert!(
            std::env::var_os("TANDEM_REQUIRE_NVRTC").is_none(),
            "TANDEM_REQUIRE_NVRTC is set but libnvrtc.so.13 cannot be loaded (LD_LIBRARY_PATH?)"
        );
        kernels::cuda::report_skip(
            "every_kernel_source_compiles_for_sm_90",
            "NVRTC (libnvrtc.so.13) not found",
        );
        return;
    }
    for source in ALL {
        let ptx = compile(source, "sm_90").unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        for function in source.functions {
            assert!(
                text.contains(&format!(".entry {function}(")),
                "{}.cu: no kernel named {function} in the PTX",
                source.name
            );
        }
    }
}

#[test]
fn a_broken_source_is_an_error_with_the_compiler_log() {
    if !nvrtc_available() {
        kernels::cuda::report_skip(
            "a_broken_source_is_an_error_with_the_compiler_log",
            "NVRTC (libnvrtc.so.13) not found",
        );
        return;
    }
    let broken = kernels::cuda::KernelSource {
        name: "broken",
        code: "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }",
        functions: &["k"],
    };
    let err = compile(&broken, "sm_90").unwrap_err().to_string();
    assert!(
        err.contains("broken.cu") && err.contains("undefined_name"),
        "{err}"
    );
}
