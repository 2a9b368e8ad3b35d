//! TEI's API as its clients call it: `/embed` and `/` (as TEI routes it), `/embed_all`,
//! `/similarity`,
//! `/info`, `/health`, `/tokenize` and `/decode`, TEI's status codes and error types, and
//! the `x-*` headers that say what an answer took. A synthetic BERT needs no download.

use crate::support::text::*;
use crate::support::*;
use serde_json::json;

/// TEI's `/similarity`: the cosine of the source sentence with each other, from the same
/// embeddings `/embed` gives; `POST /` answers a body of its shape (huggingface_hub's
/// `sentence_similarity` posts there); refusals in TEI's shape.
#[test]
fn similarity_is_the_cosine_of_embed_s_embeddings() {
    let (server, _repo) = start_synthetic();
    let texts = ["a cat runs fast", "the big red dog", "a cat runs fast"];
    let rows = embeddings(&server.post_json("/embed", &json!({"inputs": texts})));
    let body = json!({"inputs": {"source_sentence": texts[0], "sentences": &texts[1..]}});
    let r = server.post_json("/similarity", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let got: Vec<f64> = serde_json::from_value(r.json()).unwrap();
    let want = [cosine(&rows[0], &rows[1]), 1.0];
    assert_eq!(got.len(), 2, "{got:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    let root = server.post_json("/", &body);
    assert_eq!((root.status, root.json()), (200, r.json()));
    for (body, words, kind, status) in [
        (
            json!({"inputs": {"source_sentence": "a", "sentences": []}}),
            "no text",
            "Empty",
            400,
        ),
        (
            json!({"inputs": {"source_sentence": "", "sentences": ["b"]}}),
            "empty",
            "Empty",
            400,
        ),
        (
            json!({"inputs": ["a", "b"]}),
            "invalid similarity request",
            "Validation",
            422,
        ),
    ] {
        let r = server.post_json("/similarity", &body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert_eq!(r.json()["error_type"], kind, "{}", r.text());
        assert!(r.text().contains(words), "{words}: {}", r.text());
    }
}

/// TEI's other routes: `POST /` (and SageMaker's `/invocations`) embeds as `/embed` does,
/// `/info` describes the model and its limits in TEI's fields, `/health` is readiness;
/// fields TEI does not know are ignored, an over-long input is cut unless `truncate` is
/// false; errors in TEI's shape.
#[test]
fn tei_routes_answer_as_tei_does() {
    let (server, _repo) = start_synthetic();
    let texts = ["a cat runs fast", "the big red dog"];
    let embed = server.post_json("/embed", &json!({"inputs": texts}));
    assert_eq!(embed.status, 200, "{}", embed.text());
    for path in ["/", "/invocations"] {
        let root = server.post_json(path, &json!({"inputs": texts}));
        assert_eq!(root.status, 200, "{path}: {}", root.text());
        assert_eq!(embeddings(&root), embeddings(&embed), "{path}");
    }
    // LangChain's body, and huggingface_hub's `encoding_format`: extra fields TEI ignores.
    let extra = json!({"inputs": texts, "parameters": {}, "encoding_format": "float"});
    let r = server.post_json("/embed", &extra);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(embeddings(&r), embeddings(&embed));
    let long = "a cat runs fast ".repeat(40);
    let cut = server.post_json("/embed", &json!({"inputs": long}));
    assert_eq!(cut.status, 200, "{}", cut.text());
    let explicit = server.post_json("/embed", &json!({"inputs": long, "truncate": true}));
    assert_eq!(explicit.status, 200, "{}", explicit.text());
    assert_eq!(embeddings(&cut), embeddings(&explicit));
    let refused = server.post_json("/embed", &json!({"inputs": long, "truncate": false}));
    assert_eq!(refused.status, 413, "{}", refused.text());
    assert!(
        refused.text().contains("at most 48 fit"),
        "{}",
        refused.text()
    );
    let info = server.get("/info");
    assert_eq!(info.status, 200, "{}", info.text());
    let info = info.json();
    for (field, want) in [
        ("model_id", json!("enc")),
        ("model_dtype", json!("float32")),
        ("model_type", json!({"embedding": {"pooling": "mean"}})),
        ("max_input_length", json!(48)),
        ("max_batch_tokens", json!(16_384)),
        ("max_batch_requests", json!(64)),
        ("max_client_batch_size", json!(2048)),
        ("auto_truncate", json!(true)),
        ("served_model_name", json!("enc")),
    ] {
        assert_eq!(info[field], want, "{field}: {info}");
    }
    for path in ["/health", "/"] {
        let r = server.get(path);
        assert_eq!((r.status, r.text()), (200, String::new()), "{path}");
    }
    for (body, words) in [
        (
            json!({"inputs": "a", "truncation_direction": "Middle"}),
            "truncation_direction",
        ),
        (json!({"inputs": 3}), "must be a string"),
    ] {
        let r = server.post_json("/", &body);
        assert_eq!(r.status, 422, "{body}: {}", r.text());
        assert_eq!(r.json()["error_type"], "Validation", "{}", r.text());
        assert!(r.text().contains(words), "{words}: {}", r.text());
    }
    let r = server.post_json(
        "/",
        &json!({"inputs": texts, "truncation_direction": "Right"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(embeddings(&r), embeddings(&embed));
}

/// TEI's `/tokenize` gives each text's tokens with their bytes of it, and those ids embed as
/// the text does; `/decode` gives the text back. Ids for `/tokenize`, texts for `/decode`,
/// ids past the vocabulary and texts past the counting limit are refused with TEI's codes.
#[test]
fn tei_tokenize_and_decode() {
    let (server, _repo) = start_synthetic();
    let r = server.post_json("/tokenize", &json!({"inputs": "a cat"}));
    assert_eq!(r.status, 200, "{}", r.text());
    let tokens = r.json();
    let cat = &tokens[0];
    assert_eq!(cat.as_array().unwrap().len(), 4, "{tokens}");
    assert_eq!(
        cat[0],
        json!({"id": 2, "text": "[CLS]", "special": true, "start": null, "stop": null})
    );
    assert_eq!(
        (&cat[2]["text"], &cat[2]["start"], &cat[2]["stop"]),
        (&json!("cat"), &json!(2), &json!(5))
    );
    let ids = token_ids(&r);
    let by_ids = server.post_json("/embed", &json!({"inputs": [ids]}));
    let by_text = server.post_json("/embed", &json!({"inputs": ["a cat"]}));
    assert_eq!(embeddings(&by_ids), embeddings(&by_text));
    let bare = server.post_json(
        "/tokenize",
        &json!({"inputs": ["a cat", "the dog"], "add_special_tokens": false}),
    );
    assert_eq!(bare.json().as_array().unwrap().len(), 2, "{}", bare.text());
    assert_eq!(bare.json()[0].as_array().unwrap().len(), 2);
    let r = server.post_json("/decode", &json!({"ids": ids}));
    assert_eq!(
        (r.status, r.json()),
        (200, json!(["a cat"])),
        "{}",
        r.text()
    );
    let r = server.post_json(
        "/decode",
        &json!({"ids": [ids, [2, 3]], "skip_special_tokens": false}),
    );
    assert_eq!(
        r.json()[0].as_str().map(|t| t.starts_with("[CLS]")),
        Some(true),
        "{}",
        r.text()
    );
    let r = server.post_json("/tokenize", &json!({"inputs": ""}));
    assert_eq!(
        r.json()[0].as_array().map(Vec::len),
        Some(2),
        "{}",
        r.text()
    );
    let huge = "a cat ".repeat(20_000);
    for (path, body, words, status) in [
        (
            "/embed",
            json!({"inputs": "a", "dimensions": 8}),
            "one size",
            422,
        ),
        (
            "/tokenize",
            json!({"inputs": [[2, 3]]}),
            "token ids are what /tokenize gives",
            422,
        ),
        (
            "/tokenize",
            json!({"inputs": huge}),
            "more than 16384 tokens",
            413,
        ),
        ("/decode", json!({"ids": "a cat"}), "ids must be", 422),
        (
            "/decode",
            json!({"ids": [2, 999_999]}),
            "token id 999999 is past",
            422,
        ),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, status, "{path}: {}", r.text());
        assert_eq!(r.json()["error_type"], "Validation", "{}", r.text());
        let message = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(words), "{words}: {message}");
    }
    let r = server.post_json("/decode", &json!({"ids": []}));
    assert_eq!((r.status, &r.json()["error_type"]), (400, &json!("Empty")));
    let r = server.post_json("/tokenize", &json!({"inputs": "a cat", "colour": 1}));
    assert_eq!(r.json(), tokens);
}

/// Answers that ran the model say what it took in TEI's `x-*` headers: the characters and
/// tokens (those the body's usage counts), and the time of each step in whole
/// milliseconds, none past the total; refusals carry none.
#[test]
fn text_answers_carry_teis_timing_headers() {
    let (server, _repo) = start_synthetic();
    let texts = ["a cat runs fast", "the big red dog, é"];
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    let openai = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": texts}));
    let tokens = openai.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    let cohere = server.post_json("/v2/embed", &json!({"texts": texts}));
    let routes = [
        openai,
        server.post_json("/embed", &json!({"inputs": texts})),
        server.post_json("/", &json!({"inputs": texts})),
        cohere,
    ];
    for r in &routes {
        assert_eq!(r.status, 200, "{}", r.text());
        let number = |name: &str| -> u64 {
            let value = r.header(name).unwrap_or_else(|| panic!("no {name}: {r:?}"));
            value.parse().unwrap_or_else(|_| panic!("{name}: {value}"))
        };
        assert_eq!(number("x-compute-characters"), chars as u64);
        assert_eq!(number("x-compute-tokens"), tokens);
        assert_eq!(r.header("x-compute-type"), Some("cpu"));
        let total = number("x-total-time");
        assert_eq!(number("x-compute-time"), total);
        for step in ["x-tokenization-time", "x-queue-time", "x-inference-time"] {
            assert!(number(step) <= total, "{step} past {total} ms: {r:?}");
        }
    }
    let similarity = json!({"inputs": {"source_sentence": texts[0], "sentences": [texts[1]]}});
    let r = server.post_json("/similarity", &similarity);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-compute-tokens"),
        Some(tokens.to_string().as_str())
    );
    let refused = server.post_json("/embed", &json!({"inputs": []}));
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.header("x-compute-time"), None);
}

/// With no text model loaded, TEI's routes say so with a 404 in TEI's shape.
#[test]
fn tei_routes_without_a_text_model_are_404s() {
    let repo = TempDir::new("tei-no-text");
    write_version(repo.path(), "digits", 1, &[8, 4], 1);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    for r in [
        server.get("/info"),
        server.post_json("/", &json!({"inputs": "a"})),
    ] {
        assert_eq!(r.status, 404, "{}", r.text());
        assert!(r.text().contains("no text model"), "{}", r.text());
        assert_eq!(r.json()["error_type"], "Validation", "{}", r.text());
    }
    assert_eq!(server.get("/health").status, 200);
}

/// TEI's `/embed_all`: each text's every token's state, special tokens included, in order,
/// over several batches of a request and beside pooled requests; their mean is what `/embed`
/// pools. Refused where the model's embeddings are not its states pooled (Dense modules),
/// past `max_batch_tokens` tokens in one request, and for an over-long input with `truncate`
/// false; the server keeps serving.
#[test]
fn embed_all_gives_every_token_s_state() {
    let repo = TempDir::new("tei-embed-all");
    synthetic(&repo.path().join("enc/1"), 7);
    synthetic_with_dense(&repo.path().join("dense/1"), 9);
    // Two texts a batch: a request of three runs as two batches.
    let config = "p99_ms = 2000\nmax_batch_size = 2\nmax_batch_tokens = 300\n";
    for model in ["enc", "dense"] {
        std::fs::write(repo.path().join(model).join("config.toml"), config).unwrap();
    }
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let texts = ["a cat runs fast", "the big red dog, é", "x"];
    let all = server.post_json("/embed_all", &json!({"inputs": texts, "model": "enc"}));
    assert_eq!(all.status, 200, "{}", all.text());
    let states: Vec<Vec<Vec<f64>>> = (all.json().as_array().unwrap().iter())
        .map(float_rows)
        .collect();
    let pooled = embeddings(&server.post_json(
        "/embed",
        &json!({"inputs": texts, "normalize": false, "model": "enc"}),
    ));
    assert_eq!(states.len(), texts.len());
    for (i, text) in texts.iter().enumerate() {
        let tokenized = server.post_json("/tokenize", &json!({"inputs": text, "model": "enc"}));
        assert_eq!(states[i].len(), token_ids(&tokenized).len(), "{text}");
        assert!(states[i].iter().all(|s| s.len() == 32), "{text}");
        let mean: Vec<f64> = (0..32)
            .map(|d| states[i].iter().map(|s| s[d]).sum::<f64>() / states[i].len() as f64)
            .collect();
        let worst = (mean.iter().zip(&pooled[i])).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst < 1e-5,
            "{text}: the states' mean is {worst} off /embed's"
        );
    }
    // One text as a string: one text's states.
    let one = server.post_json("/embed_all", &json!({"inputs": texts[0], "model": "enc"}));
    assert_eq!(one.status, 200, "{}", one.text());
    assert_eq!(float_rows(&one.json()[0]), states[0]);
    embed_all_beside_pooled_requests(&server, &texts, &states, &pooled);
    let long = "a cat runs fast ".repeat(40);
    for (body, status, words) in [
        (
            json!({"inputs": texts, "model": "dense"}),
            422,
            "does not answer with every token's state",
        ),
        (
            json!({"inputs": vec![long.as_str(); 10], "model": "enc"}),
            413,
            "max_batch_tokens of 300",
        ),
        (
            json!({"inputs": long, "truncate": false, "model": "enc"}),
            413,
            "at most 48 fit",
        ),
        (json!({"inputs": [], "model": "enc"}), 400, "no text"),
        (
            json!({"inputs": 3, "model": "enc"}),
            422,
            "must be a string",
        ),
        (json!(["not", "an", "object"]), 422, "embed_all"),
    ] {
        let r = server.post_json("/embed_all", &body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(r.text().contains(words), "{words}: {}", r.text());
    }
    let again = server.post_json("/embed_all", &json!({"inputs": texts, "model": "enc"}));
    assert_eq!((again.status, again.json()), (200, all.json()));
}

/// Clients of `/embed_all` and `/embed` at once, so that their texts share batches: each
/// answer is the one each gets alone.
fn embed_all_beside_pooled_requests(
    server: &Server,
    texts: &[&str],
    states: &[Vec<Vec<f64>>],
    pooled: &[Vec<f64>],
) {
    let close = |a: &[f64], b: &[f64]| {
        let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
        (a.iter().zip(b)).all(|(x, y)| (x - y).abs() <= 1e-4 * scale)
    };
    std::thread::scope(|s| {
        for client in 0..4 {
            s.spawn(move || {
                for round in 0..10 {
                    let i = (client + round) % texts.len();
                    let body = json!({"inputs": [texts[i]], "normalize": false, "model": "enc"});
                    if (client + round) % 2 == 0 {
                        let r = server.post_json("/embed_all", &body);
                        assert_eq!(r.status, 200, "{}", r.text());
                        let got = float_rows(&r.json()[0]);
                        assert_eq!(got.len(), states[i].len());
                        assert!(got.iter().zip(&states[i]).all(|(g, w)| close(g, w)));
                    } else {
                        let r = server.post_json("/embed", &body);
                        assert_eq!(r.status, 200, "{}", r.text());
                        assert!(close(&embeddings(&r)[0], &pooled[i]));
                    }
                }
            });
        }
    });
}

/// TEI's `/embed_sparse` for a sparse encoder (SPLADE): each text's weights above zero by
/// vocabulary index, the same as `/embed` gives (unnormalised) in full; `/info` calls its
/// pooling `splade`. Refused for a dense encoder; the server keeps serving.
#[test]
fn embed_sparse_gives_each_text_s_weights_above_zero() {
    let repo = TempDir::new("tei-embed-sparse");
    synthetic_sparse(&repo.path().join("splade/1"), 11);
    synthetic(&repo.path().join("enc/1"), 7);
    for model in ["splade", "enc"] {
        let config = repo.path().join(model).join("config.toml");
        std::fs::write(config, "p99_ms = 2000\n").unwrap();
    }
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let texts = ["a cat runs fast", "the big red dog, é", "x"];
    let body = json!({"inputs": texts, "model": "splade"});
    let r = server.post_json("/embed_sparse", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let dense = embeddings(&server.post_json(
        "/embed",
        &json!({"inputs": texts, "normalize": false, "model": "splade"}),
    ));
    let answers = r.json();
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), texts.len());
    for (i, (sparse, full)) in answers.iter().zip(&dense).enumerate() {
        let pairs: Vec<(usize, f64)> = (sparse.as_array().unwrap().iter())
            .map(|p| {
                (
                    p["index"].as_u64().unwrap() as usize,
                    p["value"].as_f64().unwrap(),
                )
            })
            .collect();
        let above_zero: Vec<(usize, f64)> = (full.iter().copied().enumerate())
            .filter(|(_, w)| *w > 0.0)
            .collect();
        assert!(
            !pairs.is_empty() && pairs.len() < full.len(),
            "text {i}: {pairs:?}"
        );
        assert_eq!(pairs.len(), above_zero.len(), "text {i}");
        for ((j, v), (k, w)) in pairs.iter().zip(&above_zero) {
            assert_eq!(j, k, "text {i}");
            assert!(
                (v - w).abs() <= 1e-6 * w.abs().max(1.0),
                "text {i}, {j}: {v} vs {w}"
            );
        }
    }
    for (body, words) in [
        (
            json!({"inputs": texts, "model": "enc"}),
            "not a sparse encoder",
        ),
        (json!({"inputs": [1, "a"], "model": "splade"}), "token ids"),
        (
            json!({"inputs": "a", "truncate": "yes", "model": "splade"}),
            "embed_sparse",
        ),
    ] {
        let refused = server.post_json("/embed_sparse", &body);
        assert_eq!(refused.status, 422, "{body}: {}", refused.text());
        assert!(
            refused.text().contains(words),
            "{words}: {}",
            refused.text()
        );
    }
    let again = server.post_json("/embed_sparse", &body);
    assert_eq!((again.status, again.json()), (200, r.json()));
    drop(server);
    std::fs::remove_dir_all(repo.path().join("enc")).unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let info = server.get("/info").json();
    assert_eq!(
        info["model_type"],
        json!({"embedding": {"pooling": "splade"}}),
        "{info}"
    );
}
