//! The text encoder's forward pass against a float64 reference written from the
//! architecture in numpy (tests/python/bert_reference.py, run with $TANDEM_PYTHON), on a
//! tiny random BERT, DistilBERT, MPNet and XLM-RoBERTa written here (no download) and on
//! all-MiniLM-L6-v2 (fetched by scripts/fetch-models.sh; $TANDEM_MINILM_DIR or the cache).
//! The same bodies run on the CPU and, where a device exists, on CUDA. A test whose model
//! or Python is absent says `SKIPPED <test>: <reason>`, unless TANDEM_REQUIRE_TOOLS is set,
//! when it fails.

use std::path::Path;

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::projection::DenseActivation;
use models::encoder::synthetic::{SyntheticDense, SyntheticSpec};
use models::encoder::{Encoded, Encoder, PackedTokens, Pooling, TextTokenizer, l2_normalize_rows};
use models::rng::SplitMix64;

mod support;

use support::{TempDir, minilm_dir, on_every_device, python, run_python, run_script, synthetic};

/// The reference's pooled (not normalised) embeddings of `seqs`.
fn reference(python: &Path, dir: &Path, seqs: &[Encoded], pooling: Pooling) -> Vec<Vec<f64>> {
    let request = serde_json::json!({
        "sequences": seqs
            .iter()
            .map(|e| serde_json::json!({"ids": e.ids, "type_ids": e.type_ids}))
            .collect::<Vec<_>>(),
        "pooling": if pooling == Pooling::Cls { "cls" } else { "mean" },
    });
    let stdout = run_python(
        python,
        &["embed", dir.to_str().unwrap()],
        request.to_string().as_bytes(),
    );
    let reply: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    serde_json::from_value(reply["embeddings"].clone()).unwrap()
}

// ---------------------------------------------------------------------------------------
// Helpers on embeddings.

fn pack(seqs: &[Encoded]) -> PackedTokens {
    let mut p = PackedTokens::new();
    seqs.iter().for_each(|e| p.push(e));
    p
}

fn embed(encoder: &mut Encoder, seqs: &[Encoded]) -> Vec<f32> {
    let mut out = vec![f32::NAN; seqs.len() * encoder.output_width()];
    encoder.forward_packed(&pack(seqs), &mut out).unwrap();
    out
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * y).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Every embedding of `got` within `min_cosine` of the reference.
fn assert_cosines(got: &[f32], want: &[Vec<f64>], min_cosine: f64, context: &str) {
    let h = want[0].len();
    assert_eq!(got.len(), want.len() * h, "{context}: output size");
    for (i, (g, w)) in got.chunks_exact(h).zip(want).enumerate() {
        assert!(
            g.iter().all(|v| v.is_finite()),
            "{context}: sequence {i} not finite"
        );
        let c = cosine(g, w);
        assert!(
            c >= min_cosine,
            "{context}: sequence {i} has cosine {c:.8} < {min_cosine}"
        );
    }
}

fn encode_all(tokenizer: &TextTokenizer, texts: &[&str]) -> Vec<Encoded> {
    texts
        .iter()
        .map(|t| tokenizer.encode(t, true).unwrap())
        .collect()
}

/// Sequences of random ids in `lo..hi` framed by `cls` and `sep`, of the given lengths.
fn random_sequences(lengths: &[usize], lo: u32, hi: u32, cls: u32, sep: u32) -> Vec<Encoded> {
    let mut rng = SplitMix64::new(99);
    lengths
        .iter()
        .map(|&n| {
            let mut ids: Vec<u32> = (0..n)
                .map(|_| lo + rng.below((hi - lo) as usize) as u32)
                .collect();
            ids[0] = cls;
            if n > 1 {
                ids[n - 1] = sep;
            }
            Encoded {
                type_ids: vec![0; n],
                full_len: n,
                ids,
            }
        })
        .collect()
}

