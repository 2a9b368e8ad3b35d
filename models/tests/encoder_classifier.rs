//! Sequence classifiers' logits (the encoder, then `BertForSequenceClassification`'s pooler
//! and classifier, or `XLMRobertaForSequenceClassification`'s and
//! `DistilBertForSequenceClassification`'s heads) against the float64 reference written
//! from the architecture in numpy (tests/python/bert_reference.py `classify`, run with
//! $TANDEM_PYTHON), on synthetic classifiers over single texts and pairs packed in one
//! batch. The same bodies run on the CPU and, where a device exists, on CUDA.

use std::path::Path;

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoded, Encoder, PackedTokens, TextTokenizer};

mod support;

use support::{on_every_device, python, run_python, synthetic};

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
    let request = serde_json::json!({
        "sequences": seqs
            .iter()
            .map(|e| serde_json::json!({"ids": e.ids, "type_ids": e.type_ids}))
            .collect::<Vec<_>>(),
    });
    let stdout = run_python(
        python,
        &["classify", dir.to_str().unwrap()],
        request.to_string().as_bytes(),
    );
    let reply: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    serde_json::from_value(reply["logits"].clone()).unwrap()
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
    let Some(python) = python(test) else { return };
    let spec = SyntheticSpec {
        family,
        labels,
        dtype,
        prefixed: true,
        seed: 11,
        ..SyntheticSpec::default()
    };
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

/// MPNet's classifier head is RoBERTa's; its relative attention runs on the CPU only.
#[test]
fn synthetic_mpnet_reranker_cpu() {
    check_synthetic_classifier(
        &Device::Cpu,
        "synthetic_mpnet_reranker_cpu",
        Family::Mpnet,
        1,
        DType::F32,
    );
}
