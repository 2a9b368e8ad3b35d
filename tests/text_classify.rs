//! Sequence classifiers and cross-encoders served end to end: TEI's `/predict` and
//! `/rerank`, `POST /` and `/info` for a classifier, v2's logits, and huggingface_hub's
//! `text_classification` unchanged. Scores are checked against the same synthetic model
//! run in-process (itself held to the numpy reference in models/tests/encoder.rs), so a
//! pair tokenized or packed wrongly on the way would show.

mod common;

use std::path::Path;
use std::process::Command;

use common::text::skip;
use common::*;
use kernels::Device;
use models::encoder::synthetic::{SyntheticSpec, write_synthetic};
use models::encoder::{Encoder, PackedTokens, TextTokenizer};
use serde_json::{Value, json};

/// A repository with the classifier `nli` (three labels), the cross-encoder `rerank` (one)
/// and the embedding model `enc`.
fn start() -> (Server, TempDir) {
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
enum Seq<'a> {
    One(&'a str),
    Pair(&'a str, &'a str),
}

/// The logits of `seqs` from the model in `dir`, run in this process, cut at the server's
/// limit for it: its 64 positions (a classifier's folder has no sentence_bert_config.json).
fn logits_here(dir: &Path, seqs: &[Seq]) -> Vec<Vec<f32>> {
    let tokenizer = TextTokenizer::from_dir(dir, 64).unwrap();
    let mut encoder = Encoder::load(dir, &Device::Cpu).unwrap();
    let mut packed = PackedTokens::new();
    for s in seqs {
        let encoded = match s {
            Seq::One(t) => tokenizer.encode(t, true),
            Seq::Pair(a, b) => tokenizer.encode_pair(a, b, true),
        };
        packed.push(&encoded.unwrap());
    }
    let width = encoder.output_width();
    let mut out = vec![0.0; seqs.len() * width];
    encoder.forward_packed(&packed, &mut out).unwrap();
    out.chunks(width).map(<[f32]>::to_vec).collect()
}

fn assert_near(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
        "{what}: {got} vs {want}"
    );
}

fn ok(server: &Server, path: &str, body: &Value) -> Value {
    let r = server.post_json(path, body);
    assert_eq!(r.status, 200, "{path} {body}: {}", r.text());
    r.json()
}

/// `(label, score)` of one `/predict` answer, in its order.
fn labelled(answer: &Value) -> Vec<(String, f64)> {
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

/// `/predict` gives every label with its softmax score (or its logit with `raw_scores`),
/// best first, for a text, a pair and a list of both; `POST /` answers as `/predict` for a
/// classifier; v2 serves the same logits as `logits`.
#[test]
fn predict_scores_texts_and_pairs_as_the_model_does() {
    let (server, repo) = start();
    let dir = repo.path().join("nli/1");
    let here = logits_here(
        &dir,
        &[
            Seq::One("a cat runs fast"),
            Seq::Pair("a man is eating", "the dog runs"),
        ],
    );
    let labels = ["contradiction", "entailment", "neutral"];
    let softmax = |l: &[f32]| -> Vec<f64> {
        let e: Vec<f64> = l.iter().map(|v| (*v as f64).exp()).collect();
        e.iter().map(|v| v / e.iter().sum::<f64>()).collect()
    };
    let one = ok(
        &server,
        "/predict",
        &json!({"inputs": "a cat runs fast", "model": "nli"}),
    );
    let got = labelled(&one);
    assert!(
        got.windows(2).all(|w| w[0].1 >= w[1].1),
        "best first: {one}"
    );
    let want = softmax(&here[0]);
    for (label, score) in &got {
        let i = labels.iter().position(|l| l == label).unwrap();
        assert_near(*score, want[i], label);
    }
    let many = ok(
        &server,
        "/predict",
        &json!({"inputs": ["a cat runs fast", ["a man is eating", "the dog runs"]],
                "raw_scores": true, "model": "nli"}),
    );
    assert_eq!(many.as_array().unwrap().len(), here.len(), "{many}");
    for (answer, logits) in many.as_array().unwrap().iter().zip(&here) {
        assert_eq!(labelled(answer).len(), 3, "{answer}");
        for (label, score) in labelled(answer) {
            let i = labels.iter().position(|l| *l == label).unwrap();
            assert_near(score, logits[i] as f64, &label);
        }
    }
    let pair = ok(
        &server,
        "/predict",
        &json!({"inputs": ["a man is eating", "the dog runs"], "model": "nli",
                "parameters": {"top_k": 1, "function_to_apply": "none"}}),
    );
    assert_eq!(labelled(&pair).len(), 1, "top_k: {pair}");
    let best = here[1].iter().copied().fold(f32::MIN, f32::max);
    assert_near(labelled(&pair)[0].1, best as f64, "the pair's best logit");
    let v2 = ok(
        &server,
        "/v2/models/nli/infer",
        &json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                            "data": ["a cat runs fast"]}]}),
    );
    assert_eq!(v2["outputs"][0]["name"], "logits", "{v2}");
    assert_eq!(v2["outputs"][0]["shape"], json!([1, 3]), "{v2}");
    for (got, want) in v2["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&here[0])
    {
        assert_near(got.as_f64().unwrap(), *want as f64, "v2 logit");
    }
}