/// max |a − b| / max |b| per embedding, the worst over all.
fn worst_relative_difference(a: &[f32], b: &[f32], h: usize) -> f64 {
    a.chunks_exact(h)
        .zip(b.chunks_exact(h))
        .map(|(x, y)| {
            let scale = y.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let diff = x
                .iter()
                .zip(y)
                .fold(0f64, |m, (p, q)| m.max((p - q).abs() as f64));
            diff / scale
        })
        .fold(0.0, f64::max)
}

const SENTENCES: [&str; 12] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Two men pushed carts through the woods.",
    "Café crème brûlée, naïve façade — résumé.",
    "北京是中国的首都。",
    "Emoji 🙂🚀 and symbols ∑ ≠ ∞",
    "x",
    "",
    "The quick brown fox jumps over the lazy dog, again and again, until the dog finally \
     gets up, stretches, and wanders off to find a quieter place to sleep in the afternoon sun.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong and Buzz Aldrin walked on its \
     surface while Michael Collins orbited above in the command module Columbia.",
];

fn long_text() -> String {
    "Attention is computed per sequence on its own length, so a long input costs its tokens. "
        .repeat(30)
}

// ---------------------------------------------------------------------------------------
// The tiny synthetic BERT: no download needed.

/// The padding token inside a text is a token like any other for BERT; RoBERTa gives it the
/// padding position and does not count it.
const SYNTHETIC_TEXTS: [&str; 7] = [
    "a man is eating food.",
    "the <pad> dog <pad> runs",
    "the big red dog runs fast, the small cat runs slow!",
    "x",
    "",
    "one two three four five six seven eight nine 0 1 2 3 4 5 6 7 8 9 quickly",
    "the woman was eating a piece of bread with the man in the green house",
];

fn check_synthetic(device: &Device, test: &str, spec: SyntheticSpec) {
    let Some(python) = python(test) else { return };
    let dir = synthetic(
        &format!("{}-{:?}", test.replace("::", "-"), spec.dtype),
        &spec,
    );
    let tokenizer = TextTokenizer::from_dir(&dir.0, spec.max_seq_length).unwrap();
    let mut seqs = encode_all(&tokenizer, &SYNTHETIC_TEXTS);
    seqs.push(
        tokenizer
            .encode_pair("a cat", "the dog runs", true)
            .unwrap(),
    );
    seqs.push(
        tokenizer
            .encode(&"a b c d e f g ".repeat(20), true)
            .unwrap(),
    );
    let mut encoder = Encoder::load(&dir.0, device).unwrap();
    let got = embed(&mut encoder, &seqs);
    // The reference runs on the f32 weights the 16-bit ones were rounded from.
    let f32_dir = synthetic(
        &format!("{}-ref", test.replace("::", "-")),
        &SyntheticSpec {
            dtype: DType::F32,
            ..spec.clone()
        },
    );
    let want = reference(&python, &f32_dir.0, &seqs, spec.pooling);
    let min = if spec.dtype == DType::F32 {
        0.99999
    } else {
        0.999
    };
    assert_cosines(
        &got,
        &want,
        min,
        &format!("{test} {device:?} {:?}", spec.dtype),
    );
}

fn check_synthetic_packing(device: &Device, spec: SyntheticSpec) {
    let dir = synthetic(
        &format!(
            "packing-{}-{:?}",
            device.label().replace(':', ""),
            spec.family
        ),
        &spec,
    );
    let mut encoder = Encoder::load(&dir.0, device).unwrap();
    let lengths: Vec<usize> = (1..=spec.max_seq_length).rev().step_by(3).collect();
    let seqs = random_sequences(&lengths, 5, 60, 2, 3);
    let together = embed(&mut encoder, &seqs);
    let h = encoder.hidden();
    let mut alone = Vec::new();
    for s in &seqs {
        alone.extend(embed(&mut encoder, std::slice::from_ref(s)));
    }
    let worst = worst_relative_difference(&together, &alone, h);
    assert!(
        worst <= 1e-5,
        "{device:?}: packed and alone differ by {worst:e}"
    );
}

