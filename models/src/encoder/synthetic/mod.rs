//! A tiny random BERT, DistilBERT, MPNet, XLM-RoBERTa, ModernBERT, NomicBERT or GTE in a
//! sentence-transformers folder, for tests that must run without a download: the files a real snapshot has (config,
//! weights, a tokenizer over a small English vocabulary — WordPiece, or SentencePiece's
//! Unigram for XLM-RoBERTa (`tokenizers`) — modules, pooling, Dense and sentence configs), with
//! weights drawn from a seeded generator. It runs the same code as a real model; only its
//! outputs mean nothing.

use std::path::Path;

use kernels::DType;
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::json;

use super::dense_module::DenseActivation;
use super::family::{Family, RELATIVE_BUCKETS};
use crate::rng::SplitMix64;
use crate::text::pooling::{Pooling, SparsePooling};

mod modern;
mod tokenizers;

pub use modern::GteSpec;
use modern::{
    gte_config_json, gte_weights, modern_config_json, modern_weights, nomic_config_json,
    nomic_weights,
};
use tokenizers::{sentencepiece_vocabulary, tokenizer_json, unigram_tokenizer_json, vocabulary};

/// What the synthetic folder holds.
#[derive(Clone, Debug)]
pub struct SyntheticSpec {
    /// BERT; DistilBERT or MPNet (their names, no token types, BERT's tokenizer); or
    /// XLM-RoBERTa (positions after the padding id, one token type, `<s>` and `</s>` around
    /// each text).
    pub family: Family,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub max_position_embeddings: usize,
    /// `sentence_bert_config.json`'s `max_seq_length`.
    pub max_seq_length: usize,
    /// Matrices stored in this precision; embeddings, biases and norms always f32.
    pub dtype: DType,
    /// Tensor names start with the family's prefix (`bert.`, `roberta.`, ...).
    pub prefixed: bool,
    pub pooling: Pooling,
    /// Dense modules after pooling (`2_Dense`, `3_Dense`, ...), each taking the previous
    /// width; their matrices stored in `dtype`.
    pub dense: Vec<SyntheticDense>,
    /// `modules.json` lists a `Normalize` module.
    pub normalize: bool,
    /// A sequence classifier with this many labels (`BertForSequenceClassification`, no
    /// sentence-transformers modules, as a cross-encoder's folder); 0 for an encoder of
    /// embeddings.
    pub labels: usize,
    /// ModernBERT's `local_attention`: the window is half of it on either side.
    pub local_attention: usize,
    /// A NomicBERT's gate and biases.
    pub nomic: NomicSpec,
    /// A GTE's activation, token types and rotary scaling.
    pub gte: GteSpec,
    /// A BERT sparse encoder (`BertForMaskedLM` with sentence-transformers'
    /// `MLMTransformer` and `SpladePooling` modules) pooling as given; its masked-language
    /// head's decoder tied to the word embeddings, as transformers saves it.
    pub sparse: Option<SparsePooling>,
    pub seed: u64,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            family: Family::Bert,
            layers: 2,
            hidden: 32,
            heads: 4,
            intermediate: 64,
            max_position_embeddings: 64,
            max_seq_length: 48,
            dtype: DType::F32,
            prefixed: false,
            pooling: Pooling::Mean,
            dense: Vec::new(),
            normalize: true,
            labels: 0,
            local_attention: 8,
            nomic: NomicSpec::default(),
            gte: GteSpec::default(),
            sparse: None,
            seed: 7,
        }
    }
}

/// A NomicBERT's `activation_function` (`"swiglu"` or `"geglu"`), which of its dense layers
/// have biases (`qkv_proj_bias`: `Wqkv` and `out_proj`; `mlp_fc1_bias`: `fc11` and `fc12`;
/// `mlp_fc2_bias`: `fc2`), and its `pad_vocab_size_multiple` (the word table's rows are the
/// vocabulary rounded up to it). By default nomic-embed-text's form.
#[derive(Clone, Debug)]
pub struct NomicSpec {
    pub activation: &'static str,
    pub qkv_proj_bias: bool,
    pub mlp_fc1_bias: bool,
    pub mlp_fc2_bias: bool,
    pub pad_vocab_size_multiple: usize,
}

impl Default for NomicSpec {
    fn default() -> Self {
        NomicSpec {
            activation: "swiglu",
            qkv_proj_bias: false,
            mlp_fc1_bias: false,
            mlp_fc2_bias: false,
            pad_vocab_size_multiple: 64,
        }
    }
}