/// `/rerank` scores each text as the pair (query, text), sigmoid of the cross-encoder's
/// logit, best first, with the text when asked; `/info` calls the model a reranker.
#[test]
fn rerank_orders_texts_by_the_cross_encoders_score() {
    let (server, repo) = start();
    let texts = [
        "the dog runs",
        "a man is eating bread",
        "one two three",
        "a red cat",
    ];
    let query = "a man is eating food";
    let pairs: Vec<Seq> = texts.iter().map(|t| Seq::Pair(query, t)).collect();
    let here = logits_here(&repo.path().join("rerank/1"), &pairs);
    let body = json!({"query": query, "texts": texts, "return_text": true, "model": "rerank"});
    let ranked = ok(&server, "/rerank", &body);
    let ranked = ranked.as_array().unwrap();
    assert_eq!(ranked.len(), texts.len());
    let mut last = f64::INFINITY;
    for r in ranked {
        let index = r["index"].as_u64().unwrap() as usize;
        let score = r["score"].as_f64().unwrap();
        let sigmoid = 1.0 / (1.0 + (-(here[index][0] as f64)).exp());
        assert_near(score, sigmoid, &format!("text {index}"));
        assert_eq!(r["text"], texts[index]);
        assert!(score <= last, "best first: {ranked:?}");
        last = score;
    }
    let raw = ok(
        &server,
        "/rerank",
        &json!({"query": query, "texts": texts, "raw_scores": true, "model": "rerank"}),
    );
    let first = &raw[0];
    assert!(first.get("text").is_none(), "{raw}");
    let index = first["index"].as_u64().unwrap() as usize;
    assert_near(
        first["score"].as_f64().unwrap(),
        here[index][0] as f64,
        "raw",
    );
}

