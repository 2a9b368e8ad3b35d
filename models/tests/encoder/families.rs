//! The newer kinds of model against the float64 reference: sentence-transformers Dense
//! modules after pooling and ModernBERT (both config forms, packed batches), on every
//! device; and every family against Hugging Face's own libraries (ignored: they are not in
//! the tests' environment).

use std::path::Path;

use kernels::{DType, Device};
use models::encoder::dense_module::DenseActivation;
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoder, Pooling, TextTokenizer};

use crate::support::embeddings::{
    SYNTHETIC_TEXTS, assert_cosines, check_synthetic, check_synthetic_packing, cosine, dense,
    embed, encode_all, random_sequences, reference, synthetic_sequences, worst_relative_difference,
};
use crate::support::{on_every_device, python, run_script, synthetic};

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

// The window (4 tokens each side) is shorter than most of the texts, so the
// sliding-window layer masks.
on_every_device!(synthetic_modernbert_mean, |device, test| {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        ..SyntheticSpec::default()
    };
    check_synthetic(device, test, spec);
});

on_every_device!(synthetic_modernbert_prefixed_cls_bf16, |device, test| {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        layers: 4,
        prefixed: true,
        pooling: Pooling::Cls,
        dtype: DType::BF16,
        seed: 15,
        ..SyntheticSpec::default()
    };
    check_synthetic(device, test, spec);
});

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
/// `TANDEM_TRANSFORMERS_PYTHON=PYTHON cargo test --release -p models --test encoder_families
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
        let seqs = synthetic_sequences(&dir.0, spec.max_seq_length);
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

// Rotary positions restart and the window applies within each packed sequence.
on_every_device!(synthetic_modernbert_packing, |device, _test| {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        layers: 3,
        ..SyntheticSpec::default()
    };
    check_synthetic_packing(device, spec);
});

/// On two threads a batch of several sequences runs a group of them per thread, each group's
/// layers on its own thread (these models are so narrow that any batch of several groups),
/// and one sequence alone runs each layer split over both: either way every embedding is
/// what one thread gives, for every family (MPNet's
/// bias table, ModernBERT's rotary tables and windows). Not bitwise: where a sequence's rows
/// fall in the dense kernel's tiles decides how its sums are split, to a few ulp.
#[test]
fn groups_of_sequences_per_thread_give_what_one_thread_gives() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let even: Vec<usize> = (0..12).map(|i| 20 + (i * 7) % 25).collect();
    let alone = [48];
    for family in [Family::Bert, Family::Mpnet, Family::ModernBert] {
        let spec = SyntheticSpec {
            family,
            seed: 31,
            ..SyntheticSpec::default()
        };
        let dir = synthetic(&format!("groups-{family:?}"), &spec);
        let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
        for lengths in [&even[..], &alone[..]] {
            let seqs = random_sequences(lengths, 5, 60, 2, 3);
            let on = |encoder: &mut Encoder, threads| {
                encoder.set_threads(threads);
                pool.install(|| embed(encoder, &seqs))
            };
            let (two, one) = (on(&mut encoder, 2), on(&mut encoder, 1));
            let worst = worst_relative_difference(&two, &one, encoder.hidden());
            assert!(
                worst <= 1e-6,
                "{family:?} {lengths:?}: two threads differ by {worst:e}"
            );
        }
    }
}