/// A sentence-transformers Dense module of the synthetic folder.
#[derive(Clone, Debug)]
pub struct SyntheticDense {
    pub out_features: usize,
    pub bias: bool,
    pub activation: DenseActivation,
}

/// Writes the folder (created if needed).
pub fn write_synthetic(dir: &Path, spec: &SyntheticSpec) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let write_json = |file: &str, value: serde_json::Value| {
        std::fs::write(dir.join(file), serde_json::to_vec_pretty(&value)?)
    };
    let (tokenizer, vocab) = match spec.family {
        Family::Bert
        | Family::DistilBert
        | Family::Mpnet
        | Family::ModernBert
        | Family::NomicBert
        | Family::Gte
        | Family::Qwen2
        | Family::Qwen3
        | Family::Gemma3 => {
            let vocab = vocabulary();
            (tokenizer_json(&vocab), vocab.len())
        }
        Family::Roberta => {
            let vocab = sentencepiece_vocabulary();
            (unigram_tokenizer_json(&vocab), vocab.len())
        }
    };
    write_json("config.json", config_json(spec, vocab))?;
    write_json("tokenizer.json", tokenizer)?;
    std::fs::write(dir.join("model.safetensors"), weights(spec, vocab))?;
    if spec.labels > 0 {
        return Ok(());
    }
    write_json(
        "sentence_bert_config.json",
        json!({"max_seq_length": spec.max_seq_length, "do_lower_case": false}),
    )?;
    if let Some(pooling) = spec.sparse {
        return write_sparse_modules(dir, pooling, vocab);
    }
    std::fs::create_dir_all(dir.join("1_Pooling"))?;
    write_json("modules.json", modules_json(spec))?;
    write_dense_modules(dir, spec)?;
    write_json(
        "1_Pooling/config.json",
        json!({
            "word_embedding_dimension": spec.hidden,
            "pooling_mode_cls_token": spec.pooling == Pooling::Cls,
            "pooling_mode_mean_tokens": spec.pooling == Pooling::Mean,
            "pooling_mode_max_tokens": false,
            "pooling_mode_mean_sqrt_len_tokens": false,
        }),
    )
}

/// A sparse encoder's modules, as sentence-transformers 5 saves a `SparseEncoder`.
fn write_sparse_modules(dir: &Path, pooling: SparsePooling, vocab: usize) -> std::io::Result<()> {
    let prefix = "sentence_transformers.sparse_encoder.models";
    let modules = json!([
        {"idx": 0, "name": "0", "path": "", "type": format!("{prefix}.MLMTransformer")},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": format!("{prefix}.SpladePooling")},
    ]);
    std::fs::write(
        dir.join("modules.json"),
        serde_json::to_vec_pretty(&modules)?,
    )?;
    // Without it sentence-transformers reads the folder as a dense model to convert.
    let kind = json!({"model_type": "SparseEncoder", "similarity_fn_name": "dot"});
    std::fs::write(
        dir.join("config_sentence_transformers.json"),
        serde_json::to_vec_pretty(&kind)?,
    )?;
    std::fs::create_dir_all(dir.join("1_SpladePooling"))?;
    let strategy = match pooling {
        SparsePooling::Max => "max",
        SparsePooling::Sum => "sum",
    };
    let config = json!({"pooling_strategy": strategy, "activation_function": "relu",
                        "word_embedding_dimension": vocab});
    std::fs::write(
        dir.join("1_SpladePooling/config.json"),
        serde_json::to_vec_pretty(&config)?,
    )
}

/// A classifier's label names: an NLI model's three, or `LABEL_i` as transformers names
/// them by default.
pub fn label_names(labels: usize) -> Vec<String> {
    match labels {
        3 => ["contradiction", "entailment", "neutral"]
            .map(String::from)
            .to_vec(),
        n => (0..n).map(|i| format!("LABEL_{i}")).collect(),
    }
}

