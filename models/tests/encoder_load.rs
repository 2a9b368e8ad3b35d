//! Loading a text encoder's folder: what loads (prefixes, 16-bit weights, old LayerNorm
//! names, the configs' limits and modules) and what is refused, with a message that names
//! the file, the tensor or the value. All on the tiny synthetic BERT and XLM-RoBERTa: no
//! download.

use std::path::{Path, PathBuf};

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::projection::DenseActivation;
use models::encoder::synthetic::{SyntheticDense, SyntheticSpec, write_synthetic};
use models::encoder::{Encoder, EncoderConfig, EncoderWeights, Pooling, is_encoder_dir};
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

/// A fresh synthetic folder, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(tag: &str, spec: &SyntheticSpec) -> Folder {
        let dir = std::env::temp_dir().join(format!("tandem-load-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_synthetic(&dir, spec).unwrap();
        Folder(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// Rewrites a JSON file through `edit`.
    fn edit_json(&self, file: &str, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = self.path(file);
        let mut value: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut value);
        std::fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
    }

    /// Rewrites model.safetensors through `edit` on (name, dtype, shape, bytes).
    fn edit_tensors(&self, edit: impl FnOnce(&mut Vec<Tensor>)) {
        self.edit_tensors_of("model.safetensors", edit)
    }

    /// Rewrites the safetensors `file` through `edit`.
    fn edit_tensors_of(&self, file: &str, edit: impl FnOnce(&mut Vec<Tensor>)) {
        let bytes = std::fs::read(self.path(file)).unwrap();
        let parsed = SafeTensors::deserialize(&bytes).unwrap();
        let mut tensors: Vec<Tensor> = parsed
            .iter()
            .map(|(name, v)| Tensor {
                name: name.to_string(),
                dtype: v.dtype(),
                shape: v.shape().to_vec(),
                bytes: v.data().to_vec(),
            })
            .collect();
        edit(&mut tensors);
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|t| {
                let view = TensorView::new(t.dtype, t.shape.clone(), &t.bytes).unwrap();
                (t.name.clone(), view)
            })
            .collect();
        let out = safetensors::serialize(views, None).unwrap();
        std::fs::write(self.path(file), out).unwrap();
    }

    fn load_error(&self) -> String {
        match Encoder::load(&self.0, &Device::Cpu) {
            Ok(_) => panic!("{} loaded", self.0.display()),
            Err(e) => e.to_string(),
        }
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Tensor {
    name: String,
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// Adds a copy of the tensor `from` under the name `to`.
fn copy_tensor(ts: &mut Vec<Tensor>, from: &str, to: &str) {
    let t = ts.iter().find(|t| t.name == from).unwrap();
    let copy = Tensor {
        name: to.into(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        bytes: t.bytes.clone(),
    };
    ts.push(copy);
}

fn spec() -> SyntheticSpec {
    SyntheticSpec::default()
}

fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

#[test]
fn a_synthetic_folder_loads_with_what_its_configs_say() {
    let f = Folder::new("plain", &spec());
    assert!(is_encoder_dir(&f.0));
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!((e.hidden(), e.max_seq_len()), (32, 48));
    assert!(e.normalize_by_default());
    assert_eq!(e.config().pooling, Pooling::Mean);
    assert!(!is_encoder_dir(Path::new("/nonexistent")));
}

#[test]
fn prefixes_16_bit_weights_and_old_norm_names_load() {
    for (tag, dtype, prefix) in [("bf16", DType::BF16, true), ("f16", DType::F16, false)] {
        let spec = SyntheticSpec {
            dtype,
            prefixed: prefix,
            pooling: Pooling::Cls,
            normalize: false,
            ..spec()
        };
        let f = Folder::new(tag, &spec);
        f.edit_tensors(|ts| {
            for t in ts.iter_mut() {
                t.name = t
                    .name
                    .replace("LayerNorm.weight", "LayerNorm.gamma")
                    .replace("LayerNorm.bias", "LayerNorm.beta");
            }
            // What BertModel checkpoints carry beside the encoder.
            for name in ["embeddings.position_ids", "pooler.dense.bias"] {
                ts.push(Tensor {
                    name: name.into(),
                    dtype: safetensors::Dtype::F32,
                    shape: vec![2],
                    bytes: vec![0; 8],
                });
            }
        });
        let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
        assert!(!e.normalize_by_default());
        assert_eq!(e.config().pooling, Pooling::Cls);
    }
}

#[test]
fn max_seq_length_is_capped_by_the_position_table_and_defaults_to_512() {
    let f = Folder::new(
        "limit",
        &SyntheticSpec {
            max_seq_length: 1000,
            ..spec()
        },
    );
    assert_eq!(Encoder::load(&f.0, &Device::Cpu).unwrap().max_seq_len(), 64);
    std::fs::remove_file(f.path("sentence_bert_config.json")).unwrap();
    std::fs::remove_file(f.path("modules.json")).unwrap();
    std::fs::remove_dir_all(f.path("1_Pooling")).unwrap();
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(
        e.max_seq_len(),
        64,
        "512 by default, capped at 64 positions"
    );
    assert!(!e.normalize_by_default(), "no modules.json: no Normalize");
    assert_eq!(e.config().pooling, Pooling::Mean);
}

#[test]
fn missing_files_are_named() {
    for file in ["tokenizer.json", "config.json", "model.safetensors"] {
        let f = Folder::new(&format!("missing-{file}"), &spec());
        std::fs::remove_file(f.path(file)).unwrap();
        assert_contains(&f.load_error(), &[file, "is missing"]);
    }
}

#[test]
fn a_tensor_of_the_wrong_shape_is_named_with_both_shapes() {
    let f = Folder::new("shape", &spec());
    f.edit_tensors(|ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name == "encoder.layer.1.intermediate.dense.weight")
            .unwrap();
        t.shape = vec![32, 64];
    });
    assert_contains(
        &f.load_error(),
        &[
            "encoder.layer.1.intermediate.dense.weight",
            "[32, 64]",
            "[64, 32]",
        ],
    );
}

#[test]
fn missing_and_unexpected_tensors_are_named() {
    let f = Folder::new("missing-tensor", &spec());
    f.edit_tensors(|ts| ts.retain(|t| t.name != "encoder.layer.0.attention.self.key.bias"));
    assert_contains(
        &f.load_error(),
        &["encoder.layer.0.attention.self.key.bias", "missing"],
    );
    let f = Folder::new("extra-tensor", &spec());
    f.edit_tensors(|ts| {
        ts.push(Tensor {
            name: "encoder.layer.2.output.dense.bias".into(),
            dtype: safetensors::Dtype::F32,
            shape: vec![32],
            bytes: vec![0; 128],
        })
    });
    assert_contains(
        &f.load_error(),
        &["unexpected tensor encoder.layer.2.output.dense.bias"],
    );
}

#[test]
fn integer_and_non_finite_weights_are_refused() {
    let f = Folder::new("dtype", &spec());
    f.edit_tensors(|ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name.ends_with("query.bias"))
            .unwrap();
        t.dtype = safetensors::Dtype::I32;
    });
    assert_contains(&f.load_error(), &["query.bias", "I32"]);
    let f = Folder::new("nan", &spec());
    f.edit_tensors(|ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name.ends_with("0.output.dense.weight"))
            .unwrap();
        t.bytes[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    assert_contains(
        &f.load_error(),
        &["output.dense.weight", "non-finite", "index 2"],
    );
}

#[test]
fn other_architectures_activations_and_positions_are_refused_by_name() {
    let cases: [(&str, serde_json::Value, &[&str]); 5] = [
        (
            "model_type",
            "deberta-v2".into(),
            &[
                "model_type \"deberta-v2\"",
                "config.json",
                "\"xlm-roberta\"",
            ],
        ),
        (
            "architectures",
            serde_json::json!(["BertForMaskedLM"]),
            &["architecture \"BertForMaskedLM\""],
        ),
        ("hidden_act", "relu".into(), &["hidden_act \"relu\""]),
        (
            "position_embedding_type",
            "relative_key".into(),
            &["position_embedding_type \"relative_key\""],
        ),
        (
            "num_attention_heads",
            5.into(),
            &["not a multiple of num_attention_heads 5"],
        ),
    ];
    for (key, value, parts) in cases {
        let f = Folder::new(&format!("arch-{key}"), &spec());
        f.edit_json("config.json", |c| c[key] = value.clone());
        assert_contains(&f.load_error(), parts);
    }
    let f = Folder::new("no-field", &spec());
    f.edit_json("config.json", |c| {
        c.as_object_mut().unwrap().remove("hidden_size");
    });
    assert_contains(&f.load_error(), &["config.json", "hidden_size"]);
}

#[test]
fn unsupported_pooling_and_modules_are_refused() {
    let f = Folder::new("pool-max", &spec());
    f.edit_json("1_Pooling/config.json", |c| {
        c["pooling_mode_mean_tokens"] = false.into();
        c["pooling_mode_max_tokens"] = true.into();
    });
    assert_contains(
        &f.load_error(),
        &["1_Pooling", "pooling max", "mean and cls"],
    );
    let f = Folder::new("pool-two", &spec());
    f.edit_json("1_Pooling/config.json", |c| {
        c["pooling_mode_cls_token"] = true.into()
    });
    assert_contains(&f.load_error(), &["pooling cls + mean"]);
    let f = Folder::new("module-layernorm", &spec());
    f.edit_json("modules.json", |m| {
        m.as_array_mut().unwrap().insert(
            2,
            serde_json::json!({"idx": 2, "name": "2", "path": "2_LayerNorm",
                               "type": "sentence_transformers.models.LayerNorm"}),
        )
    });
    assert_contains(
        &f.load_error(),
        &[
            "modules.json",
            "module \"sentence_transformers.models.LayerNorm\"",
        ],
    );
}

#[test]
fn a_classifier_loads_its_labels_in_order_and_its_head() {
    let spec = SyntheticSpec {
        labels: 3,
        prefixed: true,
        ..spec()
    };
    let f = Folder::new("classifier", &spec);
    // id2label's keys as JSON gives them, out of numeric order.
    f.edit_json("config.json", |c| {
        c["id2label"] =
            serde_json::json!({"2": "neutral", "0": "contradiction", "1": "entailment"});
        c["num_labels"] = serde_json::json!(3);
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(
        e.config().labels,
        ["contradiction", "entailment", "neutral"]
    );
    assert_eq!((e.output_width(), e.config().pooling), (3, Pooling::Cls));
    assert!(!e.normalize_by_default());
    let outputs = &e.signature().outputs;
    assert_eq!(
        (outputs[0].name.as_str(), &outputs[0].shape),
        ("logits", &vec![-1, 3])
    );
}

#[test]
fn a_classifier_without_id2label_has_num_labels_or_two() {
    let f = Folder::new(
        "classifier-defaults",
        &SyntheticSpec {
            labels: 2,
            ..spec()
        },
    );
    f.edit_json("config.json", |c| {
        c.as_object_mut().unwrap().remove("id2label");
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(e.config().labels, ["LABEL_0", "LABEL_1"]);
    // num_labels alone names that many; the head must then have as many rows.
    let f = Folder::new(
        "classifier-num-labels",
        &SyntheticSpec {
            labels: 3,
            ..spec()
        },
    );
    f.edit_json("config.json", |c| {
        c.as_object_mut().unwrap().remove("id2label");
        c["num_labels"] = serde_json::json!(3);
        c["problem_type"] = serde_json::json!("multi_label_classification");
    });
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(e.config().labels, ["LABEL_0", "LABEL_1", "LABEL_2"]);
    assert!(e.config().multi_label);
}

#[test]
fn a_classifier_head_and_labels_that_disagree_are_refused_by_name() {
    let classifier = || SyntheticSpec {
        labels: 1,
        ..spec()
    };
    let f = Folder::new("head-missing", &classifier());
    f.edit_tensors(|ts| ts.retain(|t| t.name != "pooler.dense.weight"));
    assert_contains(&f.load_error(), &["pooler.dense.weight", "missing"]);
    let f = Folder::new("head-shape", &classifier());
    f.edit_json("config.json", |c| {
        c["id2label"] = serde_json::json!({"0": "a", "1": "b"})
    });
    assert_contains(
        &f.load_error(),
        &["classifier.weight", "[2, 32]", "[1, 32]"],
    );
    for (tag, id2label, num_labels, why) in [
        (
            "gap",
            serde_json::json!({"0": "a", "2": "b"}),
            None,
            "\"2\" is not an index",
        ),
        (
            "twice",
            serde_json::json!({"0": "a", "00": "b"}),
            None,
            "twice",
        ),
        ("empty", serde_json::json!({}), None, "no labels"),
        (
            "count",
            serde_json::json!({"0": "a"}),
            Some(2),
            "num_labels is 2",
        ),
    ] {
        let f = Folder::new(&format!("labels-{tag}"), &classifier());
        f.edit_json("config.json", |c| {
            c["id2label"] = id2label;
            if let Some(n) = num_labels {
                c["num_labels"] = serde_json::json!(n);
            }
        });
        assert_contains(&f.load_error(), &["config.json", why]);
    }
    // An encoder of embeddings holding a classifier's head is not one.
    let f = Folder::new("head-on-encoder", &spec());
    f.edit_tensors(|ts| {
        ts.push(Tensor {
            name: "classifier.bias".into(),
            dtype: safetensors::Dtype::F32,
            shape: vec![1],
            bytes: vec![0; 4],
        })
    });
    assert_contains(&f.load_error(), &["classifier.bias"]);
}

fn roberta() -> SyntheticSpec {
    SyntheticSpec {
        family: Family::Roberta,
        ..spec()
    }
}

/// RoBERTa's position table starts after the padding id, so 514 rows serve 512 tokens; its
/// tensors may sit under `roberta.`, and a checkpoint's pooler is not used.
#[test]
fn an_xlm_roberta_folder_loads_with_its_positions_after_the_padding_id() {
    let f = Folder::new("xlmr", &roberta());
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(e.config().family, Family::Roberta);
    assert_eq!(
        (e.config().pad_token_id, e.config().type_vocab_size),
        (1, 1)
    );
    assert_eq!(e.max_seq_len(), 48);
    let mut positions = Vec::new();
    e.config().position_ids(&[0, 7, 1, 9, 2], &mut positions);
    assert_eq!(positions, vec![2, 3, 1, 4, 5]);
    f.edit_json("config.json", |c| c["max_position_embeddings"] = 40.into());
    f.edit_tensors(|ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name.contains("position_emb"))
            .unwrap();
        t.shape[0] = 40;
        t.bytes.truncate(40 * 32 * 4);
    });
    assert_eq!(Encoder::load(&f.0, &Device::Cpu).unwrap().max_seq_len(), 38);
    std::fs::remove_file(f.path("sentence_bert_config.json")).unwrap();
    f.edit_json("config.json", |c| c["max_position_embeddings"] = 514.into());
    f.edit_tensors(|ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name.contains("position_emb"))
            .unwrap();
        t.shape[0] = 514;
        t.bytes.resize(514 * 32 * 4, 0);
        ts.push(Tensor {
            name: "roberta.pooler.dense.bias".into(),
            dtype: safetensors::Dtype::F32,
            shape: vec![32],
            bytes: vec![0; 128],
        });
        for t in ts.iter_mut() {
            t.name = format!("roberta.{}", t.name.trim_start_matches("roberta."));
        }
    });
    assert_eq!(
        Encoder::load(&f.0, &Device::Cpu).unwrap().max_seq_len(),
        512
    );
}

#[test]
fn a_roberta_config_that_mixes_families_or_leaves_no_positions_is_refused() {
    let f = Folder::new("xlmr-bert-arch", &roberta());
    f.edit_json("config.json", |c| {
        c["architectures"] = serde_json::json!(["BertModel"])
    });
    assert_contains(
        &f.load_error(),
        &[
            "architecture \"BertModel\" of model_type \"xlm-roberta\"",
            "XLMRobertaModel",
        ],
    );
    let f = Folder::new("bert-roberta-arch", &spec());
    f.edit_json("config.json", |c| {
        c["architectures"] = serde_json::json!(["RobertaModel"])
    });
    assert_contains(
        &f.load_error(),
        &["architecture \"RobertaModel\" of model_type \"bert\""],
    );
    let f = Folder::new("xlmr-no-positions", &roberta());
    f.edit_json("config.json", |c| c["max_position_embeddings"] = 2.into());
    assert_contains(
        &f.load_error(),
        &["max_position_embeddings 2 leaves no position after pad_token_id 1"],
    );
    // A BERT-named head in a RoBERTa classifier is not RoBERTa's: refused by name.
    let f = Folder::new(
        "xlmr-bert-head",
        &SyntheticSpec {
            labels: 1,
            ..roberta()
        },
    );
    f.edit_tensors(|ts| {
        for t in ts.iter_mut() {
            t.name = t
                .name
                .replace("classifier.dense", "pooler.dense")
                .replace("classifier.out_proj", "classifier");
        }
    });
    assert_contains(&f.load_error(), &["classifier.dense.weight"]);
}

/// DistilBERT's config.json names its sizes its own way (`dim`, `n_layers`, `n_heads`,
/// `hidden_dim`, `activation`) and has no `layer_norm_eps`; its layers are named its way,
/// under `distilbert.` in a task model; it has no token types.
#[test]
fn a_distilbert_folder_loads_under_its_own_names() {
    let distilbert = SyntheticSpec {
        family: Family::DistilBert,
        prefixed: true,
        ..spec()
    };
    let f = Folder::new("distilbert", &distilbert);
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    let c = e.config();
    assert_eq!(c.family, Family::DistilBert);
    assert_eq!(
        (c.hidden, c.layers, c.heads, c.intermediate),
        (32, 2, 4, 64)
    );
    assert_eq!((c.layer_norm_eps, c.type_vocab_size), (1e-12, 2));
    // A BERT layer name in a DistilBERT file is not DistilBERT's: refused by name.
    f.edit_tensors(|ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name.ends_with("0.ffn.lin1.weight"))
            .unwrap();
        t.name = "distilbert.transformer.layer.0.intermediate.dense.weight".into();
    });
    assert_contains(&f.load_error(), &["transformer.layer.0.ffn.lin1.weight"]);
    let f = Folder::new("distilbert-relu", &distilbert);
    f.edit_json("config.json", |c| c["activation"] = "relu".into());
    assert_contains(&f.load_error(), &["hidden_act \"relu\""]);
}

