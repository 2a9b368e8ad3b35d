//! Sequence classifiers' logits (the encoder, then `BertForSequenceClassification`'s pooler
//! and classifier, or `XLMRobertaForSequenceClassification`'s and
//! `DistilBertForSequenceClassification`'s heads) against the float64 reference written
//! from the architecture in numpy (tests/python/bert_reference.py `classify`, run with
//! $TANDEM_PYTHON), on synthetic classifiers over single texts and pairs packed in one
//! batch. The same bodies run on the CPU and, where a device exists, on CUDA.

use std::path::Path;

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::synthetic::{GteSpec, SyntheticSpec};
use models::encoder::{Encoded, Encoder, PackedTokens, TextTokenizer};

use crate::support::embeddings::ask_reference;
use crate::support::{on_every_device, python, run_script, synthetic};

const TEXTS: [&str; 3] = [
    "a man is eating food.",
    "the big red dog runs fast, the small cat runs slow!",
    "x",
];

fn logits(encoder: &mut Encoder, seqs: &[Encoded]) -> Vec<f32> {
    let mut packed = PackedTokens::new();
    seqs.iter().for_each(|e| packed.push(e));
    let mut out = vec![f32::NAN; seqs.len() * encoder.output_width()];
    encoder.forward_packed(&packed, &mut out).unwrap();
    out
}

/// The reference's logits of `seqs` through a classifier's head.
fn reference_logits(python: &Path, dir: &Path, seqs: &[Encoded]) -> Vec<Vec<f64>> {
    ask_reference(python, "classify", dir, seqs, None, "logits")
}

/// A classifier's logits against the reference's, on single texts and on pairs (whose
/// second text has token type 1 for BERT), packed in one batch.
fn check_synthetic_classifier(
    device: &Device,
    test: &str,
    family: Family,
    labels: usize,
    dtype: DType,
) {
    let spec = SyntheticSpec {
        family,
        labels,
        dtype,
        prefixed: true,
        seed: 11,
        ..SyntheticSpec::default()
    };
    check_synthetic_classifier_spec(device, test, spec)
}

fn check_synthetic_classifier_spec(device: &Device, test: &str, spec: SyntheticSpec) {
    let Some(python) = python(test) else { return };
    let (labels, dtype) = (spec.labels, spec.dtype);
    let tag = test.replace("::", "-");
    let dir = synthetic(&format!("{tag}-{dtype:?}"), &spec);
    let tokenizer = TextTokenizer::from_dir(&dir.0, spec.max_seq_length).unwrap();
    let mut seqs: Vec<Encoded> = (TEXTS.iter())
        .map(|t| tokenizer.encode(t, true).unwrap())
        .collect();
    for (a, b) in [
        ("a cat", "the dog runs"),
        ("the man", &"is eating bread ".repeat(9)),
    ] {
        seqs.push(tokenizer.encode_pair(a, b, true).unwrap());
    }
    let mut encoder = Encoder::load(&dir.0, device).unwrap();
    assert_eq!(encoder.output_width(), labels);
    let got = logits(&mut encoder, &seqs);
    let f32_dir = synthetic(
        &format!("{tag}-ref"),
        &SyntheticSpec {
            dtype: DType::F32,
            ..spec
        },
    );
    let want: Vec<f64> = reference_logits(&python, &f32_dir.0, &seqs).concat();
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    let worst = got
        .iter()
        .zip(&want)
        .fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
    let max = if dtype == DType::F32 { 1e-4 } else { 2e-2 };
    assert!(
        worst <= max * scale,
        "{test} {device:?} {dtype:?}: logits differ by {worst:e} (largest {scale:e}); got \
         {got:?}, want {want:?}"
    );
}

on_every_device!(synthetic_reranker, |device, test| {
    check_synthetic_classifier(device, test, Family::Bert, 1, DType::F32)
});
on_every_device!(synthetic_classifier_3_labels, |device, test| {
    check_synthetic_classifier(device, test, Family::Bert, 3, DType::F32)
});
on_every_device!(synthetic_classifier_bf16, |device, test| {
    check_synthetic_classifier(device, test, Family::Bert, 3, DType::BF16)
});
on_every_device!(synthetic_xlm_roberta_reranker, |device, test| {
    check_synthetic_classifier(device, test, Family::Roberta, 1, DType::F32)
});
on_every_device!(synthetic_distilbert_classifier, |device, test| {
    check_synthetic_classifier(device, test, Family::DistilBert, 3, DType::F32)
});
on_every_device!(synthetic_xlm_roberta_classifier_f16, |device, test| {
    check_synthetic_classifier(device, test, Family::Roberta, 3, DType::F16)
});

