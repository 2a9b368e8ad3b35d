//! Decoder embedders (Qwen3, Qwen2, Gemma3 as EmbeddingGemma) served: the fixtures of tests/fixtures/decoders (made
//! by tests/python/make_decoder_models.py with transformers and sentence-transformers) in
//! a repository, answered through v2, OpenAI, TEI and Cohere with their prompts, in one
//! request of many texts, cut to fewer dimensions; and a text past the context cut or
//! refused as the request says.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::text::{cosine, embeddings, v2};
use crate::support::*;

const DECODERS: [&str; 3] = ["qwen3", "qwen2", "gemma3"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/decoders")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => drop(std::fs::copy(entry.path(), target).unwrap()),
        }
    }
}

/// A repository of both decoders, each version 1, with a budget a busy machine cannot make
/// a request miss and Matryoshka cuts down to 8 values.
fn repository() -> TempDir {
    let repo = TempDir::new("decoders");
    for name in DECODERS {
        copy_dir(&fixture(name), &repo.path().join(name).join("1"));
        std::fs::write(
            repo.path().join(name).join("config.toml"),
            "p99_ms = 2000\nmin_dimensions = 8\n",
        )
        .unwrap();
    }
    repo
}

/// The fixture's cases: (text, prompt name, sentence-transformers' embedding).
fn cases(name: &str) -> Vec<(String, Option<String>, Vec<f64>)> {
    let expected = std::fs::read(fixture(name).join("expected.json")).unwrap();
    let json: Value = serde_json::from_slice(&expected).unwrap();
    (json["cases"].as_array().unwrap().iter())
        .map(|c| {
            let text = c["text"].as_str().unwrap().to_string();
            let prompt = c["prompt_name"].as_str().map(str::to_string);
            let embedding = serde_json::from_value(c["embedding"].clone()).unwrap();
            (text, prompt, embedding)
        })
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], context: &str) {
    let c = cosine(got, want);
    assert!(c >= 0.99999, "{context}: cosine {c:.8}");
}

/// Every case through each route that embeds, with its prompt by name (Cohere's by its
/// input type), one request a case; then all the cases without a prompt in one request.
/// (The empty text, which the models' tests embed, is a 400 here as for every model.)
#[test]
fn decoders_embed_as_sentence_transformers_through_every_route() {
    let repo = repository();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    for name in DECODERS {
        let mut cases = cases(name);
        cases.retain(|c| !c.0.is_empty());
        for (text, prompt, want) in &cases {
            // Without a prompt: no name, and a Cohere input type the folder has no prompt
            // of (its default then, which is none).
            let name_of = |mut body: Value| {
                if let Some(prompt) = prompt {
                    body["prompt_name"] = json!(prompt);
                }
                body
            };
            let mut v2_body = v2(&[text]);
            v2_body["parameters"] = name_of(json!({}));
            let cohere_type = match prompt.as_deref() {
                Some("query") => "search_query",
                _ => "classification",
            };
            let requests = [
                (format!("/v2/models/{name}/infer"), v2_body),
                (
                    "/v1/embeddings".into(),
                    name_of(json!({"model": name, "input": text})),
                ),
                (
                    "/embed".into(),
                    name_of(json!({"model": name, "inputs": text})),
                ),
                (
                    "/v1/embed".into(),
                    json!({"model": name, "texts": [text], "input_type": cohere_type}),
                ),
            ];
            for (route, body) in requests {
                let r = server.post_json(&route, &body);
                assert_eq!(r.status, 200, "{name} {route}: {}", r.text());
                assert_close(
                    &embeddings(&r)[0],
                    want,
                    &format!("{name} {route} {text:.20}"),
                );
            }
        }
        let plain: Vec<&(String, Option<String>, Vec<f64>)> =
            cases.iter().filter(|c| c.1.is_none()).collect();
        let texts: Vec<&str> = plain.iter().map(|c| c.0.as_str()).collect();
        let r = server.post_json("/v1/embeddings", &json!({"model": name, "input": texts}));
        assert_eq!(r.status, 200, "{}", r.text());
        for (got, case) in embeddings(&r).iter().zip(&plain) {
            assert_close(got, &case.2, &format!("{name} in one request"));
        }
    }
}

/// OpenAI's `dimensions`: the first values of the embedding, normalised again.
#[test]
fn decoder_embeddings_cut_to_fewer_dimensions() {
    let repo = repository();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let (text, _, full) = cases("qwen3").swap_remove(1);
    let body = json!({"model": "qwen3", "input": text, "dimensions": 16});
    let r = server.post_json("/v1/embeddings", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let got = &embeddings(&r)[0];
    assert_eq!(got.len(), 16);
    assert_close(got, &full[..16], "qwen3 cut to 16");
    let norm: f64 = got.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{norm}");
}

/// A text past the context: cut (to what sentence-transformers embeds) unless the request
/// says not to, then a 413 with its count; the server serves on.
#[test]
fn a_text_past_a_decoders_context_is_cut_or_refused_as_asked() {
    let repo = repository();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let (long, _, want) = cases("qwen3").pop().unwrap();
    let r = server.post_json("/embed", &json!({"model": "qwen3", "inputs": long}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_close(&embeddings(&r)[0], &want, "qwen3 cut");
    let refused = json!({"model": "qwen3", "inputs": long, "truncate": false});
    let r = server.post_json("/embed", &refused);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("at most 512"), "{}", r.text());
    let r = server.post_json("/embed", &json!({"model": "qwen3", "inputs": "still here"}));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A decoder folder that cannot serve (scaled rotary embeddings, which tandem would run
/// differently) is not ready, with the key named, and the others in the repository serve.
#[test]
fn a_decoder_that_cannot_serve_says_why_and_the_others_serve() {
    let repo = repository();
    let broken = repo.path().join("scaled/1");
    copy_dir(&fixture("qwen3"), &broken);
    let config = broken.join("config.json");
    let mut json: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    json["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0});
    std::fs::write(&config, json.to_string()).unwrap();
    let server = Server::spawn(&["--model-repository", repo.path().to_str().unwrap()]);
    let reported = poll_until(std::time::Duration::from_secs(30), || {
        let index = server.post_json("/v2/repository/index", &json!({}));
        let entries: Vec<Value> = serde_json::from_slice(&index.body).unwrap_or_default();
        entries.iter().any(|e| {
            e["name"] == "scaled"
                && e["state"] == "UNAVAILABLE"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("rope_scaling"))
        })
    });
    assert!(reported, "{}", server.log());
    assert_ne!(server.get("/v2/models/scaled/ready").status, 200);
    assert!(poll_until(std::time::Duration::from_secs(30), || {
        server.get("/v2/models/qwen3/ready").status == 200
    }));
    let r = server.post_json(
        "/v1/embeddings",
        &json!({"model": "qwen3", "input": "still here"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}