/// With a classifier the only text model, `POST /` is its `/predict` and `/info` gives its
/// labels as TEI does; huggingface_hub's `text_classification` gets the best label.
#[test]
fn a_lone_classifier_answers_tei_root_info_and_huggingface_hub() {
    let repo = TempDir::new("classify-alone");
    let spec = SyntheticSpec {
        labels: 3,
        seed: 21,
        ..SyntheticSpec::default()
    };
    write_synthetic(&repo.path().join("nli/1"), &spec).unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let body = json!({"inputs": "a cat runs fast"});
    let predicted = ok(&server, "/predict", &body);
    let answered = || server.series("tandem_requests_total", &["model=\"nli\"", "code=\"200\""]);
    let before = answered();
    assert_eq!(ok(&server, "/", &body), predicted);
    assert_eq!(answered(), before + 1.0, "POST / counted once");
    let info = server.get("/info").json();
    let want = json!({"classifier": {
        "id2label": {"0": "contradiction", "1": "entailment", "2": "neutral"},
        "label2id": {"contradiction": 0, "entailment": 1, "neutral": 2}}});
    assert_eq!(info["model_type"], want, "{info}");
    let Some(python) = std::env::var_os("TANDEM_PYTHON") else {
        return skip(
            "huggingface_hub",
            "TANDEM_PYTHON not set (scripts/test.sh sets it)",
        );
    };
    let script = "from huggingface_hub import InferenceClient; import sys, json; \
                  r = InferenceClient(model=sys.argv[1]).text_classification(sys.argv[2]); \
                  print(json.dumps([r.label, r.score]))";
    let out = Command::new(python)
        .args([
            "-c",
            script,
            &format!("http://{}", server.addr),
            "a cat runs fast",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got[0], predicted[0]["label"], "{got} vs {predicted}");
    assert_near(
        got[1].as_f64().unwrap(),
        predicted[0]["score"].as_f64().unwrap(),
        "huggingface_hub's score",
    );
}

/// What a classifier cannot do, and what is not one, are clear 400s in TEI's shape; the
/// server keeps serving.
#[test]
fn classification_refusals_are_clear_and_serving_goes_on() {
    let (server, _repo) = start();
    // 100 tokens; a classifier's folder has no sentence_bert_config.json, so its limit is
    // its 64 positions.
    let long = "a cat runs fast and ".repeat(20);
    let cases = [
        (
            "/predict",
            json!({"inputs": "a", "model": "enc"}),
            "gives embeddings",
        ),
        (
            "/rerank",
            json!({"query": "a", "texts": ["b"], "model": "nli"}),
            "3 labels",
        ),
        (
            "/embed",
            json!({"inputs": "a", "model": "nli"}),
            "is a classifier",
        ),
        (
            "/v1/embeddings",
            json!({"input": "a", "model": "rerank"}),
            "is a classifier",
        ),
        (
            "/rerank",
            json!({"query": "a", "texts": [], "model": "rerank"}),
            "1 to 2048",
        ),
        (
            "/rerank",
            json!({"query": "", "texts": ["b"], "model": "rerank"}),
            "empty text",
        ),
        (
            "/predict",
            json!({"inputs": [], "model": "nli"}),
            "1 to 2048",
        ),
        (
            "/predict",
            json!({"inputs": 3, "model": "nli"}),
            "inputs must be a text",
        ),
        (
            "/predict",
            json!({"inputs": long, "model": "nli"}),
            "at most 64 fit",
        ),
        (
            "/rerank",
            json!({"query": "a", "texts": [long], "model": "rerank", "truncate": false}),
            "at most 64 fit",
        ),
        (
            "/predict",
            json!({"inputs": "a", "model": "nli", "parameters": {"function_to_apply": "x"}}),
            "function_to_apply",
        ),
        (
            "/predict",
            json!({"inputs": "a", "model": "nli", "truncation_direction": "Left"}),
            "truncation_direction",
        ),
    ];
    for (path, body, words) in cases {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        assert!(
            r.text().contains(words),
            "{path} {body}: {words:?} in {}",
            r.text()
        );
    }
    let v2 = json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                "data": ["a"]}], "parameters": {"normalize": true}});
    let r = server.post_json("/v2/models/nli/infer", &v2);
    assert_eq!(r.status, 400, "{}", r.text());
    // Every refusal of a request naming nli is counted under it, once: seven above and v2's.
    let counted = server.series("tandem_requests_total", &["model=\"nli\"", "code=\"400\""]);
    assert_eq!(counted, 8.0, "refusals on nli counted");
    ok(&server, "/embed", &json!({"inputs": "a", "model": "enc"}));
}

/// Over-long inputs are cut when asked, as the model's tokenizer cuts them (a pair longest
/// text first); more than 2,048 texts, documents or pairs are refused, counted without
/// being kept.
#[test]
fn long_inputs_are_cut_and_too_many_are_refused() {
    let (server, repo) = start();
    let long = "a cat runs fast and ".repeat(20);
    let query = "the man is eating ".repeat(15);
    let nli = logits_here(&repo.path().join("nli/1"), &[Seq::One(&long)]);
    let cut = ok(
        &server,
        "/predict",
        &json!({"inputs": long, "model": "nli", "truncate": true, "raw_scores": true}),
    );
    let labels = ["contradiction", "entailment", "neutral"];
    for (label, score) in labelled(&cut) {
        let i = labels.iter().position(|l| *l == label).unwrap();
        assert_near(score, nli[0][i] as f64, "cut text");
    }
    let rerank = logits_here(&repo.path().join("rerank/1"), &[Seq::Pair(&query, &long)]);
    let cut = ok(
        &server,
        "/rerank",
        &json!({"query": query, "texts": [long], "model": "rerank", "truncate": true,
                "raw_scores": true}),
    );
    assert_near(
        cut[0]["score"].as_f64().unwrap(),
        rerank[0][0] as f64,
        "cut pair",
    );
    // More than a batch takes (64 by default) runs as several.
    let hundred: Vec<String> = (0..100).map(|i| format!("a cat {}", i % 10)).collect();
    let ranked = ok(
        &server,
        "/v2/rerank",
        &json!({"query": "q", "documents": hundred, "model": "rerank"}),
    );
    assert_eq!(ranked["results"].as_array().unwrap().len(), 100, "{ranked}");
    let many: Vec<&str> = vec!["a"; 2049];
    for (path, body) in [
        ("/predict", json!({"inputs": many, "model": "nli"})),
        (
            "/rerank",
            json!({"query": "q", "texts": many, "model": "rerank"}),
        ),
        (
            "/v2/rerank",
            json!({"query": "q", "documents": many, "model": "rerank"}),
        ),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(r.text().contains("this one 2049"), "{path}: {}", r.text());
    }
}

