//! Fuzz targets: every decoder a client (or a trainer, or a model folder) reaches, each as
//! a function of arbitrary bytes that panics when an invariant breaks. The coverage-guided
//! fuzzer in `fuzz/` (libFuzzer, `scripts/fuzz.sh`) calls them; the tests below replay the
//! committed corpus and a few thousand deterministic mutations of it in every
//! `cargo test`. What each target asserts, and why, is in `docs/fuzzing.md`:
//!
//! - no panic, on any input;
//! - a refused input is a client error: the `ApiError` it becomes answers 4xx, never 5xx
//!   (a model folder's loaders answer `LoadError`s, and a tokenizer must never fail on
//!   text, which the HTTP layer would answer with 500);
//! - what a decoder returns is no larger than its input allows ([`output_bounds`] per
//!   target, checked here), and the memory it holds at its peak is within
//!   [`memory_bound`] of the input (checked by the fuzz binary's counting allocator).
//!
//! Nothing here runs in the server; the module is public (and hidden) only so that the fuzz
//! crate, a separate workspace, can call it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use models::encoder::synthetic::{SyntheticSpec, write_synthetic};
use models::{InputKind, TextInput, TextTokenizer};

use crate::config::ModelSettings;
use crate::error::ApiError;
use crate::http::admin::{LogChange, SloChange};
use crate::http::content_coding;
use crate::protocol::{Datatype, InferRequest, binary, json_de};
use crate::validate::{Signature, ValidInput, ValidRequest, validate};

use text::tokenize_all;
pub use text::{embeddings_json, tokenize};

/// A fuzz target: panics when an invariant breaks on these bytes.
pub type Target = fn(&[u8]);

/// Every target, by the name the fuzz crate's binaries and corpus folders use.
pub const TARGETS: &[(&str, Target)] = &[
    ("infer_json", infer_json),
    ("infer_binary", infer_binary),
    ("content_coding", content_coding),
    ("admin_json", admin_json),
    ("embeddings_json", embeddings_json),
    ("coloc_line", coloc_line),
    ("checkpoint", checkpoint),
    ("encoder_config", encoder_config),
    ("encoder_weights", encoder_weights),
    ("tokenize", tokenize),
    ("grpc_infer", grpc_infer),
];

/// The most memory (bytes, at the peak, above what was held before) that one call of
/// `target` may take for an input of `len` bytes: `per_byte × len + fixed`. The fixed part
/// covers per-call set-up (a decompressor's window, a tokenizer's scratch); the per-byte
/// part is the decoder's staging (a JSON value of two bytes becomes an f64 of eight; a
/// `Vec` may hold twice what it grew to while it grows).
pub fn memory_bound(target: &str, len: usize) -> usize {
    let (per_byte, fixed) = match target {
        // JSON numbers: 2 bytes each → 8 (f64 staging) + 4 (the model's f32) while both
        // live, twice over for growth. BYTES strings: `"",` is 3 bytes → a 24-byte String.
        "infer_json" | "infer_binary" => (24, 1 << 20),
        // Protobuf: a 2-byte BYTES element becomes a 24-byte Vec, a 1-byte varint an 8-byte
        // INT64 in the binary section, then the validated values beside both.
        "grpc_infer" => (64, 1 << 20),
        // Decoded bodies are bounded by the limit (at most 1 MiB here), not the input:
        // the body as it grows, and flate2's reference decoding beside it.
        "content_coding" => (4, 4 << 20),
        "admin_json" | "embeddings_json" => (24, 1 << 20),
        "coloc_line" => (8, 1 << 20),
        "checkpoint" | "encoder_weights" => (8, 1 << 20),
        "encoder_config" => (24, 4 << 20),
        // A parsed message and its JSON form hold a few words per byte of text.
        "model_config" => (24, 4 << 20),
        // A tokenizer keeps per byte of text an offset pair and normalisation alignments.
        "tokenize" => (160, 4 << 20),
        _ => (usize::MAX / (len + 1), 0),
    };
    per_byte.saturating_mul(len).saturating_add(fixed)
}

/// The largest input each target is fuzzed with (libFuzzer's `-max_len`): past the body
/// limit of a route nothing new is reachable.
pub fn max_len(target: &str) -> usize {
    match target {
        // Past `INLINE_DECODE` (64 KiB) a body is decoded on the blocking pool.
        "content_coding" => 160 << 10,
        "checkpoint" | "encoder_weights" => 128 << 10,
        "admin_json" => 64 << 10,
        "coloc_line" => 80 << 10,
        _ => 16 << 10,
    }
}

