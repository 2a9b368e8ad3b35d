//! The text encoders' APIs as their users' clients call them: token ids beside texts,
//! OpenAI's model listing, prompts, and real clients
//! unchanged (tritonclient, openai, huggingface_hub) with all-MiniLM-L6-v2 scoring the
//! published pair through each. A synthetic BERT needs no download; MiniLM's absence is a
//! SKIPPED test (a failure with TANDEM_REQUIRE_TOOLS set).

use std::path::Path;
use std::process::Command;

use crate::support::text::*;
use crate::support::*;
use serde_json::{Value, json};

/// Token ids made with the model's own tokenizer give what their text gives, alone or beside
/// texts, on both JSON APIs; ids the model cannot take are a clear 4xx, and serving goes on.
#[test]
fn token_ids_give_what_their_text_gives() {
    let (server, repo) = start_synthetic();
    let tokenizer = models::TextTokenizer::from_dir(&repo.path().join("enc/1"), 48).unwrap();
    let texts = [
        "a cat runs fast",
        "the big red dog is eating bread with a woman",
    ];
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| tokenizer.encode(t, false).unwrap().ids)
        .collect();
    let [_, want, _] = through_every_endpoint(&server, "enc", &texts);
    let ok = |path: &str, body: Value| {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, 200, "{body}: {}", r.text());
        embeddings(&r)
    };
    let both = ok("/v1/embeddings", json!({"model": "enc", "input": ids}));
    let mixed = ok("/embed", json!({"inputs": [texts[0], ids[1]]}));
    let one = ok("/v1/embeddings", json!({"model": "enc", "input": ids[1]}));
    for (got, text) in [
        (&both[0], 0),
        (&both[1], 1),
        (&mixed[0], 0),
        (&mixed[1], 1),
        (&one[0], 1),
    ] {
        let c = cosine(got, &want[text]);
        assert!(c > 0.999_999, "text {text}: cosine {c}");
    }
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": ids}));
    let tokens = ids.iter().map(Vec::len).sum::<usize>();
    assert_eq!(r.json()["usage"]["prompt_tokens"], tokens);
    // TEI's alias of the OpenAI route, without `/v1`.
    assert_eq!(
        ok("/embeddings", json!({"model": "enc", "input": ids})),
        both
    );
    // A text of 60 tokens, as ids: cut to the model's 48 as its text is cut ([SEP] kept) on
    // /v1 and /embed, refused on /embed when truncation is off.
    let text = "a cat runs fast and ".repeat(12);
    let wide = models::TextTokenizer::from_dir(&repo.path().join("enc/1"), 512).unwrap();
    let long = wide.encode(&text, false).unwrap().ids;
    assert_eq!(long.len(), 62);
    let cut = ok("/v1/embeddings", json!({"model": "enc", "input": text}));
    let r = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": long}));
    assert_eq!(r.json()["usage"]["prompt_tokens"], 48, "{}", r.text());
    let c = cosine(&embeddings(&r)[0], &cut[0]);
    assert!(
        c > 0.999_999,
        "truncated ids against the truncated text: {c}"
    );
    let r = server.post_json("/embed", &json!({"inputs": [long], "truncate": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    // TEI's routes answer with TEI's codes: 413 past a limit, 422 for ids it cannot take.
    for (path, body, words, status) in [
        (
            "/embed",
            json!({"inputs": [long], "truncate": false}),
            "input 0 has 62 token ids, at most 48",
            413,
        ),
        (
            "/embed",
            json!({"inputs": ["a", [2, 999_999, 3]]}),
            "token id 999999 is past",
            422,
        ),
        // Ids without the model's [CLS] and [SEP] (here 2 and 3): another tokenizer's.
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": [[9906, 1917]]}),
            "must be the model's own",
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": [2, 5, 6]}),
            "ending with [3]",
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": [[]]}),
            "holds no token ids",
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": [-1]}),
            "must be a string",
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": [[1.5]]}),
            "must be a string",
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": ["a", 1]}),
            "must be a string",
            400,
        ),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(r.text().contains(words), "{words}: {}", r.text());
    }
    assert_eq!(
        ok("/v1/embeddings", json!({"model": "enc", "input": ids[1]})),
        one
    );
}

/// OpenAI's model listing names the text encoders, the models `/v1/embeddings` serves, and
/// answers a model that is not one of them with OpenAI's 404.
#[test]
fn openai_models_lists_the_text_encoders() {
    let repo = TempDir::new("text-models");
    synthetic(&repo.path().join("enc/1"), 7);
    write_version(repo.path(), "digits", 1, &[8, 4], 1);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let r = server.get("/v1/models");
    assert_eq!(r.status, 200, "{}", r.text());
    let list = r.json();
    assert_eq!(list["object"], "list");
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{list}");
    assert_eq!(data[0]["id"], "enc");
    assert_eq!(data[0]["object"], "model");
    assert!(data[0]["created"].as_u64().unwrap() >= before, "{list}");
    let r = server.get("/v1/models/enc");
    assert_eq!((r.status, r.json()), (200, data[0].clone()));
    for path in ["/v1/models/digits", "/v1/models/nope"] {
        let r = server.get(path);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "model_not_found", "{}", r.text());
    }
    let r = server.post_json("/v1/models", &json!({}));
    assert_eq!(r.status, 405, "{}", r.text());
    assert!(r.json()["error"]["message"].is_string(), "{}", r.text());
}

