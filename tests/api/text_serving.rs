//! Text encoders served end to end: the same embeddings through v2 (BYTES in JSON), OpenAI's
//! /v1/embeddings and TEI's /embed; packed batches of mixed lengths giving what one text at
//! a time gives; over-long inputs cut from either end; bad input answered with a clear 4xx
//! while serving goes on; versions hot
//! loaded from copied snapshots, broken ones refused by name with the previous one serving.
//! A tiny synthetic BERT needs no download. The APIs as clients call them are in
//! tests/text_apis.rs.

use std::time::Duration;

use crate::support::text::*;
use crate::support::*;
use models::encoder::synthetic::{SyntheticSpec, write_synthetic};
use serde_json::{Value, json};

#[test]
fn every_endpoint_gives_the_same_normalised_embeddings() {
    let (server, _repo) = start_synthetic();
    let texts = ["a man is eating food .", "the cat runs", "one"];
    let [a, b, c] = through_every_endpoint(&server, "enc", &texts);
    for (x, y) in a
        .iter()
        .flatten()
        .zip(b.iter().flatten().chain(c.iter().flatten()))
    {
        assert!((x - y).abs() < 1e-6, "{x} vs {y}");
    }
    for row in &a {
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
    // [-1, 1], as tritonclient sends texts; and normalize off.
    let mut body = json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3, 1], "data": [["a man is eating food ."], ["the cat runs"], ["one"]]}]});
    body["parameters"] = json!({"normalize": false});
    let r = server.post_json("/v2/models/enc/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let raw = embeddings(&r);
    for (x, y) in raw.iter().zip(&a) {
        assert!((cosine(x, y) - 1.0).abs() < 1e-6);
    }
    // OpenAI's usage counts the tokens, special ones included.
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": "one"}));
    assert_eq!(r.json()["usage"]["prompt_tokens"], 3, "{}", r.text());
    assert_eq!(r.json()["object"], "list");
}