/// What the targets share: a model's settings, the two signatures, the synthetic encoder's
/// tokenizer and configuration, a synthetic XLM-RoBERTa's SentencePiece tokenizer, and a
/// scratch folder for loaders that read files.
struct Fixtures {
    settings: ModelSettings,
    dense_width: usize,
    text: TextInput,
    tokenizer: TextTokenizer,
    sentencepiece: TextTokenizer,
    synthetic: PathBuf,
    encoder: models::encoder::EncoderConfig,
    scratch: PathBuf,
    runtime: tokio::runtime::Runtime,
}

/// The synthetic encoder's folder, the same for every call in this process.
const SEQ_LEN: usize = 48;
/// The bundled digits model takes rows of 64 values.
const DENSE_WIDTH: usize = 64;

fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("tandem-fuzz-{}", std::process::id()));
        let synthetic = root.join("synthetic");
        let spec = SyntheticSpec {
            max_seq_length: SEQ_LEN,
            ..SyntheticSpec::default()
        };
        write_synthetic(&synthetic, &spec).expect("write the synthetic encoder");
        let encoder = models::encoder::EncoderConfig::read(&synthetic).expect("synthetic config");
        let tokenizer = TextTokenizer::from_dir(&synthetic, SEQ_LEN).expect("synthetic tokenizer");
        let xlmr = root.join("xlm-roberta");
        let spec = SyntheticSpec {
            family: models::encoder::family::Family::Roberta,
            ..spec
        };
        write_synthetic(&xlmr, &spec).expect("write the synthetic XLM-RoBERTa");
        let sentencepiece = TextTokenizer::from_dir(&xlmr, SEQ_LEN).expect("its tokenizer");
        let scratch = root.join("scratch");
        std::fs::create_dir_all(&scratch).expect("scratch folder");
        Fixtures {
            settings: ModelSettings::default(),
            dense_width: DENSE_WIDTH,
            text: TextInput {
                max_seq_len: SEQ_LEN,
                vocab_size: encoder.vocab_size,
                type_vocab_size: encoder.type_vocab_size,
                normalize_by_default: true,
                pooling: encoder.pooling,
                precision: models::DType::F32,
                attention_per_token_pair: 0.01,
                sliding_window: None,
                labels: Vec::new(),
                multi_label: false,
                token_states: false,
                sparse: false,
            },
            tokenizer,
            sentencepiece,
            synthetic,
            encoder,
            scratch,
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime"),
        }
    })
}

/// Sets everything up outside any measured call (the fuzz binary's allocator counts from a
/// baseline taken after this).
pub fn init() {
    fixtures();
    // The compiled model_config.proto descriptors, decoded once a process: charged to
    // nobody's input.
    let _ = crate::triton::parse("");
}

/// A refusal must be the client's fault: a 4xx, on TEI's routes too.
fn assert_client_error(e: impl Into<ApiError>) {
    let e = e.into();
    let status = e.status();
    assert!(
        status.is_client_error(),
        "input refused with {status} (not a 4xx): {e}"
    );
    let (tei, _) = crate::http::errors::tei_kind(&e);
    assert!(tei.is_client_error(), "TEI's routes refuse with {tei}: {e}");
}

/// Bytes the infer route decodes: `Inference-Header-Content-Length` first (`None`: a plain
/// JSON body), then the body.
fn decode_and_validate(body: &[u8], header_len: Option<usize>) -> Option<ValidRequest> {
    let (json_part, binary_part) = match header_len {
        Some(n) => match binary::split(body, n) {
            Ok(parts) => parts,
            Err(e) => {
                assert_client_error(e);
                return None;
            }
        },
        None => (body, &[][..]),
    };
    let request: InferRequest = match json_de::from_slice(json_part) {
        Ok(r) => r,
        Err(e) => {
            assert_client_error(ApiError::malformed(e.to_string()));
            return None;
        }
    };
    // Each value of `data` took at least two bytes of JSON (`1,`); strings three (`"",`).
    let values: usize = request
        .inputs
        .iter()
        .filter_map(|i| i.data.as_ref().map(|d| d.len()))
        .sum();
    assert!(
        values <= json_part.len() / 2 + 1,
        "{values} values from {} bytes of JSON",
        json_part.len()
    );
    validate_decoded(request, binary_part, body.len())
}

