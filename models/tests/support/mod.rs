//! What the model tests need from outside: all-MiniLM-L6-v2's folder, Python, scratch
//! folders, and the SKIPPED line (or, with TANDEM_REQUIRE_TOOLS set, the failure) when one is
//! missing.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use models::encoder::synthetic::{SyntheticSpec, write_synthetic};

pub mod embeddings;
pub mod folder;
pub mod parity;
pub mod precision;

pub fn require_tools() -> bool {
    std::env::var_os("TANDEM_REQUIRE_TOOLS").is_some()
}

/// Says why `test` skips, or fails it when TANDEM_REQUIRE_TOOLS is set.
pub fn skip<T>(test: &str, reason: &str) -> Option<T> {
    assert!(
        !require_tools(),
        "{test}: {reason} (TANDEM_REQUIRE_TOOLS is set)"
    );
    kernels::cuda::report_skip(test, reason);
    None
}

/// all-MiniLM-L6-v2's folder: $TANDEM_MINILM_DIR, or where scripts/fetch-models.sh puts it.
pub fn minilm_dir(test: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("TANDEM_MINILM_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let cache = std::env::var_os("TANDEM_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/tandem")
                });
            cache.join("models/all-minilm-l6-v2")
        }
    };
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        skip(
            test,
            &format!(
                "no all-MiniLM-L6-v2 in {} (run scripts/fetch-models.sh)",
                dir.display()
            ),
        )
    }
}

pub fn python(test: &str) -> Option<PathBuf> {
    match std::env::var_os("TANDEM_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None => skip(test, "TANDEM_PYTHON is not set (scripts/test.sh sets it)"),
    }
}

pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python")
        .join(name)
}

/// A folder under the system's temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tandem-encoder-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs tests/python/bert_reference.py with `args` and `stdin`, returning its stdout.
pub fn run_python(python: &Path, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    run_script(python, "bert_reference.py", args, stdin)
}

/// Runs tests/python/`name` with `args`, feeding `stdin`; its stdout.
pub fn run_script(python: &Path, name: &str, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new(python)
        .arg(script(name))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A synthetic BERT folder (see `models::encoder::synthetic`) under a scratch folder.
pub fn synthetic(tag: &str, spec: &SyntheticSpec) -> TempDir {
    let dir = TempDir::new(tag);
    write_synthetic(&dir.0, spec).unwrap();
    dir
}

/// Defines a test module `$name` whose `cpu` test runs `$body` on the CPU and whose `cuda` test
/// runs it on a GPU, or says SKIPPED where there is none.
#[allow(unused_macros)]
macro_rules! on_every_device {
    ($name:ident, |$device:ident, $test:ident| $body:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn cpu() {
                let $device = &Device::Cpu;
                let $test = concat!(stringify!($name), "::cpu");
                $body
            }

            #[test]
            fn cuda() {
                let $test = concat!(stringify!($name), "::cuda");
                if let Some(d) = kernels::cuda::device_for_test($test) {
                    let $device = &Device::Cuda(d);
                    $body
                }
            }
        }
    };
}

#[allow(unused_imports)]
pub(crate) use on_every_device;
