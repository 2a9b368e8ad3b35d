//! Triton's model repository extension against the real server: the index says which
//! versions serve and why the others do not; an operator's unload takes a model out of
//! service (new versions included) without failing the requests it was answering, and a
//! load brings it back; load and unload answer whom the admin API answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::*;
use serde_json::json;

const DIMS: [usize; 3] = [8, 16, 3];

fn start(extra: &str) -> (Server, TempDir) {
    let dir = TempDir::new("repo-ext");
    let models = dir.path().join("models");
    write_version(&models, "m", 1, &DIMS, 1);
    write_version(&models, "n", 1, &DIMS, 2);
    // Version 2 of n is not a safetensors file: it fails to load and n/1 serves on.
    let broken = models.join("n/2/model.safetensors");
    std::fs::create_dir_all(broken.parent().unwrap()).unwrap();
    std::fs::write(&broken, b"not a checkpoint").unwrap();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\nrepository_poll_ms = 100\n{extra}",
            models.display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    (server, dir)
}

fn post(server: &Server, path: &str, body: &str) -> HttpResponse {
    request(server.addr, "POST", path, &[], body.as_bytes())
}

fn index(server: &Server, body: &str) -> Vec<(String, String, String, String)> {
    let r = post(server, "/v2/repository/index", body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap().to_string();
            (
                field("name"),
                field("version"),
                field("state"),
                field("reason"),
            )
        })
        .collect()
}

fn state_of(server: &Server, model: &str, version: &str) -> (String, String) {
    index(server, "")
        .into_iter()
        .find(|e| e.0 == model && e.1 == version)
        .map(|e| (e.2, e.3))
        .unwrap_or_else(|| panic!("{model}/{version} not in the index"))
}

#[test]
fn the_index_shows_every_version_and_why_it_does_not_serve() {
    let (server, _dir) = start("");
    let all = index(&server, "");
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(state_of(&server, "m", "1"), ("READY".into(), "".into()));
    assert_eq!(state_of(&server, "n", "1"), ("READY".into(), "".into()));
    let (state, reason) = state_of(&server, "n", "2");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.starts_with("failed to load: "), "{reason}");
    // Only what serves, when asked.
    let ready = index(&server, r#"{"ready": true}"#);
    assert_eq!(ready.len(), 2, "{ready:?}");
    assert!(ready.iter().all(|e| e.2 == "READY"));

    // The server says it has the extension; bad requests get their 4xx.
    let extensions = server.get("/v2").json()["extensions"].clone();
    assert!(
        extensions
            .as_array()
            .unwrap()
            .contains(&json!("model_repository")),
        "{extensions}"
    );
    assert_eq!(
        post(&server, "/v2/repository/index", "{\"ready\": 1").status,
        400
    );
    assert_eq!(server.get("/v2/repository/index").status, 405);
    assert_eq!(server.get("/v2/repository/models/m/load").status, 405);
    server.assert_serves("m", DIMS[0]);
}

#[test]
fn unload_takes_a_model_out_of_service_until_it_is_loaded() {
    let (server, dir) = start("");
    let x = inputs(DIMS[0], 3);

    // A client keeps asking m throughout: every answer is 200 (before the unload, or
    // queued when it came) or 404 (after), never a failure or a lost connection.
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (addr, stop, body) = (server.addr, stop.clone(), infer_body(&x, 1));
        std::thread::spawn(move || {
            let mut codes = std::collections::BTreeMap::<u16, usize>::new();
            while !stop.load(Ordering::Relaxed) {
                *codes
                    .entry(post_json(addr, "/v2/models/m/infer", &body).status)
                    .or_default() += 1;
            }
            codes
        })
    };
    std::thread::sleep(Duration::from_millis(300));

    let r = post(
        &server,
        "/v2/repository/models/m/unload",
        r#"{"parameters": {"unload_dependents": false}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Done when answered: nothing of m serves any more.
    assert_eq!(server.get("/v2/models/m").status, 404);
    assert_eq!(server.get("/v2/models/m/ready").status, 404);
    assert_eq!(
        state_of(&server, "m", "1"),
        ("UNAVAILABLE".into(), "unloaded".into())
    );
    // The other model still serves, and so the server is ready.
    assert_eq!(server.get("/v2/health/ready").status, 200);
    server.assert_serves("n", DIMS[0]);

    // A new version of a model held out is not loaded by the repository's poll.
    write_version(&dir.path().join("models"), "m", 2, &DIMS, 4);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(server.get("/v2/models/m").status, 404);
    assert_eq!(
        state_of(&server, "m", "2"),
        ("UNAVAILABLE".into(), "unloaded".into())
    );

    let r = post(&server, "/v2/repository/models/m/load", "");
    assert_eq!(r.status, 200, "{}", r.text());
    // Loaded and warmed up when answered: the newest version serves.
    let meta = server.get("/v2/models/m").json();
    assert_eq!(meta["versions"], json!(["1", "2"]), "{meta}");
    server.assert_serves("m", DIMS[0]);
    assert_eq!(state_of(&server, "m", "2"), ("READY".into(), "".into()));

    stop.store(true, Ordering::Relaxed);
    let codes = client.join().unwrap();
    assert!(
        codes.keys().all(|c| *c == 200 || *c == 404),
        "answers by code: {codes:?}\n{}",
        server.log()
    );
    assert!(codes.get(&200).is_some_and(|n| *n > 0), "{codes:?}");
    assert!(
        server
            .log()
            .contains("model unloaded through the repository API")
    );
}

