//! The text encoder's forward pass against a float64 reference written from the
//! architecture in numpy (tests/python/bert_reference.py, run with $TANDEM_PYTHON), on a
//! tiny random BERT, DistilBERT, MPNet and XLM-RoBERTa written here (no download) and on
//! all-MiniLM-L6-v2 (fetched by scripts/fetch-models.sh; $TANDEM_MINILM_DIR or the cache).
//! The same bodies run on the CPU and, where a device exists, on CUDA. A test whose model
//! or Python is absent says `SKIPPED <test>: <reason>`, unless TANDEM_REQUIRE_TOOLS is set,
//! when it fails.

use kernels::{DType, Device};
use models::encoder::family::Family;
use models::encoder::synthetic::SyntheticSpec;
use models::encoder::{Encoded, Encoder, PackedTokens, Pooling, TextTokenizer, l2_normalize_rows};

use crate::support::embeddings::{
    assert_cosines, check_synthetic, check_synthetic_packing, embed, encode_all, pack,
    random_sequences, reference, worst_relative_difference,
};
use crate::support::{TempDir, minilm_dir, on_every_device, python, run_python, synthetic};

const SENTENCES: [&str; 12] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Two men pushed carts through the woods.",
    "Café crème brûlée, naïve façade — résumé.",
    "北京是中国的首都。",
    "Emoji 🙂🚀 and symbols ∑ ≠ ∞",
    "x",
    "",
    "The quick brown fox jumps over the lazy dog, again and again, until the dog finally \
     gets up, stretches, and wanders off to find a quieter place to sleep in the afternoon sun.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong and Buzz Aldrin walked on its \
     surface while Michael Collins orbited above in the command module Columbia.",
];

fn long_text() -> String {
    "Attention is computed per sequence on its own length, so a long input costs its tokens. "
        .repeat(30)
}

// ---------------------------------------------------------------------------------------
// all-MiniLM-L6-v2.

fn minilm_texts(tokenizer: &TextTokenizer) -> Vec<Encoded> {
    let mut seqs = encode_all(tokenizer, &SENTENCES);
    let long = long_text();
    seqs.push(tokenizer.encode(&long, true).unwrap());
    seqs.push(
        tokenizer
            .encode_pair("How many people live in Berlin?", &long, true)
            .unwrap(),
    );
    seqs
}

fn check_minilm_f32(device: &Device, test: &str) {
    let (Some(dir), Some(python)) = (minilm_dir(test), python(test)) else {
        return;
    };
    let mut encoder = Encoder::load(&dir, device).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let seqs = minilm_texts(&tokenizer);
    assert_eq!(
        seqs.last().unwrap().len(),
        256,
        "the long pair is truncated to 256"
    );
    let got = embed(&mut encoder, &seqs);
    let want = reference(&python, &dir, &seqs, Pooling::Mean);
    assert_cosines(&got, &want, 0.99999, &format!("{test} {device:?}"));
}

fn check_minilm_16bit(device: &Device, test: &str) {
    let (Some(dir), Some(python)) = (minilm_dir(test), python(test)) else {
        return;
    };
    let tokenizer = TextTokenizer::from_dir(&dir, 256).unwrap();
    let seqs = minilm_texts(&tokenizer);
    let want = reference(&python, &dir, &seqs, Pooling::Mean);
    for dtype in ["F16", "BF16"] {
        let copy = TempDir::new(&format!("{}-{dtype}", test.replace("::", "-")));
        let args = [
            "convert",
            dir.to_str().unwrap(),
            copy.0.to_str().unwrap(),
            dtype,
        ];
        run_python(&python, &args, b"");
        let mut encoder = Encoder::load(&copy.0, device).unwrap();
        let got = embed(&mut encoder, &seqs);
        assert_cosines(&got, &want, 0.999, &format!("{test} {device:?} {dtype}"));
    }
}

