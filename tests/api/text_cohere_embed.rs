//! Cohere's embed API (`/v1/embed`, `/v2/embed`) as Cohere's SDK calls it, against the
//! embeddings `/v1/embeddings` gives. A synthetic BERT needs no download.

use std::process::Command;

use crate::support::text::*;
use serde_json::{Value, json};

/// Cohere's embed API on `/v1/embed` and `/v2/embed`: the embeddings `/v1/embeddings`
/// gives, as floats, base64 and packed signs; `truncate` START and NONE; refusals in
/// Cohere's shape; and Cohere's own SDK, unchanged, through both.
#[test]
fn cohere_embed_answers_as_cohere_and_its_sdk_works_unchanged() {
    let (server, _repo) = start_synthetic();
    let texts = ["a cat runs fast", "the big red dog", "one two three"];
    let openai = server.post_json("/v1/embeddings", &json!({"model": "enc", "input": texts}));
    let want = embeddings(&openai);
    let body = json!({"model": "enc", "texts": texts, "input_type": "search_document",
                      "embedding_types": ["float", "base64", "binary", "ubinary"]});
    let r = server.post_json("/v2/embed", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let got = r.json();
    assert_eq!(got["response_type"], "embeddings_by_type", "{got}");
    assert_eq!(got["texts"], json!(texts));
    let billed = &got["meta"]["billed_units"]["input_tokens"];
    assert_eq!(*billed, openai.json()["usage"]["prompt_tokens"], "{got}");
    let by_type = &got["embeddings"];
    for (i, want) in want.iter().enumerate() {
        let floats: Vec<f64> = (by_type["float"][i].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(&floats, want, "float {i}");
        let bytes = base64_decode(by_type["base64"][i].as_str().unwrap());
        // The f32s themselves: JSON's shortest decimal for each reads back as the same f32.
        let decoded: Vec<f32> = (bytes.chunks_exact(4))
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let want_f32: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        assert_eq!(decoded, want_f32, "base64 {i}");
        let packed: Vec<u64> = (want.chunks(8))
            .map(|eight| {
                (eight.iter().enumerate())
                    .filter(|(_, v)| **v > 0.0)
                    .map(|(j, _)| 0x80 >> j)
                    .sum()
            })
            .collect();
        assert_eq!(by_type["ubinary"][i], json!(packed), "ubinary {i}");
        let signed: Vec<i64> = packed.iter().map(|&b| b as i64 - 128).collect();
        assert_eq!(by_type["binary"][i], json!(signed), "binary {i}");
    }
    // Version 1 without embedding_types: plain floats, of the one model loaded.
    let v1 = server.post_json("/v1/embed", &json!({"texts": texts}));
    assert_eq!(v1.status, 200, "{}", v1.text());
    assert_eq!(
        v1.json()["response_type"],
        "embeddings_floats",
        "{}",
        v1.text()
    );
    let floats = Value::Array(want.iter().map(|e| json!(e)).collect());
    assert_eq!(v1.json()["embeddings"], floats);
    // truncate START keeps an over-long text's end, as TEI's Left does; NONE refuses it.
    let long = format!(
        "{}{}",
        "the big red dog ".repeat(20),
        "a cat runs fast ".repeat(20)
    );
    let start = server.post_json("/v1/embed", &json!({"texts": [long], "truncate": "START"}));
    assert_eq!(start.status, 200, "{}", start.text());
    let left = json!({"inputs": long, "truncation_direction": "Left", "normalize": false});
    let tei = embeddings(&server.post_json("/embed", &left));
    let c = cosine(&embeddings(&start)[0], &tei[0]);
    assert!(c > 0.999_999, "{c}");
    for (body, words) in [
        (
            json!({"texts": [long], "truncate": "NONE"}),
            "at most 48 fit",
        ),
        (
            json!({"texts": ["a"], "embedding_types": ["int8"]}),
            "calibration",
        ),
        (json!({"texts": ["a"], "input_type": "image"}), "input_type"),
        (json!({"texts": ["a"], "max_tokens": 8}), "max_tokens"),
        (
            json!({"texts": ["a"], "output_dimension": 7}),
            "output_dimension",
        ),
        (
            json!({"images": ["data:image/png;base64,AA=="]}),
            "embeds texts",
        ),
        (json!({"model": "enc"}), "texts is required"),
        (json!({"texts": [""]}), "empty"),
        (
            json!({"texts": ["a"], "embedding_types": []}),
            "embedding_types is empty",
        ),
        (
            json!({"texts": ["a"], "embedding_types": ["f16"]}),
            "\"f16\"",
        ),
        (json!({"texts": vec!["a"; 2049]}), "at most 2048"),
    ] {
        let r = server.post_json("/v2/embed", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let message = r.json()["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(words), "{words}: {}", r.text());
    }
    let Some(python) = std::env::var_os("TANDEM_PYTHON") else {
        return skip(
            "cohere_embed",
            "TANDEM_PYTHON not set (scripts/test.sh sets it)",
        );
    };
    let script = r#"
import json, sys, cohere
url, texts = sys.argv[1], json.loads(sys.argv[2])
v2 = cohere.ClientV2(api_key="unused", base_url=url).embed(
    model="enc", texts=texts, input_type="search_query", embedding_types=["float"])
# More than the 96 texts the v1 client sends at once: it splits them and joins the answers.
v1 = cohere.Client(api_key="unused", base_url=url).embed(
    texts=texts * 33, model="enc", input_type="search_document")
print(json.dumps({"v2": v2.embeddings.float_, "v1": v1.embeddings[:3], "v1_count":
                  len(v1.embeddings), "v1_texts": v1.texts[96:99],
                  "tokens": v2.meta.billed_units.input_tokens}))
"#;
    let out = Command::new(python)
        .args(["-c", script, &format!("http://{}", server.addr)])
        .arg(json!(texts).to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    // In a batch of 96 a text's sums may split across the kernel's tiles differently.
    for api in ["v1", "v2"] {
        for (got, want) in float_rows(&got[api]).iter().zip(&want) {
            let c = cosine(got, want);
            assert!(c > 0.999_999, "{api}: {c}");
        }
    }
    assert_eq!(got["v1_count"], 99, "{got}");
    assert_eq!(got["v1_texts"], json!(texts), "the joined answers in order");
    // The SDK reads billed units as floats.
    assert_eq!(got["tokens"].as_f64(), billed.as_f64(), "{got}");
}