/// A folder's sentence-transformers prompts: the one a request names (TEI's and tandem's
/// `prompt_name`, v2's `parameters.prompt_name`), or the folder's default, goes before each
/// text; unknown names and prompts for token ids are refused.
#[test]
fn prompts_go_before_texts_by_name_or_by_default() {
    let repo = TempDir::new("text-prompts");
    let dir = repo.path().join("enc/1");
    synthetic(&dir, 7);
    let prompts = json!({"prompts": {"query": "a cat ", "passage": "the dog ", "none": "",
                                     "classification": ""},
                         "default_prompt_name": "passage"});
    std::fs::write(
        dir.join("config_sentence_transformers.json"),
        prompts.to_string(),
    )
    .unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let embed = |body: Value| {
        let r = server.post_json("/embed", &body);
        assert_eq!(r.status, 200, "{body}: {}", r.text());
        embeddings(&r)
    };
    let plain = |text: &str| embed(json!({"inputs": [text], "prompt_name": "none"}));
    assert_eq!(
        embed(json!({"inputs": ["runs fast"]})),
        plain("the dog runs fast")
    );
    let query = plain("a cat runs fast");
    assert_eq!(
        embed(json!({"inputs": ["runs fast"], "prompt_name": "query"})),
        query
    );
    let r = server.post_json(
        "/v1/embeddings",
        &json!({"model": "enc", "input": "runs fast", "prompt_name": "query"}),
    );
    let c = cosine(&embeddings(&r)[0], &query[0]);
    assert!(c > 0.999_999, "{c}");
    assert_eq!(r.json()["usage"]["prompt_tokens"], 6, "{}", r.text());
    let mut v2_body = v2(&["runs fast"]);
    v2_body["parameters"] = json!({"prompt_name": "query"});
    let r = server.post_json("/v2/models/enc/infer", &v2_body);
    let c = cosine(&embeddings(&r)[0], &query[0]);
    assert!(c > 0.999_999, "{c}");
    // Cohere's input_type picks the prompt of its name or its short name; the folder's
    // default where it has neither.
    for (input_type, want) in [
        ("search_query", &query),
        ("search_document", &plain("the dog runs fast")),
        ("clustering", &plain("the dog runs fast")),
        ("classification", &plain("runs fast")),
    ] {
        let body = json!({"texts": ["runs fast"], "input_type": input_type});
        let r = server.post_json("/v1/embed", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let got: Vec<f64> = (r.json()["embeddings"][0].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap())
            .collect();
        let c = cosine(&got, &want[0]);
        assert!(c > 0.999_999, "{input_type}: {c}");
    }
    for (body, words) in [
        (
            json!({"inputs": "a", "prompt_name": "title"}),
            r#""classification", "none", "passage", "query""#,
        ),
        (
            json!({"inputs": [[2, 3]], "prompt_name": "query"}),
            "token ids are taken as they are",
        ),
    ] {
        let r = server.post_json("/embed", &body);
        assert_eq!(r.status, 422, "{body}: {}", r.text());
        let message = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(words), "{words}: {message}");
    }
    // Ids get no default prompt: they are what the model runs.
    let r = server.post_json(
        "/tokenize",
        &json!({"inputs": "runs fast", "prompt_name": "none"}),
    );
    let ids = token_ids(&r);
    let by_ids = embed(json!({"inputs": [ids]}));
    assert_eq!(by_ids, plain("runs fast"));
    assert_ne!(by_ids, embed(json!({"inputs": ["runs fast"]})));
}

