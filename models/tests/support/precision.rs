//! The checks a CPU precision other than f32 (`LoadOptions::cpu_precision`) must pass, shared
//! by the bf16 and bf16x3 tests: all-MiniLM-L6-v2 against the float64 reference, its pair
//! score, packing, and every family's synthetic model.

use kernels::{DType, Device};
use models::LoadOptions;
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoder, Pooling, TextTokenizer, l2_normalize_rows};

use super::embeddings::{
    assert_cosines, check_synthetic_with, cosine, embed, encode_all, random_sequences, reference,
};
use super::{minilm_dir, python};

const TEXTS: [&str; 6] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "Café crème brûlée, naïve façade — résumé.",
    "北京是中国的首都。",
    "x",
    "",
];

/// all-MiniLM-L6-v2 loaded with `options` is within `min_cosine` of the reference on
/// [`TEXTS`] and a 256-token text, embedded together and (the texts `alone`) one at a time,
/// and not equal to f32's: the layers do run in that precision.
pub fn minilm_matches_the_reference(
    test: &str,
    options: LoadOptions,
    min_cosine: f64,
    alone: &[usize],
) {
    let (Some(dir), Some(python)) = (minilm_dir(test), python(test)) else {
        return;
    };
    let mut encoder = Encoder::load_with(&dir, &Device::Cpu, options).unwrap();
    assert_eq!(encoder.cpu_precision(), options.cpu_precision);
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let mut seqs = encode_all(&tokenizer, &TEXTS);
    let long = "Attention is computed per sequence on its own length. ".repeat(40);
    seqs.push(tokenizer.encode(&long, true).unwrap());
    assert_eq!(seqs.last().unwrap().len(), 256);
    let want = reference(&python, &dir, &seqs, Pooling::Mean);
    let got = embed(&mut encoder, &seqs);
    assert_cosines(&got, &want, min_cosine, test);
    for &i in alone {
        let one = embed(&mut encoder, &seqs[i..i + 1]);
        assert_cosines(&one, &want[i..i + 1], min_cosine, test);
    }
    let mut f32 = Encoder::load(&dir, &Device::Cpu).unwrap();
    let exact = embed(&mut f32, &seqs);
    let moved = got.iter().zip(&exact).filter(|(a, b)| a != b).count();
    assert!(
        moved > got.len() / 2,
        "only {moved} values differ from f32's"
    );
}

/// all-MiniLM-L6-v2 loaded with `options` scores "A man is eating food." / "A man is eating a
/// piece of bread." within `within` of f32's 0.7553.
pub fn minilm_scores_the_pair(test: &str, options: LoadOptions, within: f32) {
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load_with(&dir, &Device::Cpu, options).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let mut out = embed(&mut encoder, &encode_all(&tokenizer, &TEXTS[..2]));
    l2_normalize_rows(&mut out, encoder.hidden());
    let (a, b) = out.split_at(encoder.hidden());
    let score: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    assert!((score - 0.7553).abs() <= within, "score {score}");
}

/// Random sequences of `lengths` packed together get what each gets alone, within
/// `min_cosine`.
pub fn minilm_packs_as_alone(test: &str, options: LoadOptions, lengths: &[usize], min_cosine: f64) {
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load_with(&dir, &Device::Cpu, options).unwrap();
    let seqs = random_sequences(lengths, 1000, 30000, 101, 102);
    let together = embed(&mut encoder, &seqs);
    let h = encoder.hidden();
    for (i, (s, p)) in seqs.iter().zip(together.chunks_exact(h)).enumerate() {
        let alone = embed(&mut encoder, std::slice::from_ref(s));
        let alone: Vec<f64> = alone.iter().map(|&v| v as f64).collect();
        let c = cosine(p, &alone);
        let len = lengths[i];
        assert!(c >= min_cosine, "sequence {i} of {len} tokens: cosine {c}");
    }
}

/// A synthetic model of every family, in several weight formats and poolings, with `heads`
/// heads (2 are heads of 16 values, which AMX's attention takes), loaded with `options`:
/// within `min_cosine` of the reference.
pub fn every_family_matches_the_reference(
    test: &str,
    options: LoadOptions,
    heads: usize,
    min_cosine: f64,
) {
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
        let spec = SyntheticSpec {
            family,
            dtype,
            pooling,
            seed,
            heads,
            ..SyntheticSpec::default()
        };
        let case = format!("{test}-{family:?}");
        check_synthetic_with(&Device::Cpu, &case, spec, options, min_cosine);
    }
}
