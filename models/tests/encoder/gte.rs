//! GTE (`NewModel`, gte-base-en-v1.5's architecture) against the float64 reference: GELU
//! and SiLU gates, with and without token types, its NTK-scaled rotary frequencies with and
//! without `mixed_b`, bf16 weights, packed batches; what its config says; what would run
//! differently, refused by name; and the GPU's refusal.

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::synthetic::{GteSpec, SyntheticSpec};
use models::encoder::{Encoder, Pooling};

use crate::support::embeddings::{
    check_synthetic, check_synthetic_packing, embed, synthetic_sequences,
};
use crate::support::folder::{Folder, assert_contains, copy_tensor};

fn gte(gte: GteSpec) -> SyntheticSpec {
    SyntheticSpec {
        family: Family::Gte,
        gte,
        pooling: Pooling::Cls,
        ..SyntheticSpec::default()
    }
}

/// gte-base-en-v1.5's form: GELU, no token types, NTK scaling without `mixed_b`, CLS
/// pooling.
#[test]
fn synthetic_gte_matches_the_reference() {
    let test = "synthetic_gte_matches_the_reference";
    check_synthetic(&Device::Cpu, test, gte(GteSpec::default()));
}

/// Token types, a SiLU gate, `mixed_b` scaling, tensors under `new.`, mean pooling.
#[test]
fn synthetic_gte_silu_token_types_mixed_scaling_prefixed_matches_the_reference() {
    let test = "synthetic_gte_silu_token_types_mixed_scaling_prefixed_matches_the_reference";
    let spec = SyntheticSpec {
        layers: 3,
        prefixed: true,
        pooling: Pooling::Mean,
        seed: 31,
        ..gte(GteSpec {
            activation: "silu",
            type_vocab_size: 2,
            ntk: Some((4.0, Some(0.8))),
        })
    };
    check_synthetic(&Device::Cpu, test, spec);
}

#[test]
fn synthetic_gte_unscaled_bf16_weights_match_the_reference() {
    let test = "synthetic_gte_unscaled_bf16_weights_match_the_reference";
    let spec = SyntheticSpec {
        dtype: DType::BF16,
        seed: 32,
        ..gte(GteSpec {
            ntk: None,
            ..GteSpec::default()
        })
    };
    check_synthetic(&Device::Cpu, test, spec);
}

#[test]
fn packed_gte_batches_give_what_one_text_at_a_time_gives() {
    check_synthetic_packing(&Device::Cpu, gte(GteSpec::default()));
}