/// A decoded request validated against the model it names (a text model for an input
/// named `text`, else the dense one); checked against the `body_len` bytes it came from.
fn validate_decoded(
    request: InferRequest,
    binary_part: &[u8],
    body_len: usize,
) -> Option<ValidRequest> {
    let f = fixtures();
    let text = request.inputs.first().is_some_and(|i| i.name == "text");
    let (input, input_name, output_name) = if text {
        (InputKind::Text(f.text.clone()), "text", "embedding")
    } else {
        (
            InputKind::Dense {
                width: f.dense_width,
            },
            "input-0",
            "output-0",
        )
    };
    let signature = Signature {
        input: &input,
        input_name,
        output_name,
    };
    match validate(request, binary_part, &signature, &f.settings) {
        Ok(valid) => {
            check_valid(&valid, body_len);
            Some(valid)
        }
        Err(e) => {
            assert_client_error(e);
            None
        }
    }
}

/// A valid request is what its model takes, and no larger than its body allowed.
fn check_valid(valid: &ValidRequest, body_len: usize) {
    let f = fixtures();
    let max_rows = f.settings.max_batch_size;
    match &valid.input {
        ValidInput::Dense { values, rows } => {
            assert!(*rows >= 1 && *rows <= max_rows, "{rows} rows");
            assert_eq!(values.len(), rows * f.dense_width);
            assert!(values.iter().all(|v| v.is_finite()), "a non-finite value");
            // Every value took at least one byte of the body (a binary BOOL or INT8).
            assert!(values.len() <= body_len, "{} values", values.len());
        }
        ValidInput::Tensors { .. } => {}
        ValidInput::Text(t) => {
            assert!(!t.texts.is_empty() && t.texts.len() <= max_rows);
            assert!(t.texts.iter().all(|t| !t.is_empty()));
            let bytes: usize = t.texts.iter().map(String::len).sum();
            assert!(bytes <= body_len, "{bytes} bytes of text from {body_len}");
            tokenize_all(&t.texts, t.truncation);
        }
    }
    assert!(valid.priority >= 1 && valid.priority <= f.settings.priority_levels);
    assert_eq!(valid.outputs.len(), 1, "the one output, once");
}

/// `POST .../infer` with a JSON body, validated against the model it names (the digits MLP,
/// or the synthetic text encoder for an input named `text`), texts tokenized.
pub fn infer_json(data: &[u8]) {
    decode_and_validate(data, None);
}

