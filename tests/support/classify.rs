//! Helpers for the classifier tests: a repository of classifiers, logits of the same models
//! run in this process, and answers read from the endpoints.

use std::path::Path;

use kernels::Device;
use models::encoder::synthetic::{SyntheticSpec, write_synthetic};
use models::encoder::{Encoder, PackedTokens, TextTokenizer, Truncation};
use serde_json::Value;

use super::{Server, TempDir};

/// A repository with the classifier `nli` (three labels), the cross-encoder `rerank` (one)
/// and the embedding model `enc`.
pub fn start_classifiers() -> (Server, TempDir) {
    let repo = TempDir::new("classify");
    for (model, labels, seed) in [("nli", 3, 21), ("rerank", 1, 22), ("enc", 0, 23)] {
        let spec = SyntheticSpec {
            labels,
            seed,
            ..SyntheticSpec::default()
        };
        write_synthetic(&repo.path().join(model).join("1"), &spec).unwrap();
    }
    // These tests are about answers, not admission: a budget that a busy test machine
    // cannot make a long rerank list miss (tests/text_serving.rs does the same).
    std::fs::write(repo.path().join("rerank/config.toml"), "p99_ms = 2000\n").unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    (server, repo)
}

/// One input: a text or a pair.
pub enum Seq<'a> {
    One(&'a str),
    Pair(&'a str, &'a str),
}

/// The logits of `seqs` from the model in `dir`, run in this process, cut at the server's
/// limit for it: its 64 positions (a classifier's folder has no sentence_bert_config.json).
pub fn logits_here(dir: &Path, seqs: &[Seq]) -> Vec<Vec<f32>> {
    logits_cut_here(dir, seqs, Truncation::Right)
}

/// As [`logits_here`], with over-long inputs cut as `truncation` says.
pub fn logits_cut_here(dir: &Path, seqs: &[Seq], truncation: Truncation) -> Vec<Vec<f32>> {
    let tokenizer = TextTokenizer::from_dir(dir, 64).unwrap();
    let mut encoder = Encoder::load(dir, &Device::Cpu).unwrap();
    let mut packed = PackedTokens::new();
    for s in seqs {
        let encoded = match s {
            Seq::One(t) => tokenizer.encode(t, truncation),
            Seq::Pair(a, b) => tokenizer.encode_pair(a, b, truncation),
        };
        packed.push(&encoded.unwrap());
    }
    let width = encoder.output_width();
    let mut out = vec![0.0; seqs.len() * width];
    encoder.forward_packed(&packed, &mut out).unwrap();
    out.chunks(width).map(<[f32]>::to_vec).collect()
}

pub fn assert_near(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
        "{what}: {got} vs {want}"
    );
}

pub fn ok(server: &Server, path: &str, body: &Value) -> Value {
    let r = server.post_json(path, body);
    assert_eq!(r.status, 200, "{path} {body}: {}", r.text());
    r.json()
}

/// `(label, score)` of one `/predict` answer, in its order.
pub fn labelled(answer: &Value) -> Vec<(String, f64)> {
    answer
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["label"].as_str().unwrap().into(),
                e["score"].as_f64().unwrap(),
            )
        })
        .collect()
}
