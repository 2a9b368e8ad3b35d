//! Sequence classifiers served end to end: TEI's `/predict`, `POST /` and `/info` for a
//! classifier, v2's logits, refusals and limits, and huggingface_hub's `text_classification`
//! unchanged (reranking is in tests/text_rerank.rs). Scores are checked against the same
//! synthetic model run in-process (itself held to the numpy reference in
//! models/tests/encoder_classifier.rs), so a pair tokenized or packed wrongly on the way
//! would show.

use std::process::Command;

use crate::support::classify::*;
use crate::support::text::skip;
use crate::support::*;
use models::Truncation;
use models::encoder::synthetic::{SyntheticSpec, write_synthetic};
use serde_json::{Value, json};

/// `/predict` gives every label with its softmax score (or its logit with `raw_scores`),
/// best first, for a text, a pair and a list of both; `POST /` answers as `/predict` for a
/// classifier; v2 serves the same logits as `logits`.
#[test]
fn predict_scores_texts_and_pairs_as_the_model_does() {
    let (server, repo) = start_classifiers();
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
    // TEI's batch form, each text or pair an array of its own, reads the same.
    let batch = json!({"inputs": [["a cat runs fast"], ["a man is eating", "the dog runs"]],
                       "raw_scores": true, "model": "nli"});
    assert_eq!(ok(&server, "/predict", &batch), many);
    // A one-string array is one text, answered as one.
    let single = json!({"inputs": ["a cat runs fast"], "model": "nli"});
    assert_eq!(ok(&server, "/predict", &single), one);
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

/// With a reranker (one label) the only text model, `POST /` and `/invocations` are its
/// `/rerank`, as TEI routes them; an empty document is scored, not refused.
#[test]
fn a_lone_reranker_answers_tei_root_as_rerank() {
    let repo = TempDir::new("rerank-alone");
    let spec = SyntheticSpec {
        labels: 1,
        seed: 22,
        ..SyntheticSpec::default()
    };
    write_synthetic(&repo.path().join("rerank/1"), &spec).unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let body = json!({"query": "a cat", "texts": ["a cat runs fast", "", "the big red dog"]});
    let ranked = ok(&server, "/rerank", &body);
    assert_eq!(ranked.as_array().map(Vec::len), Some(3), "{ranked}");
    for path in ["/", "/invocations"] {
        assert_eq!(ok(&server, path, &body), ranked, "{path}");
    }
    let info = server.get("/info").json();
    assert!(info["model_type"]["reranker"].is_object(), "{info}");
}

/// What a classifier cannot do, and what is not one, are clear refusals (in TEI's shape and
/// with TEI's codes on its routes); the server keeps serving.
#[test]
fn classification_refusals_are_clear_and_serving_goes_on() {
    let (server, _repo) = start_classifiers();
    // 100 tokens; a classifier's folder has no sentence_bert_config.json, so its limit is
    // its 64 positions.
    let long = "a cat runs fast and ".repeat(20);
    let cases = [
        (
            "/predict",
            json!({"inputs": "a", "model": "enc"}),
            "gives embeddings",
            422,
        ),
        (
            "/rerank",
            json!({"query": "a", "texts": ["b"], "model": "nli"}),
            "3 labels",
            422,
        ),
        (
            "/embed",
            json!({"inputs": "a", "model": "nli"}),
            "is a classifier",
            422,
        ),
        (
            "/v1/embeddings",
            json!({"input": "a", "model": "rerank"}),
            "is a classifier",
            400,
        ),
        (
            "/rerank",
            json!({"query": "a", "texts": [], "model": "rerank"}),
            "1 to 2048",
            400,
        ),
        (
            "/rerank",
            json!({"query": "", "texts": [""], "model": "rerank"}),
            "empty text",
            400,
        ),
        (
            "/predict",
            json!({"inputs": [], "model": "nli"}),
            "1 to 2048",
            400,
        ),
        (
            "/predict",
            json!({"inputs": 3, "model": "nli"}),
            "inputs must be a text",
            422,
        ),
        (
            "/predict",
            json!({"inputs": long, "model": "nli", "truncate": false}),
            "at most 64 fit",
            413,
        ),
        (
            "/rerank",
            json!({"query": "a", "texts": [long], "model": "rerank", "truncate": false}),
            "at most 64 fit",
            413,
        ),
        (
            "/predict",
            json!({"inputs": "a", "model": "nli", "parameters": {"function_to_apply": "x"}}),
            "function_to_apply",
            422,
        ),
        (
            "/predict",
            json!({"inputs": "a", "model": "nli", "truncation_direction": "Up"}),
            "truncation_direction",
            422,
        ),
    ];
    for (path, body, words, status) in cases {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, status, "{path} {body}: {}", r.text());
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
    // Every refusal of a request naming nli is counted under it, once, by its status: seven
    // above and v2's.
    for (code, want) in [("400", 2.0), ("413", 1.0), ("422", 5.0)] {
        let code = format!("code=\"{code}\"");
        let counted = server.series("tandem_requests_total", &["model=\"nli\"", &code]);
        assert_eq!(counted, want, "refusals on nli counted under {code}");
    }
    ok(&server, "/embed", &json!({"inputs": "a", "model": "enc"}));
    // Scores that ran say what they took, as embeddings do.
    for (path, body) in [
        ("/predict", json!({"inputs": ["a", "b"], "model": "nli"})),
        (
            "/rerank",
            json!({"query": "a", "texts": ["b"], "model": "rerank"}),
        ),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.header("x-compute-characters"), Some("2"), "{path}");
        assert!(r.header("x-inference-time").is_some(), "{path}: {r:?}");
    }
}