fn config_json(spec: &SyntheticSpec, vocab: usize) -> serde_json::Value {
    let mut config = json!({
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": spec.max_position_embeddings,
        "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "vocab_size": vocab,
    });
    if spec.family == Family::DistilBert {
        let c = config.as_object_mut().expect("an object");
        for (bert, distilbert) in [
            ("hidden_size", "dim"),
            ("num_hidden_layers", "n_layers"),
            ("num_attention_heads", "n_heads"),
            ("intermediate_size", "hidden_dim"),
            ("hidden_act", "activation"),
        ] {
            let value = c.remove(bert).expect("written above");
            c.insert(distilbert.into(), value);
        }
        for absent in [
            "layer_norm_eps",
            "type_vocab_size",
            "position_embedding_type",
        ] {
            c.remove(absent);
        }
        c.insert("architectures".into(), json!(["DistilBertModel"]));
        c.insert("model_type".into(), json!("distilbert"));
        c.insert("sinusoidal_pos_embds".into(), json!(false));
    }
    if spec.family == Family::Mpnet {
        // MPNet's padding id is 1 whatever the config says: its vocabulary's `<pad>`, here the
        // WordPiece vocabulary's `[UNK]`, which then counts no position, as in transformers.
        let c = config.as_object_mut().expect("an object");
        c.insert("pad_token_id".into(), json!(1));
        c.remove("type_vocab_size");
        c.insert("architectures".into(), json!(["MPNetModel"]));
        c.insert("model_type".into(), json!("mpnet"));
        c.insert("layer_norm_eps".into(), json!(1e-5));
        c.insert(
            "relative_attention_num_buckets".into(),
            json!(RELATIVE_BUCKETS),
        );
    }
    if spec.family == Family::Roberta {
        config["architectures"] = json!(["XLMRobertaModel"]);
        config["model_type"] = json!("xlm-roberta");
        config["layer_norm_eps"] = json!(1e-5);
        config["pad_token_id"] = json!(1);
        config["type_vocab_size"] = json!(1);
    }
    if spec.family == Family::ModernBert {
        config = modern_config_json(spec, vocab);
    }
    if spec.family == Family::NomicBert {
        config = nomic_config_json(spec, vocab);
    }
    if spec.family == Family::Gte {
        config = gte_config_json(spec, vocab);
    }
    with_task_head(&mut config, spec);
    config
}

/// A classifier's or a sparse encoder's architecture in `config`, and a classifier's labels.
fn with_task_head(config: &mut serde_json::Value, spec: &SyntheticSpec) {
    if spec.sparse.is_some() {
        config["architectures"] = json!(["BertForMaskedLM"]);
    }
    if spec.labels > 0 {
        let names = label_names(spec.labels);
        let id2label: serde_json::Map<_, _> = (0..spec.labels)
            .map(|i| (i.to_string(), json!(names[i])))
            .collect();
        config["architectures"] = json!([match spec.family {
            Family::Bert => "BertForSequenceClassification",
            Family::Roberta => "XLMRobertaForSequenceClassification",
            Family::DistilBert => "DistilBertForSequenceClassification",
            Family::Mpnet => "MPNetForSequenceClassification",
            Family::ModernBert => "ModernBertForSequenceClassification",
            Family::Gte => "NewForSequenceClassification",
            // Not served: the load refuses them.
            Family::NomicBert => "NomicBertForSequenceClassification",
            Family::Qwen2 | Family::Qwen3 | Family::Gemma3 => "Qwen3ForSequenceClassification",
        }]);
        config["id2label"] = json!(id2label);
    }
}

fn modules_json(spec: &SyntheticSpec) -> serde_json::Value {
    let module = |kind: &str, path: &str| (kind.to_string(), path.to_string());
    let mut modules = vec![module("Transformer", ""), module("Pooling", "1_Pooling")];
    for i in 0..spec.dense.len() {
        modules.push(module("Dense", &dense_dir(i)));
    }
    if spec.normalize {
        let idx = modules.len();
        modules.push(module("Normalize", &format!("{idx}_Normalize")));
    }
    let modules = modules.iter().enumerate().map(|(idx, (kind, path))| {
        json!({"idx": idx, "name": idx.to_string(), "path": path,
               "type": format!("sentence_transformers.models.{kind}")})
    });
    serde_json::Value::Array(modules.collect())
}

/// The folder of the `i`-th Dense module: after the transformer and the pooling.
fn dense_dir(i: usize) -> String {
    format!("{}_Dense", i + 2)
}

