//! Folders as sentence-transformers 6 saves them: module types under its new module paths
//! (`sentence_transformers.base.modules.transformer.Transformer`, ...), and the sequence
//! limit in `tokenizer_config.json`'s `model_max_length` rather than in
//! `sentence_bert_config.json`. They load as the same model, cut where 6 cuts.

use kernels::Device;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoder, SparsePooling};

use crate::support::embeddings::{embed, random_sequences};
use crate::support::folder::{Folder, assert_contains, with_dense};

/// Rewrites the folder's configuration as sentence-transformers 6 saves it: module types
/// renamed by `rename`, no `max_seq_length`, the limit given as the tokenizer's.
fn as_saved_by_6(f: &Folder, rename: fn(&str) -> String, model_max_length: serde_json::Value) {
    f.edit_json("modules.json", |modules| {
        for m in modules.as_array_mut().unwrap() {
            let class = m["type"]
                .as_str()
                .unwrap()
                .rsplit('.')
                .next()
                .unwrap()
                .to_string();
            m["type"] = rename(&class).into();
        }
    });
    f.edit_json("sentence_bert_config.json", |c| {
        *c = serde_json::json!({"transformer_task": "feature-extraction",
                                "module_output_name": "token_embeddings"});
    });
    let tokenizer = serde_json::json!({"model_max_length": model_max_length, "max_length": 128});
    std::fs::write(f.path("tokenizer_config.json"), tokenizer.to_string()).unwrap();
}

fn dense_types(class: &str) -> String {
    match class {
        "Pooling" => "sentence_transformers.sentence_transformer.modules.pooling.Pooling".into(),
        other => format!(
            "sentence_transformers.base.modules.{}.{other}",
            other.to_lowercase()
        ),
    }
}

fn sparse_types(class: &str) -> String {
    let module = match class {
        "MLMTransformer" => "mlm_transformer",
        _ => "splade_pooling",
    };
    format!("sentence_transformers.sparse_encoder.modules.{module}.{class}")
}

#[test]
fn an_encoder_saved_by_sentence_transformers_6_loads_as_the_same_model() {
    let before = Folder::new("st6-dense-before", &with_dense());
    let after = Folder::new("st6-dense-after", &with_dense());
    as_saved_by_6(&after, dense_types, serde_json::json!(20));
    let mut old = Encoder::load(&before.0, &Device::Cpu).unwrap();
    let mut new = Encoder::load(&after.0, &Device::Cpu).unwrap();
    assert_eq!((old.max_seq_len(), new.max_seq_len()), (48, 20));
    assert_eq!(new.config().dense.len(), 2);
    assert!(new.config().normalize);
    let seqs = random_sequences(&[5, 12, 20], 5, 60, 2, 3);
    assert_eq!(embed(&mut old, &seqs), embed(&mut new, &seqs));
}

#[test]
fn transformers_no_limit_leaves_the_position_table_s() {
    let f = Folder::new("st6-no-limit", &SyntheticSpec::default());
    // transformers writes 1e30 where a tokenizer has no limit of its own.
    as_saved_by_6(&f, dense_types, serde_json::json!(1e30));
    assert_eq!(Encoder::load(&f.0, &Device::Cpu).unwrap().max_seq_len(), 64);
}

#[test]
fn a_sparse_encoder_saved_by_sentence_transformers_6_loads() {
    let spec = SyntheticSpec {
        sparse: Some(SparsePooling::Sum),
        ..SyntheticSpec::default()
    };
    let f = Folder::new("st6-sparse", &spec);
    as_saved_by_6(&f, sparse_types, serde_json::json!(30));
    let e = Encoder::load(&f.0, &Device::Cpu).unwrap();
    assert_eq!(
        (e.config().sparse, e.max_seq_len()),
        (Some(SparsePooling::Sum), 30)
    );
}

#[test]
fn another_package_s_module_is_refused_by_its_whole_type() {
    let f = Folder::new("st6-foreign", &SyntheticSpec::default());
    f.edit_json("modules.json", |m| {
        m[1]["type"] = "my_package.modules.Pooling".into()
    });
    assert_contains(&f.load_error(), &["my_package.modules.Pooling"]);
}