/// `POST .../infer` with the binary extension: the first two bytes (little-endian) are the
/// `Inference-Header-Content-Length`, the rest the body. The body's tail is also decoded
/// directly as every datatype and as BYTES elements.
pub fn infer_binary(data: &[u8]) {
    let Some((len, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    decode_and_validate(body, Some(u16::from_le_bytes(*len) as usize));
    // The tensor decoders on their own, for the values the JSON header rarely lets through.
    let datatype = DATATYPES[len[0] as usize % DATATYPES.len()];
    let size = datatype.size();
    let bytes = &body[..body.len() / size * size];
    match binary::decode(bytes, datatype, "x") {
        Ok(values) => {
            assert_eq!(values.len(), bytes.len() / size);
            assert!(values.iter().all(|v| v.is_finite()));
        }
        Err(e) => assert_client_error(e),
    }
    match binary::decode_bytes(body, "x") {
        Ok(texts) => {
            let text: usize = texts.iter().map(|t| t.len() + 4).sum();
            assert_eq!(text, body.len(), "every byte is a length or a text");
        }
        Err(e) => assert_client_error(e),
    }
}

const DATATYPES: [Datatype; 13] = [
    Datatype::Bool,
    Datatype::Int8,
    Datatype::Int16,
    Datatype::Int32,
    Datatype::Int64,
    Datatype::Uint8,
    Datatype::Uint16,
    Datatype::Uint32,
    Datatype::Uint64,
    Datatype::Fp16,
    Datatype::Bf16,
    Datatype::Fp32,
    Datatype::Fp64,
];

/// The body limits the coding target decodes under (the admin API's is 64 KiB).
const LIMITS: [usize; 4] = [1024, 16 << 10, 64 << 10, 1 << 20];

/// A compressed request body. The first byte picks the coding (bit 0: gzip or deflate)
/// and the limit (bits 1–2); the rest is the body, decoded as the HTTP layer decodes it (on
/// a current-thread runtime; bodies over 64 KiB on its blocking pool). What comes out is
/// compared with flate2's own multi-member reader.
pub fn content_coding(data: &[u8]) {
    use content_coding::Coding;
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let coding = if mode & 1 == 0 {
        Coding::Gzip
    } else {
        Coding::Deflate
    };
    let limit = LIMITS[(mode as usize >> 1) % LIMITS.len()];
    let f = fixtures();
    let decoded = f.runtime.block_on(content_coding::decode(
        Bytes::copy_from_slice(body),
        coding,
        limit,
    ));
    match decoded {
        Ok(out) => {
            assert!(
                out.len() <= limit,
                "{} bytes decoded past {limit}",
                out.len()
            );
            let mut reference = Vec::new();
            let read = match coding {
                Coding::Gzip => flate2::bufread::MultiGzDecoder::new(body)
                    .take(limit as u64 + 1)
                    .read_to_end(&mut reference),
                _ => flate2::bufread::ZlibDecoder::new(body)
                    .take(limit as u64 + 1)
                    .read_to_end(&mut reference),
            };
            assert!(read.is_ok(), "accepted what flate2 refuses: {read:?}");
            assert!(reference == out[..], "decoded differently from flate2");
        }
        Err(e) => {
            let status = e.status().as_u16();
            assert!(matches!(status, 400 | 413), "refused with {status}: {e}");
        }
    }
}

/// The admin API's bodies: an SLO change, applied to the default settings and validated
/// as the handler does; whatever validation lets through must be usable (a queue's
/// semaphore, a budget as a `Duration`), not panic later when a version loads. And a log
/// filter change, whose directives the fuzz binary hands to tracing's parser
/// ([`admin_log_filter`]).
pub fn admin_json(data: &[u8]) {
    if let Ok(change) = json_de::from_slice::<SloChange>(data) {
        let settings = change.overrides().apply(&ModelSettings::default());
        match settings.validate("slo") {
            Ok(()) => check_usable(&settings),
            Err(e) => assert_client_error(ApiError::invalid(e.to_string())),
        }
    }
    admin_log_filter(data);
}

/// The directives of a `PUT /admin/log` body, if it parses and the handler would pass them
/// on to tracing's parser.
pub fn admin_log_filter(data: &[u8]) -> Option<String> {
    let change = json_de::from_slice::<LogChange>(data).ok()?;
    match change.directives() {
        Ok(d) => Some(d.to_string()),
        Err(e) => {
            assert_client_error(e);
            None
        }
    }
}

/// What a loaded version does with its settings, none of which may panic.
fn check_usable(s: &ModelSettings) {
    let _ = tokio::sync::Semaphore::new(s.queue_capacity);
    let budget = s.budget();
    assert!(budget > std::time::Duration::ZERO);
    let _ = std::time::Instant::now() + budget;
    let _ = std::time::Instant::now() + std::time::Duration::from_micros(s.max_queue_delay_us);
    let _ = s.batch_limits(&InputKind::Dense { width: DENSE_WIDTH });
}

/// The co-location socket's bytes, as a trainer may send them: lines read with the
/// protocol's bounded reader (through a buffer of 1 to 64 bytes, the first byte says how
/// many, so that lines cross buffer boundaries), each parsed as a trainer's message (and a
/// gateway's, as the trainer parses them). A message that parses must survive a round trip,
/// and a hello must give a directive.
pub fn coloc_line(data: &[u8]) {
    use coloc_protocol::{Directive, GatewayMessage, MAX_LINE, TrainerMessage, read_line};
    let Some((&capacity, stream)) = data.split_first() else {
        return;
    };
    let mut reader = std::io::BufReader::with_capacity(1 + capacity as usize % 64, stream);
    let mut buf = Vec::new();
    let mut consumed = 0;
    while let Ok(Some(line)) = read_line(&mut reader, &mut buf) {
        assert!(line.len() <= MAX_LINE);
        consumed += line.len() + 1;
        assert!(consumed <= stream.len());
        if let Ok(message) = serde_json::from_str::<TrainerMessage>(&line) {
            let again = coloc_protocol::encode(&message);
            let back: TrainerMessage = serde_json::from_slice(&again)
                .unwrap_or_else(|e| panic!("{message:?} does not survive a round trip: {e}"));
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(&message)
            );
            if let TrainerMessage::Hello(hello) = &message {
                let d = Directive::unconstrained(hello);
                let line = coloc_protocol::encode(&GatewayMessage::Directive(d));
                assert!(serde_json::from_slice::<GatewayMessage>(&line).is_ok());
            }
        }
        let _ = serde_json::from_str::<GatewayMessage>(&line);
    }
}

/// An MLP version's `model.safetensors` (a trainer writes these into the repository).
pub fn checkpoint(data: &[u8]) {
    if let Ok(c) = models::Checkpoint::from_bytes(data, Path::new("fuzz/model.safetensors")) {
        assert!(!c.layers.is_empty());
        for pair in c.layers.windows(2) {
            assert_eq!(pair[0].outputs, pair[1].inputs);
        }
        let values: usize = c
            .layers
            .iter()
            .map(|l| l.inputs * l.outputs + l.outputs)
            .sum();
        // Every value took at least two bytes of the file (f16, bf16).
        assert!(
            values * 2 <= data.len(),
            "{values} values from {} bytes",
            data.len()
        );
    }
}

/// A text encoder folder's configuration files: the input split at NUL bytes (which JSON
/// text cannot hold) into `config.json`, `modules.json`, `1_Pooling/config.json`,
/// `sentence_bert_config.json` and `2_Dense/config.json` (a file absent where the input has
/// fewer parts), read as the loader reads them; a configuration that passes must describe a
/// runnable encoder, and the synthetic tokenizer must take its sequence limit.
pub fn encoder_config(data: &[u8]) {
    const FILES: [&str; 5] = [
        "config.json",
        "modules.json",
        "1_Pooling/config.json",
        "sentence_bert_config.json",
        "2_Dense/config.json",
    ];
    let dir = fixtures().scratch.join("encoder");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("1_Pooling")).expect("scratch folder");
    std::fs::create_dir_all(dir.join("2_Dense")).expect("scratch folder");
    for (file, part) in FILES.iter().zip(data.split(|&b| b == 0)) {
        std::fs::write(dir.join(file), part).expect("scratch file");
    }
    let Ok(config) = models::encoder::EncoderConfig::read(&dir) else {
        return;
    };
    assert!(config.hidden >= 1 && config.heads >= 1 && config.layers >= 1);
    assert_eq!(config.hidden % config.heads, 0);
    assert!(config.head_dim() >= 1);
    assert!(config.max_seq_len >= 1);
    assert!(config.first_position() + config.max_seq_len <= config.max_position_embeddings);
    // (Not asserted finite and positive: an f64 epsilon that passes the check can still round
    // to 0 or infinity as the f32 the encoder keeps; docs/fuzzing.md, "Findings".)
    assert!(!config.layer_norm_eps.is_nan());
    // Dense modules chain from the pooled width, each at least one value wide.
    let mut width = config.hidden;
    for m in &config.dense {
        assert_eq!(m.in_features, width, "{m:?}");
        assert!(m.out_features >= 1, "{m:?}");
        width = m.out_features;
    }
    // The loader's next steps with this configuration: the tokenizer at its limit (a
    // limit too small is refused, not a panic), the synthetic weights checked against it.
    let _ = TextTokenizer::from_dir(&fixtures().synthetic, config.max_seq_len);
    let _ = models::encoder::EncoderWeights::read(
        &fixtures().synthetic.join("model.safetensors"),
        &config,
    );
}

