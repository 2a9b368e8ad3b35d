//! Loading ModernBERT folders: both config forms, the classifier's head, and what
//! transformers would compute differently, refused by name.

use kernels::Device;
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoder, Pooling};

use crate::support::folder::{Folder, assert_contains, copy_tensor, modernbert};

/// ModernBERT: global attention every other layer (the synthetic config's
/// `global_attn_every_n_layers: 2`), a window of `local_attention / 2`, the rotary bases;
/// new configs (`layer_types`, `rope_parameters`) read alike; its masked-language head
/// ignored, as sentence-transformers ignores it.
#[test]
fn a_modernbert_folder_loads_with_its_windows_and_rotary_bases() {
    let f = Folder::new("modernbert", &modernbert());
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let c = e.config();
    let params = c.modern.clone().unwrap();
    assert_eq!((c.family, c.layer_norm_eps), (Family::ModernBert, 1e-5));
    assert_eq!(params.global, [true, false, true]);
    assert_eq!(params.window, 4);
    assert_eq!(
        (params.global_theta, params.local_theta),
        (160_000.0, 10_000.0)
    );
    f.edit_json("config.json", |c| {
        let c = c.as_object_mut().unwrap();
        for old in [
            "global_attn_every_n_layers",
            "global_rope_theta",
            "local_rope_theta",
        ] {
            c.remove(old);
        }
        c.insert(
            "layer_types".into(),
            serde_json::json!(["full_attention", "sliding_attention", "sliding_attention"]),
        );
        c.insert(
            "rope_parameters".into(),
            serde_json::json!({
                "full_attention": {"rope_type": "default", "rope_theta": 80000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}}),
        );
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let params = e.config().modern.clone().unwrap();
    assert_eq!(params.global, [true, false, false]);
    assert_eq!(
        (params.global_theta, params.local_theta),
        (80_000.0, 5_000.0)
    );
    f.edit_tensors(|ts| {
        for name in ["head.norm.weight", "decoder.bias"] {
            copy_tensor(ts, "final_norm.weight", name);
        }
    });
    Encoder::load(&f.0, &Device::Cpu).unwrap();
}

#[test]
fn a_modernbert_that_would_run_differently_is_refused_by_name() {
    let refused = |tag: &str, edit: &dyn Fn(&mut serde_json::Value), parts: &[&str]| {
        let f = Folder::new(tag, &modernbert());
        f.edit_json("config.json", edit);
        assert_contains(&f.load_error(), parts);
    };
    refused(
        "modern-classifier-pooling",
        &|c| c["classifier_pooling"] = "max".into(),
        &["classifier_pooling \"max\""],
    );
    refused(
        "modern-classifier-activation",
        &|c| {
            c["architectures"] = serde_json::json!(["ModernBertForSequenceClassification"]);
            c["classifier_activation"] = "silu".into();
        },
        &["classifier_activation \"silu\""],
    );
    refused(
        "modern-tanh",
        &|c| c["hidden_activation"] = "gelu_pytorch_tanh".into(),
        &["hidden_activation \"gelu_pytorch_tanh\""],
    );
    refused(
        "modern-bias",
        &|c| c["mlp_bias"] = true.into(),
        &["without biases"],
    );
    refused(
        "modern-scaling",
        &|c| c["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": 2.0}),
        &["rope_scaling"],
    );
    refused(
        "modern-rope-type",
        &|c| {
            c["rope_parameters"] =
                serde_json::json!({"sliding_attention": {"rope_type": "yarn", "rope_theta": 1.0}})
        },
        &["rope_type \"yarn\""],
    );
    refused(
        "modern-layer-types",
        &|c| c["layer_types"] = serde_json::json!(vec!["sliding_attention"; 3]),
        &["layer_types"],
    );
    refused(
        "modern-every-0",
        &|c| c["global_attn_every_n_layers"] = 0.into(),
        &["global_attn_every_n_layers is 0"],
    );
    refused(
        "modern-odd-heads",
        &|c| c["num_attention_heads"] = 32.into(),
        &["heads of 1 values", "even"],
    );
    // The first layer has no attention norm; every other layer has one.
    let f = Folder::new("modern-norms", &modernbert());
    f.edit_tensors(|ts| ts.retain(|t| t.name != "layers.1.attn_norm.weight"));
    assert_contains(&f.load_error(), &["layers.1.attn_norm.weight", "[32]"]);
    let f = Folder::new("modern-norm-0", &modernbert());
    f.edit_tensors(|ts| copy_tensor(ts, "final_norm.weight", "layers.0.attn_norm.weight"));
    assert_contains(&f.load_error(), &["layers.0.attn_norm.weight"]);
}

/// A ModernBERT classifier: its head under `head.` beside `model.`, read with the
/// classifier's pooling; `classifier_bias` adds `head.dense.bias`.
#[test]
fn a_modernbert_classifier_loads_its_head_and_pooling() {
    let spec = SyntheticSpec {
        labels: 3,
        prefixed: true,
        ..modernbert()
    };
    let f = Folder::new("modern-classifier", &spec);
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!((e.output_width(), e.config().pooling), (3, Pooling::Mean));
    f.edit_json("config.json", |c| c["classifier_pooling"] = "cls".into());
    assert_eq!(
        Encoder::load(&f.0, &Device::Cpu).unwrap().config().pooling,
        Pooling::Cls
    );
    f.edit_json("config.json", |c| c["classifier_bias"] = true.into());
    assert_contains(&f.load_error(), &["head.dense.bias", "[32]"]);
    f.edit_tensors(|ts| copy_tensor(ts, "head.norm.weight", "head.dense.bias"));
    Encoder::load(&f.0, &Device::Cpu).unwrap();
    f.edit_tensors(|ts| ts.retain(|t| t.name != "head.norm.weight"));
    assert_contains(&f.load_error(), &["head.norm.weight"]);
}

#[test]
fn modernbert_rope_settings_it_would_ignore_are_refused() {
    let refused = |tag: &str, edit: &dyn Fn(&mut serde_json::Value), parts: &[&str]| {
        let f = Folder::new(tag, &modernbert());
        f.edit_json("config.json", edit);
        assert_contains(&f.load_error(), parts);
    };
    refused(
        "modern-null-theta",
        &|c| c["local_rope_theta"] = serde_json::Value::Null,
        &["local_rope_theta null"],
    );
    refused(
        "modern-rope-factor",
        &|c| {
            c["rope_parameters"] = serde_json::json!({"full_attention":
                {"rope_type": "default", "rope_theta": 1e4, "factor": 2.0}})
        },
        &["factor"],
    );
    refused(
        "modern-rope-flat",
        &|c| c["rope_parameters"] = serde_json::json!({"rope_theta": 1e4}),
        &["rope_theta"],
    );
    // An encoder never builds the classifier's head, so its activation does not matter;
    // a masked-language checkpoint serves its encoder.
    let f = Folder::new("modern-mlm", &modernbert());
    f.edit_json("config.json", |c| {
        c["classifier_activation"] = "silu".into();
        c["architectures"] = serde_json::json!(["ModernBertForMaskedLM"]);
    });
    Encoder::load(&f.0, &Device::Cpu).unwrap();
}
