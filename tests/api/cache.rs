//! The response cache end to end: a hit answers bit-identically to the miss that filled it
//! on every route (v2 JSON and binary, OpenAI, TEI, Cohere; an MLP's rows and a text
//! encoder's texts); partial hits answer in order; a new version, an unload and a clear
//! are never answered from the old entries; concurrent misses of one text run it once;
//! the bypasses do what they say; the byte bound holds under a flood of unique rows; the
//! counts in the metrics and Triton's statistics are what was sent; a bad `[cache]` is
//! refused at start.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::support::text::*;
use crate::support::*;
use serde_json::{Value, json};

const DIMS: [usize; 3] = [8, 16, 3];

/// A repository of `enc` (a synthetic text encoder) and `mlp`, both caching, and `plain`,
/// an MLP that does not.
fn repository(root: &Path) -> PathBuf {
    let models = root.join("models");
    synthetic(&models.join("enc/1"), 7);
    write_version(&models, "mlp", 1, &DIMS, 1);
    write_version(&models, "plain", 1, &DIMS, 1);
    // Answers are what these tests are about: a budget a busy test machine cannot miss.
    for (model, cache) in [("enc", true), ("mlp", true), ("plain", false)] {
        let settings = format!("p99_ms = 2000\ncache = {cache}\n");
        std::fs::write(models.join(model).join("config.toml"), settings).unwrap();
    }
    models
}

/// A server of [`repository`] with `[cache] max_bytes` and `more` keys of `[cache]`.
fn start_with_cache(max_bytes: u64, more: &str) -> (Server, TempDir) {
    let dir = TempDir::new("cache");
    let models = repository(dir.path());
    let config = dir.path().join("tandem.toml");
    let text = format!(
        "model_repository = \"{}\"\nrepository_poll_ms = 100\n[cache]\nmax_bytes = {max_bytes}\n{more}\n",
        models.display()
    );
    std::fs::write(&config, text).unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    (server, dir)
}

fn start() -> (Server, TempDir) {
    start_with_cache(64 << 20, "")
}

