//! What `tandem-bench load` sends: the request bodies (`--bodies` of them, each with its
//! own random rows, as JSON, Triton's binary extension or a gRPC `ModelInfer` message, or
//! its own lines of a file of texts, for v2 or OpenAI's embeddings) and each whole HTTP
//! request.

use std::time::Duration;

use bytes::Bytes;
use models::rng::SplitMix64;
use tokio::time::Instant;

use crate::cli::{Api, LoadArgs};

/// One of the requests jobs send, built once.
pub(super) struct Target {
    /// Request line and headers, up to (not including) the blank line that ends them
    /// (empty for gRPC, whose connections write their own).
    head: Vec<u8>,
    /// The HTTP body, or the framed gRPC message.
    body: Bytes,
    /// With `--propagate-deadline`: the budget, whose remainder each request carries.
    deadline_budget: Option<Duration>,
    /// Without it every request is the same bytes, built once.
    fixed: Option<Vec<u8>>,
}

impl Target {
    pub(super) fn new(
        authority: &str,
        path: &str,
        body: Bytes,
        header_len: Option<usize>,
        deadline_budget: Option<Duration>,
    ) -> Target {
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        if let Some(n) = header_len {
            head.push_str(&format!("inference-header-content-length: {n}\r\n"));
        }
        let head = head.into_bytes();
        let fixed = deadline_budget
            .is_none()
            .then(|| [&head[..], b"\r\n", &body[..]].concat());
        Target {
            head,
            body,
            deadline_budget,
            fixed,
        }
    }

    /// A gRPC call of the framed `message`.
    pub(super) fn grpc(message: Bytes, deadline_budget: Option<Duration>) -> Target {
        Target {
            head: Vec::new(),
            body: message,
            deadline_budget,
            fixed: None,
        }
    }

    /// The framed gRPC message of a [`Target::grpc`], and what is left of the budget for
    /// a job scheduled at `scheduled` where the deadline is propagated (`grpc-timeout`).
    pub(super) fn call(&self, scheduled: Instant) -> (&Bytes, Option<Duration>) {
        let left = (self.deadline_budget).map(|b| b.saturating_sub(scheduled.elapsed()));
        (&self.body, left)
    }

    /// The whole HTTP/1.1 request for a job scheduled at `scheduled`; `scratch` holds it
    /// when it differs from request to request.
    pub(super) fn request<'a>(&'a self, scratch: &'a mut Vec<u8>, scheduled: Instant) -> &'a [u8] {
        if let Some(fixed) = &self.fixed {
            return fixed;
        }
        scratch.clear();
        scratch.extend_from_slice(&self.head);
        if let Some(budget) = self.deadline_budget {
            // What is left of the budget after waiting for a connection, as a caller that
            // propagates its deadline sends it.
            let left = budget.saturating_sub(scheduled.elapsed());
            scratch.extend_from_slice(
                format!("tandem-timeout-us: {}\r\n", left.as_micros()).as_bytes(),
            );
        }
        scratch.extend_from_slice(b"\r\n");
        scratch.extend_from_slice(&self.body);
        scratch
    }
}

/// What a row of a dense model's input is: the input's and first output's names, and the
/// input's dims past the batch dimension (an MLP's `[width]`, an image model's `[3, 224,
/// 224]`), read from the model's metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct RowShape {
    pub input: String,
    pub output: String,
    pub dims: Vec<usize>,
}

impl RowShape {
    /// An MLP's `input-0` rows of `width` values.
    pub fn mlp(width: usize) -> RowShape {
        RowShape {
            input: "input-0".into(),
            output: "output-0".into(),
            dims: vec![width],
        }
    }

    fn values(&self) -> usize {
        self.dims.iter().product()
    }
}

/// The most memory `--bodies` may take, all bodies together.
const MAX_BODIES_BYTES: usize = 256 << 20;

