//! Token ids from Python's `tokenizers` (tests/python/tokenizer_parity.py), for the
//! tokenizer tests to compare with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;

use super::skip;

#[derive(serde::Deserialize)]
pub struct PyEncoding {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
}

pub fn python_ids(
    python: &Path,
    tokenizer: &Path,
    max_len: usize,
    cases: &[(String, Option<String>)],
) -> Vec<PyEncoding> {
    let request = serde_json::json!({
        "tokenizer": tokenizer,
        "max_len": max_len,
        "cases": cases
            .iter()
            .flat_map(|(a, b)| {
                [json!(true), json!("left"), json!(false)]
                    .map(|t| json!({"a": a, "b": b, "truncate": t}))
            })
            .collect::<Vec<_>>(),
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/tokenizer_parity.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tokenizer_parity.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn python_for(test: &str) -> Option<PathBuf> {
    match std::env::var_os("TANDEM_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None => skip(test, "TANDEM_PYTHON is not set (scripts/test.sh sets it)"),
    }
}