/// A text encoder's `model.safetensors`, checked against the synthetic encoder's
/// configuration (32 hidden, 2 layers).
pub fn encoder_weights(data: &[u8]) {
    let f = fixtures();
    let path = f.scratch.join("model.safetensors");
    std::fs::write(&path, data).expect("scratch file");
    if let Ok(w) = models::encoder::EncoderWeights::read(&path, &f.encoder) {
        assert_eq!(w.layers.len(), f.encoder.layers);
        assert_eq!(
            w.embeddings.word.len(),
            f.encoder.vocab_size * f.encoder.hidden
        );
    }
}

/// Bounds on what a target's decoder may return, by target: documented here, asserted in
/// the targets above.
pub const fn output_bounds() -> &'static [(&'static str, &'static str)] {
    &[
        (
            "infer_json",
            "values ≤ JSON bytes / 2 + 1; valid rows ≤ max_batch_size; texts' bytes ≤ body",
        ),
        (
            "infer_binary",
            "decoded values = bytes / datatype size; BYTES: lengths and texts = the bytes",
        ),
        (
            "content_coding",
            "decoded ≤ limit; equal to flate2's decoding",
        ),
        ("checkpoint", "values × 2 ≤ file bytes"),
        (
            "tokenize",
            "tokens ≤ max_seq_len (truncating); full length ≤ 3 × characters + 2; /tokenize's tokens are encode's, in order within the text; a cut from either end keeps that end's tokens",
        ),
    ]
}

/// Where the committed seeds and regression inputs of `target` live.
pub fn corpus_dirs(target: &str) -> [PathBuf; 2] {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    [
        fuzz.join("corpus").join(target),
        fuzz.join("regressions").join(target),
    ]
}

mod grpc;
mod model_config;
#[cfg(test)]
mod tests;
mod text;

pub use grpc::grpc_infer;
pub use model_config::model_config;
