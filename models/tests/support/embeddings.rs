//! Embeddings for the encoder tests: the float64 reference's, the encoder's own, and the
//! checks between them; the synthetic models' texts and their runs against the reference.

use std::path::Path;

use kernels::{DType, Device};
use models::LoadOptions;
use models::encoder::dense_module::DenseActivation;
use models::encoder::synthetic::{SyntheticDense, SyntheticSpec};
use models::encoder::{Encoded, Encoder, PackedTokens, Pooling, TextTokenizer};
use models::rng::SplitMix64;

use super::{python, run_python, synthetic};

/// The reference's pooled (not normalised) embeddings of `seqs`.
pub fn reference(python: &Path, dir: &Path, seqs: &[Encoded], pooling: Pooling) -> Vec<Vec<f64>> {
    let pooling = if pooling == Pooling::Cls {
        "cls"
    } else {
        "mean"
    };
    ask_reference(python, "embed", dir, seqs, Some(pooling), "embeddings")
}

/// The reference's final state of every token of each of `seqs`.
pub fn reference_states(python: &Path, dir: &Path, seqs: &[Encoded]) -> Vec<Vec<Vec<f64>>> {
    ask_reference(python, "states", dir, seqs, None, "states")
}

/// Runs the reference's `command` on the model folder `dir` and `seqs` (pooled as `pooling`
/// names it, where it pools); `field` of its answer.
pub fn ask_reference<T: serde::de::DeserializeOwned>(
    python: &Path,
    command: &str,
    dir: &Path,
    seqs: &[Encoded],
    pooling: Option<&str>,
    field: &str,
) -> T {
    let mut request = serde_json::json!({
        "sequences": seqs
            .iter()
            .map(|e| serde_json::json!({"ids": e.ids, "type_ids": e.type_ids}))
            .collect::<Vec<_>>(),
    });
    if let Some(pooling) = pooling {
        request["pooling"] = serde_json::json!(pooling);
    }
    let stdout = run_python(
        python,
        &[command, dir.to_str().unwrap()],
        request.to_string().as_bytes(),
    );
    let reply: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    serde_json::from_value(reply[field].clone()).unwrap()
}

/// Hugging Face's own libraries' answer to `command` on `dir` and `seqs`
/// (tests/python/transformers_check.py, run with $TANDEM_TRANSFORMERS_PYTHON); `field` of
/// it. For the ignored tests run by hand: those libraries are not in the tests' environment.
pub fn ask_transformers<T: serde::de::DeserializeOwned>(
    command: &str,
    dir: &Path,
    seqs: &[Encoded],
    field: &str,
) -> T {
    let python = std::env::var_os("TANDEM_TRANSFORMERS_PYTHON")
        .expect("TANDEM_TRANSFORMERS_PYTHON names a Python with transformers");
    let request = serde_json::json!({
        "sequences": seqs
            .iter()
            .map(|e| serde_json::json!({"ids": e.ids, "type_ids": e.type_ids}))
            .collect::<Vec<_>>(),
    });
    let args = [command, dir.to_str().unwrap()];
    let stdout = super::run_script(
        Path::new(&python),
        "transformers_check.py",
        &args,
        request.to_string().as_bytes(),
    );
    let reply: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    serde_json::from_value(reply[field].clone()).unwrap()
}

// ---------------------------------------------------------------------------------------
// Helpers on embeddings.

pub fn pack(seqs: &[Encoded]) -> PackedTokens {
    let mut p = PackedTokens::new();
    seqs.iter().for_each(|e| p.push(e));
    p
}

pub fn embed(encoder: &mut Encoder, seqs: &[Encoded]) -> Vec<f32> {
    let mut out = vec![f32::NAN; seqs.len() * encoder.output_width()];
    encoder.forward_packed(&pack(seqs), &mut out).unwrap();
    out
}

pub fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * y).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Every embedding of `got` within `min_cosine` of the reference.
pub fn assert_cosines(got: &[f32], want: &[Vec<f64>], min_cosine: f64, context: &str) {
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

pub fn encode_all(tokenizer: &TextTokenizer, texts: &[&str]) -> Vec<Encoded> {
    texts
        .iter()
        .map(|t| tokenizer.encode(t, true).unwrap())
        .collect()
}

/// Sequences of random ids in `lo..hi` framed by `cls` and `sep`, of the given lengths.
pub fn random_sequences(lengths: &[usize], lo: u32, hi: u32, cls: u32, sep: u32) -> Vec<Encoded> {
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
pub fn worst_relative_difference(a: &[f32], b: &[f32], h: usize) -> f64 {
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

/// The padding token inside a text is a token like any other for BERT; RoBERTa gives it the
/// padding position and does not count it.
pub const SYNTHETIC_TEXTS: [&str; 7] = [
    "a man is eating food.",
    "the <pad> dog <pad> runs",
    "the big red dog runs fast, the small cat runs slow!",
    "x",
    "",
    "one two three four five six seven eight nine 0 1 2 3 4 5 6 7 8 9 quickly",
    "the woman was eating a piece of bread with the man in the green house",
];

/// The synthetic texts, a pair and a text past the limit, tokenized by the folder `dir`.
pub fn synthetic_sequences(dir: &Path, max_seq_length: usize) -> Vec<Encoded> {
    let tokenizer = TextTokenizer::from_dir(dir, max_seq_length).unwrap();
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
    seqs
}

pub fn check_synthetic(device: &Device, test: &str, spec: SyntheticSpec) {
    let min = if spec.dtype == DType::F32 {
        0.99999
    } else {
        0.999
    };
    check_synthetic_with(device, test, spec, LoadOptions::default(), min);
}

/// The synthetic model of `spec`, loaded with `options`, within `min` cosine of the
/// reference on its f32 weights.
pub fn check_synthetic_with(
    device: &Device,
    test: &str,
    spec: SyntheticSpec,
    options: LoadOptions,
    min: f64,
) {
    let Some(python) = python(test) else { return };
    let dir = synthetic(
        &format!("{}-{:?}", test.replace("::", "-"), spec.dtype),
        &spec,
    );
    let seqs = synthetic_sequences(&dir.0, spec.max_seq_length);
    let mut encoder = Encoder::load_with(&dir.0, device, options).unwrap();
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
    assert_cosines(
        &got,
        &want,
        min,
        &format!("{test} {device:?} {:?}", spec.dtype),
    );
}

pub fn check_synthetic_packing(device: &Device, spec: SyntheticSpec) {
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

pub fn dense(out_features: usize, bias: bool, activation: DenseActivation) -> SyntheticDense {
    SyntheticDense {
        out_features,
        bias,
        activation,
    }
}
