//! NomicBERT (nomic-embed-text's architecture) against the float64 reference: its gates
//! (SwiGLU, GeGLU), with and without biases (each flag on its own), in f32 and bf16 weights,
//! packed batches; what its config says and its defaults; what would run differently,
//! refused by name; and the GPU's refusal.

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::synthetic::{NomicSpec, SyntheticSpec};
use models::encoder::{Encoder, Pooling};

use crate::support::embeddings::{check_synthetic, check_synthetic_packing};
use crate::support::folder::{Folder, assert_contains};

fn nomic(nomic: NomicSpec) -> SyntheticSpec {
    SyntheticSpec {
        family: Family::NomicBert,
        nomic,
        ..SyntheticSpec::default()
    }
}

/// nomic-embed-text's form: SwiGLU, no biases, mean pooling, normalised.
#[test]
fn synthetic_nomic_swiglu_matches_the_reference() {
    let test = "synthetic_nomic_swiglu_matches_the_reference";
    check_synthetic(&Device::Cpu, test, nomic(NomicSpec::default()));
}

#[test]
fn synthetic_nomic_geglu_with_biases_prefixed_cls_matches_the_reference() {
    let test = "synthetic_nomic_geglu_with_biases_prefixed_cls_matches_the_reference";
    let spec = SyntheticSpec {
        layers: 3,
        prefixed: true,
        pooling: Pooling::Cls,
        seed: 21,
        ..nomic(NomicSpec {
            activation: "geglu",
            qkv_proj_bias: true,
            mlp_fc1_bias: true,
            mlp_fc2_bias: true,
            pad_vocab_size_multiple: 1,
        })
    };
    check_synthetic(&Device::Cpu, test, spec);
}

/// Each bias flag read for its own layers: attention's without the feed-forward's, and
/// `fc2`'s without `fc11`'s and `fc12`'s.
#[test]
fn synthetic_nomic_mixed_biases_match_the_reference() {
    let test = "synthetic_nomic_mixed_biases_match_the_reference";
    let flags = [
        (23, true, false, false),
        (24, false, true, true),
        (25, false, false, true),
    ];
    for (seed, qkv, fc1, fc2) in flags {
        let spec = SyntheticSpec {
            seed,
            ..nomic(NomicSpec {
                qkv_proj_bias: qkv,
                mlp_fc1_bias: fc1,
                mlp_fc2_bias: fc2,
                ..NomicSpec::default()
            })
        };
        check_synthetic(&Device::Cpu, &format!("{test}-{seed}"), spec);
    }
}

#[test]
fn synthetic_nomic_bf16_weights_match_the_reference() {
    let test = "synthetic_nomic_bf16_weights_match_the_reference";
    let spec = SyntheticSpec {
        dtype: DType::BF16,
        seed: 22,
        ..nomic(NomicSpec {
            qkv_proj_bias: true,
            mlp_fc1_bias: true,
            mlp_fc2_bias: true,
            ..NomicSpec::default()
        })
    };
    check_synthetic(&Device::Cpu, test, spec);
}

#[test]
fn packed_nomic_batches_give_what_one_text_at_a_time_gives() {
    check_synthetic_packing(&Device::Cpu, nomic(NomicSpec::default()));
}