// ---------------------------------------------------------------------------------------
// all-MiniLM-L6-v2.

fn minilm_texts(tokenizer: &TextTokenizer) -> Vec<Encoded> {
    let mut seqs = encode_all(tokenizer, &SENTENCES);
    let long = long_text();
    seqs.push(tokenizer.encode(&long, true).unwrap());
    seqs.push(
        tokenizer
            .encode_pair("How many people live in Berlin?", &long, true)
            .unwrap(),
    );
    seqs
}

fn check_minilm_f32(device: &Device, test: &str) {
    let (Some(dir), Some(python)) = (minilm_dir(test), python(test)) else {
        return;
    };
    let mut encoder = Encoder::load(&dir, device).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let seqs = minilm_texts(&tokenizer);
    assert_eq!(
        seqs.last().unwrap().len(),
        256,
        "the long pair is truncated to 256"
    );
    let got = embed(&mut encoder, &seqs);
    let want = reference(&python, &dir, &seqs, Pooling::Mean);
    assert_cosines(&got, &want, 0.99999, &format!("{test} {device:?}"));
}

fn check_minilm_16bit(device: &Device, test: &str) {
    let (Some(dir), Some(python)) = (minilm_dir(test), python(test)) else {
        return;
    };
    let tokenizer = TextTokenizer::from_dir(&dir, 256).unwrap();
    let seqs = minilm_texts(&tokenizer);
    let want = reference(&python, &dir, &seqs, Pooling::Mean);
    for dtype in ["F16", "BF16"] {
        let copy = TempDir::new(&format!("{}-{dtype}", test.replace("::", "-")));
        let args = [
            "convert",
            dir.to_str().unwrap(),
            copy.0.to_str().unwrap(),
            dtype,
        ];
        run_python(&python, &args, b"");
        let mut encoder = Encoder::load(&copy.0, device).unwrap();
        let got = embed(&mut encoder, &seqs);
        assert_cosines(&got, &want, 0.999, &format!("{test} {device:?} {dtype}"));
    }
}

fn check_minilm_packing(device: &Device, test: &str) {
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load(&dir, device).unwrap();
    let lengths = [
        37, 1, 2, 256, 3, 5, 8, 13, 16, 17, 24, 31, 32, 33, 47, 64, 65, 100, 127, 128, 129, 200,
        255, 9, 10, 11, 12,
    ];
    let seqs = random_sequences(&lengths, 1000, 30000, 101, 102);
    let together = embed(&mut encoder, &seqs);
    let mut alone = Vec::new();
    for s in &seqs {
        alone.extend(embed(&mut encoder, std::slice::from_ref(s)));
    }
    let worst = worst_relative_difference(&together, &alone, encoder.hidden());
    assert!(
        worst <= 1e-5,
        "{test} {device:?}: packed and alone differ by {worst:e}"
    );
}

fn check_minilm_pair_score(device: &Device, test: &str) {
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load(&dir, device).unwrap();
    assert!(encoder.normalize_by_default());
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let seqs = encode_all(&tokenizer, &SENTENCES[..2]);
    let mut out = embed(&mut encoder, &seqs);
    l2_normalize_rows(&mut out, encoder.hidden());
    let (a, b) = out.split_at(encoder.hidden());
    let score: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    assert!(
        (score - 0.7553).abs() <= 0.0005,
        "{test} {device:?}: score {score}"
    );
}

// ---------------------------------------------------------------------------------------
// Every check on every device.

