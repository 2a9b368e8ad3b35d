//! The decoders (Qwen3, Qwen2) against transformers and sentence-transformers: the folders
//! under tests/fixtures/decoders and what those libraries answered for them were written by
//! tests/python/make_decoder_models.py, so no torch is needed here. Tokens with prompts
//! (the end of text appended, a long text cut as sentence-transformers cuts it), embeddings
//! one text at a time and packed together, bf16 products, and what a decoder folder may not
//! say.

use std::path::PathBuf;

use kernels::Device;
use models::encoder::{Encoded, Encoder, Pooling, Prompts, TextTokenizer, Truncation};
use models::{LoadOptions, MatmulPrecision};

use crate::support::embeddings::{assert_cosines, embed};
use crate::support::folder::assert_contains;

const DECODERS: [&str; 3] = ["qwen3", "qwen2", "gemma3"];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/decoders")
        .join(name)
}

struct Case {
    text: String,
    prompt_name: Option<String>,
    ids: Vec<u32>,
    embedding: Vec<f64>,
}

fn cases(name: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = json["cases"].as_array().unwrap();
    cases
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_string(),
            prompt_name: c["prompt_name"].as_str().map(str::to_string),
            ids: serde_json::from_value(c["ids"].clone()).unwrap(),
            embedding: serde_json::from_value(c["embedding"].clone()).unwrap(),
        })
        .collect()
}

/// Each case's tokens as tandem makes them: the prompt before the text, cut at the limit.
fn encode(name: &str, encoder: &Encoder, cases: &[Case]) -> Vec<Encoded> {
    let dir = fixture(name);
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let prompts = Prompts::read(&dir).unwrap();
    cases
        .iter()
        .map(|c| {
            let prompt = prompts
                .text(c.prompt_name.as_deref())
                .unwrap()
                .unwrap_or("");
            let text = format!("{prompt}{}", c.text);
            tokenizer.encode(&text, Truncation::Right).unwrap()
        })
        .collect()
}

fn check(name: &str, precision: MatmulPrecision, min_cosine: f64) {
    let options = LoadOptions {
        cpu_precision: precision,
    };
    let mut encoder = Encoder::load_with(&fixture(name), &Device::Cpu, options).unwrap();
    let cases = cases(name);
    let encoded = encode(name, &encoder, &cases);
    for (case, e) in cases.iter().zip(&encoded) {
        assert_eq!(e.ids, case.ids, "{name}: tokens of {:?}", case.text);
    }
    let want: Vec<Vec<f64>> = cases.iter().map(|c| c.embedding.clone()).collect();
    let mut alone = Vec::new();
    for e in &encoded {
        alone.extend(embed(&mut encoder, std::slice::from_ref(e)));
    }
    let context = format!("{name} {precision:?}");
    assert_cosines(&alone, &want, min_cosine, &format!("{context}, alone"));
    let packed = embed(&mut encoder, &encoded);
    assert_cosines(&packed, &want, min_cosine, &format!("{context}, packed"));
}

#[test]
fn decoders_embed_as_sentence_transformers_does() {
    for name in DECODERS {
        check(name, MatmulPrecision::F32, 0.99999);
    }
}

/// bf16 products keep 8 bits of each operand: a stated bound, not f32's.
#[test]
fn decoders_with_bf16_products_stay_close() {
    for name in DECODERS {
        check(name, MatmulPrecision::Bf16, 0.999);
    }
}