#[test]
fn minilm_scores_the_pair_as_published_through_every_endpoint() {
    let test = "minilm_scores_the_pair_as_published_through_every_endpoint";
    let Some(dir) = minilm() else {
        return skip(
            test,
            "all-MiniLM-L6-v2 not fetched (scripts/fetch-models.sh)",
        );
    };
    let server = Server::start(&["--model", &format!("minilm={}", dir.display())]);
    assert_scores_the_pair(&server, 5e-4);
    clients_check(test, &server, "minilm", &dir, Some(0.7553));
}

/// MiniLM, served as `minilm`, scores the issue's pair 0.7553 ± `within` through v2,
/// `/v1/embeddings` and `/embed`.
fn assert_scores_the_pair(server: &Server, within: f64) {
    let pair = ["A man is eating food.", "A man is eating a piece of bread."];
    for (endpoint, rows) in ["v2", "/v1/embeddings", "/embed"]
        .iter()
        .zip(through_every_endpoint(server, "minilm", &pair))
    {
        let score = cosine(&rows[0], &rows[1]);
        assert!((score - 0.7553).abs() <= within, "{endpoint}: {score}");
    }
}

/// `--cpu-precision bf16`: where the CPU has AVX-512 BF16, the model runs bf16 products,
/// says so in `/info`, and scores the pair within 0.0015 of f32 (0.7546 where AMX runs
/// attention in bf16 too; PyTorch under bf16 autocast: 0.7540); elsewhere it serves f32,
/// with a warning in the log.
#[test]
fn minilm_with_bf16_products_serves_the_pair_and_says_which_precision_it_runs() {
    let test = "minilm_with_bf16_products_serves_the_pair_and_says_which_precision_it_runs";
    let Some(dir) = minilm() else {
        return skip(
            test,
            "all-MiniLM-L6-v2 not fetched (scripts/fetch-models.sh)",
        );
    };
    let model = format!("minilm={}", dir.display());
    let server = Server::start(&["--model", &model, "--cpu-precision", "bf16"]);
    let bf16 = models::MatmulPrecision::Bf16.available();
    let dtype = server.get("/info").json()["model_dtype"].clone();
    assert_eq!(dtype, if bf16 { "bfloat16" } else { "float32" });
    let warned = server.log().contains("needs a CPU with AVX-512 BF16");
    assert_eq!(warned, !bf16, "{}", server.log());
    assert_scores_the_pair(&server, if bf16 { 1.5e-3 } else { 5e-4 });
}

/// `--cpu-precision bf16x3`: where the CPU has AMX the model runs bf16x3 products and scores
/// the pair within f32's 0.0005, and `/info` says float32 (the accuracy a client gets);
/// elsewhere it serves f32, with a warning in the log.
#[test]
fn minilm_with_bf16x3_products_serves_the_pair_as_f32_does() {
    let test = "minilm_with_bf16x3_products_serves_the_pair_as_f32_does";
    let Some(dir) = minilm() else {
        return skip(
            test,
            "all-MiniLM-L6-v2 not fetched (scripts/fetch-models.sh)",
        );
    };
    let model = format!("minilm={}", dir.display());
    let server = Server::start(&["--model", &model, "--cpu-precision", "bf16x3"]);
    assert_eq!(server.get("/info").json()["model_dtype"], "float32");
    let warned = server
        .log()
        .contains("cpu_precision = \"bf16x3\" needs a CPU with AMX");
    let here = models::MatmulPrecision::Bf16x3.available();
    assert_eq!(warned, !here, "{}", server.log());
    assert_scores_the_pair(&server, 5e-4);
}

/// tritonclient (BYTES in JSON and binary), the openai client (texts and token ids) and
/// huggingface_hub's InferenceClient, unchanged.
#[test]
fn tritonclient_openai_and_huggingface_hub_work_unchanged() {
    let (server, repo) = start_synthetic();
    clients_check(
        "tritonclient_openai_and_huggingface_hub_work_unchanged",
        &server,
        "enc",
        &repo.path().join("enc/1"),
        None,
    );
}

/// The clients against `model`, whose folder is `dir`.
fn clients_check(test: &str, server: &Server, model: &str, dir: &Path, pair_score: Option<f64>) {
    let Some(python) = std::env::var_os("TANDEM_PYTHON") else {
        return skip(test, "TANDEM_PYTHON not set (scripts/test.sh sets it)");
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/text_clients_check.py"
    );
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .args(["--url", &server.addr.to_string(), "--model", model])
        .arg("--tokenizer")
        .arg(dir.join("tokenizer.json"));
    if let Some(s) = pair_score {
        cmd.args(["--pair-score", &s.to_string()]);
    }
    let out = cmd.output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.contains("all checks passed"),
        "text clients check failed:\n{report}\nserver log:\n{}",
        server.log()
    );
}

