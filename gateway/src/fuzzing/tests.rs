use super::*;

/// SplitMix64: a fixed seed, so a failure here fails the same way every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes JSON and the binary formats are made of, for insertions.
const INTERESTING: &[&[u8]] = &[
    b"0",
    b"-1",
    b"1e400",
    b"9007199254740993",
    b"18446744073709551616",
    b"\"",
    b"\\u0000",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b":",
    b"null",
    b"true",
    b"\xff\xff\xff\x7f",
    b"\x00",
    b"\n",
    b"\xc3\xa9",
    b"\xf0\x9f\x98\x80",
    b"\"shape\":[1,64]",
    b"\"data\":[",
    b"\"BYTES\"",
    b"\"binary_data_size\":",
    b"1.5",
    b"-0",
    b"[[[[",
    b"\x1f\x8b\x08\x00",
    b"\x78\x9c",
];

/// One random edit: flip, set, insert, delete, duplicate a range, splice another seed.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>], max: usize) {
    let len = input.len();
    match rng.below(7) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = rng.next() as u8;
        }
        2 => {
            let token = INTERESTING[rng.below(INTERESTING.len())];
            let at = rng.below(len + 1);
            input.splice(at..at, token.iter().copied());
        }
        3 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(16));
            input.drain(at..at + n);
        }
        4 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            let copy = input[at..at + n].to_vec();
            let to = rng.below(len + 1);
            input.splice(to..to, copy);
        }
        5 if !seeds.is_empty() => {
            let other = &seeds[rng.below(seeds.len())];
            if !other.is_empty() {
                let from = rng.below(other.len());
                let n = 1 + rng.below((other.len() - from).min(256));
                let at = rng.below(len + 1);
                input.splice(at..at, other[from..from + n].iter().copied());
            }
        }
        _ => {
            let at = rng.below(len + 1);
            input.truncate(at);
        }
    }
    input.truncate(max);
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for dir in corpus_dirs(target) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            seeds.push(std::fs::read(&p).unwrap());
        }
    }
    seeds
}

/// Every seed, then `rounds` mutants of random seeds (a few edits each).
fn replay(target: &str, f: fn(&[u8]), rounds: usize) {
    let seeds = seeds(target);
    assert!(
        !seeds.is_empty(),
        "no seeds for {target}: run fuzz/seeds.py"
    );
    for s in &seeds {
        f(s);
    }
    let mut rng = Rng(0x7a_6e_64_65_6d ^ target.len() as u64);
    let max = max_len(target);
    for _ in 0..rounds {
        let mut input = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut input, &seeds, max);
        }
        f(&input);
    }
}

#[test]
fn every_target_has_a_bound_and_seeds() {
    for (name, _) in TARGETS {
        assert!(memory_bound(name, 1) < usize::MAX / 2, "{name}");
        assert!(!seeds(name).is_empty(), "{name}");
    }
}

#[test]
fn infer_json_survives_its_corpus_and_mutants() {
    replay("infer_json", infer_json, 4000);
}

#[test]
fn grpc_infer_survives_its_corpus_and_mutants() {
    replay("grpc_infer", grpc_infer, 4000);
}

#[test]
fn infer_binary_survives_its_corpus_and_mutants() {
    replay("infer_binary", infer_binary, 4000);
}

#[test]
fn content_coding_survives_its_corpus_and_mutants() {
    replay("content_coding", content_coding, 1000);
}

#[test]
fn admin_json_survives_its_corpus_and_mutants() {
    replay("admin_json", admin_json, 4000);
}

#[test]
fn embeddings_json_survives_its_corpus_and_mutants() {
    replay("embeddings_json", embeddings_json, 4000);
}

#[test]
fn coloc_line_survives_its_corpus_and_mutants() {
    replay("coloc_line", coloc_line, 4000);
}

#[test]
fn checkpoint_survives_its_corpus_and_mutants() {
    replay("checkpoint", checkpoint, 1000);
}

#[test]
fn encoder_config_survives_its_corpus_and_mutants() {
    replay("encoder_config", encoder_config, 300);
}

#[test]
fn encoder_weights_survives_its_corpus_and_mutants() {
    replay("encoder_weights", encoder_weights, 300);
}

#[test]
fn model_config_survives_its_corpus_and_mutants() {
    replay("model_config", model_config, 2000);
}

#[test]
fn tokenize_survives_its_corpus_and_mutants() {
    replay("tokenize", tokenize, 2000);
}