fn check_minilm_packing(device: &Device, test: &str) {
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load(&dir, device).unwrap();
    let lengths = [
        37, 1, 2, 256, 3, 5, 8, 13, 16, 17, 24, 31, 32, 33, 47, 64, 65, 100, 127, 128, 129, 200,
        255, 9, 10, 11, 12,
    ];
    let seqs = random_sequences(&lengths, 1000, 30000, 101, 102);
    let together = embed(&mut encoder, &seqs);
    let mut alone = Vec::new();
    for s in &seqs {
        alone.extend(embed(&mut encoder, std::slice::from_ref(s)));
    }
    let worst = worst_relative_difference(&together, &alone, encoder.hidden());
    assert!(
        worst <= 1e-5,
        "{test} {device:?}: packed and alone differ by {worst:e}"
    );
}

fn check_minilm_pair_score(device: &Device, test: &str) {
    let Some(dir) = minilm_dir(test) else { return };
    let mut encoder = Encoder::load(&dir, device).unwrap();
    assert!(encoder.normalize_by_default());
    let tokenizer = TextTokenizer::from_dir(&dir, encoder.max_seq_len()).unwrap();
    let seqs = encode_all(&tokenizer, &SENTENCES[..2]);
    let mut out = embed(&mut encoder, &seqs);
    l2_normalize_rows(&mut out, encoder.hidden());
    let (a, b) = out.split_at(encoder.hidden());
    let score: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    assert!(
        (score - 0.7553).abs() <= 0.0005,
        "{test} {device:?}: score {score}"
    );
}

// ---------------------------------------------------------------------------------------
// Every check on every device.

on_every_device!(synthetic_f32_mean, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec::default()
));
on_every_device!(synthetic_bert_prefix_cls, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        prefixed: true,
        pooling: Pooling::Cls,
        seed: 8,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_f16, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        dtype: DType::F16,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_bf16, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        dtype: DType::BF16,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_xlm_roberta_mean, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        family: Family::Roberta,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_xlm_roberta_prefixed_cls_bf16, |device, test| {
    check_synthetic(
        device,
        test,
        SyntheticSpec {
            family: Family::Roberta,
            prefixed: true,
            pooling: Pooling::Cls,
            dtype: DType::BF16,
            seed: 9,
            ..SyntheticSpec::default()
        },
    )
});
on_every_device!(synthetic_distilbert_mean, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        family: Family::DistilBert,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_distilbert_prefixed_cls_f16, |device, test| {
    check_synthetic(
        device,
        test,
        SyntheticSpec {
            family: Family::DistilBert,
            prefixed: true,
            pooling: Pooling::Cls,
            dtype: DType::F16,
            seed: 10,
            ..SyntheticSpec::default()
        },
    )
});
on_every_device!(synthetic_mpnet_mean, |device, test| check_synthetic(
    device,
    test,
    SyntheticSpec {
        family: Family::Mpnet,
        ..SyntheticSpec::default()
    }
));
on_every_device!(synthetic_mpnet_prefixed_cls_bf16, |device, test| {
    check_synthetic(
        device,
        test,
        SyntheticSpec {
            family: Family::Mpnet,
            prefixed: true,
            pooling: Pooling::Cls,
            dtype: DType::BF16,
            seed: 12,
            ..SyntheticSpec::default()
        },
    )
});

on_every_device!(synthetic_packing, |device, _test| check_synthetic_packing(
    device,
    SyntheticSpec::default()
));

on_every_device!(minilm_f32, |device, test| check_minilm_f32(device, test));
on_every_device!(minilm_16bit, |device, test| check_minilm_16bit(
    device, test
));
on_every_device!(minilm_packing, |device, test| check_minilm_packing(
    device, test
));
on_every_device!(minilm_pair_score, |device, test| check_minilm_pair_score(
    device, test
));

// ---------------------------------------------------------------------------------------
// What the forward pass refuses, and what it reports.