#[test]
fn a_decoder_folder_says_what_it_is() {
    let e = Encoder::load(&fixture("qwen3"), &Device::Cpu).unwrap();
    let c = e.config();
    let d = c.decoder.clone().unwrap();
    assert_eq!(
        (c.pooling, c.normalize, c.max_seq_len),
        (Pooling::LastToken, true, 512)
    );
    assert_eq!(
        (c.heads, d.kv_heads, d.head_dim, c.head_dim()),
        (4, 2, 16, 16)
    );
    assert!(d.qk_norm && !d.qkv_bias && d.causal);
    assert_eq!(e.output_width(), 32);
    let q2 = Encoder::load(&fixture("qwen2"), &Device::Cpu).unwrap();
    let d2 = q2.config().decoder.clone().unwrap();
    assert!(d2.qkv_bias && !d2.qk_norm && d2.head_dim == 8);
    // EmbeddingGemma's form: a window of 16 both ways reaches 8 positions either side.
    let g = Encoder::load(&fixture("gemma3"), &Device::Cpu).unwrap();
    let (gc, gd) = (g.config(), g.config().decoder.clone().unwrap());
    let local = gd.local.clone().unwrap();
    assert_eq!(
        (gc.pooling, gc.dense.len(), g.output_width()),
        (Pooling::Mean, 2, 32)
    );
    assert_eq!((local.window, local.sliding), (8, vec![true, false, true]));
    assert_eq!((local.rope_theta, gd.rope_theta), (1e4, 1e6));
    assert!(!gd.causal && gd.norm_offset == 1.0 && gd.scale_embeddings);
    assert!((gd.attention_scale - 12f64.powf(-0.5)).abs() < 1e-12);
}

/// A copy of a fixture with its config.json edited, removed when dropped.
struct Edited(PathBuf);

