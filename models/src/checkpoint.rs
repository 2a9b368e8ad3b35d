//! MLP checkpoints in safetensors: `layers.{i}.weight` `[out, in]` and `layers.{i}.bias`
//! `[out]`, PyTorch's `nn.Linear` layout, in f32, f16 or bf16.
//!
//! Reading validates everything a forward pass relies on — names, ranks, that the layers
//! chain, dtypes, finiteness — so a model that loads cannot fail on shapes later. Writing is
//! atomic (temporary file, fsync, rename), because the gateway hot-loads checkpoints that a
//! trainer writes while it serves.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use crate::LoadError;

/// A layer's weight matrix in the format it was stored in. Biases are always widened to
/// f32: they are small and added in f32 on every device.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

impl WeightData {
    pub fn dtype(&self) -> kernels::DType {
        match self {
            WeightData::F32(_) => kernels::DType::F32,
            WeightData::F16(_) => kernels::DType::F16,
            WeightData::BF16(_) => kernels::DType::BF16,
        }
    }

    /// Stores f32 values as `dtype` (rounding to nearest for 16-bit formats).
    pub fn from_f32(values: &[f32], dtype: kernels::DType) -> WeightData {
        match dtype {
            kernels::DType::F32 => WeightData::F32(values.to_vec()),
            kernels::DType::F16 => {
                WeightData::F16(values.iter().map(|v| f16::from_f32(*v)).collect())
            }
            kernels::DType::BF16 => {
                WeightData::BF16(values.iter().map(|v| bf16::from_f32(*v)).collect())
            }
        }
    }

    /// The weights widened to f32 (a copy for 16-bit formats).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            WeightData::F32(w) => w.clone(),
            WeightData::F16(w) => w.iter().map(|v| v.to_f32()).collect(),
            WeightData::BF16(w) => w.iter().map(|v| v.to_f32()).collect(),
        }
    }

    /// The weights as stored, borrowed for a kernel to lay out.
    pub fn host(&self) -> kernels::HostWeights<'_> {
        match self {
            WeightData::F32(w) => kernels::HostWeights::F32(w),
            WeightData::F16(w) => kernels::HostWeights::F16(w),
            WeightData::BF16(w) => kernels::HostWeights::BF16(w),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights {
    pub inputs: usize,
    pub outputs: usize,
    /// `[outputs, inputs]`, row-major.
    pub weight: WeightData,
    pub bias: Vec<f32>,
}

/// A validated MLP checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub layers: Vec<LayerWeights>,
}