#[test]
fn invalid_batches_are_errors_not_panics() {
    let spec = SyntheticSpec::default();
    let dir = synthetic("invalid", &spec);
    let mut encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let h = encoder.hidden();
    let ok = random_sequences(&[4], 5, 60, 2, 3);
    let mut out = vec![0.0; h];
    encoder.forward_packed(&pack(&ok), &mut out).unwrap();
    let err = encoder
        .forward_packed(&pack(&ok), &mut out[..h - 1])
        .unwrap_err();
    assert!(err.to_string().contains(&format!("expected {h}")), "{err}");
    let packed = |ids: Vec<u32>, type_ids: Vec<u32>, offsets: Vec<usize>| PackedTokens {
        ids,
        type_ids,
        offsets,
        states: Vec::new(),
    };
    let cases = [
        (
            packed(vec![2, 9999, 3], vec![0; 3], vec![0, 3]),
            "outside the vocabulary",
        ),
        (
            packed(vec![2, 5, 3], vec![0, 2, 0], vec![0, 3]),
            "token type id 2",
        ),
        (
            packed(vec![2, 5, 3], vec![0; 3], vec![0, 0, 3]),
            "sequence 0 has 0 tokens",
        ),
        (
            packed(vec![2, 5, 3], vec![0; 3], vec![0, 2]),
            "offsets must run",
        ),
        (
            packed(vec![2; 49], vec![0; 49], vec![0, 49]),
            "has 49 tokens, expected 1 to 48",
        ),
    ];
    for (tokens, message) in cases {
        let mut out = vec![0.0; tokens.sequences() * h];
        let err = encoder
            .forward_packed(&tokens, &mut out)
            .unwrap_err()
            .to_string();
        assert!(err.contains(message), "{err} (wanted {message:?})");
    }
    let mut none: [f32; 0] = [];
    encoder
        .forward_packed(&PackedTokens::new(), &mut none)
        .unwrap();
}

#[test]
fn flops_count_dense_layers_per_token_and_attention_per_sequence() {
    let dir = synthetic("flops", &SyntheticSpec::default());
    let encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let tokens = pack(&random_sequences(&[3, 5], 5, 60, 2, 3));
    // hidden 32, intermediate 64, 2 layers: 2·(4·32² + 2·32·64) per token, 4·32·Σn² per layer.
    let per_token = 2 * (4 * 32 * 32 + 2 * 32 * 64);
    let want = 2 * (per_token * 8 + 4 * 32 * (9 + 25));
    assert_eq!(encoder.flops(&tokens), want as u64);
}

/// ModernBERT's local layers score only the pairs within the window (4 tokens a side in the
/// synthetic model, every other layer), and its batches are costed so.
#[test]
fn modernbert_flops_and_units_count_the_window() {
    let spec = SyntheticSpec {
        family: Family::ModernBert,
        ..SyntheticSpec::default()
    };
    let dir = synthetic("modern_flops", &spec);
    let encoder = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let tokens = pack(&random_sequences(&[3, 20], 5, 60, 2, 3));
    // Pairs at most 4 apart: all 9 of the 3 tokens; 20 + 2·(19 + 18 + 17 + 16) of the 20.
    let (square, windowed) = (9 + 400, 9 + 160);
    let (h, i) = (spec.hidden, spec.intermediate);
    let dense = 2 * (4 * h * h + 3 * h * i) * 23;
    let want = spec.layers * dense + 4 * h * (square + windowed);
    assert_eq!(spec.layers, 2, "one global layer and one local");
    assert_eq!(encoder.flops(&tokens), want as u64);
    let text = encoder.text_input();
    let per_pair = text.attention_per_token_pair;
    let units = 20.0 + per_pair * (400.0 + 160.0) / 2.0;
    assert!(
        (text.units(20) - units).abs() < 1e-9,
        "{} vs {units}",
        text.units(20)
    );
}

#[test]
fn l2_normalisation_gives_unit_rows_and_leaves_zero_rows() {
    let mut rows = vec![3.0, 4.0, 0.0, 0.0, 1.0, 0.0];
    l2_normalize_rows(&mut rows, 2);
    assert_eq!(rows, vec![0.6, 0.8, 0.0, 0.0, 1.0, 0.0]);
}

// ---------------------------------------------------------------------------------------
// CUDA against the CPU, which the tests above hold to the float64 reference: needs neither
// Python nor a download, so it runs on a GPU host as it is. Sequences up to 300 tokens
// cross attention's 64-key tiles on CUDA several times; heads of 8 and 64 values.

