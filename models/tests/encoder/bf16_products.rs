//! Text encoders on the CPU with bf16 products (`LoadOptions::cpu_precision`): against the
//! float64 reference of the architecture, on all-MiniLM-L6-v2 and on a synthetic model of
//! every family, within cosine 0.9999 (tighter than 16-bit weights' bar of 0.999), and not
//! equal to f32's: the layers do run in bf16. They say SKIPPED on a CPU
//! without AVX-512 BF16, where the option is refused at load (tested there).

use kernels::{DType, Device};
use models::encoder::Encoder;
use models::encoder::synthetic::SyntheticSpec;
use models::{LoadOptions, MatmulPrecision};

use crate::support::{precision, synthetic};

const BF16: LoadOptions = LoadOptions {
    cpu_precision: MatmulPrecision::Bf16,
};

/// Whether this CPU has bf16 products; says SKIPPED where it has not.
fn bf16_here(test: &str) -> bool {
    let here = MatmulPrecision::Bf16.available();
    if !here {
        kernels::cuda::report_skip(test, "no AVX-512 BF16 on this CPU");
    }
    here
}

#[test]
fn minilm_with_bf16_products_matches_the_reference() {
    let test = "minilm_with_bf16_products_matches_the_reference";
    if bf16_here(test) {
        precision::minilm_matches_the_reference(test, BF16, 0.9999, &[]);
    }
}

/// The pair scores 0.7553 ± 0.0015 with bf16 products: f32's ± 0.0005 where attention stays
/// f32, and 0.7546 where AMX runs attention's products in bf16 too. PyTorch under bf16
/// autocast, which rounds attention's operands as well, scores it 0.7540.
#[test]
fn minilm_with_bf16_products_scores_the_pair_near_f32() {
    let test = "minilm_with_bf16_products_scores_the_pair_near_f32";
    if bf16_here(test) {
        precision::minilm_scores_the_pair(test, BF16, 0.0015);
    }
}

/// A sequence packed with others gets what it gets alone, up to the order f32 sums in
/// (tiles of different heights split the sums differently), which can move a value across
/// a bf16 rounding boundary in the next layer: close in direction, not to f32's last bits.
#[test]
fn minilm_with_bf16_products_packs_as_alone() {
    let test = "minilm_with_bf16_products_packs_as_alone";
    if bf16_here(test) {
        let lengths = [
            37, 1, 2, 256, 3, 5, 8, 13, 17, 31, 33, 64, 65, 127, 129, 200, 9,
        ];
        precision::minilm_packs_as_alone(test, BF16, &lengths, 0.99999);
    }
}

/// Heads of 16 values, which AMX's attention takes where the CPU has it.
#[test]
fn every_family_with_bf16_products_matches_the_reference() {
    let test = "every_family_with_bf16_products_matches_the_reference";
    if bf16_here(test) {
        precision::every_family_matches_the_reference(test, BF16, 2, 0.9999);
    }
}

/// What the server reads from the model: `/info`'s dtype, and the weight of attention in
/// a batch's cost, which grows against the dense layers as bf16 speeds them up (twice with
/// AVX-512 BF16, six times on AMX's tiles) and shrinks where attention's products run on
/// AMX too (twice as fast, for heads of a multiple of 16 values).
#[test]
fn bf16_products_are_reported_and_weigh_attention_by_their_speedup() {
    let test = "bf16_products_are_reported_and_weigh_attention_by_their_speedup";
    if !bf16_here(test) {
        return;
    }
    let dense = MatmulPrecision::Bf16.dense_speedup();
    assert!(dense == 2.0 || dense == 6.0, "{dense}");
    // Heads of 8 values (AMX's attention takes none) and of 16.
    for (heads, attention) in [(4, 1.0), (2, if dense == 6.0 { 2.0 } else { 1.0 })] {
        let spec = SyntheticSpec {
            heads,
            ..SyntheticSpec::default()
        };
        let dir = synthetic(&format!("{test}-{heads}"), &spec);
        let f32 = Encoder::load(&dir.0, &Device::Cpu).unwrap();
        let bf16 = Encoder::load_with(&dir.0, &Device::Cpu, BF16).unwrap();
        let (a, b) = (f32.text_input(), bf16.text_input());
        assert_eq!((a.precision, b.precision), (DType::F32, DType::BF16));
        assert_eq!(
            b.attention_per_token_pair,
            dense / attention * a.attention_per_token_pair,
            "{heads} heads"
        );
        assert_eq!(bf16.output_width(), f32.output_width());
    }
}

#[test]
fn bf16_products_are_refused_where_the_cpu_has_none() {
    let test = "bf16_products_are_refused_where_the_cpu_has_none";
    if MatmulPrecision::Bf16.available() {
        kernels::cuda::report_skip(test, "this CPU has AVX-512 BF16");
        return;
    }
    let dir = synthetic(test, &SyntheticSpec::default());
    let err = Encoder::load_with(&dir.0, &Device::Cpu, BF16)
        .err()
        .expect("bf16 products refused")
        .to_string();
    assert!(err.contains("AVX-512 BF16"), "{err}");
}