/// The requests to send: `--bodies` of them, each with its own rows.
pub(super) fn targets(
    args: &LoadArgs,
    shape: &RowShape,
    authority: &str,
) -> anyhow::Result<Vec<Target>> {
    let path = match args.api {
        Api::V2 => format!("/v2/models/{}/infer", args.model),
        Api::Openai => "/v1/embeddings".to_string(),
    };
    let deadline_budget = args
        .propagate_deadline
        .then(|| Duration::from_secs_f64(args.budget_ms / 1e3));
    let count = args.bodies.max(1) as usize;
    let texts = match &args.texts {
        Some(path) => Some(read_texts(path)?),
        None => None,
    };
    anyhow::ensure!(
        args.api == Api::V2 || texts.is_some(),
        "--api openai sends texts: give --texts"
    );
    if let (Some(texts), Some(_)) = (&texts, args.zipf) {
        // Otherwise bodies would share texts, and repeats the report does not count reach
        // the server.
        anyhow::ensure!(
            count * args.rows <= texts.len(),
            "--zipf counts repeats by body: --bodies {count} x --rows {} needs as many \
             texts, and --texts has {}",
            args.rows,
            texts.len()
        );
    }
    let mut targets = Vec::with_capacity(count);
    for i in 0..count as u64 {
        // The first body is the one a single-body run sends.
        let seed = args
            .seed
            .wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let encoding = match (&args.grpc, args.binary) {
            (Some(_), _) => Encoding::Grpc,
            (None, true) => Encoding::Binary,
            (None, false) => Encoding::Json,
        };
        let target = match &texts {
            Some(texts) => {
                let body = text_payload(texts, args, i as usize);
                Target::new(authority, &path, body, None, deadline_budget)
            }
            None => {
                let (body, header_len) = payload(shape, args.rows, encoding, &args.model, seed);
                match encoding {
                    Encoding::Grpc => Target::grpc(body, deadline_budget),
                    _ => Target::new(authority, &path, body, header_len, deadline_budget),
                }
            }
        };
        // Bodies differ in length by a few digits at most: the first one's tells.
        let len = target.body.len();
        anyhow::ensure!(
            len.saturating_mul(count) <= MAX_BODIES_BYTES,
            "--bodies {count} of about {len} bytes each need more than {} MiB; send fewer",
            MAX_BODIES_BYTES >> 20
        );
        targets.push(target);
    }
    Ok(targets)
}

/// The texts of the file: its non-empty lines, or for a `.json` file the strings of its
/// `texts` array (the corpus `benches/compare_text_peers.py` writes).
fn read_texts(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let named = |e: &dyn std::fmt::Display| anyhow::anyhow!("--texts {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| named(&e))?;
    let texts: Vec<String> = match path.extension().is_some_and(|e| e == "json") {
        true => {
            #[derive(serde::Deserialize)]
            struct Corpus {
                texts: Vec<String>,
            }
            let corpus: Corpus = serde_json::from_str(&text).map_err(|e| named(&e))?;
            corpus.texts.into_iter().filter(|t| !t.is_empty()).collect()
        }
        false => (text.lines())
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect(),
    };
    anyhow::ensure!(
        !texts.is_empty(),
        "--texts {}: no text in it",
        path.display()
    );
    Ok(texts)
}

/// Body `i` of a text model's: the next `--rows` texts, in v2's JSON with BYTES or as
/// OpenAI's embeddings request.
fn text_payload(texts: &[String], args: &LoadArgs, i: usize) -> Bytes {
    let rows = args.rows;
    let picked: Vec<&str> = (0..rows)
        .map(|r| texts[(i * rows + r) % texts.len()].as_str())
        .collect();
    let body = match args.api {
        Api::V2 => serde_json::json!({
            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [rows], "data": picked}]
        }),
        Api::Openai if rows == 1 => serde_json::json!({"model": args.model, "input": picked[0]}),
        Api::Openai => serde_json::json!({"model": args.model, "input": picked}),
    };
    Bytes::from(body.to_string())
}

/// How rows go over the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Json,
    /// Triton's binary extension.
    Binary,
    /// A framed gRPC `ModelInfer` message.
    Grpc,
}