fn check_cuda_matches_cpu(test: &str, spec: SyntheticSpec, min_cosine: f64) {
    let Some(gpu) = kernels::cuda::device_for_test(test) else {
        return;
    };
    let dir = synthetic(test, &spec);
    let mut cpu = Encoder::load(&dir.0, &Device::Cpu).unwrap();
    let mut cuda = Encoder::load(&dir.0, &Device::Cuda(gpu)).unwrap();
    let lengths: Vec<usize> = [1, 2, 5, 17, 63, 64, 65, 100, 128, 129, 200, 299, 300]
        .into_iter()
        .filter(|&n| n <= spec.max_seq_length)
        .collect();
    let seqs = random_sequences(&lengths, 5, 60, 2, 3);
    let want = embed(&mut cpu, &seqs);
    let got = embed(&mut cuda, &seqs);
    let want: Vec<Vec<f64>> = want
        .chunks_exact(cpu.hidden())
        .map(|r| r.iter().map(|v| *v as f64).collect())
        .collect();
    assert_cosines(&got, &want, min_cosine, test);
    // One at a time, too: the same vectors as in the batch.
    let alone = embed(&mut cuda, &seqs[3..4]);
    let h = cuda.hidden();
    let worst = worst_relative_difference(&alone, &got[3 * h..4 * h], h);
    assert!(
        worst <= 1e-5,
        "{test}: packed and alone differ by {worst:e}"
    );
}

fn long_spec(dtype: DType, hidden: usize, heads: usize, pooling: Pooling) -> SyntheticSpec {
    SyntheticSpec {
        hidden,
        heads,
        intermediate: 2 * hidden,
        max_position_embeddings: 320,
        max_seq_length: 300,
        dtype,
        pooling,
        ..SyntheticSpec::default()
    }
}

#[test]
fn cuda_matches_cpu_f32_heads_of_8_mean() {
    let spec = long_spec(DType::F32, 32, 4, Pooling::Mean);
    check_cuda_matches_cpu("cuda_matches_cpu_f32_heads_of_8_mean", spec, 0.99999);
}

#[test]
fn cuda_matches_cpu_f32_heads_of_64_cls() {
    let spec = long_spec(DType::F32, 128, 2, Pooling::Cls);
    check_cuda_matches_cpu("cuda_matches_cpu_f32_heads_of_64_cls", spec, 0.99999);
}

/// MPNet's bias by relative position, over distances past its last bucket (128) and
/// across CUDA's key tiles.
#[test]
fn cuda_matches_cpu_mpnet_relative_bias() {
    let spec = SyntheticSpec {
        family: Family::Mpnet,
        ..long_spec(DType::F32, 64, 4, Pooling::Mean)
    };
    check_cuda_matches_cpu("cuda_matches_cpu_mpnet_relative_bias", spec, 0.99999);
}

/// ModernBERT: rotary positions, and windows of 4 tokens a side (most of CUDA's 64-key
/// tiles lie outside a block's windows, the rest are partly masked), of 64 (a tile) and
/// 65, in f32 and bf16.
#[test]
fn cuda_matches_cpu_modernbert_window() {
    for (local_attention, dtype, min_cosine) in [
        (8, DType::F32, 0.99999),
        (128, DType::F32, 0.99999),
        (130, DType::BF16, 0.999),
    ] {
        let spec = SyntheticSpec {
            family: Family::ModernBert,
            layers: 3,
            local_attention,
            ..long_spec(dtype, 64, 2, Pooling::Mean)
        };
        let test = format!("cuda_matches_cpu_modernbert_window_{local_attention}_{dtype:?}");
        check_cuda_matches_cpu(&test, spec, min_cosine);
    }
}

#[test]
fn cuda_matches_cpu_f16_and_bf16() {
    for dtype in [DType::F16, DType::BF16] {
        let spec = long_spec(dtype, 64, 2, Pooling::Mean);
        check_cuda_matches_cpu("cuda_matches_cpu_f16_and_bf16", spec, 0.999);
    }
}