on_every_device!(synthetic_f32_mean, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec::default()
));
on_every_device!(synthetic_bert_prefix_cls, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        prefixed: true,
        pooling: Pooling::Cls,
        seed: 8,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_f16, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        dtype: DType::F16,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_bf16, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        dtype: DType::BF16,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_xlm_roberta_mean, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        family: Family::Roberta,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_xlm_roberta_prefixed_cls_bf16, |device, test| {
    check_synthetic(
        device,
        test,
        SyntheticSpec {
            family: Family::Roberta,
            prefixed: true,
            pooling: Pooling::Cls,
            dtype: DType::BF16,
            seed: 9,
            ..SyntheticSpec::default()
        },
    )
});
on_every_device!(synthetic_distilbert_mean, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        family: Family::DistilBert,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_distilbert_prefixed_cls_f16, |device, test| {
    check_synthetic(
        device,
        test,
        SyntheticSpec {
            family: Family::DistilBert,
            prefixed: true,
            pooling: Pooling::Cls,
            dtype: DType::F16,
            seed: 10,
            ..SyntheticSpec::default()
        },
    )
});
// LaBSE's shape: CLS, a Dense module with tanh, normalised; then a chain of two modules
// (ReLU to a wider layer, then one without bias or activation to a narrower one).
on_every_device!(synthetic_bert_cls_dense_tanh, |device, test| {
    check_synthetic(
        device,
        test,
        SyntheticSpec {
            pooling: Pooling::Cls,
            dense: vec![dense(24, true, DenseActivation::Tanh)],
            seed: 13,
            ..SyntheticSpec::default()
        },
    )
});
on_every_device!(synthetic_distilbert_dense_chain_f16, |device, test| {
    check_synthetic(
        device,
        test,
        SyntheticSpec {
            family: Family::DistilBert,
            dtype: DType::F16,
            dense: vec![
                dense(48, true, DenseActivation::Relu),
                dense(16, false, DenseActivation::Identity),
            ],
            seed: 14,
            ..SyntheticSpec::default()
        },
    )
});

fn dense(out_features: usize, bias: bool, activation: DenseActivation) -> SyntheticDense {
    SyntheticDense {
        out_features,
        bias,
        activation,
    }
}

/// ModernBERT runs on the CPU only. The window (4 tokens each side) is shorter than most of
/// the texts, so the sliding-window layer masks.
#[test]
fn synthetic_modernbert_mean_cpu() {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        ..SyntheticSpec::default()
    };
    check_synthetic(&Device::Cpu, "synthetic_modernbert_mean_cpu", spec);
}

#[test]
fn synthetic_modernbert_prefixed_cls_bf16_cpu() {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        layers: 4,
        prefixed: true,
        pooling: Pooling::Cls,
        dtype: DType::BF16,
        seed: 15,
        ..SyntheticSpec::default()
    };
    check_synthetic(
        &Device::Cpu,
        "synthetic_modernbert_prefixed_cls_bf16_cpu",
        spec,
    );
}

/// transformers 5 writes `layer_types` and `rope_parameters` in place of
/// `global_attn_every_n_layers` and the two bases: read alike, here with bases of its own.
#[test]
fn synthetic_modernbert_new_config_form_cpu() {
    let test = "synthetic_modernbert_new_config_form_cpu";
    let Some(python) = python(test) else { return };
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        layers: 4,
        seed: 16,
        ..SyntheticSpec::default()
    };
    let dir = synthetic(test, &spec);
    let path = dir.0.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let c = config.as_object_mut().unwrap();
    for old in [
        "global_attn_every_n_layers",
        "global_rope_theta",
        "local_rope_theta",
    ] {
        c.remove(old);
    }
    let (full, sliding) = ("full_attention", "sliding_attention");
    c.insert(
        "layer_types".into(),
        serde_json::json!([full, sliding, sliding, full]),
    );
    c.insert(
        "rope_parameters".into(),
        serde_json::json!({full: {"rope_type": "default", "rope_theta": 80000.0},
                           sliding: {"rope_type": "default", "rope_theta": 500.0}}),
    );
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir.0, spec.max_seq_length).unwrap();
    let mut seqs = encode_all(&tokenizer, &SYNTHETIC_TEXTS);
    seqs.push(
        tokenizer
            .encode(&"a b c d e f g ".repeat(20), true)
            .unwrap(),
    );
    let got = embed(&mut Encoder::load(&dir.0, &Device::Cpu).unwrap(), &seqs);
    let want = reference(&python, &dir.0, &seqs, Pooling::Mean);
    assert_cosines(&got, &want, 0.99999, test);
}