#[test]
fn packed_batches_of_mixed_lengths_give_what_one_text_at_a_time_gives() {
    let (server, _repo) = start_synthetic();
    let words = "a the man woman is eating food bread piece of cat dog runs big small red";
    let words: Vec<&str> = words.split(' ').collect();
    let texts: Vec<String> = (0..24)
        .map(|i| {
            (0..1 + (i * 7) % 40)
                .map(|j| words[(i + j) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let alone: Vec<Vec<f64>> = texts
        .iter()
        .map(|t| {
            let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": t}));
            embeddings(&r).remove(0)
        })
        .collect();
    // All at once from many clients: the batcher packs them together.
    let addr = server.addr;
    let together: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = texts
            .iter()
            .map(|t| {
                s.spawn(move || {
                    let r = post_json(addr, "/v1/embeddings", &json!({"model": "enc", "input": t}));
                    assert_eq!(r.status, 200, "{}", r.text());
                    embeddings(&r).remove(0)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (a, b) in alone.iter().zip(&together) {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
    }
    let metrics = server.get("/metrics").text();
    let sum = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("model=\"enc\""))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} for enc in:\n{metrics}"))
    };
    // Rows count texts (each request here had one), tokens count tokens.
    assert_eq!(sum("tandem_batch_rows_sum"), (2 * texts.len()) as f64);
    assert!(sum("tandem_batch_tokens_sum") > sum("tandem_batch_rows_sum"));
}

/// One 4xx each, and the server serves the next request as before.
#[test]
fn bad_text_input_gets_a_clear_4xx_and_serving_goes_on() {
    let (server, _repo) = start_synthetic();
    let long = "a ".repeat(10_000);
    let bytes_body = |elements: &[u8], claimed: usize| -> (Value, Vec<u8>) {
        let header = json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                         "parameters": {"binary_data_size": claimed}}]});
        (header, elements.to_vec())
    };
    let binary = |header: Value, tail: Vec<u8>| {
        let h = header.to_string();
        let mut body = h.clone().into_bytes();
        body.extend(tail);
        request(
            server.addr,
            "POST",
            "/v2/models/enc/infer",
            &[("Inference-Header-Content-Length", h.len().to_string())],
            &body,
        )
    };
    let mut latin1 = 1u32.to_le_bytes().to_vec();
    latin1.push(0xe9);
    let (h, t) = bytes_body(&latin1, 5);
    let r = binary(h, t);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("UTF-8"), "{}", r.text());
    let mut past = 50u32.to_le_bytes().to_vec();
    past.extend(b"abc");
    let (h, t) = bytes_body(&past, 7);
    let r = binary(h, t);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("claims 50 bytes"), "{}", r.text());
    let json_cases = [
        (v2(&[""]), "empty"),
        (
            json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": [1, 2]}]}),
            "not a string",
        ),
        (
            json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2, 2], "data": ["a", "b", "c", "d"]}]}),
            "shape",
        ),
        (
            json!({"inputs": [{"name": "text", "datatype": "FP32", "shape": [1], "data": [1.0]}]}),
            "BYTES",
        ),
        (
            json!({"inputs": [{"name": "input-0", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}),
            "exactly one input named",
        ),
        (
            {
                let mut b = v2(&[&long]);
                b["parameters"] = json!({"truncate": false});
                b
            },
            "10002 tokens, at most 48 fit",
        ),
    ];
    for (body, words) in json_cases {
        let r = server.post_json("/v2/models/enc/infer", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains(words), "{words}: {}", r.text());
        server.post_json("/v2/models/enc/infer", &v2(&["a cat"]));
    }
    // Truncated by default: 10,000 tokens become the model's 48.
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": long}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["prompt_tokens"], 48);
    // TEI's routes cut it too (TEI's default since 1.9), and refuse it when told not to.
    let r = server.post_json("/embed", &json!({"inputs": long}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = server.post_json("/embed", &json!({"inputs": long, "truncate": false}));
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error_type"], "Validation");
    // 4 MiB in one text: its first words answer it, and a refusal counts only so far.
    let huge = "a cat and the dog ".repeat(1 << 18);
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": huge}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["prompt_tokens"], 48);
    let r = server.post_json("/embed", &json!({"inputs": &huge}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = server.post_json("/embed", &json!({"inputs": huge, "truncate": false}));
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("more than 16"), "{}", r.text());
    // More texts than any request may hold, each tiny: refused without keeping them.
    let many = vec![""; 5000];
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": many}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("5000 texts"), "{}", r.text());
    // OpenAI's own error object, on its route.
    for (body, status) in [
        (json!({"model": "enc", "input": "a", "dimensions": 8}), 400),
        (json!({"model": "enc", "input": [1, 2, 999_999]}), 400),
        (json!({"model": "enc", "input": []}), 400),
        (json!({"model": "nope", "input": "a"}), 404),
        (
            json!({"model": "enc", "input": "a", "encoding_format": "hex"}),
            400,
        ),
    ] {
        let r = server.post_json("/v1/embeddings", &body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(r.json()["error"]["message"].is_string(), "{}", r.text());
    }
    // The route's own refusals too: a wrong method, a path it does not serve.
    for (path, status) in [("/v1/embeddings", 405), ("/v1/chat/completions", 404)] {
        let r = server.get(path);
        assert_eq!(r.status, status, "{path}: {}", r.text());
        assert!(
            r.json()["error"]["type"].is_string(),
            "{path}: {}",
            r.text()
        );
    }
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": "a cat"}));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// `tandem_requests_total{model, code}` as the server counts it now.
fn requests_total(server: &Server, model: &str, code: u16) -> u64 {
    let labels = [format!("model=\"{model}\""), format!("code=\"{code}\"")];
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    server.series("tandem_requests_total", &labels) as u64
}

/// Every embedding request is counted once, whether it is refused before its body names a
/// model, for a model that is not there, or after; and answers come compressed when asked.
#[test]
fn embedding_requests_are_all_counted_and_answers_compressed_on_request() {
    let (server, _repo) = start_synthetic();
    let post = |path: &str, body: &[u8], extra: &[(&str, String)]| {
        let mut headers = vec![("Content-Type", "application/json".to_string())];
        headers.extend(extra.iter().cloned());
        request(server.addr, "POST", path, &headers, body)
    };
    let unknown_400 = requests_total(&server, "_unknown", 400);
    let unknown_404 = requests_total(&server, "_unknown", 404);
    let unknown_422 = requests_total(&server, "_unknown", 422);
    let enc_400 = requests_total(&server, "enc", 400);
    let refused = [
        ("/v1/embeddings", &b"{not json"[..], 400),
        ("/embed", &b"[1, 2"[..], 400),
        // JSON of another shape: TEI's 422.
        ("/embed", &br#"{"inputs": "a", "truncate": "yes"}"#[..], 422),
        (
            "/v1/embeddings",
            &br#"{"model": "nope", "input": "a"}"#[..],
            404,
        ),
        ("/embed", &br#"{"model": "nope", "inputs": "a"}"#[..], 404),
    ];
    for (path, body, status) in refused {
        let r = post(path, body, &[]);
        assert_eq!(r.status, status, "{path}: {}", r.text());
    }
    assert_eq!(requests_total(&server, "_unknown", 400), unknown_400 + 2);
    assert_eq!(requests_total(&server, "_unknown", 422), unknown_422 + 1);
    assert_eq!(requests_total(&server, "_unknown", 404), unknown_404 + 2);
    for (path, body) in [
        ("/v1/embeddings", json!({"model": "enc", "input": ""})),
        ("/embed", json!({"model": "enc", "inputs": []})),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
    }
    assert_eq!(requests_total(&server, "enc", 400), enc_400 + 2);
    let stats = server.get("/v2/models/enc/stats").json();
    let failed = &stats["model_stats"][0]["inference_stats"]["fail"]["count"];
    assert_eq!(failed, 2, "{stats}");

    // Several texts make a body worth compressing; what comes back decodes to the answer
    // an identity request gets.
    let texts: Vec<String> = (0..8)
        .map(|i| format!("text number {i} of eight"))
        .collect();
    for (path, body) in [
        ("/v1/embeddings", json!({"model": "enc", "input": texts})),
        ("/embed", json!({"inputs": texts})),
    ] {
        let body = body.to_string().into_bytes();
        let plain = post(path, &body, &[]);
        assert_eq!(plain.status, 200, "{}", plain.text());
        assert_eq!(plain.header("content-encoding"), None);
        let packed = post(path, &body, &[("Accept-Encoding", "gzip".into())]);
        assert_eq!(packed.status, 200, "{}", packed.text());
        assert_eq!(packed.header("content-encoding"), Some("gzip"), "{path}");
        assert_eq!(packed.header("vary"), Some("accept-encoding"));
        assert!(packed.body.len() < plain.body.len());
        let mut decoded = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&packed.body[..]),
            &mut decoded,
        )
        .unwrap();
        let as_json = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap();
        assert_eq!(as_json(&decoded), as_json(&plain.body), "{path}");
    }
}

/// A snapshot copied in file by file loads once it is whole; one with no tokenizer or a
/// tensor of the wrong shape is refused by name, and the version before keeps serving.
#[test]
fn text_model_versions_load_hot_and_broken_ones_are_refused_by_name() {
    let repo = TempDir::new("text-versions");
    synthetic(&repo.path().join("enc/1"), 7);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\nrepository_poll_ms = 100\nkeep_versions = 1\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let serving = || server.get("/v2/models/enc").json()["versions"].clone();
    // Version 2 without its tokenizer: refused, saying which file is missing.
    let v2_dir = repo.path().join("enc/2");
    synthetic(&v2_dir, 8);
    let tokenizer = std::fs::read(v2_dir.join("tokenizer.json")).unwrap();
    std::fs::remove_file(v2_dir.join("tokenizer.json")).unwrap();
    assert!(poll_until(Duration::from_secs(10), || server
        .log()
        .contains("tokenizer.json")));
    assert_eq!(serving(), json!(["1"]));
    // The rest of the copy arrives: it loads.
    std::fs::write(v2_dir.join("tokenizer.json"), tokenizer).unwrap();
    assert!(
        poll_until(Duration::from_secs(20), || serving() == json!(["2"])),
        "{}",
        server.log()
    );
    // Version 3 with a tensor of the wrong shape: refused by the tensor's name.
    let v3_dir = repo.path().join("enc/3");
    write_synthetic(
        &v3_dir,
        &SyntheticSpec {
            intermediate: 48,
            ..SyntheticSpec::default()
        },
    )
    .unwrap();
    let mut wrong: Value =
        serde_json::from_slice(&std::fs::read(v3_dir.join("config.json")).unwrap()).unwrap();
    wrong["intermediate_size"] = json!(64);
    std::fs::write(v3_dir.join("config.json"), wrong.to_string()).unwrap();
    server.assert_logs_within(Duration::from_secs(10), "intermediate.dense.weight");
    assert_eq!(serving(), json!(["2"]));
    // Version 4, whose tokenizer gives an id past the model's vocabulary: refused, or a text
    // holding that token would fail every batch it joined.
    let v4_dir = repo.path().join("enc/4");
    let outside = TempDir::new("text-versions-staging");
    let staging = outside.path().join("4");
    synthetic(&staging, 9);
    let vocab = read_json(&staging.join("config.json"))["vocab_size"].clone();
    let mut tokenizer = read_json(&staging.join("tokenizer.json"));
    tokenizer["added_tokens"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "id": vocab, "content": "[EXTRA]", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true
        }));
    std::fs::write(staging.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::rename(&staging, &v4_dir).unwrap();
    server.assert_logs_within(Duration::from_secs(10), "past the model's vocab_size");
    assert_eq!(serving(), json!(["2"]));
    // Version 5, whose default prompt is not one of its prompts: refused, by the file.
    let staging = outside.path().join("5");
    synthetic(&staging, 10);
    let prompts = json!({"prompts": {"query": "q: "}, "default_prompt_name": "title"});
    let file = staging.join("config_sentence_transformers.json");
    std::fs::write(file, prompts.to_string()).unwrap();
    std::fs::rename(&staging, repo.path().join("enc/5")).unwrap();
    server.assert_logs_within(Duration::from_secs(10), "default_prompt_name \"title\"");
    assert_eq!(serving(), json!(["2"]));
    // Version 6, an XLM-RoBERTa (one token type) whose tokenizer gives a pair's second text
    // type 1, as BERT's does: refused, or every pair would fail its batch.
    let staging = outside.path().join("6");
    let spec = SyntheticSpec {
        family: models::encoder::family::Family::Roberta,
        ..SyntheticSpec::default()
    };
    write_synthetic(&staging, &spec).unwrap();
    let mut tokenizer = read_json(&staging.join("tokenizer.json"));
    tokenizer["post_processor"]["pair"][4]["Sequence"]["type_id"] = json!(1);
    std::fs::write(staging.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::rename(&staging, repo.path().join("enc/6")).unwrap();
    server.assert_logs_within(Duration::from_secs(10), "type_vocab_size of 1");
    assert_eq!(serving(), json!(["2"]));
    let r = server.post_json("/v2/models/enc/infer", &v2(&["a cat"]));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A tokenizer with no special tokens of its own gives none for blank text: that request is
/// refused, and the model serves the next.
#[test]
fn a_text_that_gives_no_tokens_is_a_400_for_its_own_request() {
    let repo = TempDir::new("text-no-specials");
    let dir = repo.path().join("enc/1");
    synthetic(&dir, 7);
    let mut tokenizer = read_json(&dir.join("tokenizer.json"));
    tokenizer["post_processor"] = Value::Null;
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    for body in [
        json!({"model": "enc", "input": " \t "}),
        json!({"model": "enc", "input": ["a cat", "  "]}),
    ] {
        let r = server.post_json("/v1/embeddings", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains("gives no tokens"), "{}", r.text());
    }
    // TEI's route: nothing to embed, TEI's `Empty`.
    let r = server.post_json("/embed", &json!({"inputs": ["a cat", "  "]}));
    assert_eq!((r.status, &r.json()["error_type"]), (400, &json!("Empty")));
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": "a cat"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["prompt_tokens"], 2);
}

/// A request of more inputs than one batch takes (`max_batch_size` texts,
/// `max_batch_tokens` token-units) runs as several batches, its answers in order and each
/// what the text gives alone; only a text that alone is over `max_batch_tokens` is refused.
/// v2's one batch per request still refuses more than `max_batch_size` texts.
#[test]
fn requests_past_one_batch_run_as_several_in_order() {
    let repo = TempDir::new("text-split");
    synthetic(&repo.path().join("enc/1"), 7);
    // A text of 10 tokens is 11 token-units for this model; of 48 tokens, 66. The budget is
    // one a busy test machine cannot make three small batches miss: this is about answers,
    // not admission.
    std::fs::write(
        repo.path().join("enc/config.toml"),
        "max_batch_size = 4\nmax_batch_tokens = 60\np99_ms = 2000\n",
    )
    .unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let words = [
        "a", "cat", "runs", "fast", "the", "big", "red", "dog", "is", "eating",
    ];
    let texts: Vec<String> = (0..10).map(|i| words[..1 + i % 10].join(" ")).collect();
    let alone: Vec<Vec<f64>> = (texts.iter())
        .map(|t| embeddings(&server.post_json("/embed", &json!({"inputs": t}))).remove(0))
        .collect();
    for (path, body) in [
        ("/embed", json!({"inputs": texts})),
        ("/v1/embeddings", json!({"input": texts, "model": "enc"})),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        // TEI's headers count the tokens of every batch, and time them within the total.
        let number = |name: &str| r.header(name).and_then(|v| v.parse::<u64>().ok());
        let tokens: usize = texts.iter().map(|t| t.split(' ').count() + 2).sum();
        assert_eq!(number("x-compute-tokens"), Some(tokens as u64), "{path}");
        let total = number("x-total-time").unwrap_or_default();
        let queue = number("x-queue-time").unwrap_or(u64::MAX);
        assert!(queue <= total, "{path}: queued {queue} ms of {total}");
        let together = embeddings(&r);
        assert_eq!(together.len(), texts.len(), "{path}");
        for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
            assert!(cosine(a, b) > 0.999_999, "{path}: text {i} out of place");
        }
    }
    let long = "a cat runs fast and ".repeat(20);
    let r = server.post_json(
        "/embed",
        &json!({"inputs": ["a cat", long], "truncate": true}),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("input 1's 48 tokens"), "{}", r.text());
    let r = server.post_json("/v2/models/enc/infer", &v2(&["a", "b", "c", "d", "e"]));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("max_batch_size of 4"), "{}", r.text());
}

/// A request of several batches is admitted or refused as a whole: under a budget no
/// batch behind another can meet, its first batch (alone in front of an idle device) is
/// admitted and the rest follow it, where judged one by one they would be refused with a
/// 429 for the request's own batches ahead of them. Under so tight a budget a request the
/// front end left unread for a few milliseconds (other tests share the cores) is refused
/// at the door, rightly; such refusals are sent again, any other fails the test.
#[test]
fn a_request_of_several_batches_is_admitted_as_a_whole() {
    let repo = TempDir::new("text-split-admit");
    synthetic(&repo.path().join("enc/1"), 7);
    std::fs::write(
        repo.path().join("enc/config.toml"),
        "max_batch_size = 2\np99_ms = 0.1\n",
    )
    .unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let texts: Vec<String> = (0..12).map(|i| "a cat runs ".repeat(1 + i % 5)).collect();
    let body = json!({"input": texts, "model": "enc"});
    let (mut answered, mut sent) = (0, 0);
    while answered < 3 {
        assert!(
            sent < 30,
            "{answered} of {sent} answered: the front end is always behind"
        );
        sent += 1;
        let r = server.post_json("/v1/embeddings", &body);
        if r.status == 429 && r.text().contains("ms unread") {
            continue;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(embeddings(&r).len(), texts.len());
        answered += 1;
    }
}

/// TEI's `truncation_direction: Left` cuts an over-long input's start off: a text embeds as
/// the ids of its last tokens between `[CLS]` and `[SEP]` do, a pair's texts are each cut
/// from the start, and token ids are cut as a text is.
#[test]
fn tei_truncation_from_the_left_keeps_the_end() {
    let (server, _repo) = start_synthetic();
    // Over 1 KiB, so that the text is read a piece at a time, from its end.
    let long = format!(
        "{}{}",
        "the big red dog ".repeat(10),
        "a cat runs fast ".repeat(70)
    );
    let limit = server.get("/info").json()["max_input_length"]
        .as_u64()
        .unwrap() as usize;
    let tokens = server.post_json("/tokenize", &json!({"inputs": long}));
    let ids = token_ids(&tokens);
    let (cls, sep) = (ids[0], ids[ids.len() - 1]);
    let tail = &ids[ids.len() - 1 - (limit - 2)..ids.len() - 1];
    let want: Vec<u64> = [&[cls][..], tail, &[sep]].concat();
    let by_ids = server.post_json("/embed", &json!({"inputs": [want]}));
    assert_eq!(by_ids.status, 200, "{}", by_ids.text());
    let left = json!({"inputs": long, "truncation_direction": "Left"});
    let r = server.post_json("/embed", &left);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(embeddings(&r), embeddings(&by_ids));
    let right = server.post_json("/embed", &json!({"inputs": long}));
    assert_ne!(embeddings(&right), embeddings(&r), "the start kept");
    // Token ids past the limit are cut as the text is.
    let cut_ids = json!({"inputs": [ids], "truncation_direction": "left"});
    assert_eq!(
        embeddings(&server.post_json("/embed", &cut_ids)),
        embeddings(&r)
    );
    // Past the 16,384 ids kept, cutting the start off is refused: the end was not kept.
    let many: Vec<u64> = [&[cls][..], &vec![tail[0]; 16_400], &[sep]].concat();
    let r = server.post_json(
        "/embed",
        &json!({"inputs": [many], "truncation_direction": "Left"}),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(
        r.text().contains("only the first 16384 are kept"),
        "{}",
        r.text()
    );
    let r = server.post_json("/embed", &json!({"inputs": [many]}));
    assert_eq!(r.status, 200, "{}", r.text());
    // Without truncation the direction changes nothing: a refusal.
    let refused = json!({"inputs": long, "truncate": false, "truncation_direction": "Left"});
    let r = server.post_json("/embed", &refused);
    assert_eq!(r.status, 413, "{}", r.text());
    // /similarity takes it in its parameters: the cosine of the embeddings /embed gives.
    let body = json!({"inputs": {"source_sentence": "a cat", "sentences": [long]},
                      "parameters": {"truncation_direction": "Left"}});
    let r = server.post_json("/similarity", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let source = embeddings(&server.post_json("/embed", &json!({"inputs": "a cat"})));
    let dot: f64 = (source[0].iter().zip(&embeddings(&by_ids)[0]))
        .map(|(a, b)| a * b)
        .sum();
    let similarity = r.json()[0].as_f64().unwrap();
    assert!(
        (similarity - dot).abs() < 1e-5,
        "{similarity} against {dot}"
    );
}