/// Over-long inputs are cut when asked, as the model's tokenizer cuts them (a pair longest
/// text first); more than 2,048 texts, documents or pairs are refused, counted without
/// being kept.
#[test]
fn long_inputs_are_cut_and_too_many_are_refused() {
    let (server, repo) = start_classifiers();
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
    // Cut from the left, a text keeps its end, and each text of a pair its own end.
    let query = format!("{query}and a dog");
    let tail = format!("{long}the end");
    let left = |model: &str, seq: Seq| {
        let dir = repo.path().join(model).join("1");
        let want = logits_cut_here(&dir, std::slice::from_ref(&seq), Truncation::Left);
        let right = logits_cut_here(&dir, &[seq], Truncation::Right);
        assert!(
            (want[0][0] - right[0][0]).abs() > 1e-4,
            "{model}: the ends differ"
        );
        want[0][0] as f64
    };
    let predicted = ok(
        &server,
        "/predict",
        &json!({"inputs": tail, "model": "nli", "raw_scores": true,
                "truncation_direction": "Left"}),
    );
    let (label, score) = labelled(&predicted)
        .into_iter()
        .find(|(l, _)| l == labels[0])
        .unwrap();
    assert_near(score, left("nli", Seq::One(&tail)), &label);
    // Several documents share the query's tokens, read once from its end.
    let other = format!("{}the other end", "a dog sleeps ".repeat(20));
    let reranked = ok(
        &server,
        "/rerank",
        &json!({"query": query, "texts": [tail, other], "model": "rerank", "raw_scores": true,
                "truncation_direction": "Left"}),
    );
    for (i, document) in [&tail, &other].into_iter().enumerate() {
        let answer = reranked
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["index"] == i)
            .unwrap();
        let want = left("rerank", Seq::Pair(&query, document));
        assert_near(
            answer["score"].as_f64().unwrap(),
            want,
            "pair cut from the left",
        );
    }
    // More than a batch takes (64 by default) runs as several.
    let hundred: Vec<String> = (0..100).map(|i| format!("a cat {}", i % 10)).collect();
    let ranked = ok(
        &server,
        "/v2/rerank",
        &json!({"query": "q", "documents": hundred, "model": "rerank"}),
    );
    assert_eq!(ranked["results"].as_array().unwrap().len(), 100, "{ranked}");
    let many: Vec<&str> = vec!["a"; 2049];
    for (path, body, status) in [
        ("/predict", json!({"inputs": many, "model": "nli"}), 413),
        (
            "/rerank",
            json!({"query": "q", "texts": many, "model": "rerank"}),
            413,
        ),
        (
            "/v2/rerank",
            json!({"query": "q", "documents": many, "model": "rerank"}),
            400,
        ),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, status, "{path}: {}", r.text());
        assert!(r.text().contains("this one 2049"), "{path}: {}", r.text());
    }
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
