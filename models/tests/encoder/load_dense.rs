//! Loading sentence-transformers Dense modules after pooling: what loads, and what
//! sentence-transformers would run differently or fail on, refused by name; and
//! configurations and weights built by hand that do not belong together.

use kernels::Device;
use models::encoder::dense_module::DenseActivation;
use models::encoder::family::Family;
use models::encoder::{Encoder, EncoderConfig, EncoderWeights};

use crate::support::folder::{Folder, assert_contains, modernbert, with_dense};

#[test]
fn dense_modules_load_and_set_the_embedding_width() {
    let f = Folder::new("dense", &with_dense());
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!((e.hidden(), e.output_width()), (32, 16));
    let modules = &e.config().dense;
    let shapes: Vec<_> = modules
        .iter()
        .map(|m| (m.path.as_str(), m.in_features, m.out_features, m.bias))
        .collect();
    assert_eq!(
        shapes,
        [("2_Dense", 32, 24, true), ("3_Dense", 24, 16, false)]
    );
    assert!(e.config().normalize);
    // Without an activation_function, sentence-transformers' default: tanh.
    f.edit_json("3_Dense/config.json", |c| {
        c.as_object_mut().unwrap().remove("activation_function");
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(e.config().dense[1].activation, DenseActivation::Tanh);
}

#[test]
fn dense_modules_that_would_run_differently_are_refused_by_name() {
    let refused = |tag: &str, edit: &dyn Fn(&Folder), parts: &[&str]| {
        let f = Folder::new(tag, &with_dense());
        edit(&f);
        assert_contains(&f.load_error(), parts);
    };
    let config = |file: &'static str, key: &'static str, value: serde_json::Value| {
        move |f: &Folder| f.edit_json(file, |c| c[key] = value.clone())
    };
    refused(
        "dense-in",
        &config("3_Dense/config.json", "in_features", 23.into()),
        &["3_Dense", "in_features is 23", "24 values"],
    );
    refused(
        "dense-out",
        &config("3_Dense/config.json", "out_features", 17.into()),
        &["linear.weight", "[17, 24]", "[16, 24]"],
    );
    refused(
        "dense-gelu",
        &config(
            "2_Dense/config.json",
            "activation_function",
            "torch.nn.modules.activation.GELU".into(),
        ),
        &[
            "2_Dense",
            "activation_function \"torch.nn.modules.activation.GELU\"",
        ],
    );
    refused(
        "dense-residual",
        &config("2_Dense/config.json", "use_residual", true.into()),
        &["2_Dense", "use_residual"],
    );
    refused(
        "dense-tokens",
        &config(
            "2_Dense/config.json",
            "module_input_name",
            "token_embeddings".into(),
        ),
        &["2_Dense", "token_embeddings", "sentence embedding only"],
    );
    refused(
        "dense-bias-absent",
        &config("3_Dense/config.json", "bias", true.into()),
        &["3_Dense", "linear.bias"],
    );
    refused(
        "dense-bias-extra",
        &|f: &Folder| f.edit_json("2_Dense/config.json", |c| c["bias"] = false.into()),
        &["2_Dense", "linear.bias"],
    );
    refused(
        "dense-after-normalize",
        &|f: &Folder| f.edit_json("modules.json", |m| m.as_array_mut().unwrap().swap(3, 4)),
        &[
            "modules.json",
            "Dense module without a Pooling before it, or after Normalize",
        ],
    );
    refused(
        "dense-outside",
        &|f: &Folder| f.edit_json("modules.json", |m| m[2]["path"] = "../2_Dense".into()),
        &["modules.json", "module path \"../2_Dense\""],
    );
    refused(
        "dense-pickle",
        &|f: &Folder| {
            std::fs::rename(
                f.path("2_Dense/model.safetensors"),
                f.path("2_Dense/pytorch_model.bin"),
            )
            .unwrap()
        },
        &["pytorch_model.bin", "model.safetensors only"],
    );
    refused(
        "dense-no-config",
        &|f: &Folder| std::fs::remove_file(f.path("3_Dense/config.json")).unwrap(),
        &["3_Dense/config.json"],
    );
    refused(
        "dense-nan",
        &|f: &Folder| {
            f.edit_tensors_of("3_Dense/model.safetensors", |ts| {
                ts[0].bytes[..4].copy_from_slice(&f32::NAN.to_le_bytes())
            })
        },
        &["linear.weight", "NaN"],
    );
}

/// What sentence-transformers reads and what it fails on: a Dense module needs a Pooling
/// before it; `./` in a module's path is its folder; an explicit null activation is refused.
#[test]
fn dense_modules_follow_pooling_and_explicit_nulls_are_refused() {
    let f = Folder::new("dense-no-pooling", &with_dense());
    f.edit_json("modules.json", |m| {
        m.as_array_mut().unwrap().remove(1);
    });
    assert_contains(&f.load_error(), &["without a Pooling before it"]);
    let f = Folder::new("dense-curdir", &with_dense());
    f.edit_json("modules.json", |m| m[2]["path"] = "./2_Dense".into());
    Encoder::load(&f.0, &Device::Cpu).unwrap();
    f.edit_json("2_Dense/config.json", |c| {
        c["activation_function"] = serde_json::Value::Null
    });
    assert_contains(&f.load_error(), &["activation_function null"]);
}

/// An encoder's configuration and weights are public: ones that do not belong together
/// are an error from `Encoder::new`, not a panic or a silently different model.
#[test]
fn weights_that_do_not_match_their_configuration_are_refused() {
    let f = Folder::new("mismatch", &with_dense());
    let config = EncoderConfig::read(&f.0).unwrap();
    let weights = EncoderWeights::read(&f.path("model.safetensors"), &config).unwrap();
    let mut no_dense = config.clone();
    no_dense.dense.clear();
    let err = Encoder::new(no_dense, weights.clone(), &Device::Cpu)
        .err()
        .unwrap();
    assert_contains(&err.to_string(), &["Dense modules' widths"]);
    let mut modern = config.clone();
    modern.family = Family::ModernBert;
    assert!(EncoderWeights::read(&f.path("model.safetensors"), &modern).is_err());
    let m = Folder::new("mismatch-modern", &modernbert());
    let modern = EncoderConfig::read(&m.0).unwrap();
    let modern_weights = EncoderWeights::read(&m.path("model.safetensors"), &modern).unwrap();
    let err = Encoder::new(config, modern_weights, &Device::Cpu)
        .err()
        .unwrap();
    assert_contains(&err.to_string(), &["ModernBERT's parameters and layers"]);
}