/// One request body of `model`'s: random rows (the same for every encoding, given the
/// seed), and the length of the binary extension's JSON header.
fn payload(
    row: &RowShape,
    rows: usize,
    encoding: Encoding,
    model: &str,
    seed: u64,
) -> (Bytes, Option<usize>) {
    let mut rng = SplitMix64::new(seed);
    let values: Vec<f32> = (0..row.values() * rows).map(|_| rng.normal()).collect();
    let shape: Vec<usize> = std::iter::once(rows)
        .chain(row.dims.iter().copied())
        .collect();
    if encoding == Encoding::Grpc {
        let message = crate::grpc::infer_message(model, &row.input, &shape, &values);
        (message, None)
    } else if encoding == Encoding::Binary {
        let header = serde_json::json!({
            "inputs": [{"name": row.input, "datatype": "FP32", "shape": shape,
                        "parameters": {"binary_data_size": values.len() * 4}}],
            "outputs": [{"name": row.output, "parameters": {"binary_data": true}}]
        })
        .to_string();
        let mut body = header.clone().into_bytes();
        for v in &values {
            body.extend_from_slice(&v.to_le_bytes());
        }
        (Bytes::from(body), Some(header.len()))
    } else {
        let body = serde_json::json!({
            "inputs": [{"name": row.input, "datatype": "FP32", "shape": shape, "data": values}]
        });
        (Bytes::from(body.to_string()), None)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::test_args;
    use super::*;
    use crate::cli::LoadShape;

    fn parsed(request: &[u8]) -> (Vec<(String, String)>, usize) {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut r = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(head) = r.parse(request).expect("a valid request") else {
            panic!("incomplete request head");
        };
        assert_eq!(
            (r.method, r.path),
            (Some("POST"), Some("/v2/models/m/infer"))
        );
        let headers = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        (headers, request.len() - head)
    }

    #[test]
    fn every_body_has_its_own_rows_and_the_first_is_the_single_one() {
        let mut a = test_args(LoadShape::Constant);
        let single = targets(&a, &RowShape::mlp(784), "h:1").unwrap();
        a.bodies = 3;
        let three = targets(&a, &RowShape::mlp(784), "h:1").unwrap();
        assert_eq!((single.len(), three.len()), (1, 3));
        // `--bodies 1` sends what the generator always sent.
        assert_eq!(three[0].body, single[0].body);
        assert_ne!(three[0].body, three[1].body);
        assert_ne!(three[1].body, three[2].body);
        for t in &three {
            let v: serde_json::Value = serde_json::from_slice(&t.body).unwrap();
            assert_eq!(v["inputs"][0]["data"].as_array().unwrap().len(), 784);
            let (headers, body_len) = parsed(t.fixed.as_ref().unwrap());
            assert_eq!(body_len, t.body.len());
            assert!(
                headers
                    .iter()
                    .any(|(n, v)| n == "content-length" && *v == t.body.len().to_string())
            );
        }
        // Bodies that would not fit the memory bound are refused, not allocated.
        a.rows = 512;
        a.bodies = 1024;
        let e = targets(&a, &RowShape::mlp(784), "h:1")
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("send fewer"), "{e}");
    }

    #[test]
    fn grpc_bodies_carry_the_rows_json_bodies_carry() {
        let mut a = test_args(LoadShape::Constant);
        a.bodies = 2;
        let json = targets(&a, &RowShape::mlp(4), "h:1").unwrap();
        a.grpc = Some("h:2".into());
        a.propagate_deadline = true;
        let grpc = targets(&a, &RowShape::mlp(4), "h:1").unwrap();
        for (j, g) in json.iter().zip(&grpc) {
            let v: serde_json::Value = serde_json::from_slice(&j.body).unwrap();
            let values: Vec<f32> = (v["inputs"][0]["data"].as_array().unwrap().iter())
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            let expected = crate::grpc::infer_message("m", "input-0", &[1, 4], &values);
            let scheduled = Instant::now() - Duration::from_millis(20);
            let (message, left) = g.call(scheduled);
            assert_eq!(*message, expected);
            assert!(g.head.is_empty() && g.fixed.is_none());
            let left = left.expect("the deadline propagated");
            assert!(
                left <= Duration::from_millis(30),
                "{left:?} of 50 ms after 20"
            );
        }
        assert_ne!(grpc[0].body, grpc[1].body);
    }

    #[test]
    fn text_bodies_take_the_file_s_lines_in_turn() {
        let path = std::env::temp_dir().join(format!("tandem-texts-{}", std::process::id()));
        std::fs::write(&path, "a cat\n\nthe dog runs\né\n").unwrap();
        let mut a = test_args(LoadShape::Constant);
        a.texts = Some(path.clone());
        a.rows = 2;
        a.bodies = 3;
        let bodies: Vec<serde_json::Value> =
            (targets(&a, &RowShape::mlp(0), "h:1").unwrap().iter())
                .map(|t| serde_json::from_slice(&t.body).unwrap())
                .collect();
        let data = |b: &serde_json::Value| b["inputs"][0]["data"].clone();
        assert_eq!(
            data(&bodies[0]),
            serde_json::json!(["a cat", "the dog runs"])
        );
        assert_eq!(data(&bodies[1]), serde_json::json!(["é", "a cat"]));
        assert_eq!(data(&bodies[2]), serde_json::json!(["the dog runs", "é"]));
        assert_eq!(bodies[0]["inputs"][0]["shape"], serde_json::json!([2]));
        assert_eq!(bodies[0]["inputs"][0]["datatype"], "BYTES");
        std::fs::write(&path, "\n \n").unwrap();
        let e = targets(&a, &RowShape::mlp(0), "h:1")
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("no text"), "{e}");
        let _ = std::fs::remove_file(&path);
        // A corpus as compare_text_peers.py writes it, a text with a line break included.
        let json = path.with_extension("json");
        std::fs::write(&json, r#"{"texts": ["a\nb", "c"], "tokens": [4, 3]}"#).unwrap();
        a.texts = Some(json.clone());
        a.bodies = 1;
        let body: serde_json::Value =
            serde_json::from_slice(&targets(&a, &RowShape::mlp(0), "h:1").unwrap()[0].body)
                .unwrap();
        assert_eq!(data(&body), serde_json::json!(["a\nb", "c"]));
        let _ = std::fs::remove_file(&json);
    }

    #[test]
    fn openai_bodies_are_embeddings_requests_and_zipf_needs_a_text_per_body() {
        let path = std::env::temp_dir().join(format!("tandem-openai-{}", std::process::id()));
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        let mut a = test_args(LoadShape::Constant);
        a.api = Api::Openai;
        let e = targets(&a, &RowShape::mlp(0), "h:1")
            .err()
            .expect("refused");
        assert!(e.to_string().contains("give --texts"), "{e}");
        a.texts = Some(path.clone());
        a.bodies = 3;
        let single = targets(&a, &RowShape::mlp(0), "h:1").unwrap();
        let body = |t: &Target| serde_json::from_slice::<serde_json::Value>(&t.body).unwrap();
        assert_eq!(
            body(&single[1]),
            serde_json::json!({"model": "m", "input": "two"})
        );
        assert!(
            single[1]
                .head
                .starts_with(b"POST /v1/embeddings HTTP/1.1\r\n")
        );
        a.rows = 2;
        let pairs = targets(&a, &RowShape::mlp(0), "h:1").unwrap();
        assert_eq!(
            body(&pairs[1])["input"],
            serde_json::json!(["three", "one"])
        );
        // Drawn bodies that shared texts would repeat inputs the report does not count.
        a.zipf = Some(1.0);
        let e = targets(&a, &RowShape::mlp(0), "h:1")
            .err()
            .expect("refused");
        assert!(e.to_string().contains("needs as many texts"), "{e}");
        a.rows = 1;
        assert_eq!(targets(&a, &RowShape::mlp(0), "h:1").unwrap().len(), 3);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn requests_are_whole_http_requests_with_the_body_they_announce() {
        let body = Bytes::from_static(b"{\"inputs\": []}");
        let fixed = Target::new("h:1", "/v2/models/m/infer", body.clone(), Some(7), None);
        let mut scratch = Vec::new();
        let request = fixed.request(&mut scratch, Instant::now()).to_vec();
        assert!(
            scratch.is_empty(),
            "a fixed request is built once, not per send"
        );
        let (headers, body_len) = parsed(&request);
        assert_eq!(body_len, body.len());
        assert!(request.ends_with(&body));
        let value = |h: &[(String, String)], name: &str| {
            h.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
        };
        assert_eq!(
            value(&headers, "content-length"),
            Some(body.len().to_string())
        );
        assert_eq!(
            value(&headers, "inference-header-content-length"),
            Some("7".into())
        );
        assert_eq!(value(&headers, "tandem-timeout-us"), None);

        // With a propagated deadline each request carries what is left of the budget.
        let budget = Duration::from_millis(50);
        let propagating = Target::new(
            "h:1",
            "/v2/models/m/infer",
            body.clone(),
            None,
            Some(budget),
        );
        let scheduled = Instant::now() - Duration::from_millis(20);
        let request = propagating.request(&mut scratch, scheduled).to_vec();
        let (headers, body_len) = parsed(&request);
        assert_eq!(body_len, body.len());
        let left: u64 = value(&headers, "tandem-timeout-us")
            .expect("the deadline header")
            .parse()
            .expect("microseconds");
        assert!(
            (1..=30_000).contains(&left),
            "{left} us left of 50 ms after 20 ms"
        );
    }
}