fn send(server: &Server, path: &str, body: &Value, headers: &[(&str, String)]) -> HttpResponse {
    let mut headers = headers.to_vec();
    headers.push(("Content-Type", "application/json".into()));
    let r = request(
        server.addr,
        "POST",
        path,
        &headers,
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{path} {body}: {}", r.text());
    r
}

fn outcome(r: &HttpResponse) -> &str {
    r.header("x-tandem-cache").unwrap_or("none")
}

fn counter(server: &Server, name: &str, model: &str) -> f64 {
    server.series(name, &[&format!("model=\"{model}\"")])
}

/// Rows the version's batches ran so far, from Triton's statistics.
fn rows_run(server: &Server, model: &str) -> u64 {
    let stats = server.get(&format!("/v2/models/{model}/stats")).json();
    let batches = stats["model_stats"][0]["batch_stats"].as_array().cloned();
    (batches.unwrap_or_default().iter())
        .map(|b| b["batch_size"].as_u64().unwrap() * b["compute_infer"]["count"].as_u64().unwrap())
        .sum()
}

/// Cohere's answer carries a fresh id each time; everything else of it must repeat.
fn without_id(r: &HttpResponse) -> Value {
    let mut j = r.json();
    if let Some(o) = j.as_object_mut() {
        o.remove("id");
    }
    j
}

#[test]
fn a_hit_answers_bit_identically_to_the_miss_that_filled_it_on_every_route() {
    let (server, _dir) = start();
    let binary = json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                    "data": ["binary out"]}],
                        "parameters": {"binary_data_output": true}});
    let routes: Vec<(&str, Value)> = vec![
        ("/v2/models/enc/infer", v2(&["v2 json", "two texts"])),
        ("/v2/models/enc/infer", binary),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": ["openai floats"]}),
        ),
        (
            "/v1/embeddings",
            json!({"model": "enc", "input": ["openai b64"], "encoding_format": "base64"}),
        ),
        ("/embed", json!({"inputs": ["tei embed"]})),
        (
            "/v2/embed",
            json!({"model": "enc", "texts": ["cohere"], "input_type": "search_query"}),
        ),
        (
            "/v2/models/mlp/infer",
            infer_body(&inputs(2 * DIMS[0], 3), 2),
        ),
    ];
    for (path, body) in &routes {
        let miss = send(&server, path, body, &[]);
        let hit = send(&server, path, body, &[]);
        assert_eq!(
            (outcome(&miss), outcome(&hit)),
            ("miss", "hit"),
            "{path} {body}"
        );
        assert_eq!(hit.body.len(), miss.body.len(), "{path} {body}");
        match path.ends_with("/v2/embed") {
            true => assert_eq!(without_id(&hit), without_id(&miss)),
            false => assert_eq!(hit.body, miss.body, "{path} {body}"),
        }
    }
    // Entries hold the model's output: what a request does with it after is its own. The
    // texts above, unnormalised and cut, are hits with the values a fresh run gives.
    let raw = json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["v2 json"]}],
                     "parameters": {"normalize": false}});
    let hit = send(&server, "/v2/models/enc/infer", &raw, &[]);
    let fresh = send(
        &server,
        "/v2/models/enc/infer",
        &raw,
        &[("Cache-Control", "no-cache".into())],
    );
    assert_eq!((outcome(&hit), outcome(&fresh)), ("hit", "miss"));
    assert_eq!(hit.body, fresh.body);
    // The 7 texts above looked up twice, one of them once more (the no-cache request looked
    // nothing up); the 2 rows twice.
    assert_eq!(counter(&server, "tandem_cache_misses_total", "enc"), 7.0);
    assert_eq!(counter(&server, "tandem_cache_hits_total", "enc"), 8.0);
    assert_eq!(counter(&server, "tandem_cache_misses_total", "mlp"), 2.0);
    assert_eq!(counter(&server, "tandem_cache_hits_total", "mlp"), 2.0);
    assert!(counter(&server, "tandem_cache_entries", "enc") >= 7.0);
    assert!(counter(&server, "tandem_cache_bytes", "enc") > 7.0 * 32.0 * 4.0);
    // Triton's statistics count requests: 7 found whole, 6 that looked up and ran (the
    // no-cache one looked nothing up).
    let stats = server.get("/v2/models/enc/stats").json();
    let inference = &stats["model_stats"][0]["inference_stats"];
    assert_eq!(inference["cache_hit"]["count"], 7, "{stats}");
    assert_eq!(inference["cache_miss"]["count"], 6, "{stats}");
    assert_eq!(inference["success"]["count"], 14, "{stats}");
    // Inferences, as Triton counts them: the texts computed.
    assert_eq!(stats["model_stats"][0]["inference_count"], 8, "{stats}");
    // A model that does not opt in says nothing of a cache.
    let plain = send(
        &server,
        "/v2/models/plain/infer",
        &infer_body(&inputs(DIMS[0], 1), 1),
        &[],
    );
    assert_eq!(outcome(&plain), "none");
}

#[test]
fn partial_hits_answer_in_order_and_run_only_the_rest() {
    let (server, _dir) = start();
    let first = send(
        &server,
        "/v1/embeddings",
        &json!({"model": "enc", "input": ["a cat", "the dog"]}),
        &[],
    );
    let before = rows_run(&server, "enc");
    let mixed = json!({"model": "enc", "input": ["red", "a cat", "big blue sky", "the dog"]});
    let partial = send(&server, "/v1/embeddings", &mixed, &[]);
    assert_eq!(outcome(&partial), "partial");
    assert_eq!(
        rows_run(&server, "enc") - before,
        2,
        "only the two new texts ran"
    );
    let (got, filled) = (embeddings(&partial), embeddings(&first));
    assert_eq!(got[1], filled[0]);
    assert_eq!(got[3], filled[1]);
    let fresh = send(
        &server,
        "/v1/embeddings",
        &mixed,
        &[("Cache-Control", "no-cache".into())],
    );
    for (g, f) in got.iter().zip(embeddings(&fresh)) {
        assert!((cosine(g, &f) - 1.0).abs() < 1e-6);
    }
    // Usage counts every text's tokens, found or run.
    assert_eq!(partial.json()["usage"], fresh.json()["usage"]);
    // MLP rows likewise: the found row as it was computed alone, the others as a fresh run
    // of the three gives them (a batch's products may round differently by its size).
    let rows = inputs(3 * DIMS[0], 5);
    let middle = &rows[DIMS[0]..2 * DIMS[0]];
    let alone = send(&server, "/v2/models/mlp/infer", &infer_body(middle, 1), &[]);
    let r = send(&server, "/v2/models/mlp/infer", &infer_body(&rows, 3), &[]);
    assert_eq!(outcome(&r), "partial");
    let got = r.output_values();
    assert_eq!(got[DIMS[2]..2 * DIMS[2]], alone.output_values());
    let fresh = send(
        &server,
        "/v2/models/plain/infer",
        &infer_body(&rows, 3),
        &[],
    );
    for (g, f) in got.iter().zip(fresh.output_values()) {
        assert!((g - f).abs() <= 1e-5 * f.abs().max(1.0), "{g} vs {f}");
    }
}

