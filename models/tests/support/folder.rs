//! A synthetic encoder folder to edit and load, for the loading tests: its JSON files and
//! safetensors rewritten in place, and the error its load gives.

use std::path::PathBuf;

use kernels::Device;
use models::encoder::Encoder;
use models::encoder::dense_module::DenseActivation;
use models::encoder::family::Family;
use models::encoder::synthetic::{SyntheticDense, SyntheticSpec, write_synthetic};
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

/// A fresh synthetic folder, removed when dropped.
pub struct Folder(pub PathBuf);

impl Folder {
    pub fn new(tag: &str, spec: &SyntheticSpec) -> Folder {
        let dir = std::env::temp_dir().join(format!("tandem-load-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_synthetic(&dir, spec).unwrap();
        Folder(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// A JSON file of the folder.
    pub fn json(&self, file: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.path(file)).unwrap()).unwrap()
    }

    /// Rewrites a JSON file through `edit`.
    pub fn edit_json(&self, file: &str, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut value = self.json(file);
        edit(&mut value);
        std::fs::write(self.path(file), serde_json::to_vec(&value).unwrap()).unwrap();
    }

    /// Rewrites model.safetensors through `edit` on (name, dtype, shape, bytes).
    pub fn edit_tensors(&self, edit: impl FnOnce(&mut Vec<Tensor>)) {
        self.edit_tensors_of("model.safetensors", edit)
    }

    /// Rewrites the safetensors `file` through `edit`.
    pub fn edit_tensors_of(&self, file: &str, edit: impl FnOnce(&mut Vec<Tensor>)) {
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

    pub fn load_error(&self) -> String {
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

pub struct Tensor {
    pub name: String,
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// Adds a copy of the tensor `from` under the name `to`.
pub fn copy_tensor(ts: &mut Vec<Tensor>, from: &str, to: &str) {
    let t = ts.iter().find(|t| t.name == from).unwrap();
    let copy = Tensor {
        name: to.into(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        bytes: t.bytes.clone(),
    };
    ts.push(copy);
}

pub fn spec() -> SyntheticSpec {
    SyntheticSpec::default()
}

pub fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

/// Two Dense modules after pooling, as distiluse and LaBSE have: 32 → 24 (tanh) → 16 (no
/// bias, no activation).
pub fn with_dense() -> SyntheticSpec {
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

pub fn modernbert() -> SyntheticSpec {
    SyntheticSpec {
        family: Family::ModernBert,
        layers: 3,
        ..spec()
    }
}
