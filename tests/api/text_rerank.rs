//! Cross-encoders reranking end to end: TEI's `/rerank`, Cohere's `/v1/rerank` and
//! `/v2/rerank` with Cohere's own SDK unchanged, and v2's pairs (`text_pair`); and an
//! XLM-RoBERTa reranker and encoder, as bge-reranker and multilingual-e5 are. Scores are
//! checked against the same synthetic model run in-process.

use std::process::Command;

use crate::support::classify::*;
use crate::support::text::skip;
use crate::support::*;
use models::encoder::dense_module::DenseActivation;
use models::encoder::family::Family;
use models::encoder::synthetic::{SyntheticDense, SyntheticSpec, write_synthetic};
use serde_json::{Value, json};

/// `/rerank` scores each text as the pair (query, text), sigmoid of the cross-encoder's
/// logit, best first, with the text when asked; `/info` calls the model a reranker.
#[test]
fn rerank_orders_texts_by_the_cross_encoders_score() {
    let (server, repo) = start_classifiers();
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

/// Cohere's rerank API on `/v1/rerank` and `/v2/rerank`: documents as strings or `{text}`
/// objects, `top_n`, `return_documents`, the relevance TEI's `/rerank` gives; and Cohere's
/// own SDK, unchanged, through both.
#[test]
fn cohere_rerank_answers_as_cohere_and_its_sdk_works_unchanged() {
    let (server, _repo) = start_classifiers();
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
    let (server, repo) = start_classifiers();
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

/// XLM-RoBERTa, ModernBERT and GTE cross-encoders rerank, and XLM-RoBERTa, MPNet, ModernBERT,
/// NomicBERT and GTE encoders and a BERT with two Dense modules after pooling embed, as the
/// same models run in this process: `<s> query </s></s> text </s>`, one token type or none,
/// positions after the padding id, MPNet's relative attention and ModernBERT's, NomicBERT's
/// and GTE's layers (on the CPU; GTE's without a token type table, so that its tokenizer's
/// pair type ids are not checked against one), embeddings of the last module's width.
#[test]
fn xlm_roberta_and_mpnet_models_rerank_and_embed_as_run_in_process() {
    let repo = TempDir::new("xlmr");
    let dense = |out_features, activation| SyntheticDense {
        out_features,
        bias: true,
        activation,
    };
    for (model, family, labels) in [
        ("xrerank", Family::Roberta, 1),
        ("mrerank", Family::ModernBert, 1),
        ("grerank", Family::Gte, 1),
        ("xembed", Family::Roberta, 0),
        ("mpnet", Family::Mpnet, 0),
        ("modern", Family::ModernBert, 0),
        ("nomic", Family::NomicBert, 0),
        ("gte", Family::Gte, 0),
        ("dense", Family::Bert, 0),
    ] {
        let spec = SyntheticSpec {
            family,
            labels,
            prefixed: labels > 0,
            seed: 31,
            dense: match model {
                "dense" => vec![
                    dense(24, DenseActivation::Tanh),
                    dense(16, DenseActivation::Identity),
                ],
                _ => Vec::new(),
            },
            ..SyntheticSpec::default()
        };
        write_synthetic(&repo.path().join(model).join("1"), &spec).unwrap();
    }
    let repo_path = repo.path().to_str().unwrap();
    let server = Server::start(&["--device", "cpu", "--model-repository", repo_path]);
    let texts = ["the dog runs", "a man is eating bread", "a red cat"];
    let query = "a man is eating food";
    let pairs: Vec<Seq> = texts.iter().map(|t| Seq::Pair(query, t)).collect();
    for model in ["xrerank", "mrerank", "grerank"] {
        let here = logits_here(&repo.path().join(model).join("1"), &pairs);
        let ranked = ok(
            &server,
            "/rerank",
            &json!({"query": query, "texts": texts, "raw_scores": true, "model": model}),
        );
        assert_eq!(ranked.as_array().unwrap().len(), texts.len());
        for r in ranked.as_array().unwrap() {
            let index = r["index"].as_u64().unwrap() as usize;
            let what = format!("{model} rerank");
            assert_near(r["score"].as_f64().unwrap(), here[index][0] as f64, &what);
        }
    }
    let tokens = ok(
        &server,
        "/tokenize",
        &json!({"inputs": "a cat", "model": "xembed"}),
    );
    let texts_of: Vec<&str> = (tokens[0].as_array().unwrap().iter())
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts_of, ["<s>", "a", " cat", "</s>"], "{tokens}");
    let seqs: Vec<Seq> = texts.iter().map(|t| Seq::One(t)).collect();
    let meta = server.get("/v2/models/dense").json();
    assert_eq!(meta["outputs"][0]["shape"], json!([-1, 16]), "{meta}");
    for model in ["xembed", "mpnet", "modern", "nomic", "gte", "dense"] {
        let mut want = logits_here(&repo.path().join(model).join("1"), &seqs);
        let got = ok(
            &server,
            "/v1/embeddings",
            &json!({"input": texts, "model": model}),
        );
        for (i, w) in want.iter_mut().enumerate() {
            let width = w.len();
            models::encoder::l2_normalize_rows(w, width);
            let g = &got["data"][i]["embedding"];
            assert_eq!(g.as_array().unwrap().len(), width, "{model} text {i}");
            for (d, v) in w.iter().enumerate() {
                let what = format!("{model} text {i} [{d}]");
                assert_near(g[d].as_f64().unwrap(), *v as f64, &what);
            }
        }
    }
}
