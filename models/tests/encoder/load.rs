//! Loading a text encoder's folder: what loads (prefixes, 16-bit weights, old LayerNorm
//! names, the configs' limits and modules) and what is refused, with a message that names
//! the file, the tensor or the value. All on the tiny synthetic BERT and XLM-RoBERTa: no
//! download.

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoder, Pooling, is_encoder_dir};

use std::path::Path;

use crate::support::folder::{Folder, Tensor, assert_contains, spec};

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
fn on_the_cpu_it_splits_layers_over_a_pool_of_several_threads_only() {
    let f = Folder::new("threads", &spec());
    for (threads, splits) in [(1, false), (2, true)] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let e = pool.install(|| Encoder::load(&f.0, &Device::Cpu)).unwrap();
        assert_eq!(e.splits_layers_over_threads(), splits, "{threads} threads");
    }
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
            serde_json::json!(["BertForQuestionAnswering"]),
            &["architecture \"BertForQuestionAnswering\""],
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
        &["1_Pooling", "pooling max", "mean, cls and lasttoken"],
    );
    // sentence-transformers 6's pooling without a prompt's tokens: the same without prompts,
    // refused with them.
    let f = Folder::new("pool-no-prompt", &spec());
    f.edit_json("1_Pooling/config.json", |c| {
        c["include_prompt"] = false.into()
    });
    assert!(Encoder::load(&f.0, &Device::Cpu).is_ok());
    std::fs::write(
        f.path("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "query: "}}"#,
    )
    .unwrap();
    assert_contains(
        &f.load_error(),
        &["1_Pooling", "include_prompt false with prompts"],
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
