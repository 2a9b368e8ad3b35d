//! Helpers for the text encoder tests: the synthetic BERT and all-MiniLM-L6-v2's folders,
//! embeddings read from any endpoint's answer, and the same texts through every endpoint.

use std::path::{Path, PathBuf};

use models::encoder::synthetic::{SyntheticSpec, write_synthetic};
use serde_json::{Value, json};

use super::{HttpResponse, Server, TempDir};

pub fn skip(test: &str, reason: &str) {
    assert!(
        std::env::var_os("TANDEM_REQUIRE_TOOLS").is_none(),
        "{test}: {reason} (TANDEM_REQUIRE_TOOLS is set)"
    );
    kernels::cuda::report_skip(test, reason);
}

/// all-MiniLM-L6-v2's folder, where scripts/fetch-models.sh puts it.
pub fn minilm() -> Option<PathBuf> {
    let dir = std::env::var_os("TANDEM_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("TANDEM_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/tandem")
                });
            cache.join("models/all-minilm-l6-v2")
        });
    dir.join("model.safetensors").is_file().then_some(dir)
}

pub fn synthetic(dir: &Path, seed: u64) {
    let spec = SyntheticSpec {
        seed,
        ..SyntheticSpec::default()
    };
    write_synthetic(dir, &spec).unwrap();
}

/// The synthetic BERT with a Dense module after pooling (32 wide to 12, tanh).
pub fn synthetic_with_dense(dir: &Path, seed: u64) {
    use models::encoder::dense_module::DenseActivation;
    use models::encoder::synthetic::SyntheticDense;
    let spec = SyntheticSpec {
        seed,
        dense: vec![SyntheticDense {
            out_features: 12,
            bias: true,
            activation: DenseActivation::Tanh,
        }],
        ..SyntheticSpec::default()
    };
    write_synthetic(dir, &spec).unwrap();
}

/// The synthetic BERT as a sparse encoder (SPLADE, max pooling).
pub fn synthetic_sparse(dir: &Path, seed: u64) {
    let spec = SyntheticSpec {
        seed,
        sparse: Some(models::encoder::SparsePooling::Max),
        ..SyntheticSpec::default()
    };
    write_synthetic(dir, &spec).unwrap();
}

pub fn start_synthetic() -> (Server, TempDir) {
    let repo = TempDir::new("text");
    synthetic(&repo.path().join("enc/1"), 7);
    // These tests are about answers, not admission: a budget that a test machine busy with
    // the other tests' servers and Python clients cannot make a request miss (a 429 there
    // would read as a wrong answer).
    std::fs::write(repo.path().join("enc/config.toml"), "p99_ms = 2000\n").unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    (server, repo)
}

/// The ids of the first text's tokens in a `/tokenize` answer.
pub fn token_ids(r: &HttpResponse) -> Vec<u64> {
    let tokens = r.json()[0].as_array().cloned().unwrap_or_default();
    tokens.iter().map(|t| t["id"].as_u64().unwrap()).collect()
}

pub fn embeddings(r: &HttpResponse) -> Vec<Vec<f64>> {
    let j = r.json();
    let rows = if let Some(data) = j["data"].as_array() {
        data.iter().map(|d| d["embedding"].clone()).collect()
    } else if let Some(outputs) = j["outputs"].as_array() {
        let width = outputs[0]["shape"][1].as_u64().unwrap() as usize;
        let flat: Vec<Value> = outputs[0]["data"].as_array().unwrap().clone();
        flat.chunks(width)
            .map(|c| Value::Array(c.to_vec()))
            .collect()
    } else if let Some(embeddings) = j.get("embeddings") {
        // Cohere's: floats, by type or not.
        let floats = embeddings.get("float").unwrap_or(embeddings);
        floats.as_array().unwrap().clone()
    } else {
        j.as_array().unwrap().clone()
    };
    float_rows(&Value::Array(rows))
}

/// An array of arrays of numbers.
pub fn float_rows(rows: &Value) -> Vec<Vec<f64>> {
    (rows.as_array().unwrap().iter())
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        })
        .collect()
}

pub fn v2(texts: &[&str]) -> Value {
    json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [texts.len()], "data": texts}]})
}

pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// Embeddings of `texts` through each endpoint, in the same order.
pub fn through_every_endpoint(server: &Server, model: &str, texts: &[&str]) -> [Vec<Vec<f64>>; 3] {
    let ok = |r: HttpResponse| {
        assert_eq!(r.status, 200, "{}", r.text());
        embeddings(&r)
    };
    [
        ok(server.post_json(&format!("/v2/models/{model}/infer"), &v2(texts))),
        ok(server.post_json("/v1/embeddings", &json!({"model": model, "input": texts}))),
        ok(server.post_json("/embed", &json!({"inputs": texts, "model": model}))),
    ]
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Standard base64 (with `=` padding) to bytes.
pub fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sextets: Vec<u32> = (text.bytes().filter(|&b| b != b'='))
        .map(|b| ALPHABET.iter().position(|&a| a == b).expect("base64") as u32)
        .collect();
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for chunk in sextets.chunks(4) {
        let word = chunk.iter().fold(0u32, |w, s| (w << 6) | s) << (6 * (4 - chunk.len()));
        out.extend_from_slice(&word.to_be_bytes()[1..chunk.len()]);
    }
    out
}