impl Edited {
    fn new(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Edited {
        let dir = std::env::temp_dir().join(format!(
            "tandem-decoder-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        copy_dir(&fixture(name), &dir);
        let path = dir.join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(&path, config.to_string()).unwrap();
        Edited(dir)
    }

    fn load(&self) -> Result<Encoder, String> {
        Encoder::load(&self.0, &Device::Cpu).map_err(|e| e.to_string())
    }
}

impl Drop for Edited {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The reason a fixture with its config.json edited fails to load.
fn load_error_with(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    match Edited::new(name, edit).load() {
        Ok(_) => "loaded".to_string(),
        Err(e) => e,
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => drop(std::fs::copy(entry.path(), target).unwrap()),
        }
    }
}

/// What is changed in config.json, how, and what the load error says.
type Refusal = (
    &'static str,
    fn(&mut serde_json::Value),
    &'static [&'static str],
);

#[test]
fn what_a_decoder_would_run_differently_is_refused_by_name() {
    let refused: [Refusal; 6] = [
        (
            "rope scaling",
            |c| c["rope_scaling"] = serde_json::json!({"type": "yarn", "factor": 4.0}),
            &["rope_scaling", "yarn", "unscaled"],
        ),
        (
            "rope type",
            |c| c["rope_parameters"]["rope_type"] = "linear".into(),
            &["rope_type \"linear\""],
        ),
        (
            "groups",
            |c| c["num_key_value_heads"] = 3.into(),
            &["num_attention_heads 4 is not a multiple of num_key_value_heads 3"],
        ),
        (
            "activation",
            |c| c["hidden_act"] = "gelu".into(),
            &["hidden_act \"gelu\""],
        ),
        (
            "sliding window",
            |c| c["use_sliding_window"] = true.into(),
            &["use_sliding_window"],
        ),
        (
            "architecture",
            |c| c["architectures"] = serde_json::json!(["Qwen3ForSequenceClassification"]),
            &["Qwen3ForSequenceClassification"],
        ),
    ];
    for (what, edit, says) in refused {
        let error = load_error_with("qwen3", edit);
        assert_contains(&error, says);
        assert!(!error.contains("loaded"), "{what}");
    }
    // Sizes that disagree with the weights: the tensor named, with both shapes.
    let error = load_error_with("qwen3", |c| c["head_dim"] = 8.into());
    assert_contains(
        &error,
        &["layers.0.self_attn.q_proj.weight", "[32, 32]", "[64, 32]"],
    );
    let error = load_error_with("qwen2", |c| c["intermediate_size"] = 48.into());
    assert_contains(&error, &["mlp.gate_proj.weight"]);
}

/// transformers 4's keys (Qwen3-Embedding's and EmbeddingGemma's published configs: a flat
/// `rope_theta`, `rope_scaling: null`, Gemma's `rope_local_base_freq`) give what 5's give.
#[test]
fn transformers_4_configs_read_as_5_s() {
    let qwen = Edited::new("qwen3", |c| {
        let theta = c["rope_parameters"]["rope_theta"].clone();
        c.as_object_mut().unwrap().remove("rope_parameters");
        c["rope_theta"] = theta;
        c["rope_scaling"] = serde_json::Value::Null;
    });
    let gemma = Edited::new("gemma3", |c| {
        let rope = c
            .as_object_mut()
            .unwrap()
            .remove("rope_parameters")
            .unwrap();
        c["rope_theta"] = rope["full_attention"]["rope_theta"].clone();
        c["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"].clone();
        c["rope_scaling"] = serde_json::Value::Null;
    });
    for (name, edited) in [("qwen3", qwen), ("gemma3", gemma)] {
        let mut encoder = edited.load().unwrap();
        let cases = cases(name);
        let encoded = encode(name, &encoder, &cases);
        let want: Vec<Vec<f64>> = cases.iter().map(|c| c.embedding.clone()).collect();
        let got = embed(&mut encoder, &encoded);
        assert_cosines(
            &got,
            &want,
            0.99999,
            &format!("{name} from transformers 4's keys"),
        );
    }
}

/// A causal LM's folder without sentence-transformers modules is not an embedder; a Qwen3
/// may say it attends both ways (`use_bidirectional_attention`, as TEI reads it), a Qwen2
/// with `is_causal`.
#[test]
fn a_decoder_is_an_embedder_by_its_modules_and_says_how_it_attends() {
    let bare = Edited::new("qwen3", |_| {});
    std::fs::remove_file(bare.0.join("modules.json")).unwrap();
    assert_contains(
        &bare.load().err().unwrap(),
        &["modules.json", "without sentence-transformers modules"],
    );
    let causal = |e: Edited| e.load().unwrap().config().decoder.clone().unwrap().causal;
    assert!(!causal(Edited::new("qwen3", |c| {
        c["use_bidirectional_attention"] = true.into()
    })));
    assert!(!causal(
        Edited::new("qwen2", |c| c["is_causal"] = false.into())
    ));
    let window = load_error_with("gemma3", |c| c["sliding_window"] = serde_json::Value::Null);
    assert_contains(&window, &["sliding_window null"]);
}

/// A text past the limit is cut (its end of text kept, as the fixture's long case shows
/// above) or refused with its count.
#[test]
fn a_text_past_the_context_is_refused_when_asked() {
    let dir = fixture("qwen3");
    let tokenizer = TextTokenizer::from_dir(&dir, 512).unwrap();
    let long = "word ".repeat(2000);
    let error = tokenizer.encode(&long, Truncation::Refuse).unwrap_err();
    assert!(error.to_string().contains("at most 512 fit"), "{error}");
    for truncation in [Truncation::Right, Truncation::Left] {
        let cut = tokenizer.encode(&long, truncation).unwrap();
        assert_eq!(cut.ids.len(), 512);
        assert_eq!(*cut.ids.last().unwrap(), 0, "the end of text stays last");
    }
}

/// The fixtures made again by tests/python/make_decoder_models.py with the Python of
/// `TANDEM_TORCH_PYTHON` (torch, transformers, sentence-transformers): the same tokens, and
/// embeddings within f32's bound of those checked in (another version of the libraries may
/// round differently). Slow and needs torch: run with `--ignored`.
#[test]
#[ignore]
fn decoder_fixtures_regenerate() {
    let Ok(python) = std::env::var("TANDEM_TORCH_PYTHON") else {
        panic!(
            "TANDEM_TORCH_PYTHON names a Python with torch, transformers and sentence-transformers"
        );
    };
    let out = std::env::temp_dir().join(format!("tandem-decoders-{}", std::process::id()));
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/python/make_decoder_models.py");
    let status = std::process::Command::new(python)
        .arg(&script)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "{script:?} failed");
    for name in DECODERS {
        let made = std::fs::read_to_string(out.join(name).join("expected.json")).unwrap();
        let made: serde_json::Value = serde_json::from_str(&made).unwrap();
        for (case, want) in made["cases"].as_array().unwrap().iter().zip(cases(name)) {
            let ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
            assert_eq!(ids, want.ids, "{name}: {:?}", want.text);
            let got: Vec<f32> = serde_json::from_value(case["embedding"].clone()).unwrap();
            assert_cosines(&got, &[want.embedding], 0.99999, name);
        }
    }
    std::fs::remove_dir_all(&out).unwrap();
}
