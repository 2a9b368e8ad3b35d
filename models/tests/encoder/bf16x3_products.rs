//! Text encoders on the CPU with bf16x3 products (`MatmulPrecision::Bf16x3`: f32 products
//! emulated by three bf16 products on AMX's tiles): against the float64 reference of the
//! architecture, on all-MiniLM-L6-v2 and on a synthetic model of every family, they meet
//! f32's bar (cosine 0.99999) and f32's pair score, and are not f32's: the layers do run
//! on the tiles. They say SKIPPED on a CPU without AMX, where the option is refused at load
//! (tested there).

use kernels::{DType, Device};
use models::encoder::Encoder;
use models::encoder::synthetic::SyntheticSpec;
use models::{LoadOptions, MatmulPrecision};

use crate::support::{precision, synthetic};

const BF16X3: LoadOptions = LoadOptions {
    cpu_precision: MatmulPrecision::Bf16x3,
};

/// Whether this CPU has bf16x3 products; says SKIPPED where it has not.
fn bf16x3_here(test: &str) -> bool {
    let here = MatmulPrecision::Bf16x3.available();
    if !here {
        kernels::cuda::report_skip(test, "no AMX tiles on this CPU");
    }
    here
}

/// Together (the tiles run) and two short texts alone (a few rows: the recombined weights).
#[test]
fn minilm_with_bf16x3_products_matches_the_reference_as_f32_does() {
    let test = "minilm_with_bf16x3_products_matches_the_reference_as_f32_does";
    if bf16x3_here(test) {
        precision::minilm_matches_the_reference(test, BF16X3, 0.99999, &[0, 4]);
    }
}

/// The pair scores 0.7553 ± 0.0005, f32's bar.
#[test]
fn minilm_with_bf16x3_products_scores_the_pair_as_f32_does() {
    let test = "minilm_with_bf16x3_products_scores_the_pair_as_f32_does";
    if bf16x3_here(test) {
        precision::minilm_scores_the_pair(test, BF16X3, 0.0005);
    }
}

/// A sequence packed with others (on the tiles) gets what it gets alone (on the tiles from
/// 16 tokens, on the recombined weights below), to within bf16x3's precision.
#[test]
fn minilm_with_bf16x3_products_packs_as_alone() {
    let test = "minilm_with_bf16x3_products_packs_as_alone";
    if bf16x3_here(test) {
        let lengths = [37, 1, 2, 256, 3, 5, 8, 13, 15, 16, 17, 31, 33, 64, 129, 9];
        precision::minilm_packs_as_alone(test, BF16X3, &lengths, 0.999999);
    }
}

#[test]
fn every_family_with_bf16x3_products_matches_the_reference_as_f32_does() {
    let test = "every_family_with_bf16x3_products_matches_the_reference_as_f32_does";
    if bf16x3_here(test) {
        precision::every_family_matches_the_reference(test, BF16X3, 4, 0.99999);
    }
}

/// What the server reads from the model: `/info`'s dtype is f32's (the accuracy a client
/// gets), and a pair of tokens in attention, which stays f32, weighs twice as much against
/// the dense layers as with f32 products.
#[test]
fn bf16x3_products_are_reported_as_f32_and_weigh_attention_by_their_speedup() {
    let test = "bf16x3_products_are_reported_as_f32_and_weigh_attention_by_their_speedup";
    if !bf16x3_here(test) {
        return;
    }
    let dir = synthetic(test, &SyntheticSpec::default());
    let f32 = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let split = Encoder::load_with(&dir.0, &Device::Cpu, BF16X3).unwrap();
    let (a, b) = (f32.text_input(), split.text_input());
    assert_eq!((a.precision, b.precision), (DType::F32, DType::F32));
    assert_eq!(b.attention_per_token_pair, 2.0 * a.attention_per_token_pair);
}

#[test]
fn bf16x3_products_are_refused_where_the_cpu_has_no_amx() {
    let test = "bf16x3_products_are_refused_where_the_cpu_has_no_amx";
    if MatmulPrecision::Bf16x3.available() {
        kernels::cuda::report_skip(test, "this CPU has AMX");
        return;
    }
    let dir = synthetic(test, &SyntheticSpec::default());
    let err = Encoder::load_with(&dir.0, &Device::Cpu, BF16X3)
        .err()
        .expect("bf16x3 products refused")
        .to_string();
    assert!(err.contains("AMX"), "{err}");
}