/// The GPT-2 names read as BERT's sizes, the word table padded to
/// `pad_vocab_size_multiple`, the feed-forward's `n_inner` (64) rounded up to 256 as the
/// Hugging Face code rounds it, every layer global with `rotary_emb_base` (1000, not the
/// default); a scaled rotary base limits texts to `max_trained_positions`; and absent keys
/// take the defaults of the code nomic-embed-text-v1.5 ships (base 10,000, no scaling).
#[test]
fn a_nomic_folder_loads_with_its_sizes_and_limits() {
    let spec = nomic(NomicSpec::default());
    let f = Folder::new("nomic-config", &spec);
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let c = e.config();
    let params = c.modern.clone().unwrap();
    assert_eq!((c.family, c.layer_norm_eps), (Family::NomicBert, 1e-12));
    assert_eq!(
        (c.hidden, c.heads, c.intermediate, c.layers),
        (32, 4, 256, 2)
    );
    let raw = f.json("config.json")["vocab_size"].as_u64().unwrap() as usize;
    assert_ne!(raw % 64, 0, "the synthetic vocabulary needs padding");
    assert_eq!(c.vocab_size, raw.next_multiple_of(64));
    assert_eq!(c.cpu_only(), Some("a NomicBERT encoder"));
    assert_eq!(params.global, [true, true]);
    assert_eq!((params.global_theta, params.local_theta), (1000.0, 1000.0));
    assert_eq!(c.sliding_window(), None);
    assert_eq!(c.max_seq_len, spec.max_seq_length);
    f.edit_json("config.json", |c| {
        c["rotary_scaling_factor"] = 2.0.into();
        c["max_trained_positions"] = 20.into();
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(e.config().max_seq_len, 20);
    f.edit_json("config.json", |c| {
        let c = c.as_object_mut().unwrap();
        c.remove("rotary_scaling_factor");
        c.remove("rotary_emb_base");
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let params = e.config().modern.clone().unwrap();
    assert_eq!(e.config().max_seq_len, spec.max_seq_length);
    assert_eq!(params.global_theta, 10_000.0);
}

#[test]
fn a_nomic_that_would_run_differently_is_refused_by_name() {
    let refused = |tag: &str, edit: &dyn Fn(&mut serde_json::Value), parts: &[&str]| {
        let f = Folder::new(tag, &nomic(NomicSpec::default()));
        f.edit_json("config.json", edit);
        assert_contains(&f.load_error(), parts);
    };
    let flag = |key: &'static str| move |c: &mut serde_json::Value| c[key] = true.into();
    for key in [
        "prenorm",
        "parallel_block",
        "rotary_emb_interleaved",
        "use_rms_norm",
        "causal",
    ] {
        refused(
            &format!("nomic-{key}"),
            &flag(key),
            &[&format!("{key} true")],
        );
    }
    refused(
        "nomic-gelu",
        &|c| c["activation_function"] = "gelu".into(),
        &["activation_function \"gelu\"", "swiglu"],
    );
    refused(
        "nomic-partial-rotary",
        &|c| c["rotary_emb_fraction"] = 0.5.into(),
        &["rotary_emb_fraction 0.5"],
    );
    refused(
        "nomic-no-rotary",
        &|c| {
            c.as_object_mut().unwrap().remove("rotary_emb_fraction");
        },
        &["rotary_emb_fraction 0"],
    );
    refused(
        "nomic-moe",
        &|c| c["moe_every_n_layers"] = 2.into(),
        &["moe_every_n_layers"],
    );
    refused(
        "nomic-base",
        &|c| c["rotary_emb_base"] = (-1.0).into(),
        &["rotary_emb_base is -1"],
    );
    refused(
        "nomic-scale-base",
        &|c| c["rotary_emb_scale_base"] = 512.0.into(),
        &["rotary_emb_scale_base 512"],
    );
    refused(
        "nomic-trained-positions",
        &|c| {
            c["rotary_scaling_factor"] = 2.0.into();
            c["max_trained_positions"] = 0.into();
        },
        &["max_trained_positions is 0"],
    );
    refused(
        "nomic-classifier",
        &|c| c["architectures"] = serde_json::json!(["NomicBertForSequenceClassification"]),
        &["NomicBertForSequenceClassification", "NomicBertModel"],
    );
}

/// A bias the config says is absent, present in the file, is an unexpected tensor; one it
/// says is there, missing, is named.
#[test]
fn nomic_biases_must_be_where_the_config_says() {
    let f = Folder::new("nomic-bias-absent", &nomic(NomicSpec::default()));
    f.edit_json("config.json", |c| c["mlp_fc2_bias"] = true.into());
    assert_contains(&f.load_error(), &["encoder.layers.0.mlp.fc2.bias"]);
    let with_biases = NomicSpec {
        qkv_proj_bias: true,
        mlp_fc1_bias: true,
        mlp_fc2_bias: true,
        ..NomicSpec::default()
    };
    let f = Folder::new("nomic-bias-extra", &nomic(with_biases));
    f.edit_json("config.json", |c| c["qkv_proj_bias"] = false.into());
    assert_contains(&f.load_error(), &["encoder.layers.0.attn.Wqkv.bias"]);
}

/// On a GPU a NomicBERT is refused at load, with the way to serve it.
#[test]
fn a_nomic_encoder_on_a_gpu_is_refused_with_the_way_to_serve_it() {
    let test = "a_nomic_encoder_on_a_gpu_is_refused_with_the_way_to_serve_it";
    let Some(d) = kernels::cuda::device_for_test(test) else {
        return;
    };
    let f = Folder::new("nomic-gpu", &nomic(NomicSpec::default()));
    let err = Encoder::load(&f.0, &Device::Cuda(d))
        .err()
        .unwrap()
        .to_string();
    assert_contains(&err, &["NomicBERT", "--device cpu"]);
}