/// Cohere's rerank API on `/v1/rerank` and `/v2/rerank`: documents as strings or `{text}`
/// objects, `top_n`, `return_documents`, the relevance TEI's `/rerank` gives; and Cohere's
/// own SDK, unchanged, through both.
#[test]
fn cohere_rerank_answers_as_cohere_and_its_sdk_works_unchanged() {
    let (server, _repo) = start();
    let query = "a man is eating food";
    let texts = [
        "the dog runs",
        "a man is eating bread",
        "one two three",
        "a red cat",
    ];
    let tei = ok(
        &server,
        "/rerank",
        &json!({"query": query, "texts": texts, "model": "rerank"}),
    );
    let want: Vec<(u64, f64)> = (tei.as_array().unwrap().iter())
        .map(|r| (r["index"].as_u64().unwrap(), r["score"].as_f64().unwrap()))
        .collect();
    let documents = json!(["the dog runs", {"text": "a man is eating bread"}, "one two three",
                           {"text": "a red cat"}]);
    for path in ["/v1/rerank", "/v2/rerank"] {
        let body = json!({"model": "rerank", "query": query, "documents": documents,
                          "top_n": 3, "return_documents": true, "max_tokens_per_doc": 512});
        let got = ok(&server, path, &body);
        let results = got["results"].as_array().unwrap();
        assert_eq!(results.len(), 3, "top_n: {got}");
        for (r, (index, score)) in results.iter().zip(&want) {
            assert_eq!(r["index"].as_u64().unwrap(), *index, "{path}: {got}");
            assert_near(r["relevance_score"].as_f64().unwrap(), *score, path);
            assert_eq!(r["document"]["text"], texts[*index as usize]);
        }
        assert!(got["usage"]["total_tokens"].as_u64().unwrap() > 0, "{got}");
    }
    let r = server.post_json(
        "/v1/rerank",
        &json!({"model": "nli", "query": "a", "documents": ["b"]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.json()["message"].as_str().unwrap().contains("3 labels"),
        "{}",
        r.text()
    );
    let Some(python) = std::env::var_os("TANDEM_PYTHON") else {
        return skip("cohere", "TANDEM_PYTHON not set (scripts/test.sh sets it)");
    };
    let script = r#"
import json, sys, cohere
url, query, docs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
v2 = cohere.ClientV2(api_key="unused", base_url=url).rerank(
    model="rerank", query=query, documents=docs, top_n=2)
v1 = cohere.Client(api_key="unused", base_url=url).rerank(
    model="rerank", query=query, documents=docs, return_documents=True)
print(json.dumps({
    "v2": [[r.index, r.relevance_score] for r in v2.results],
    "v1": [[r.index, r.relevance_score, r.document.text] for r in v1.results]}))
"#;
    let out = Command::new(python)
        .args(["-c", script, &format!("http://{}", server.addr), query])
        .arg(json!(texts).to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["v2"].as_array().unwrap().len(), 2, "{got}");
    assert_eq!(got["v1"].as_array().unwrap().len(), 4, "{got}");
    for api in ["v1", "v2"] {
        for (r, (index, score)) in got[api].as_array().unwrap().iter().zip(&want) {
            assert_eq!(r[0].as_u64().unwrap(), *index, "{api}: {got}");
            assert_near(r[1].as_f64().unwrap(), *score, api);
        }
    }
    assert_eq!(got["v1"][0][2], texts[want[0].0 as usize], "{got}");
}

/// v2 takes a classifier's pairs as a second BYTES input, `text_pair`, in JSON and in the
/// binary extension (each input's texts from its own part of the binary section, in the
/// header's order); the logits are the pairs' own. Mismatched counts and `text_pair` on a
/// model of embeddings are 400s.
#[test]
fn v2_scores_pairs_from_text_and_text_pair() {
    let (server, repo) = start();
    let (a, b) = (
        ["a man is eating", "the cat"],
        ["the dog runs", "is big and red"],
    );
    let seqs: Vec<Seq> = a.iter().zip(&b).map(|(a, b)| Seq::Pair(a, b)).collect();
    let here = logits_here(&repo.path().join("nli/1"), &seqs);
    let bytes = |name: &str, texts: &[&str]| json!({"name": name, "datatype": "BYTES", "shape": [texts.len()], "data": texts});
    let body = json!({"inputs": [bytes("text_pair", &b), bytes("text", &a)]});
    let json_logits = ok(&server, "/v2/models/nli/infer", &body)["outputs"][0]["data"].clone();
    // The same request in the binary extension: text_pair's bytes first, as its header is.
    let encode = |texts: &[&str]| -> Vec<u8> {
        (texts.iter())
            .flat_map(|t| {
                [
                    (t.len() as u32).to_le_bytes().to_vec(),
                    t.as_bytes().to_vec(),
                ]
                .concat()
            })
            .collect()
    };
    let (pair_bytes, text_bytes) = (encode(&b), encode(&a));
    let header = json!({"inputs": [
        {"name": "text_pair", "datatype": "BYTES", "shape": [2],
         "parameters": {"binary_data_size": pair_bytes.len()}},
        {"name": "text", "datatype": "BYTES", "shape": [2, 1],
         "parameters": {"binary_data_size": text_bytes.len()}}]})
    .to_string();
    let r = request(
        server.addr,
        "POST",
        "/v2/models/nli/infer",
        &[("Inference-Header-Content-Length", header.len().to_string())],
        &[header.as_bytes(), &pair_bytes, &text_bytes].concat(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let binary_logits = r.json()["outputs"][0]["data"].clone();
    for data in [json_logits, binary_logits] {
        let got: Vec<f64> = serde_json::from_value(data).unwrap();
        assert_eq!(got.len(), 2 * 3, "{got:?}");
        for (g, w) in got.iter().zip(here.concat()) {
            assert_near(*g, w as f64, "v2 pair logit");
        }
    }
    let cases = [
        (
            "nli",
            json!({"inputs": [bytes("text", &a), bytes("text_pair", &b[..1])]}),
            "a pair",
        ),
        (
            "nli",
            json!({"inputs": [bytes("text_pair", &b)]}),
            "for pairs",
        ),
        (
            "nli",
            json!({"inputs": [bytes("text", &a), bytes("text", &a)]}),
            "exactly one",
        ),
        (
            "enc",
            json!({"inputs": [bytes("text", &a), bytes("text_pair", &b)]}),
            "exactly one",
        ),
    ];
    for (model, body, words) in cases {
        let r = server.post_json(&format!("/v2/models/{model}/infer"), &body);
        assert_eq!(r.status, 400, "{model} {body}: {}", r.text());
        assert!(r.text().contains(words), "{words:?} in {}", r.text());
    }
    let meta = server.get("/v2/models/nli").json();
    assert_eq!(meta["inputs"][1]["name"], "text_pair", "{meta}");
}

/// A multi-label classifier (`problem_type` `multi_label_classification`) scores each
/// label by its own sigmoid, as transformers' pipeline does; `function_to_apply` overrides.
#[test]
fn a_multi_label_classifier_scores_each_label_alone() {
    let repo = TempDir::new("classify-multi");
    let dir = repo.path().join("tags/1");
    let spec = SyntheticSpec {
        labels: 3,
        seed: 24,
        ..SyntheticSpec::default()
    };
    write_synthetic(&dir, &spec).unwrap();
    let config = dir.join("config.json");
    let mut c: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    c["problem_type"] = json!("multi_label_classification");
    std::fs::write(&config, c.to_string()).unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let here = logits_here(&dir, &[Seq::One("a cat runs fast")]);
    let labels = ["contradiction", "entailment", "neutral"];
    let sigmoid = |x: f32| 1.0 / (1.0 + (-(x as f64)).exp());
    let got = ok(&server, "/predict", &json!({"inputs": "a cat runs fast"}));
    assert_eq!(labelled(&got).len(), 3, "{got}");
    for (label, score) in labelled(&got) {
        let i = labels.iter().position(|l| *l == label).unwrap();
        assert_near(score, sigmoid(here[0][i]), &label);
    }
    let softmax = ok(
        &server,
        "/predict",
        &json!({"inputs": "a cat runs fast", "parameters": {"function_to_apply": "softmax"}}),
    );
    let sum: f64 = labelled(&softmax).iter().map(|(_, s)| s).sum();
    assert_near(sum, 1.0, "softmax sums to 1");
}