#[test]
fn new_versions_unloads_and_clears_are_never_answered_from_old_entries() {
    let (server, dir) = start();
    let body = v2(&["the swap"]);
    let v1 = send(&server, "/v2/models/enc/infer", &body, &[]);
    assert_eq!(
        outcome(&send(&server, "/v2/models/enc/infer", &body, &[])),
        "hit"
    );
    synthetic(&dir.path().join("models/enc/2"), 8);
    assert!(poll_until(Duration::from_secs(60), || {
        server.get("/v2/models/enc/versions/2/ready").status == 200
    }));
    let v2_answer = send(&server, "/v2/models/enc/infer", &body, &[]);
    assert_eq!(outcome(&v2_answer), "miss");
    assert_ne!(embeddings(&v2_answer), embeddings(&v1));
    // A request for version 1 still gets version 1's answers.
    let old = send(&server, "/v2/models/enc/versions/1/infer", &body, &[]);
    assert_eq!((outcome(&old), old.body.clone()), ("hit", v1.body.clone()));
    // Cleared: every version's entries.
    let cleared = request(server.addr, "DELETE", "/admin/models/enc/cache", &[], b"");
    assert_eq!(cleared.status, 200, "{}", cleared.text());
    assert_eq!(cleared.json()["cleared_versions"], json!(["1", "2"]));
    assert_eq!(
        outcome(&send(
            &server,
            "/v2/models/enc/versions/1/infer",
            &body,
            &[]
        )),
        "miss"
    );
    assert_eq!(
        outcome(&send(&server, "/v2/models/enc/infer", &body, &[])),
        "miss"
    );
    let unknown = request(server.addr, "DELETE", "/admin/models/nope/cache", &[], b"");
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    assert_eq!(server.get("/admin/models/enc/cache").status, 405);
    // Unloaded and loaded again through the repository API: a new load, no old entries.
    assert_eq!(
        outcome(&send(&server, "/v2/models/enc/infer", &body, &[])),
        "hit"
    );
    let unload = server.post_json("/v2/repository/models/enc/unload", &json!({}));
    assert_eq!(unload.status, 200, "{}", unload.text());
    let load = server.post_json("/v2/repository/models/enc/load", &json!({}));
    assert_eq!(load.status, 200, "{}", load.text());
    assert_eq!(
        outcome(&send(&server, "/v2/models/enc/infer", &body, &[])),
        "miss"
    );
}

#[test]
fn turning_a_model_s_cache_off_drops_its_entries() {
    let (server, dir) = start();
    let body = json!({"model": "enc", "input": ["kept a while"]});
    send(&server, "/v1/embeddings", &body, &[]);
    assert_eq!(outcome(&send(&server, "/v1/embeddings", &body, &[])), "hit");
    let settings = dir.path().join("models/enc/config.toml");
    let switch = |on: bool| {
        std::fs::write(&settings, format!("p99_ms = 2000\ncache = {on}\n")).unwrap();
        let used = move |r: &HttpResponse| r.header("x-tandem-cache").is_some();
        assert!(poll_until(Duration::from_secs(30), || {
            used(&send(
                &server,
                "/v1/embeddings",
                &json!({"model": "enc", "input": ["probe"]}),
                &[],
            )) == on
        }));
    };
    switch(false);
    switch(true);
    assert_eq!(
        outcome(&send(&server, "/v1/embeddings", &body, &[])),
        "miss"
    );
}