/// Every family, and Dense modules, against Hugging Face's own libraries: transformers'
/// `AutoModel` and sentence-transformers' `Pooling` and `Dense` (tests/python/
/// transformers_check.py). They are not in the tests' environment, so this runs by hand:
/// `TANDEM_TRANSFORMERS_PYTHON=PYTHON cargo test --release -p models --test encoder
/// every_family_matches_transformers -- --ignored --nocapture`.
#[test]
#[ignore = "needs torch, transformers and sentence-transformers"]
fn every_family_matches_transformers() {
    let python = std::env::var_os("TANDEM_TRANSFORMERS_PYTHON")
        .expect("TANDEM_TRANSFORMERS_PYTHON names a Python with transformers");
    let python = Path::new(&python);
    let cases = [
        ("bert", Family::Bert, Pooling::Mean, 2),
        ("distilbert", Family::DistilBert, Pooling::Mean, 2),
        ("mpnet", Family::Mpnet, Pooling::Cls, 2),
        ("xlm-roberta", Family::Roberta, Pooling::Mean, 2),
        ("modernbert", Family::ModernBert, Pooling::Mean, 4),
    ];
    for (name, family, pooling, layers) in cases {
        let spec = SyntheticSpec {
            family,
            pooling,
            layers,
            dense: match family {
                Family::Bert => vec![dense(24, true, DenseActivation::Tanh)],
                _ => Vec::new(),
            },
            ..SyntheticSpec::default()
        };
        let dir = synthetic(&format!("transformers-{name}"), &spec);
        let tokenizer = TextTokenizer::from_dir(&dir.0, spec.max_seq_length).unwrap();
        let mut seqs = encode_all(&tokenizer, &SYNTHETIC_TEXTS);
        seqs.push(
            tokenizer
                .encode_pair("a cat", "the dog runs", true)
                .unwrap(),
        );
        seqs.push(
            tokenizer
                .encode(&"a b c d e f g ".repeat(20), true)
                .unwrap(),
        );
        let got = embed(&mut Encoder::load(&dir.0, &Device::Cpu).unwrap(), &seqs);
        let request = serde_json::json!({"sequences": seqs
            .iter()
            .map(|e| serde_json::json!({"ids": e.ids, "type_ids": e.type_ids}))
            .collect::<Vec<_>>()});
        let args = ["embed", dir.0.to_str().unwrap()];
        let stdout = run_script(
            python,
            "transformers_check.py",
            &args,
            request.to_string().as_bytes(),
        );
        let reply: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
        let want: Vec<Vec<f64>> = serde_json::from_value(reply["embeddings"].clone()).unwrap();
        let width = want[0].len();
        let worst = (got.chunks_exact(width).zip(&want))
            .map(|(g, w)| 1.0 - cosine(g, w))
            .fold(0.0, f64::max);
        println!(
            "{name}: {} sequences, worst 1 - cosine {worst:.2e}",
            want.len()
        );
        assert_cosines(&got, &want, 0.99999, name);
    }
}

/// MPNet's bias by relative position runs on the CPU only.
#[test]
fn synthetic_mpnet_mean_cpu() {
    let spec = SyntheticSpec {
        family: Family::Mpnet,
        ..SyntheticSpec::default()
    };
    check_synthetic(&Device::Cpu, "synthetic_mpnet_mean_cpu", spec);
}

#[test]
fn synthetic_mpnet_prefixed_cls_bf16_cpu() {
    let spec = SyntheticSpec {
        family: Family::Mpnet,
        prefixed: true,
        pooling: Pooling::Cls,
        dtype: DType::BF16,
        seed: 12,
        ..SyntheticSpec::default()
    };
    check_synthetic(&Device::Cpu, "synthetic_mpnet_prefixed_cls_bf16_cpu", spec);
}

