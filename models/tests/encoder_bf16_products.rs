//! Text encoders on the CPU with bf16 products (`LoadOptions::cpu_precision`): against the
//! float64 reference of the architecture, on all-MiniLM-L6-v2 and on a synthetic model of
//! every family, within cosine 0.9999 (tighter than 16-bit weights' bar of 0.999), and not
//! equal to f32's: the layers do run in bf16. They say SKIPPED on a CPU
//! without AVX-512 BF16, where the option is refused at load (tested there).

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoder, Pooling, TextTokenizer, l2_normalize_rows};
use models::{LoadOptions, MatmulPrecision};

mod support;

use support::embeddings::{
    assert_cosines, check_synthetic_with, cosine, embed, encode_all, random_sequences, reference,
};
use support::{minilm_dir, python, synthetic};

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

const TEXTS: [&str; 6] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "Café crème brûlée, naïve façade — résumé.",
    "北京是中国的首都。",
    "x",
    "",
];

#[test]
fn minilm_with_bf16_products_matches_the_reference() {
    let test = "minilm_with_bf16_products_matches_the_reference";
    if !bf16_here(test) {
        return;
    }
    let (Some(dir), Some(python)) = (minilm_dir(test), python(test)) else {
        return;
    };
    let mut encoder = Encoder::load_with(&dir, &Device::Cpu, BF16).unwrap();
    assert_eq!(encoder.precision(), DType::BF16);
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let mut seqs = encode_all(&tokenizer, &TEXTS);
    let long = "Attention is computed per sequence on its own length. ".repeat(40);
    seqs.push(tokenizer.encode(&long, true).unwrap());
    assert_eq!(seqs.last().unwrap().len(), 256);
    let got = embed(&mut encoder, &seqs);
    let want = reference(&python, &dir, &seqs, Pooling::Mean);
    assert_cosines(&got, &want, 0.9999, test);
    let mut f32 = Encoder::load(&dir, &Device::Cpu).unwrap();
    let exact = embed(&mut f32, &seqs);
    let moved = got.iter().zip(&exact).filter(|(a, b)| a != b).count();
    assert!(
        moved > got.len() / 2,
        "only {moved} values differ from f32's"
    );
}

/// The pair scores 0.7553 ± 0.0015 with bf16 products: f32's ± 0.0005 where attention stays
/// f32, and 0.7546 where AMX runs attention's products in bf16 too. PyTorch under bf16
/// autocast, which rounds attention's operands as well, scores it 0.7540.
#[test]
fn minilm_with_bf16_products_scores_the_pair_near_f32() {
    let test = "minilm_with_bf16_products_scores_the_pair_near_f32";
    if !bf16_here(test) {
        return;
    }
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load_with(&dir, &Device::Cpu, BF16).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let mut out = embed(&mut encoder, &encode_all(&tokenizer, &TEXTS[..2]));
    l2_normalize_rows(&mut out, encoder.hidden());
    let (a, b) = out.split_at(encoder.hidden());
    let score: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    assert!((score - 0.7553).abs() <= 0.0015, "score {score}");
}

/// A sequence packed with others gets what it gets alone, up to the order f32 sums in
/// (tiles of different heights split the sums differently), which can move a value across
/// a bf16 rounding boundary in the next layer: close in direction, not to f32's last bits.
#[test]
fn minilm_with_bf16_products_packs_as_alone() {
    let test = "minilm_with_bf16_products_packs_as_alone";
    if !bf16_here(test) {
        return;
    }
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load_with(&dir, &Device::Cpu, BF16).unwrap();
    let lengths = [
        37, 1, 2, 256, 3, 5, 8, 13, 17, 31, 33, 64, 65, 127, 129, 200, 9,
    ];
    let seqs = random_sequences(&lengths, 1000, 30000, 101, 102);
    let together = embed(&mut encoder, &seqs);
    let mut alone = Vec::new();
    for s in &seqs {
        alone.extend(embed(&mut encoder, std::slice::from_ref(s)));
    }
    let h = encoder.hidden();
    for (i, (p, a)) in together
        .chunks_exact(h)
        .zip(alone.chunks_exact(h))
        .enumerate()
    {
        let a: Vec<f64> = a.iter().map(|&v| v as f64).collect();
        let c = cosine(p, &a);
        assert!(
            c >= 0.99999,
            "sequence {i} of {} tokens: cosine {c}",
            lengths[i]
        );
    }
}

#[test]
fn every_family_with_bf16_products_matches_the_reference() {
    let test = "every_family_with_bf16_products_matches_the_reference";
    if !bf16_here(test) {
        return;
    }
    let families = [
        (Family::Bert, DType::F32, Pooling::Mean),
        (Family::Roberta, DType::BF16, Pooling::Cls),
        (Family::DistilBert, DType::F16, Pooling::Mean),
        (Family::Mpnet, DType::F32, Pooling::Cls),
        (Family::ModernBert, DType::F32, Pooling::Mean),
        (Family::NomicBert, DType::F32, Pooling::Mean),
        (Family::Gte, DType::BF16, Pooling::Cls),
    ];
    for (seed, (family, dtype, pooling)) in (40..).zip(families) {
        // Heads of 16 values, which AMX's attention takes where the CPU has it.
        let spec = SyntheticSpec {
            family,
            dtype,
            pooling,
            seed,
            heads: 2,
            ..SyntheticSpec::default()
        };
        let case = format!("{test}-{family:?}");
        check_synthetic_with(&Device::Cpu, &case, spec, BF16, 0.9999);
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