/// Each Dense module's `config.json` and `model.safetensors` (`linear.weight`, and
/// `linear.bias` if it has one), as sentence-transformers saves them.
fn write_dense_modules(dir: &Path, spec: &SyntheticSpec) -> std::io::Result<()> {
    let mut drawn = Drawn {
        rng: SplitMix64::new(spec.seed ^ 0xD15E),
        tensors: Vec::new(),
    };
    let mut width = spec.hidden;
    for (i, d) in spec.dense.iter().enumerate() {
        let folder = dir.join(dense_dir(i));
        std::fs::create_dir_all(&folder)?;
        let activation = match d.activation {
            DenseActivation::Identity => "torch.nn.modules.linear.Identity",
            DenseActivation::Tanh => "torch.nn.modules.activation.Tanh",
            DenseActivation::Relu => "torch.nn.modules.activation.ReLU",
        };
        let config = json!({"in_features": width, "out_features": d.out_features,
                            "bias": d.bias, "activation_function": activation});
        std::fs::write(folder.join("config.json"), serde_json::to_vec(&config)?)?;
        drawn.tensors.clear();
        let scale = 2.0 / (width as f32).sqrt();
        drawn.dense("linear", width, d.out_features, scale);
        if !d.bias {
            drawn.tensors.pop();
        }
        let tensors = std::mem::take(&mut drawn.tensors);
        std::fs::write(
            folder.join("model.safetensors"),
            encode(spec.dtype, tensors),
        )?;
        width = d.out_features;
    }
    Ok(())
}

/// Tensors drawn from a seeded generator: (name, shape, values, whether a matrix).
struct Drawn {
    rng: SplitMix64,
    tensors: Vec<(String, Vec<usize>, Vec<f32>, bool)>,
}

impl Drawn {
    fn add(&mut self, name: String, shape: Vec<usize>, scale: f32, offset: f32, matrix: bool) {
        let n = shape.iter().product();
        let values = (0..n).map(|_| offset + self.rng.normal() * scale).collect();
        self.tensors.push((name, shape, values, matrix));
    }

    /// `[rows, width]` values of about `scale`, not a matrix of a layer (kept in f32).
    fn table(&mut self, name: &str, rows: usize, width: usize, scale: f32) {
        self.add(name.into(), vec![rows, width], scale, 0.0, false);
    }

    /// A dense layer `{prefix}.weight` `[outputs, inputs]` and `{prefix}.bias`.
    fn dense(&mut self, prefix: &str, inputs: usize, outputs: usize, scale: f32) {
        let shape = vec![outputs, inputs];
        self.add(format!("{prefix}.weight"), shape, scale, 0.0, true);
        self.add(format!("{prefix}.bias"), vec![outputs], 0.1, 0.0, false);
    }

    /// A layer norm's `weight` near 1 and `bias` near 0.
    fn norm(&mut self, prefix: &str, width: usize) {
        self.add(format!("{prefix}.weight"), vec![width], 0.1, 1.0, false);
        self.add(format!("{prefix}.bias"), vec![width], 0.1, 0.0, false);
    }
}

/// The weights in safetensors, named as the family's model (`BertModel`, ...) names them.
fn weights(spec: &SyntheticSpec, vocab: usize) -> Vec<u8> {
    let mut drawn = Drawn {
        rng: SplitMix64::new(spec.seed),
        tensors: Vec::new(),
    };
    if spec.family == Family::ModernBert {
        modern_weights(&mut drawn, spec, vocab);
        return serialize(spec, drawn.tensors);
    }
    if spec.family == Family::NomicBert {
        nomic_weights(&mut drawn, spec, vocab);
        return serialize(spec, drawn.tensors);
    }
    if spec.family == Family::Gte {
        gte_weights(&mut drawn, spec, vocab);
        return serialize(spec, drawn.tensors);
    }
    let h = spec.hidden;
    drawn.table("embeddings.word_embeddings.weight", vocab, h, 0.5);
    let positions = spec.max_position_embeddings;
    drawn.table("embeddings.position_embeddings.weight", positions, h, 0.3);
    // DistilBERT's and MPNet's are dropped as they are renamed (`family_name`).
    let types = if spec.family == Family::Roberta { 1 } else { 2 };
    drawn.table("embeddings.token_type_embeddings.weight", types, h, 0.3);
    drawn.norm("embeddings.LayerNorm", h);
    for l in 0..spec.layers {
        layer(
            &mut drawn,
            &format!("encoder.layer.{l}"),
            h,
            spec.intermediate,
        );
    }
    if spec.family == Family::Mpnet {
        let name = "encoder.relative_attention_bias.weight";
        drawn.table(name, RELATIVE_BUCKETS, spec.heads, 1.0);
    }
    if spec.labels > 0 {
        let (pooler, classifier) = match spec.family {
            Family::Bert => ("pooler.dense", "classifier"),
            Family::Roberta | Family::Mpnet => ("classifier.dense", "classifier.out_proj"),
            Family::DistilBert => ("pre_classifier", "classifier"),
            _ => unreachable!("these are drawn above, or not at all (the decoders)"),
        };
        drawn.dense(pooler, h, h, 1.0 / (h as f32).sqrt());
        drawn.dense(classifier, h, spec.labels, 1.0);
    }
    if spec.sparse.is_some() {
        let p = "cls.predictions";
        drawn.dense(
            &format!("{p}.transform.dense"),
            h,
            h,
            1.0 / (h as f32).sqrt(),
        );
        drawn.norm(&format!("{p}.transform.LayerNorm"), h);
        drawn.add(format!("{p}.bias"), vec![vocab], 0.5, -1.0, false);
    }
    serialize(spec, drawn.tensors)
}