#[test]
fn concurrent_misses_of_one_text_run_it_once() {
    let (server, _dir) = start();
    let n = 8;
    // A long text: its forward pass takes long enough for the others to arrive meanwhile.
    let text = "the quick brown fox jumps over the lazy dog ".repeat(40);
    let body = Arc::new(json!({"model": "enc", "input": [text]}));
    let before = rows_run(&server, "enc");
    let barrier = Arc::new(Barrier::new(n));
    let addr = server.addr;
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (body, barrier) = (body.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let r = post_json(addr, "/v1/embeddings", &body);
                assert_eq!(r.status, 200, "{}", r.text());
                (
                    r.header("x-tandem-cache").unwrap().to_string(),
                    embeddings(&r),
                )
            })
        })
        .collect();
    let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(rows_run(&server, "enc") - before, 1, "the text ran once");
    let misses = answers.iter().filter(|(o, _)| o == "miss").count();
    assert_eq!(
        misses,
        1,
        "{:?}",
        answers.iter().map(|a| &a.0).collect::<Vec<_>>()
    );
    assert!(answers.iter().all(|(_, e)| *e == answers[0].1));
    assert_eq!(counter(&server, "tandem_cache_misses_total", "enc"), 1.0);
    assert_eq!(
        counter(&server, "tandem_cache_hits_total", "enc"),
        (n - 1) as f64
    );
}

#[test]
fn bypasses_skip_the_lookup_the_store_or_both() {
    let (server, _dir) = start();
    let row = infer_body(&inputs(DIMS[0], 11), 1);
    let mut off = row.clone();
    off["parameters"] = json!({"cache": false});
    for _ in 0..2 {
        assert_eq!(
            outcome(&send(&server, "/v2/models/mlp/infer", &off, &[])),
            "none"
        );
    }
    assert_eq!(
        outcome(&send(&server, "/v2/models/mlp/infer", &row, &[])),
        "miss"
    );
    let no_store = [("Cache-Control", "no-store".into())];
    let body = json!({"model": "enc", "input": ["not kept"]});
    assert_eq!(
        outcome(&send(&server, "/v1/embeddings", &body, &no_store)),
        "miss"
    );
    assert_eq!(
        outcome(&send(&server, "/v1/embeddings", &body, &no_store)),
        "miss"
    );
    assert_eq!(
        outcome(&send(&server, "/v1/embeddings", &body, &[])),
        "miss"
    );
    assert_eq!(
        outcome(&send(&server, "/v1/embeddings", &body, &no_store)),
        "hit"
    );
    let no_cache = [("Cache-Control", "max-age=0, No-Cache".into())];
    assert_eq!(
        outcome(&send(&server, "/v1/embeddings", &body, &no_cache)),
        "miss"
    );
    // Bypassed lookups are not counted as misses.
    assert_eq!(counter(&server, "tandem_cache_misses_total", "enc"), 3.0);
    assert_eq!(counter(&server, "tandem_cache_hits_total", "enc"), 1.0);
}

#[test]
fn a_hit_is_answered_without_admission_even_past_its_deadline() {
    let (server, _dir) = start();
    let body = json!({"model": "enc", "input": ["in time"]});
    assert_eq!(
        outcome(&send(&server, "/v1/embeddings", &body, &[])),
        "miss"
    );
    // A deadline already passed: admission refuses what is to be computed, but a request
    // found whole takes no queue slot and no batch.
    let passed = [("tandem-timeout-us", "0".to_string())];
    let hit = send(&server, "/v1/embeddings", &body, &passed);
    assert_eq!(outcome(&hit), "hit");
    let other = json!({"model": "enc", "input": ["too late"]});
    let r = request(
        server.addr,
        "POST",
        "/v1/embeddings",
        &passed,
        other.to_string().as_bytes(),
    );
    assert_eq!(r.status, 504, "{}", r.text());
    let row = infer_body(&inputs(DIMS[0], 21), 1);
    send(&server, "/v2/models/mlp/infer", &row, &[]);
    let r = send(&server, "/v2/models/mlp/infer", &row, &passed);
    assert_eq!(outcome(&r), "hit");
}