/// BERT's sizes, every layer global with `rope_theta`, the NTK scaling, no token type
/// table (type ids then unread), the gated feed-forward's width as given; absent keys take
/// the defaults of GTE's configuration (base 10,000, one token type, no scaling).
#[test]
fn a_gte_folder_loads_with_its_sizes_and_scaling() {
    let spec = gte(GteSpec::default());
    let f = Folder::new("gte-config", &spec);
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let c = e.config();
    let params = c.modern.clone().unwrap();
    assert_eq!((c.family, c.layer_norm_eps), (Family::Gte, 1e-12));
    assert_eq!(
        (
            c.hidden,
            c.heads,
            c.intermediate,
            c.layers,
            c.type_vocab_size
        ),
        (32, 4, 64, 2, 0)
    );
    assert_eq!(c.cpu_only(), Some("a GTE encoder"));
    assert_eq!(params.global, [true, true]);
    assert_eq!((params.global_theta, params.local_theta), (1000.0, 1000.0));
    let ntk = params.ntk.unwrap();
    assert_eq!((ntk.factor, ntk.mixed_b), (2.0, None));
    assert_eq!(c.sliding_window(), None);
    assert_eq!(c.max_seq_len, spec.max_seq_length);
    f.edit_json("config.json", |c| {
        let c = c.as_object_mut().unwrap();
        for key in ["rope_theta", "rope_scaling", "type_vocab_size"] {
            c.remove(key);
        }
    });
    let err = f.load_error();
    assert_contains(&err, &["embeddings.token_type_embeddings.weight"]);
    let with_types = gte(GteSpec {
        type_vocab_size: 1,
        ..GteSpec::default()
    });
    let f = Folder::new("gte-defaults", &with_types);
    f.edit_json("config.json", |c| {
        let c = c.as_object_mut().unwrap();
        for key in ["rope_theta", "rope_scaling", "type_vocab_size"] {
            c.remove(key);
        }
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let params = e.config().modern.clone().unwrap();
    assert_eq!((params.global_theta, params.ntk), (10_000.0, None));
    assert_eq!(e.config().type_vocab_size, 1);
}

#[test]
fn a_gte_that_would_run_differently_is_refused_by_name() {
    let refused = |tag: &str, edit: &dyn Fn(&mut serde_json::Value), parts: &[&str]| {
        let f = Folder::new(tag, &gte(GteSpec::default()));
        f.edit_json("config.json", edit);
        assert_contains(&f.load_error(), parts);
    };
    let cases: [(&str, &str, serde_json::Value, &str); 8] = [
        (
            "absolute",
            "position_embedding_type",
            "absolute".into(),
            "position_embedding_type \"absolute\"",
        ),
        (
            "rms",
            "layer_norm_type",
            "rms_norm".into(),
            "layer_norm_type \"rms_norm\"",
        ),
        (
            "logn",
            "logn_attention_scale",
            true.into(),
            "logn_attention_scale true",
        ),
        ("unpacked", "pack_qkv", false.into(), "pack_qkv false"),
        (
            "tanh-gelu",
            "hidden_act",
            "gelu_new".into(),
            "hidden_act \"gelu_new\"",
        ),
        (
            "linear-scaling",
            "rope_scaling",
            serde_json::json!({"type": "linear", "factor": 2.0}),
            "rope_scaling of type Some(\"linear\")",
        ),
        (
            "small-factor",
            "rope_scaling",
            serde_json::json!({"type": "ntk", "factor": 0.5}),
            "factor Some(0.5)",
        ),
        (
            "masked-lm",
            "architectures",
            serde_json::json!(["NewForMaskedLM"]),
            "NewForMaskedLM",
        ),
    ];
    for (tag, key, value, expected) in cases {
        refused(
            &format!("gte-{tag}"),
            &|c| c[key] = value.clone(),
            &[expected],
        );
    }
    refused(
        "gte-theta",
        &|c| c["rope_theta"] = (-1.0).into(),
        &["rope_theta -1"],
    );
    refused(
        "gte-other-base",
        &|c| c["rope_scaling"]["rope_theta"] = 5.0.into(),
        &["rope_theta Some(5.0)"],
    );
}

/// A config transformers 5 saved again puts the scaling under `rope_parameters`, which GTE's
/// code does not read (it would run the model unscaled): refused, naming the key to use.
/// An unscaled one (`rope_type` `"default"`) loads; so does a `rope_scaling` that repeats
/// the type as `rope_type` and the base.
#[test]
fn a_gte_config_saved_by_transformers_5_is_read_as_gte_s_code_reads_it() {
    let f = Folder::new("gte-transformers-5", &gte(GteSpec::default()));
    let params = || {
        let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
        e.config().modern.clone().unwrap()
    };
    let before = params();
    f.edit_json("config.json", |c| {
        c["rope_scaling"]["rope_type"] = "ntk".into();
        c["rope_scaling"]["rope_theta"] = c["rope_theta"].clone();
    });
    assert_eq!(params(), before);
    f.edit_json("config.json", |c| {
        let c = c.as_object_mut().unwrap();
        let scaling = c.remove("rope_scaling").unwrap();
        c.insert("rope_parameters".into(), scaling);
    });
    assert_contains(&f.load_error(), &["rope_parameters", "rename the key"]);
    f.edit_json("config.json", |c| {
        c["rope_parameters"] = serde_json::json!({"rope_theta": 1000.0, "rope_type": "default"});
    });
    let unscaled = params();
    assert_eq!((unscaled.global_theta, unscaled.ntk), (1000.0, None));
    f.edit_json("config.json", |c| {
        c["rope_parameters"]["rope_theta"] = 5.0.into()
    });
    assert_contains(
        &f.load_error(),
        &["rope_parameters", "rope_theta Some(5.0)"],
    );
}

/// gte-multilingual-base's config names `NewForTokenClassification` (with a label) and its
/// checkpoint holds that head's `classifier`: it is served as the encoder
/// sentence-transformers runs, the head set aside.
#[test]
fn a_gte_with_a_token_classifier_s_head_serves_its_encoder() {
    let f = Folder::new("gte-token-classifier", &gte(GteSpec::default()));
    let mut plain = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let seqs = synthetic_sequences(&f.0, 48);
    let want = embed(&mut plain, &seqs);
    f.edit_json("config.json", |c| {
        c["architectures"] = serde_json::json!(["NewForTokenClassification"]);
        c["id2label"] = serde_json::json!({"0": "LABEL_0"});
    });
    f.edit_tensors(|ts| {
        copy_tensor(
            ts,
            "encoder.layer.0.attention.o_proj.weight",
            "classifier.weight",
        );
        copy_tensor(
            ts,
            "encoder.layer.0.attention.o_proj.bias",
            "classifier.bias",
        );
    });
    let mut served = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert!(!served.config().is_classifier());
    assert_eq!(embed(&mut served, &seqs), want);
}

/// On a GPU a GTE is refused at load, with the way to serve it.
#[test]
fn a_gte_encoder_on_a_gpu_is_refused_with_the_way_to_serve_it() {
    let test = "a_gte_encoder_on_a_gpu_is_refused_with_the_way_to_serve_it";
    let Some(d) = kernels::cuda::device_for_test(test) else {
        return;
    };
    let f = Folder::new("gte-gpu", &gte(GteSpec::default()));
    let err = Encoder::load(&f.0, &Device::Cuda(d))
        .err()
        .unwrap()
        .to_string();
    assert_contains(&err, &["GTE", "--device cpu"]);
}