/// On a GPU an MPNet folder is refused at load with the reason, not served wrong.
#[test]
fn synthetic_mpnet_is_refused_on_cuda() {
    refused_on_cuda("synthetic_mpnet_is_refused_on_cuda", Family::Mpnet);
}

/// ModernBERT has no CUDA kernels: its folder is refused on a GPU, saying where it runs.
#[test]
fn synthetic_modernbert_is_refused_on_cuda() {
    refused_on_cuda(
        "synthetic_modernbert_is_refused_on_cuda",
        Family::ModernBert,
    );
}

fn refused_on_cuda(test: &str, family: Family) {
    let Some(d) = kernels::cuda::device_for_test(test) else {
        return;
    };
    let spec = SyntheticSpec {
        family,
        ..SyntheticSpec::default()
    };
    let dir = synthetic(&format!("{test}-dir"), &spec);
    let err = Encoder::load(&dir.0, &Device::Cuda(d))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("--device cpu"), "{err}");
}

on_every_device!(synthetic_packing, |device, _test| check_synthetic_packing(
    device,
    SyntheticSpec::default()
));

/// Rotary positions restart and the window applies within each packed sequence.
#[test]
fn synthetic_modernbert_packing_cpu() {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        layers: 3,
        ..SyntheticSpec::default()
    };
    check_synthetic_packing(&Device::Cpu, spec);
}
on_every_device!(minilm_f32, |device, test| check_minilm_f32(device, test));
on_every_device!(minilm_16bit, |device, test| check_minilm_16bit(
    device, test
));
on_every_device!(minilm_packing, |device, test| check_minilm_packing(
    device, test
));
on_every_device!(minilm_pair_score, |device, test| check_minilm_pair_score(
    device, test
));

// ---------------------------------------------------------------------------------------
// What the forward pass refuses, and what it reports.

#[test]
fn invalid_batches_are_errors_not_panics() {
    let spec = SyntheticSpec::default();
    let dir = synthetic("invalid", &spec);
    let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let h = encoder.hidden();
    let ok = random_sequences(&[4], 5, 60, 2, 3);
    let mut out = vec![0.0; h];
    encoder.forward_packed(&pack(&ok), &mut out).unwrap();
    let err = encoder
        .forward_packed(&pack(&ok), &mut out[..h - 1])
        .unwrap_err();
    assert!(err.to_string().contains(&format!("expected {h}")), "{err}");
    let packed = |ids: Vec<u32>, type_ids: Vec<u32>, offsets: Vec<usize>| PackedTokens {
        ids,
        type_ids,
        offsets,
    };
    let cases = [
        (
            packed(vec![2, 9999, 3], vec![0; 3], vec![0, 3]),
            "outside the vocabulary",
        ),
        (
            packed(vec![2, 5, 3], vec![0, 2, 0], vec![0, 3]),
            "token type id 2",
        ),
        (
            packed(vec![2, 5, 3], vec![0; 3], vec![0, 0, 3]),
            "sequence 0 has 0 tokens",
        ),
        (
            packed(vec![2, 5, 3], vec![0; 3], vec![0, 2]),
            "offsets must run",
        ),
        (
            packed(vec![2; 49], vec![0; 49], vec![0, 49]),
            "has 49 tokens, expected 1 to 48",
        ),
    ];
    for (tokens, message) in cases {
        let mut out = vec![0.0; tokens.sequences() * h];
        let err = encoder
            .forward_packed(&tokens, &mut out)
            .unwrap_err()
            .to_string();
        assert!(err.contains(message), "{err} (wanted {message:?})");
    }
    let mut none: [f32; 0] = [];
    encoder
        .forward_packed(&PackedTokens::new(), &mut none)
        .unwrap();
}