/// Resident memory of `pid`, in bytes.
fn rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

#[test]
fn the_byte_bound_holds_under_a_flood_of_unique_rows() {
    let max_bytes: u64 = 2 << 20;
    let (server, dir) = start_with_cache(max_bytes, "");
    // Rows of 1,024 values: 4 KiB keys, so that the flood below would take 52 MiB unbounded.
    let width = 1024;
    let models = dir.path().join("models");
    write_version(&models, "wide", 1, &[width, 16, 3], 2);
    std::fs::write(
        models.join("wide/config.toml"),
        "p99_ms = 2000\ncache = true\n",
    )
    .unwrap();
    assert!(poll_until(Duration::from_secs(30), || {
        server.get("/v2/models/wide/ready").status == 200
    }));
    let (rows, requests) = (64, 200);
    let flood = |from: usize, to: usize| {
        for i in from..to {
            let x = inputs(rows * width, 1000 + i as u64);
            send(&server, "/v2/models/wide/infer", &infer_body(&x, rows), &[]);
        }
    };
    // Warmed up: the store full once, the allocator's arenas grown.
    flood(0, requests / 4);
    let warm = rss(server.pid());
    flood(requests / 4, requests);
    let grown = rss(server.pid()).saturating_sub(warm);
    // The store evicts in its maintenance, which runs as it is used (every 64 writes, or
    // on the first use after 300 ms): until then the latest writes may stand over the
    // bound. Used again after a pause, it is within it.
    let bytes = || counter(&server, "tandem_cache_bytes", "wide");
    let settled = poll_until(Duration::from_secs(5), || {
        std::thread::sleep(Duration::from_millis(400));
        send(
            &server,
            "/v2/models/wide/infer",
            &infer_body(&inputs(width, 1), 1),
            &[],
        );
        bytes() <= max_bytes as f64
    });
    let bytes = bytes();
    assert!(settled, "{bytes} bytes kept");
    assert!(bytes >= max_bytes as f64 / 4.0, "{bytes} bytes kept");
    // 9,600 unique rows after warm-up would take about 40 MiB unbounded.
    assert!(
        grown < 8 << 20,
        "resident memory grew {grown} bytes after warm-up"
    );
    let evicted = server.series(
        "tandem_cache_evictions_total",
        &["model=\"wide\"", "reason=\"size\""],
    );
    assert!(evicted > 10_000.0, "{evicted}");
    let entries = counter(&server, "tandem_cache_entries", "wide");
    let looked_up = counter(&server, "tandem_cache_misses_total", "wide");
    assert_eq!(looked_up, (rows * requests) as f64 + 1.0);
    assert!(
        (entries + evicted - looked_up).abs() < 1.0,
        "{entries} + {evicted} vs {looked_up}"
    );
}

#[test]
fn a_bad_cache_configuration_is_refused_at_start() {
    let dir = TempDir::new("cache-bad");
    let models = repository(dir.path());
    let cases = [
        ("max_bytes = -1", "cache.max_bytes must be 0"),
        ("max_bytes = 1000000000000000000", "more than the"),
        (
            "max_bytes = 1048576\nttl_s = 0",
            "cache.ttl_s must be a positive",
        ),
        ("size = 10", "unknown field"),
    ];
    for (i, (section, says)) in cases.iter().enumerate() {
        let config = dir.path().join(format!("bad-{i}.toml"));
        let text = format!(
            "model_repository = \"{}\"\n[cache]\n{section}\n",
            models.display()
        );
        std::fs::write(&config, text).unwrap();
        assert_start_fails(&["--config", config.to_str().unwrap()], &[says]);
    }
}

#[test]
fn answers_expire_after_their_time_to_live() {
    let (server, _dir) = start_with_cache(1 << 20, "ttl_s = 0.3");
    let row = infer_body(&inputs(DIMS[0], 4), 1);
    assert_eq!(
        outcome(&send(&server, "/v2/models/mlp/infer", &row, &[])),
        "miss"
    );
    assert_eq!(
        outcome(&send(&server, "/v2/models/mlp/infer", &row, &[])),
        "hit"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        outcome(&send(&server, "/v2/models/mlp/infer", &row, &[])),
        "miss"
    );
}