/// A model served with `min_dimensions` (one trained to be cut) answers OpenAI's and TEI's
/// `dimensions` and Cohere's `output_dimension` with each embedding's first values,
/// normalised after the cut as the request's normalisation says, over several batches and
/// after Dense modules too; sizes outside `min_dimensions` to its width are refused, as
/// every size but its own is for a model served without it.
#[test]
fn matryoshka_sizes_cut_embeddings_where_the_model_is_served_to_be_cut() {
    let repo = TempDir::new("text-matryoshka");
    synthetic(&repo.path().join("enc/1"), 7);
    synthetic_with_dense(&repo.path().join("dense/1"), 9);
    // One text a batch: a request of two runs as two batches, cut after they are joined.
    let config = "p99_ms = 2000\nmin_dimensions = 8\nmax_batch_size = 1\n";
    for model in ["enc", "dense"] {
        std::fs::write(repo.path().join(model).join("config.toml"), config).unwrap();
    }
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let texts = ["a cat runs fast", "the big red dog"];
    let post = |path: &str, body: &Value| {
        let r = server.post_json(path, body);
        assert_eq!(r.status, 200, "{path} {body}: {}", r.text());
        r
    };
    let unit = |v: &[f64]| -> Vec<f64> {
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter().map(|x| x / norm).collect()
    };
    let near = |got: &[Vec<f64>], want: &[Vec<f64>], what: &str| {
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.len(), w.len(), "{what}");
            let off = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(off < 1e-5, "{what}: off by {off}");
        }
    };
    for (model, d) in [("enc", 16), ("enc", 8), ("dense", 8)] {
        let raw_body = json!({"inputs": texts, "normalize": false, "model": model});
        let raw = embeddings(&post("/embed", &raw_body));
        assert!(raw[0].len() > d, "{model}: {}", raw[0].len());
        let cut_unit: Vec<Vec<f64>> = raw.iter().map(|r| unit(&r[..d])).collect();
        let cut_raw: Vec<Vec<f64>> = raw.iter().map(|r| r[..d].to_vec()).collect();
        let m = json!(model);
        let cases = [
            (
                "/v1/embeddings",
                json!({"model": m, "input": texts, "dimensions": d}),
                &cut_unit,
            ),
            (
                "/embed",
                json!({"model": m, "inputs": texts, "dimensions": d}),
                &cut_unit,
            ),
            (
                "/embed",
                json!({"model": m, "inputs": texts, "dimensions": d, "normalize": false}),
                &cut_raw,
            ),
            (
                "/v2/embed",
                json!({"model": m, "texts": texts, "output_dimension": d}),
                &cut_unit,
            ),
        ];
        for (path, body, want) in cases {
            near(
                &embeddings(&post(path, &body)),
                want,
                &format!("{path} {body}"),
            );
        }
        // Every encoding of the cut: base64's f32s, Cohere's signs packed eight a byte.
        let body =
            json!({"model": m, "input": texts, "dimensions": d, "encoding_format": "base64"});
        let b64 = post("/v1/embeddings", &body).json()["data"][0]["embedding"].clone();
        assert_eq!(
            b64.as_str().map(str::len),
            Some((4 * d).div_ceil(3) * 4),
            "{b64}"
        );
        let body = json!({"model": m, "texts": texts, "output_dimension": d,
                          "embedding_types": ["ubinary"]});
        let packed = post("/v2/embed", &body).json()["embeddings"]["ubinary"][0].clone();
        assert_eq!(
            packed.as_array().map(Vec::len),
            Some(d.div_ceil(8)),
            "{packed}"
        );
    }
    let width = embeddings(&post("/embed", &json!({"inputs": "a", "model": "enc"})))[0].len();
    let own = json!({"model": "enc", "input": "a", "dimensions": width});
    assert_eq!(embeddings(&post("/v1/embeddings", &own))[0].len(), width);
    for (path, body, status) in [
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": "a", "dimensions": 7}),
            400,
        ),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": "a", "dimensions": width + 1}),
            400,
        ),
        (
            "/embed",
            json!({"model": "enc", "inputs": "a", "dimensions": 7}),
            422,
        ),
        (
            "/v2/embed",
            json!({"model": "enc", "texts": ["a"], "output_dimension": 7}),
            400,
        ),
    ] {
        let r = server.post_json(path, &body);
        assert_eq!(r.status, status, "{path} {body}: {}", r.text());
        assert!(
            r.text().contains("may be cut to 8 to"),
            "{path}: {}",
            r.text()
        );
    }
}