impl Checkpoint {
    pub fn read(path: &Path) -> Result<Checkpoint, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Checkpoint::from_bytes(&bytes, path)
    }

    /// Parses and validates a checkpoint; `path` is only used in error messages.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint, LoadError> {
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| LoadError::Format {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut found = layer_tensors(&tensors)?;
        let mut layers: Vec<LayerWeights> = Vec::with_capacity(found.len());
        for i in 0..found.len() {
            let (weight, bias) = found.remove(&i).unwrap_or((None, None));
            let follows = layers.last().map(|l| l.outputs);
            layers.push(read_layer(i, weight, bias, follows)?);
        }
        Ok(Checkpoint { layers })
    }

    /// A checkpoint with PyTorch's default `nn.Linear` initialisation, U(-1/√in, 1/√in) for
    /// weights and biases, stored as `dtype`. Deterministic in `seed`.
    pub fn random(dims: &[usize], dtype: kernels::DType, seed: u64) -> Checkpoint {
        assert!(dims.len() >= 2, "an MLP needs an input and an output width");
        let mut rng = crate::rng::SplitMix64::new(seed);
        let layers = dims
            .windows(2)
            .map(|w| {
                let (inputs, outputs) = (w[0], w[1]);
                let limit = 1.0 / (inputs as f32).sqrt();
                let weight: Vec<f32> = (0..inputs * outputs).map(|_| rng.uniform(limit)).collect();
                let bias = (0..outputs).map(|_| rng.uniform(limit)).collect();
                LayerWeights {
                    inputs,
                    outputs,
                    weight: WeightData::from_f32(&weight, dtype),
                    bias,
                }
            })
            .collect();
        Checkpoint { layers }
    }

    /// The forward pass in float64 on the stored weights (16-bit ones widened): the
    /// reference every backend and the gateway are tested against.
    pub fn forward_f64(&self, input: &[f32], rows: usize) -> Vec<f64> {
        let mut x: Vec<f64> = input.iter().map(|v| *v as f64).collect();
        let n = self.layers.len();
        for (i, l) in self.layers.iter().enumerate() {
            let w = l.weight.to_f32();
            let mut y = vec![0f64; rows * l.outputs];
            for r in 0..rows {
                let xr = &x[r * l.inputs..(r + 1) * l.inputs];
                for o in 0..l.outputs {
                    let wr = &w[o * l.inputs..(o + 1) * l.inputs];
                    let s = l.bias[o] as f64
                        + xr.iter().zip(wr).map(|(a, b)| a * *b as f64).sum::<f64>();
                    y[r * l.outputs + o] = if i + 1 < n { s.max(0.0) } else { s };
                }
            }
            x = y;
        }
        x
    }

    /// `[in, hidden..., out]`.
    pub fn dims(&self) -> Vec<usize> {
        let mut dims = vec![self.layers[0].inputs];
        dims.extend(self.layers.iter().map(|l| l.outputs));
        dims
    }

    /// The checkpoint in safetensors format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut raw: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let (dtype, bytes) = match &l.weight {
                WeightData::F32(w) => {
                    (Dtype::F32, w.iter().flat_map(|v| v.to_le_bytes()).collect())
                }
                WeightData::F16(w) => {
                    (Dtype::F16, w.iter().flat_map(|v| v.to_le_bytes()).collect())
                }
                WeightData::BF16(w) => (
                    Dtype::BF16,
                    w.iter().flat_map(|v| v.to_le_bytes()).collect(),
                ),
            };
            raw.push((
                format!("layers.{i}.weight"),
                dtype,
                vec![l.outputs, l.inputs],
                bytes,
            ));
            let bias = l.bias.iter().flat_map(|v| v.to_le_bytes()).collect();
            raw.push((
                format!("layers.{i}.bias"),
                Dtype::F32,
                vec![l.outputs],
                bias,
            ));
        }
        let views: Vec<(String, TensorView<'_>)> = raw
            .iter()
            .map(|(name, dtype, shape, bytes)| {
                let view = TensorView::new(*dtype, shape.clone(), bytes)
                    .expect("shape and byte length agree by construction");
                (name.clone(), view)
            })
            .collect();
        let metadata = HashMap::from([("format".to_string(), "tandem-mlp".to_string())]);
        safetensors::serialize(views, Some(metadata))
            .expect("serializing in-memory tensors cannot fail")
    }

    /// Writes the checkpoint so that a reader sees either nothing or the whole file.
    pub fn write_atomic(&self, path: &Path) -> std::io::Result<()> {
        write_atomic(path, &self.to_bytes())
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames it into place.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp: PathBuf = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("checkpoint"),
        std::process::id()
    ));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    // Make the rename itself durable.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A layer's tensors as a checkpoint holds them: `(weight, bias)`, either possibly absent.
type LayerViews<'a> = (Option<TensorView<'a>>, Option<TensorView<'a>>);

/// Every tensor by layer index, refusing names that are not `layers.{i}.weight|bias` and
/// numbering with gaps (the first number absent below the count is a missing weight).
fn layer_tensors<'a>(
    tensors: &'a SafeTensors<'a>,
) -> Result<BTreeMap<usize, LayerViews<'a>>, LoadError> {
    let mut found: BTreeMap<usize, LayerViews<'a>> = BTreeMap::new();
    for (name, view) in tensors.iter() {
        let (index, is_weight) = parse_name(name).ok_or_else(|| LoadError::UnexpectedTensor {
            name: name.to_string(),
        })?;
        let slot = found.entry(index).or_default();
        if is_weight {
            slot.0 = Some(view);
        } else {
            slot.1 = Some(view);
        }
    }
    if found.is_empty() {
        return Err(LoadError::NoLayers);
    }
    if let Some(gap) = (0..found.len()).find(|i| !found.contains_key(i)) {
        return Err(LoadError::MissingTensor {
            name: format!("layers.{gap}.weight"),
        });
    }
    Ok(found)
}