#[test]
fn load_and_unload_refuse_what_they_cannot_do() {
    let (server, _dir) = start("");
    for action in ["load", "unload"] {
        let r = post(
            &server,
            &format!("/v2/repository/models/zzz/{action}"),
            "{}",
        );
        assert_eq!(r.status, 404, "{action}: {}", r.text());
        assert!(r.text().contains("zzz"), "{}", r.text());
    }
    // A load may not bring its own configuration: the repository's files are the truth.
    let r = post(
        &server,
        "/v2/repository/models/m/load",
        r#"{"parameters": {"config": "{\"max_batch_size\": 4}"}}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("config.toml"), "{}", r.text());
    assert_eq!(
        post(&server, "/v2/repository/models/m/unload", "[").status,
        400
    );

    // Unloaded and loaded again, n serves its good version; the broken one stays failed.
    let r = post(&server, "/v2/repository/models/n/unload", "");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(&server, "/v2/repository/models/n/load", "");
    assert_eq!(r.status, 200, "n/1 loads again: {}", r.text());
    server.assert_serves("n", DIMS[0]);
    assert_eq!(state_of(&server, "n", "2").0, "UNAVAILABLE");
    server.assert_serves("m", DIMS[0]);
}

#[test]
fn concurrent_loads_are_all_answered() {
    let (server, _dir) = start("");
    let addr = server.addr;
    let clients: Vec<_> = (0..12)
        .map(|_| {
            std::thread::spawn(move || {
                request(addr, "POST", "/v2/repository/models/m/load", &[], b"").status
            })
        })
        .collect();
    let codes: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
    server.assert_serves("m", DIMS[0]);
}

#[test]
fn a_model_whose_versions_all_fail_to_load_says_why() {
    let dir = TempDir::new("repo-ext-broken");
    let models = dir.path().join("models");
    write_version(&models, "good", 1, &DIMS, 1);
    let broken = models.join("bad/1/model.safetensors");
    std::fs::create_dir_all(broken.parent().unwrap()).unwrap();
    std::fs::write(&broken, b"garbage").unwrap();
    // The unloadable model keeps the server unready; it still answers the repository API.
    let server = Server::spawn(&["--model-repository", models.to_str().unwrap()]);
    assert!(poll_until(Duration::from_secs(60), || {
        raw(
            server.addr,
            b"POST /v2/repository/index HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
        )
        .is_ok_and(|r| r.status == 200 && r.json().as_array().is_some_and(|a| a.len() == 2))
    }));
    let r = post(&server, "/v2/repository/models/bad/load", "");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("version 1: failed to load"),
        "{}",
        r.text()
    );
    server.assert_serves("good", DIMS[0]);
}

#[test]
fn load_and_unload_need_the_admin_token_when_one_is_set() {
    let (server, _dir) = start("[admin]\ntoken = \"s3cret\"\n");
    for action in ["unload", "load"] {
        let path = format!("/v2/repository/models/m/{action}");
        assert_eq!(
            post(&server, &path, "").status,
            401,
            "{action} without the token"
        );
        let r = request(
            server.addr,
            "POST",
            &path,
            &[("Authorization", "Bearer wrong".into())],
            b"",
        );
        assert_eq!(r.status, 401);
        let r = request(
            server.addr,
            "POST",
            &path,
            &[("Authorization", "Bearer s3cret".into())],
            b"",
        );
        assert_eq!(r.status, 200, "{action}: {}", r.text());
    }
    // The index only reads: no token needed.
    assert_eq!(index(&server, "").len(), 3);
    server.assert_serves("m", DIMS[0]);
}

#[test]
fn without_a_repository_the_index_lists_the_files_served_and_nothing_loads() {
    let dir = TempDir::new("repo-ext-file");
    let ckpt = dir.path().join("one.safetensors");
    models::Checkpoint::random(&DIMS, kernels::DType::F32, 3)
        .write_atomic(&ckpt)
        .unwrap();
    let arg = format!("solo={}", ckpt.display());
    let server = Server::start(&["--model", &arg]);
    assert_eq!(
        index(&server, ""),
        vec![("solo".into(), "1".into(), "READY".into(), "".into())]
    );
    let r = post(&server, "/v2/repository/models/solo/unload", "");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("no model repository"), "{}", r.text());
    server.assert_serves("solo", DIMS[0]);
}
