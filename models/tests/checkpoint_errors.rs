//! Loading a corrupt or mismatched checkpoint gives a typed error naming the tensor and the
//! shapes — never a panic.

use std::collections::HashMap;
use std::path::Path;

use kernels::{DType, Device};
use models::{Checkpoint, LoadError, Mlp};
use safetensors::{Dtype, tensor::TensorView};

/// Serialises raw tensors: (name, dtype, shape, value to fill with).
fn file(tensors: &[(&str, Dtype, &[usize], f32)]) -> Vec<u8> {
    let data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, dtype, shape, fill)| {
            let n: usize = shape.iter().product();
            let bytes = match dtype {
                Dtype::F32 => (0..n).flat_map(|_| fill.to_le_bytes()).collect(),
                Dtype::F16 => (0..n)
                    .flat_map(|_| half::f16::from_f32(*fill).to_le_bytes())
                    .collect(),
                Dtype::I32 => (0..n).flat_map(|_| (*fill as i32).to_le_bytes()).collect(),
                Dtype::F64 => (0..n).flat_map(|_| (*fill as f64).to_le_bytes()).collect(),
                other => panic!("test helper does not write {other:?}"),
            };
            (name.to_string(), *dtype, shape.to_vec(), bytes)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = data
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None::<HashMap<String, String>>).unwrap()
}

fn load(bytes: &[u8]) -> Result<Checkpoint, LoadError> {
    Checkpoint::from_bytes(bytes, Path::new("test.safetensors"))
}

fn good() -> Vec<(&'static str, Dtype, &'static [usize], f32)> {
    vec![
        ("layers.0.weight", Dtype::F32, &[3, 4], 0.5),
        ("layers.0.bias", Dtype::F32, &[3], 0.1),
        ("layers.1.weight", Dtype::F32, &[2, 3], 0.25),
        ("layers.1.bias", Dtype::F32, &[2], 0.0),
    ]
}

#[test]
fn a_valid_file_loads() {
    let ckpt = load(&file(&good())).unwrap();
    assert_eq!(ckpt.dims(), vec![4, 3, 2]);
}

#[test]
fn truncated_files_are_format_errors() {
    let bytes = file(&good());
    for cut in [0, 4, 8, 20, bytes.len() / 2, bytes.len() - 1] {
        let err = load(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(err, LoadError::Format { .. }),
            "cut at {cut}: {err}"
        );
        assert!(err.to_string().contains("test.safetensors"), "{err}");
    }
}

#[test]
fn other_files_are_format_errors() {
    for junk in [
        &b"not a checkpoint at all, just text"[..],
        &[0xff; 64][..],
        b"{}",
    ] {
        let err = load(junk).unwrap_err();
        assert!(matches!(err, LoadError::Format { .. }), "{err}");
    }
    // A header length that points past the end of the file.
    let mut lying = 1_000_000u64.to_le_bytes().to_vec();
    lying.extend_from_slice(b"{}");
    assert!(matches!(
        load(&lying).unwrap_err(),
        LoadError::Format { .. }
    ));
}

#[test]
fn missing_layers_and_biases_are_named() {
    let mut t = good();
    t.remove(1);
    let err = load(&file(&t)).unwrap_err();
    assert!(
        matches!(&err, LoadError::MissingTensor { name } if name == "layers.0.bias"),
        "{err}"
    );

    let t = vec![
        ("layers.0.weight", Dtype::F32, &[3usize, 4][..], 0.5),
        ("layers.0.bias", Dtype::F32, &[3][..], 0.1),
        ("layers.2.weight", Dtype::F32, &[2, 3][..], 0.25),
        ("layers.2.bias", Dtype::F32, &[2][..], 0.0),
    ];
    let err = load(&file(&t)).unwrap_err();
    assert!(
        matches!(&err, LoadError::MissingTensor { name } if name == "layers.1.weight"),
        "{err}"
    );

    let err = load(&file(&[])).unwrap_err();
    assert!(matches!(err, LoadError::NoLayers), "{err}");
}

#[test]
fn extra_tensors_are_rejected() {
    for extra in [
        "layers.0.running_mean",
        "embed.weight",
        "layers.01.weight",
        "layers.x.bias",
    ] {
        let mut t = good();
        t.push((extra, Dtype::F32, &[3], 0.0));
        let err = load(&file(&t)).unwrap_err();
        assert!(
            matches!(&err, LoadError::UnexpectedTensor { name } if name == extra),
            "{err}"
        );
    }
}

#[test]
fn shapes_that_do_not_chain_name_both_layers() {
    let mut t = good();
    t[2] = ("layers.1.weight", Dtype::F32, &[2, 5], 0.25);
    let err = load(&file(&t)).unwrap_err().to_string();
    assert!(
        err.contains("layers.1.weight") && err.contains("[2, 5]") && err.contains("[out, 3]"),
        "{err}"
    );
}

#[test]
fn wrong_ranks_and_bias_lengths_are_rejected() {
    let mut t = good();
    t[0] = ("layers.0.weight", Dtype::F32, &[12], 0.5);
    let err = load(&file(&t)).unwrap_err().to_string();
    assert!(
        err.contains("layers.0.weight") && err.contains("2 dimensions"),
        "{err}"
    );

    let mut t = good();
    t[1] = ("layers.0.bias", Dtype::F32, &[4], 0.5);
    let err = load(&file(&t)).unwrap_err().to_string();
    assert!(
        err.contains("layers.0.bias") && err.contains("[3]"),
        "{err}"
    );

    let mut t = good();
    t[0] = ("layers.0.weight", Dtype::F32, &[0, 4], 0.5);
    t[1] = ("layers.0.bias", Dtype::F32, &[0], 0.5);
    assert!(matches!(
        load(&file(&t)).unwrap_err(),
        LoadError::Shape { .. }
    ));
}

#[test]
fn unsupported_dtypes_are_named() {
    for dtype in [Dtype::I32, Dtype::F64] {
        let mut t = good();
        t[2] = ("layers.1.weight", dtype, &[2, 3], 1.0);
        let err = load(&file(&t)).unwrap_err();
        assert!(
            matches!(&err, LoadError::UnsupportedDtype { name, .. } if name == "layers.1.weight"),
            "{err}"
        );
    }
}

#[test]
fn non_finite_weights_are_rejected() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut t = good();
        t[1] = ("layers.0.bias", Dtype::F32, &[3], bad);
        let err = load(&file(&t)).unwrap_err();
        assert!(
            matches!(&err, LoadError::NonFinite { name, .. } if name == "layers.0.bias"),
            "{err}"
        );
    }
    // 70000 overflows f16 to infinity.
    let mut t = good();
    t[0] = ("layers.0.weight", Dtype::F16, &[3, 4], 70000.0);
    assert!(matches!(
        load(&file(&t)).unwrap_err(),
        LoadError::NonFinite { .. }
    ));
}

#[test]
fn a_missing_file_is_an_io_error() {
    let err = Mlp::load(Path::new("/nonexistent/model.safetensors"), &Device::Cpu)
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::Io { .. }), "{err}");
}

#[test]
fn checkpoints_round_trip_through_atomic_writes() {
    let dir = std::env::temp_dir().join(format!("tandem-ckpt-{}", std::process::id()));
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let ckpt = Checkpoint::random(&[5, 7, 3], dtype, 3);
        let path = dir.join(format!("{dtype}/model.safetensors"));
        ckpt.write_atomic(&path).unwrap();
        assert_eq!(Checkpoint::read(&path).unwrap(), ckpt);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
