//! A sparse encoder (SPLADE: `BertForMaskedLM` with sentence-transformers' `SpladePooling`)
//! against the float64 reference (tests/python/bert_reference.py `sparse`, run with
//! $TANDEM_PYTHON), max and sum pooling, packed batches against one text at a time; and
//! the folders it refuses, each naming what it found.

use kernels::Device;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoder, SparsePooling};

use crate::support::embeddings::{
    ask_reference, ask_transformers, cosine, embed, synthetic_sequences,
};
use crate::support::folder::{Folder, assert_contains, copy_tensor};
use crate::support::{python, synthetic};

fn sparse(pooling: SparsePooling) -> SyntheticSpec {
    SyntheticSpec {
        sparse: Some(pooling),
        ..SyntheticSpec::default()
    }
}

/// Every text's weights within 0.99999 cosine of the reference's, zero where the
/// reference's are (no logit of the text above zero), and the same packed or alone.
fn check_against_reference(test: &str, pooling: SparsePooling) {
    let Some(python) = python(test) else { return };
    let dir = synthetic(test, &sparse(pooling));
    let seqs = synthetic_sequences(&dir.0, 48);
    let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    assert!(encoder.is_sparse() && !encoder.serves_token_states());
    let vocab = encoder.config().vocab_size;
    assert_eq!(encoder.output_width(), vocab);
    let got = embed(&mut encoder, &seqs);
    let mode = match pooling {
        SparsePooling::Max => "max",
        SparsePooling::Sum => "sum",
    };
    let want: Vec<Vec<f64>> =
        ask_reference(&python, "sparse", &dir.0, &seqs, Some(mode), "weights");
    let mut zeros = 0;
    for (i, (g, w)) in got.chunks_exact(vocab).zip(&want).enumerate() {
        let c = cosine(g, w);
        assert!(c >= 0.99999, "{test}: text {i}: cosine {c}");
        for (entry, (&x, &y)) in g.iter().zip(w).enumerate() {
            assert!(x >= 0.0, "{test}: text {i}, entry {entry}: {x}");
            if y == 0.0 {
                zeros += 1;
                assert!(x < 1e-4, "{test}: text {i}, entry {entry}: {x} where 0");
            }
        }
    }
    assert!(zeros > 0, "{test}: no zero weights to check");
    let mut alone = Vec::new();
    for s in &seqs {
        alone.extend(embed(&mut encoder, std::slice::from_ref(s)));
    }
    let worst = (got.iter().zip(&alone)).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst <= 1e-4, "{test}: packed and alone differ by {worst}");
}

#[test]
fn max_pooled_weights_match_the_reference() {
    check_against_reference("sparse-max", SparsePooling::Max);
}

#[test]
fn sum_pooled_weights_match_the_reference() {
    check_against_reference("sparse-sum", SparsePooling::Sum);
}

#[test]
fn a_folder_without_modules_reads_as_splade_s_max() {
    let f = Folder::new("sparse-no-modules", &sparse(SparsePooling::Sum));
    std::fs::remove_file(f.path("modules.json")).unwrap();
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(e.config().sparse, Some(SparsePooling::Max));
}

#[test]
fn sparse_folders_tandem_would_run_differently_are_refused_by_name() {
    let pooling = "1_SpladePooling/config.json";
    let f = Folder::new("sparse-log1p", &sparse(SparsePooling::Max));
    f.edit_json(pooling, |c| c["activation_function"] = "log1p_relu".into());
    assert_contains(
        &f.load_error(),
        &["activation_function \"log1p_relu\"", "relu"],
    );
    let f = Folder::new("sparse-mean", &sparse(SparsePooling::Max));
    f.edit_json(pooling, |c| c["pooling_strategy"] = "mean".into());
    assert_contains(
        &f.load_error(),
        &["pooling_strategy \"mean\"", "max and sum"],
    );
    let f = Folder::new("sparse-module", &sparse(SparsePooling::Max));
    f.edit_json("modules.json", |m| {
        m[1]["type"] = "sentence_transformers.models.Pooling".into();
    });
    assert_contains(&f.load_error(), &["sentence_transformers.models.Pooling"]);
    let f = Folder::new("sparse-no-bias", &sparse(SparsePooling::Max));
    f.edit_tensors(|ts| ts.retain(|t| t.name != "cls.predictions.bias"));
    assert_contains(&f.load_error(), &["cls.predictions.bias"]);
    // transformers ties the decoder's bias to the head's: a checkpoint may store both, equal.
    let f = Folder::new("sparse-tied-bias", &sparse(SparsePooling::Max));
    f.edit_tensors(|ts| copy_tensor(ts, "cls.predictions.bias", "cls.predictions.decoder.bias"));
    Encoder::load(&f.0, &Device::Cpu).unwrap();
    let f = Folder::new("sparse-untied-bias", &sparse(SparsePooling::Max));
    f.edit_tensors(|ts| {
        copy_tensor(ts, "cls.predictions.bias", "cls.predictions.decoder.bias");
        let last = ts.last_mut().unwrap();
        last.bytes[0] ^= 0x40;
    });
    assert_contains(&f.load_error(), &["cls.predictions.decoder.bias differs"]);
}

/// On a GPU a sparse encoder is refused at load, with the way to serve it.
#[test]
fn a_sparse_encoder_on_a_gpu_is_refused_with_the_way_to_serve_it() {
    let test = "a_sparse_encoder_on_a_gpu_is_refused_with_the_way_to_serve_it";
    let Some(d) = kernels::cuda::device_for_test(test) else {
        return;
    };
    let f = Folder::new("sparse-gpu", &sparse(SparsePooling::Max));
    let err = Encoder::load(&f.0, &Device::Cuda(d))
        .err()
        .unwrap()
        .to_string();
    assert_contains(&err, &["sparse encoder", "--device cpu"]);
}

/// Against sentence-transformers' own `SpladePooling` on transformers' `BertForMaskedLM`
/// (tests/python/transformers_check.py `sparse`), max and sum: the same weights above zero,
/// within 1e-5 of each (or of 1, for those below it). Those libraries are not in the tests' environment, so this runs by hand:
/// `TANDEM_TRANSFORMERS_PYTHON=PYTHON cargo test --release -p models --test encoder_sparse
/// -- --ignored --nocapture`.
#[test]
#[ignore = "needs torch, transformers and sentence-transformers"]
fn sparse_weights_match_sentence_transformers() {
    for pooling in [SparsePooling::Max, SparsePooling::Sum] {
        let dir = synthetic(&format!("sparse-st-{pooling:?}"), &sparse(pooling));
        let seqs = synthetic_sequences(&dir.0, 48);
        let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
        let vocab = encoder.output_width();
        let got = embed(&mut encoder, &seqs);
        let want: Vec<Vec<f64>> = ask_transformers("sparse", &dir.0, &seqs, "weights");
        let mut worst = 0f64;
        for (i, (g, w)) in got.chunks_exact(vocab).zip(&want).enumerate() {
            for (entry, (&x, &y)) in g.iter().zip(w).enumerate() {
                assert_eq!(
                    x > 0.0,
                    y > 0.0,
                    "{pooling:?}: text {i}, entry {entry}: {x} vs {y}"
                );
                worst = worst.max((x as f64 - y).abs() / y.abs().max(1.0));
            }
        }
        println!(
            "{pooling:?}: {} texts, the same entries above zero, worst relative difference {worst:.1e}",
            want.len()
        );
        assert!(worst <= 1e-5, "{pooling:?}: {worst}");
    }
}