/// Layer `i` from its tensors, checked: both present, `[out, in]` weights with nothing
/// empty, inputs that match the outputs of the layer before (`follows`), a bias of `[out]`,
/// a supported dtype, and finite values.
fn read_layer(
    i: usize,
    weight: Option<TensorView<'_>>,
    bias: Option<TensorView<'_>>,
    follows: Option<usize>,
) -> Result<LayerWeights, LoadError> {
    let weight_name = format!("layers.{i}.weight");
    let bias_name = format!("layers.{i}.bias");
    let weight = weight.ok_or(LoadError::MissingTensor {
        name: weight_name.clone(),
    })?;
    let bias = bias.ok_or(LoadError::MissingTensor {
        name: bias_name.clone(),
    })?;
    let shape_error = |expected: String| LoadError::Shape {
        name: weight_name.clone(),
        expected,
        given: weight.shape().to_vec(),
    };
    let [outputs, inputs] = *weight.shape() else {
        return Err(shape_error("[out, in] (2 dimensions)".into()));
    };
    if outputs == 0 || inputs == 0 {
        return Err(shape_error("[out, in] with out, in > 0".into()));
    }
    if let Some(prev) = follows
        && prev != inputs
    {
        return Err(shape_error(format!(
            "[out, {prev}] to follow layers.{}.weight",
            i - 1
        )));
    }
    if bias.shape() != [outputs] {
        return Err(LoadError::Shape {
            name: bias_name,
            expected: format!("[{outputs}] to match {weight_name}"),
            given: bias.shape().to_vec(),
        });
    }
    let weight_data = decode_weight(&weight_name, &weight)?;
    let bias_data = decode_weight(&bias_name, &bias)?.to_f32();
    check_finite(&weight_name, &weight_data.to_f32())?;
    check_finite(&bias_name, &bias_data)?;
    Ok(LayerWeights {
        inputs,
        outputs,
        weight: weight_data,
        bias: bias_data,
    })
}

/// `layers.{i}.weight` → `(i, true)`, `layers.{i}.bias` → `(i, false)`; anything else, and
/// non-canonical numbers such as `01`, → `None`.
fn parse_name(name: &str) -> Option<(usize, bool)> {
    let rest = name.strip_prefix("layers.")?;
    let (index, kind) = rest.split_once('.')?;
    let i: usize = index.parse().ok()?;
    if i.to_string() != index {
        return None;
    }
    match kind {
        "weight" => Some((i, true)),
        "bias" => Some((i, false)),
        _ => None,
    }
}

/// A tensor's values in its stored precision (f32, f16 or bf16; another is refused by name).
pub(crate) fn decode_weight(name: &str, view: &TensorView<'_>) -> Result<WeightData, LoadError> {
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => WeightData::F32(
            data.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
        Dtype::F16 => WeightData::F16(
            data.chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]))
                .collect(),
        ),
        Dtype::BF16 => WeightData::BF16(
            data.chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]))
                .collect(),
        ),
        other => {
            return Err(LoadError::UnsupportedDtype {
                name: name.to_string(),
                dtype: format!("{other:?}"),
            });
        }
    })
}

/// Refuses a NaN or an infinity, naming the tensor and the value's index.
pub(crate) fn check_finite(name: &str, values: &[f32]) -> Result<(), LoadError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(LoadError::NonFinite {
            name: name.to_string(),
            index,
            value: values[index],
        }),
        None => Ok(()),
    }
}