/// One BERT layer's tensors under `p`: hidden `h`, intermediate `i`.
fn layer(drawn: &mut Drawn, p: &str, h: usize, i: usize) {
    let dense = [
        ("attention.self.query", h, h),
        ("attention.self.key", h, h),
        ("attention.self.value", h, h),
        ("attention.output.dense", h, h),
        ("intermediate.dense", h, i),
        ("output.dense", i, h),
    ];
    for (name, inputs, outputs) in dense {
        let scale = 1.0 / (inputs as f32).sqrt();
        drawn.dense(&format!("{p}.{name}"), inputs, outputs, scale);
    }
    for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
        drawn.norm(&format!("{p}.{norm}"), h);
    }
}

/// How MPNet renames BERT's tensors.
const MPNET_NAMES: [(&str, &str); 5] = [
    ("attention.self.query", "attention.attn.q"),
    ("attention.self.key", "attention.attn.k"),
    ("attention.self.value", "attention.attn.v"),
    ("attention.output.dense", "attention.attn.o"),
    ("attention.output.LayerNorm", "attention.LayerNorm"),
];

/// How DistilBERT renames BERT's tensors.
const DISTILBERT_NAMES: [(&str, &str); 9] = [
    ("encoder.layer.", "transformer.layer."),
    ("attention.self.query", "attention.q_lin"),
    ("attention.self.key", "attention.k_lin"),
    ("attention.self.value", "attention.v_lin"),
    ("attention.output.dense", "attention.out_lin"),
    ("attention.output.LayerNorm", "sa_layer_norm"),
    ("intermediate.dense", "ffn.lin1"),
    ("output.dense", "ffn.lin2"),
    ("output.LayerNorm", "output_layer_norm"),
];

/// A BERT tensor's name as `family` names it; None for the token type table, which
/// DistilBERT and MPNet do not have.
fn family_name(family: Family, name: String) -> Option<String> {
    let names: &[(&str, &str)] = match family {
        Family::DistilBert => &DISTILBERT_NAMES,
        Family::Mpnet => &MPNET_NAMES,
        _ => return Some(name),
    };
    if name.contains("token_type") {
        return None;
    }
    Some(
        names
            .iter()
            .fold(name, |n, (bert, theirs)| n.replacen(bert, theirs, 1)),
    )
}

fn serialize(spec: &SyntheticSpec, tensors: Vec<(String, Vec<usize>, Vec<f32>, bool)>) -> Vec<u8> {
    let renamed = tensors
        .into_iter()
        .filter_map(|(name, shape, values, matrix)| {
            Some((family_name(spec.family, name)?, shape, values, matrix))
        })
        .map(|(name, shape, values, matrix)| {
            // A task model's head sits beside `bert.` (or `roberta.`), not in it.
            let head = ["classifier", "pre_classifier", "head.", "cls."]
                .iter()
                .any(|p| name.starts_with(p));
            let name = if spec.prefixed && !head {
                format!("{}{name}", spec.family.prefix())
            } else {
                name
            };
            (name, shape, values, matrix)
        })
        .collect();
    encode(spec.dtype, renamed)
}

/// safetensors bytes of the tensors, matrices stored in `matrix_dtype` and the rest in f32.
fn encode(matrix_dtype: DType, tensors: Vec<(String, Vec<usize>, Vec<f32>, bool)>) -> Vec<u8> {
    let encoded: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(name, shape, values, matrix)| {
            let dtype = if matrix { matrix_dtype } else { DType::F32 };
            let (dt, bytes) = match dtype {
                DType::F32 => (
                    Dtype::F32,
                    values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                ),
                DType::F16 => (
                    Dtype::F16,
                    values
                        .iter()
                        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                        .collect(),
                ),
                DType::BF16 => (
                    Dtype::BF16,
                    values
                        .iter()
                        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                        .collect(),
                ),
            };
            (name, dt, shape, bytes)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = encoded
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            let view = TensorView::new(*dtype, shape.clone(), bytes)
                .expect("shape and byte length agree by construction");
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize(views, None).expect("serializing in-memory tensors cannot fail")
}