/// MPNet: its layers' names, its relative attention bias (a row per bucket, a column per
/// head), 32 buckets only.
#[test]
fn an_mpnet_folder_loads_with_its_relative_attention_bias() {
    let mpnet = SyntheticSpec {
        family: Family::Mpnet,
        ..spec()
    };
    let f = Folder::new("mpnet", &mpnet);
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(e.config().family, Family::Mpnet);
    // Positions after the padding id, 1 whatever the config says (transformers fixes it).
    assert_eq!(e.config().first_position(), 2);
    f.edit_tensors(|ts| ts.retain(|t| !t.name.contains("relative_attention_bias")));
    assert_contains(
        &f.load_error(),
        &["encoder.relative_attention_bias.weight", "[32, 4]"],
    );
    let f = Folder::new("mpnet-buckets", &mpnet);
    f.edit_json("config.json", |c| {
        c["relative_attention_num_buckets"] = 64.into()
    });
    assert_contains(&f.load_error(), &["relative_attention_num_buckets 64"]);
}

/// Two Dense modules after pooling, as distiluse and LaBSE have: 32 → 24 (tanh) → 16 (no
/// bias, no activation).
fn with_dense() -> SyntheticSpec {
    let dense = |out_features, bias, activation| SyntheticDense {
        out_features,
        bias,
        activation,
    };
    SyntheticSpec {
        dense: vec![
            dense(24, true, DenseActivation::Tanh),
            dense(16, false, DenseActivation::Identity),
        ],
        ..spec()
    }
}

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

fn modernbert() -> SyntheticSpec {
    SyntheticSpec {
        family: Family::ModernBert,
        layers: 3,
        ..spec()
    }
}

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