#[test]
fn flops_count_dense_layers_per_token_and_attention_per_sequence() {
    let dir = synthetic("flops", &SyntheticSpec::default());
    let encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let tokens = pack(&random_sequences(&[3, 5], 5, 60, 2, 3));
    // hidden 32, intermediate 64, 2 layers: 2·(4·32² + 2·32·64) per token, 4·32·Σn² per layer.
    let per_token = 2 * (4 * 32 * 32 + 2 * 32 * 64);
    let want = 2 * (per_token * 8 + 4 * 32 * (9 + 25));
    assert_eq!(encoder.flops(&tokens), want as u64);
}

#[test]
fn l2_normalisation_gives_unit_rows_and_leaves_zero_rows() {
    let mut rows = vec![3.0, 4.0, 0.0, 0.0, 1.0, 0.0];
    l2_normalize_rows(&mut rows, 2);
    assert_eq!(rows, vec![0.6, 0.8, 0.0, 0.0, 1.0, 0.0]);
}

// ---------------------------------------------------------------------------------------
// CUDA against the CPU, which the tests above hold to the float64 reference: needs neither
// Python nor a download, so it runs on a GPU host as it is. Sequences up to 300 tokens
// cross attention's 64-key tiles on CUDA several times; heads of 8 and 64 values.

fn check_cuda_matches_cpu(test: &str, spec: SyntheticSpec, min_cosine: f64) {
    let Some(gpu) = kernels::cuda::device_for_test(test) else {
        return;
    };
    let dir = synthetic(test, &spec);
    let mut cpu = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let mut cuda = Encoder::load(&dir.0, &Device::Cuda(gpu)).unwrap();
    let lengths: Vec<usize> = [1, 2, 5, 17, 63, 64, 65, 100, 128, 129, 200, 299, 300]
        .into_iter()
        .filter(|&n| n <= spec.max_seq_length)
        .collect();
    let seqs = random_sequences(&lengths, 5, 60, 2, 3);
    let want = embed(&mut cpu, &seqs);
    let got = embed(&mut cuda, &seqs);
    let want: Vec<Vec<f64>> = want
        .chunks_exact(cpu.hidden())
        .map(|r| r.iter().map(|v| *v as f64).collect())
        .collect();
    assert_cosines(&got, &want, min_cosine, test);
    // One at a time, too: the same vectors as in the batch.
    let alone = embed(&mut cuda, &seqs[3..4]);
    let h = cuda.hidden();
    let worst = worst_relative_difference(&alone, &got[3 * h..4 * h], h);
    assert!(
        worst <= 1e-5,
        "{test}: packed and alone differ by {worst:e}"
    );
}

fn long_spec(dtype: DType, hidden: usize, heads: usize, pooling: Pooling) -> SyntheticSpec {
    SyntheticSpec {
        hidden,
        heads,
        intermediate: 2 * hidden,
        max_position_embeddings: 320,
        max_seq_length: 300,
        dtype,
        pooling,
        ..SyntheticSpec::default()
    }
}

#[test]
fn cuda_matches_cpu_f32_heads_of_8_mean() {
    let spec = long_spec(DType::F32, 32, 4, Pooling::Mean);
    check_cuda_matches_cpu("cuda_matches_cpu_f32_heads_of_8_mean", spec, 0.99999);
}

#[test]
fn cuda_matches_cpu_f32_heads_of_64_cls() {
    let spec = long_spec(DType::F32, 128, 2, Pooling::Cls);
    check_cuda_matches_cpu("cuda_matches_cpu_f32_heads_of_64_cls", spec, 0.99999);
}

#[test]
fn cuda_matches_cpu_f16_and_bf16() {
    for dtype in [DType::F16, DType::BF16] {
        let spec = long_spec(dtype, 64, 2, Pooling::Mean);
        check_cuda_matches_cpu("cuda_matches_cpu_f16_and_bf16", spec, 0.999);
    }
}