/// GTE's `NewForSequenceClassification` (gte-multilingual-reranker-base's) is BERT's head
/// under `new.`, without token types (pairs' type ids unread) and with them; GTE runs on
/// the CPU only.
#[test]
fn synthetic_gte_classifiers() {
    for (labels, type_vocab_size, dtype) in [(1, 0, DType::F32), (3, 2, DType::BF16)] {
        let test = format!("synthetic_gte_classifiers_{labels}_{dtype:?}");
        let spec = SyntheticSpec {
            family: Family::Gte,
            labels,
            dtype,
            prefixed: true,
            seed: 11,
            gte: GteSpec {
                type_vocab_size,
                ..GteSpec::default()
            },
            ..SyntheticSpec::default()
        };
        check_synthetic_classifier_spec(&Device::Cpu, &test, spec);
    }
}

// MPNet's classifier head is RoBERTa's.
on_every_device!(synthetic_mpnet_reranker, |device, test| {
    check_synthetic_classifier(device, test, Family::Mpnet, 1, DType::F32)
});

// ModernBERT's head pools by `classifier_pooling` (the synthetic spec's pooling), then
// `head.dense`, GELU and `head.norm` before the classifier.
on_every_device!(synthetic_modernbert_classifiers, |device, test| {
    for (labels, pooling, dtype) in [
        (1, models::encoder::Pooling::Mean, DType::F32),
        (3, models::encoder::Pooling::Cls, DType::BF16),
    ] {
        let test = format!("{test}_{labels}_{dtype:?}");
        check_synthetic_classifier_spec(
            device,
            &test,
            SyntheticSpec {
                family: Family::ModernBert,
                labels,
                dtype,
                pooling,
                prefixed: true,
                seed: 11,
                ..SyntheticSpec::default()
            },
        );
    }
});

/// Every family's classifier head against transformers' own
/// `AutoModelForSequenceClassification` (tests/python/transformers_check.py), by hand as
/// `every_family_matches_transformers` in encoder_families.rs: `TANDEM_TRANSFORMERS_PYTHON=PYTHON
/// cargo test --release -p models --test encoder_classifier
/// every_classifier_matches_transformers -- --ignored --nocapture`.
#[test]
#[ignore = "needs torch and transformers"]
fn every_classifier_matches_transformers() {
    let python = std::env::var_os("TANDEM_TRANSFORMERS_PYTHON")
        .expect("TANDEM_TRANSFORMERS_PYTHON names a Python with transformers");
    let cls = models::encoder::Pooling::Cls;
    let cases = [
        ("bert", Family::Bert, 3, cls),
        ("distilbert", Family::DistilBert, 3, cls),
        ("mpnet", Family::Mpnet, 1, cls),
        ("xlm-roberta", Family::Roberta, 1, cls),
        ("modernbert-cls", Family::ModernBert, 3, cls),
        (
            "modernbert-mean",
            Family::ModernBert,
            1,
            models::encoder::Pooling::Mean,
        ),
    ];
    for (name, family, labels, pooling) in cases {
        let spec = SyntheticSpec {
            family,
            labels,
            pooling,
            prefixed: true,
            layers: 3,
            ..SyntheticSpec::default()
        };
        let dir = synthetic(&format!("transformers-classifier-{name}"), &spec);
        let tokenizer = TextTokenizer::from_dir(&dir.0, spec.max_seq_length).unwrap();
        let mut seqs: Vec<Encoded> = (TEXTS.iter())
            .map(|t| tokenizer.encode(t, true).unwrap())
            .collect();
        seqs.push(
            tokenizer
                .encode_pair("a cat", "the dog runs", true)
                .unwrap(),
        );
        seqs.push((tokenizer.encode_pair("the man", &"is eating bread ".repeat(9), true)).unwrap());
        let got = logits(&mut Encoder::load(&dir.0, &Device::Cpu).unwrap(), &seqs);
        let request = serde_json::json!({"sequences": seqs
            .iter()
            .map(|e| serde_json::json!({"ids": e.ids, "type_ids": e.type_ids}))
            .collect::<Vec<_>>()});
        let args = ["classify", dir.0.to_str().unwrap()];
        let stdout = run_script(
            Path::new(&python),
            "transformers_check.py",
            &args,
            request.to_string().as_bytes(),
        );
        let reply: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
        let want: Vec<f64> = serde_json::from_value::<Vec<Vec<f64>>>(reply["logits"].clone())
            .unwrap()
            .concat();
        assert_eq!(got.len(), want.len(), "{name}");
        let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
        let worst = (got.iter().zip(&want)).fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
        println!(
            "{name}: {} logits, worst difference {worst:.2e} of {scale:.2e}",
            want.len()
        );
        assert!(worst <= 1e-4 * scale, "{name}: got {got:?}, want {want:?}");
    }
}
