//! `TextTokenizer` against Python's `tokenizers` (tests/python/tokenizer_parity.py, run
//! with $TANDEM_PYTHON) on all-MiniLM-L6-v2's own tokenizer.json (WordPiece), the synthetic
//! XLM-RoBERTa's (SentencePiece Unigram) and a RoBERTa byte-level BPE trained here: single
//! texts and pairs in many scripts, accents, emoji, odd whitespace and control characters,
//! and inputs past the limit with and without truncation. And, with no download, what the
//! wrapper itself promises: padding and truncation replaced, refusals that say how long the
//! input was.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::minilm_dir;
use crate::support::parity::{python_for, python_ids};
use models::encoder::family::Family;
use models::encoder::synthetic::{SyntheticSpec, write_synthetic};
use models::encoder::{EncodeError, Encoded, TOKEN_COUNT_LIMIT, TextTokenizer, Truncation};

const TEXTS: &[&str] = &[
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "HELLO WORLD, Hello World, hello world",
    "iPhone, eBay, McDonald's and O'Reilly",
    "Café crème brûlée, naïve façade — résumé, coöperate",
    "e\u{301}te\u{301} (combining accents) vs été",
    "Straße, Fußgänger, ÄÖÜ äöü",
    "İstanbul ıi ŞşĞğ",
    "¿Dónde está la biblioteca? ¡Allí!",
    "Ελληνικά γράμματα: αβγδ ΑΒΓΔ",
    "Русский текст с ёжиком",
    "العربية من اليمين إلى اليسار",
    "עברית עם ניקוד",
    "हिन्दी पाठ यहाँ है",
    "ภาษาไทยไม่มีช่องว่าง",
    "日本語のテキストとカタカナ、ひらがな",
    "한국어 텍스트입니다",
    "北京是中国的首都。上海是最大的城市。",
    "Mixed 中文 and English 混合",
    "Emoji 🙂🚀🎉 and more 😂😂😂",
    "Family 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵, skin tones 👍🏽",
    "Math ∑ ∫ ≠ ≤ ∞ √2 π ≈ 3.14159",
    "Currency €100, £50, ¥1000, $3.50, ₹20",
    "https://example.com/path?q=1&r=two#frag",
    "mail me at someone.name+tag@example.co.uk",
    "fn main() { println!(\"{}\", x[0] * 2); }",
    "1,234,567.89 and 2024-11-30 at 12:34:56",
    "!!!???...,,,;;;:::",
    "“Smart quotes” and ‘single’ ones — dashes – and … ellipsis",
    "ﬁnance ﬂow (ligatures) and ＦＵＬＬ ｗｉｄｔｈ",
    "soft\u{ad}hyphen and zero\u{200b}width and bom\u{feff}here",
    "non\u{a0}breaking\u{a0}spaces and ideographic\u{3000}space",
    "tabs\tand\tnewlines\nand\r\nwindows lines",
    "   leading and trailing spaces   ",
    "multiple     inner      spaces",
    "control \u{7} bell \u{1b} escape \u{0} nul",
    "",
    " ",
    "\n\t\r",
    "x",
    "a",
    "[CLS] [SEP] [MASK] [PAD] [UNK] literal special tokens",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosispneumonoultramicroscopicsilicovolcanoconiosispneumonoultramicroscopicsilicovolcanoconiosis",
    "The cat sat on the mat. The dog sat on the log. The frog sat on the bog.",
    "Don't, can't, won't, shouldn't've, y'all",
    "#hashtag @mention $TICKER %percent ^caret &amp; *star",
    "C++ C# F# .NET node.js Vue.js",
    "3.5mm 10kg 5km/h 100°C -40°F",
    "Ünïcödé Ñoño Øresund Åland Ærø",
    "Tiếng Việt có dấu",
    "Ελληνικά και English και 日本語 μαζί",
    "Zalgo t̷̢̧e̴̡x̸̨t̵",
    "\u{2028}line separator\u{2029}paragraph separator",
    "Repeated words words words words words words",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 100000",
];

const PAIRS: &[(&str, &str)] = &[
    (
        "How many people live in Berlin?",
        "Berlin has a population of 3,520,031 registered inhabitants.",
    ),
    (
        "What is the capital of France?",
        "Paris is the capital and most populous city of France.",
    ),
    ("", "An empty first text"),
    ("An empty second text", ""),
    ("日本の首都は？", "東京は日本の首都です。"),
    ("emoji 🙂", "more emoji 🚀🎉"),
    ("Café?", "Crème brûlée."),
    ("query", "passage with\ttabs\nand newlines"),
];

fn long_text(words: usize) -> String {
    let base = [
        "retrieval",
        "augmented",
        "generation",
        "needs",
        "fast",
        "embeddings",
        "for",
        "every",
        "passage,",
        "naïvely",
        "über",
        "東京",
        "🙂",
    ];
    (0..words)
        .map(|i| base[i % base.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every case, each once with truncation and once without: (a, b).
fn cases() -> Vec<(String, Option<String>)> {
    let mut cases: Vec<(String, Option<String>)> =
        TEXTS.iter().map(|t| (t.to_string(), None)).collect();
    cases.extend(
        PAIRS
            .iter()
            .map(|(a, b)| (a.to_string(), Some(b.to_string()))),
    );
    for words in [100, 260, 1000] {
        cases.push((long_text(words), None));
    }
    // Long texts are tokenized a piece at a time: every script, accent, emoji and odd space
    // of the texts above, run on for thousands of tokens, some with no whitespace between.
    cases.push((TEXTS.join(" ").repeat(4), None));
    cases.push((TEXTS.concat().repeat(4), None));
    // Long texts whose pieces are cut at runs of spaces and at newlines after a space.
    cases.push((long_text(1200).replace(' ', "  "), None));
    cases.push((long_text(1200).replace(' ', "\n "), None));
    // A long run of spaces near the kept end: the piece holding it has few tokens, so the
    // kept tokens come from two pieces (in order, read from either end).
    let spaces = " ".repeat(1500);
    cases.push((format!("{}{spaces}the very end.", long_text(400)), None));
    cases.push((format!("The very start{spaces}{}", long_text(400)), None));
    // Pairs past the limit: one long text, and both long (longest-first cuts both).
    cases.push(("a short question?".into(), Some(long_text(400))));
    cases.push((long_text(300), Some("a short passage".into())));
    cases.push((long_text(200), Some(long_text(180))));
    // The second longer (it keeps the odd token of an odd room), texts of many pieces, and
    // the shorter text fitting in half the room while the longer does not.
    cases.push((long_text(180), Some(long_text(200))));
    cases.push((long_text(3000), Some(TEXTS.concat().repeat(4))));
    cases.push((long_text(100), Some(long_text(2000))));
    cases.push((long_text(2000), Some(long_text(2001))));
    cases
}

#[test]
fn ids_match_python_tokenizers_on_varied_texts_and_pairs() {
    let test = "ids_match_python_tokenizers_on_varied_texts_and_pairs";
    let Some(dir) = minilm_dir(test) else { return };
    let Some(python) = python_for(test) else {
        return;
    };
    assert_parity(&python, &dir, 256);
}

#[test]
fn ids_match_python_tokenizers_for_xlm_roberta_sentencepiece() {
    let test = "ids_match_python_tokenizers_for_xlm_roberta_sentencepiece";
    let Some(python) = python_for(test) else {
        return;
    };
    let dir = crate::support::synthetic(
        "parity-xlmr",
        &SyntheticSpec {
            family: Family::Roberta,
            max_position_embeddings: 300,
            ..SyntheticSpec::default()
        },
    );
    assert_parity(&python, &dir.0, 256);
}

#[test]
fn ids_match_python_tokenizers_for_roberta_byte_level_bpe() {
    let test = "ids_match_python_tokenizers_for_roberta_byte_level_bpe";
    let Some(python) = python_for(test) else {
        return;
    };
    let dir = crate::support::TempDir::new("parity-roberta-bpe");
    let corpus: Vec<String> = TEXTS
        .iter()
        .chain(PAIRS.iter().flat_map(|(a, b)| [a, b]))
        .map(|t| t.to_string())
        .chain([long_text(200)])
        .collect();
    let request = serde_json::json!({"corpus": corpus, "vocab_size": 600});
    let path = dir.0.join("tokenizer.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/tokenizer_parity.py");
    let mut child = Command::new(&python)
        .arg(script)
        .args(["train-roberta-bpe", path.to_str().unwrap()])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    (child.stdin.take().unwrap())
        .write_all(request.to_string().as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "training the BPE failed");
    let tokenizer = assert_parity(&python, &dir.0, 256);
    assert_eq!(tokenizer.special_ends(), (&[0][..], &[2][..]));
    let pair = tokenizer.encode_pair("a", "b", false).unwrap();
    assert_eq!(
        pair.type_ids,
        vec![0; pair.len()],
        "RoBERTa has one token type"
    );
    assert_eq!(tokenizer.pair_type_ids_below(), 1);
}

/// Every case of [`cases`], truncated at `max` from either side and not truncated, gives
/// the ids Python's `tokenizers` gives with `dir`'s tokenizer.json.
fn assert_parity(python: &Path, dir: &Path, max: usize) -> TextTokenizer {
    let tokenizer = TextTokenizer::from_dir(dir, max).unwrap();
    let cases = cases();
    assert!(cases.len() >= 64, "only {} cases", cases.len());
    let want = python_ids(python, &dir.join("tokenizer.json"), max, &cases);
    let mut truncated = 0;
    for (i, (a, b)) in cases.iter().enumerate() {
        let (right, left, whole) = (&want[3 * i], &want[3 * i + 1], &want[3 * i + 2]);
        let encode = |truncation: Truncation| match b {
            Some(b) => tokenizer.encode_pair(a, b, truncation),
            None => tokenizer.encode(a, truncation),
        };
        let case = format!("case {i} ({a:.40?}, {b:.40?})");
        for (truncation, cut) in [(Truncation::Right, right), (Truncation::Left, left)] {
            let got = encode(truncation).unwrap();
            let case = format!("{case}, {truncation:?}");
            assert_eq!(got.ids, cut.ids, "{case}: ids with truncation");
            assert_eq!(
                got.type_ids, cut.type_ids,
                "{case}: type ids with truncation"
            );
            assert_full_length(&case, &got, whole.ids.len(), max, || {
                b.is_some() || a.len() <= tokenizer.piece_bytes()
            });
        }
        let past_count_limit =
            |n: usize| whole.ids.len() > TOKEN_COUNT_LIMIT && n > TOKEN_COUNT_LIMIT;
        match encode(Truncation::Refuse) {
            Ok(got) => {
                assert_eq!(got.ids, whole.ids, "{case}: ids without truncation");
                assert_eq!(got.type_ids, whole.type_ids, "{case}: type ids");
            }
            Err(EncodeError::TooLong {
                tokens,
                max: m,
                counted_all,
            }) => {
                assert!(whole.ids.len() > max, "{case}: refused but fits");
                if counted_all {
                    assert_eq!((tokens, m), (whole.ids.len(), max), "{case}: refusal");
                } else {
                    assert!(
                        past_count_limit(tokens) && tokens <= whole.ids.len(),
                        "{case}"
                    );
                }
                truncated += 1;
            }
            Err(e) => panic!("{case}: {e}"),
        }
    }
    assert!(truncated >= 5, "only {truncated} cases ran past the limit");
    tokenizer
}

/// A truncated encoding's `full_len` is the whole length, except that a long text is
/// counted only just past the limit (unless `counted_in_full`: a pair, or a text of one
/// piece), and nothing past the count limit.
fn assert_full_length(
    case: &str,
    got: &Encoded,
    whole: usize,
    max: usize,
    counted_in_full: impl Fn() -> bool,
) {
    if whole > TOKEN_COUNT_LIMIT && got.full_len > TOKEN_COUNT_LIMIT {
        assert!(got.full_len <= whole, "{case}: {}", got.full_len);
    } else if counted_in_full() || !got.truncated() {
        assert_eq!(got.full_len, whole, "{case}: full length");
    } else {
        assert!(got.full_len > max && got.full_len <= whole, "{case}");
    }
}

#[test]
fn the_files_own_padding_and_truncation_are_replaced() {
    let Some(dir) = minilm_dir("the_files_own_padding_and_truncation_are_replaced") else {
        return;
    };
    // MiniLM's tokenizer.json pads and truncates at 128.
    let tokenizer = TextTokenizer::from_dir(&dir, 256).unwrap();
    let short = tokenizer.encode("A man is eating food.", false).unwrap();
    assert_eq!(
        short.ids,
        vec![101, 1037, 2158, 2003, 5983, 2833, 1012, 102]
    );
    let long = tokenizer.encode(&long_text(150), false).unwrap();
    assert!(long.len() > 128 && long.len() <= 256, "{}", long.len());
    let cut = tokenizer.encode(&long_text(1000), true).unwrap();
    assert_eq!(cut.len(), 256);
    assert_eq!(*cut.ids.last().unwrap(), 102, "the limit keeps [SEP]");
    assert!(cut.truncated());
    assert_eq!(tokenizer.special_ends(), (&[101][..], &[102][..]));
}

fn synthetic_tokenizer(tag: &str, max: usize) -> (PathBuf, TextTokenizer) {
    let dir = std::env::temp_dir().join(format!("tandem-tokenizer-{tag}-{}", std::process::id()));
    write_synthetic(&dir, &SyntheticSpec::default()).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir, max).unwrap();
    (dir, tokenizer)
}

#[test]
fn empty_text_is_cls_sep_and_pairs_get_type_ids() {
    let (dir, tokenizer) = synthetic_tokenizer("basics", 48);
    let empty = tokenizer.encode("", false).unwrap();
    assert_eq!((empty.ids, empty.type_ids), (vec![2, 3], vec![0, 0]));
    assert_eq!(tokenizer.special_ends(), (&[2][..], &[3][..]));
    let pair = tokenizer.encode_pair("a cat", "the dog", false).unwrap();
    assert_eq!(pair.ids.len(), 7);
    assert_eq!(pair.type_ids, vec![0, 0, 0, 0, 1, 1, 1]);
    assert_eq!(pair.ids.iter().filter(|&&id| id == 3).count(), 2);
    let unknown = tokenizer
        .encode("zzzzzzzzzzzzzzzzzzzzzzzzzzzz 東", false)
        .unwrap();
    assert!(unknown.ids.contains(&1), "{:?}", unknown.ids);
    let _ = std::fs::remove_dir_all(dir);
}

/// `tokens` (TEI's `/tokenize`) gives the ids `encode` gives, each with its bytes of the
/// text; `decode` gives the text back as the tokenizer normalises it.
#[test]
fn tokens_are_the_encoded_ids_with_their_bytes_and_decode_back() {
    let (dir, tokenizer) = synthetic_tokenizer("tokens", 48);
    let tokens = tokenizer.tokens("a cat  runs", true).unwrap();
    let spans: Vec<_> = tokens
        .iter()
        .map(|t| (t.id, t.text.as_str(), t.special, t.start, t.stop))
        .collect();
    let ids = tokenizer.encode("a cat  runs", false).unwrap().ids;
    assert_eq!(spans.iter().map(|s| s.0).collect::<Vec<_>>(), ids);
    assert_eq!(spans[0], (2, "[CLS]", true, None, None));
    assert_eq!(
        (spans[1].1, spans[1].3, spans[1].4),
        ("a", Some(0), Some(1))
    );
    assert_eq!(
        (spans[2].1, spans[2].3, spans[2].4),
        ("cat", Some(2), Some(5))
    );
    assert_eq!(spans.last().unwrap().1, "[SEP]");
    // Byte offsets, not characters: "é" is two bytes.
    let accented = tokenizer.tokens("é cat", false).unwrap();
    let cat = accented.last().unwrap();
    assert_eq!(
        (cat.text.as_str(), cat.start, cat.stop),
        ("cat", Some(3), Some(6))
    );
    let bare = tokenizer.tokens("a cat  runs", false).unwrap();
    assert_eq!(bare.len(), tokens.len() - 2);
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "a cat runs");
    assert!(tokenizer.decode(&ids, false).unwrap().starts_with("[CLS]"));
    // Past the counting limit: refused, as a text that long is.
    let huge = "a cat ".repeat(TOKEN_COUNT_LIMIT);
    assert!(matches!(
        tokenizer.tokens(&huge, true),
        Err(EncodeError::TooLong {
            counted_all: false,
            ..
        })
    ));
    let _ = std::fs::remove_dir_all(dir);
}

/// A tokenizer with no post-processor adds no special tokens, so there are none to expect
/// around token ids either.
#[test]
fn without_a_post_processor_there_are_no_special_ends() {
    let (dir, _) = synthetic_tokenizer("no-specials", 48);
    let path = dir.join("tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    json["post_processor"] = serde_json::Value::Null;
    std::fs::write(&path, json.to_string()).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir, 48).unwrap();
    assert_eq!(tokenizer.special_ends(), (&[][..], &[][..]));
    assert_eq!(tokenizer.encode("a cat", false).unwrap().len(), 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_huge_text_is_tokenized_only_as_far_as_its_answer_needs() {
    let (dir, tokenizer) = synthetic_tokenizer("huge", 48);
    // 4 MiB: a million words, counted for a refusal only up to the count limit.
    let huge = "a cat and the dog ".repeat(4 << 20 >> 4);
    match tokenizer.encode(&huge, false) {
        Err(
            e @ EncodeError::TooLong {
                tokens,
                max: 48,
                counted_all: false,
            },
        ) => {
            assert!(
                tokens > TOKEN_COUNT_LIMIT && tokens < 2 * TOKEN_COUNT_LIMIT,
                "{tokens}"
            );
            assert!(e.to_string().contains("more than"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // Truncated, it is its first words' tokens, as a short prefix of it gives them; cut from
    // the left, its last words', as a short suffix gives them.
    let cut = tokenizer.encode(&huge, true).unwrap();
    let prefix = tokenizer.encode(&huge[..1000], true).unwrap();
    assert_eq!((cut.len(), &cut.ids), (48, &prefix.ids));
    assert!(cut.truncated());
    let cut = tokenizer.encode(&huge, Truncation::Left).unwrap();
    let suffix = tokenizer.encode(&huge[huge.len() - 1001..], Truncation::Left);
    assert_eq!((cut.len(), &cut.ids), (48, &suffix.unwrap().ids));
    // Read from the end only as far as the cut needs: a piece or two, not a million words.
    let read = 2 * tokenizer.piece_bytes();
    assert!(cut.truncated() && cut.full_len <= read, "{}", cut.full_len);
    // Just past the piece size, a text that still fits is encoded whole, as a short one is.
    let spaced = format!("a cat{}the dog", " ".repeat(tokenizer.piece_bytes() * 3));
    let fits = tokenizer.encode(&spaced, false).unwrap();
    assert_eq!(
        fits.ids,
        tokenizer.encode("a cat the dog", false).unwrap().ids
    );
    assert_eq!(fits.full_len, fits.len());
    // Below the count limit, a refusal has the exact count.
    let many = "a ".repeat(TOKEN_COUNT_LIMIT - 10);
    match tokenizer.encode(&many, false) {
        Err(EncodeError::TooLong {
            tokens,
            counted_all: true,
            ..
        }) => assert_eq!(tokens, TOKEN_COUNT_LIMIT - 10 + 2),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn over_long_input_is_refused_with_its_length_or_truncated() {
    let (dir, tokenizer) = synthetic_tokenizer("limits", 10);
    let text = "a b c d e f g h i j k l";
    let err = tokenizer.encode(text, false).unwrap_err();
    assert_eq!(
        err,
        EncodeError::TooLong {
            tokens: 14,
            max: 10,
            counted_all: true,
        }
    );
    assert_eq!(err.to_string(), "the input has 14 tokens, at most 10 fit");
    let cut = tokenizer.encode(text, true).unwrap();
    assert_eq!((cut.len(), cut.full_len), (10, 14));
    let pair = tokenizer
        .encode_pair("a b", "c d e f g h i j", true)
        .unwrap();
    assert_eq!(pair.len(), 10);
    assert_eq!(
        pair.type_ids.iter().filter(|&&t| t == 0).count(),
        4,
        "the shorter text is kept whole"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn shared_across_threads() {
    let (dir, tokenizer) = synthetic_tokenizer("threads", 48);
    let want = tokenizer.encode("the man is eating bread", true).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..100 {
                    assert_eq!(
                        tokenizer.encode("the man is eating bread", true).unwrap(),
                        want
                    );
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_folder_without_tokenizer_json_or_with_a_tiny_limit_is_refused() {
    let (dir, _) = synthetic_tokenizer("missing", 48);
    let err = TextTokenizer::from_dir(&dir, 4).unwrap_err().to_string();
    assert!(err.contains("leaves no room"), "{err}");
    std::fs::write(dir.join("tokenizer.json"), "{not json").unwrap();
    let err = TextTokenizer::from_dir(&dir, 48).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json is not a tokenizer"), "{err}");
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let err = TextTokenizer::from_dir(&dir, 48).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json is missing"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A tokenizer without a post-processor (no special tokens, so nothing sets type ids after
/// tokenizing) still marks a pair's second text with type 1, as the `tokenizers` library
/// does, cut or not.
#[test]
fn pairs_get_type_ids_without_a_post_processor_as_the_library_gives_them() {
    let dir =
        std::env::temp_dir().join(format!("tandem-tokenizer-bertproc-{}", std::process::id()));
    write_synthetic(&dir, &SyntheticSpec::default()).unwrap();
    let path = dir.join("tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    json["post_processor"] = serde_json::Value::Null;
    std::fs::write(&path, json.to_string()).unwrap();
    let max = 12;
    let ours = TextTokenizer::from_dir(&dir, max).unwrap();
    let mut library = tokenizers::Tokenizer::from_file(&path).unwrap();
    library
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: max,
            ..Default::default()
        }))
        .unwrap();
    for (a, b) in [
        ("a cat", "the dog"),
        ("a big red cat runs", "the small dog runs fast now"),
    ] {
        let got = ours.encode_pair(a, b, true).unwrap();
        let want = library.encode((a, b), true).unwrap();
        assert_eq!(got.ids, want.get_ids(), "{a:?} {b:?}");
        assert_eq!(got.type_ids, want.get_type_ids(), "{a:?} {b:?}");
        assert!(got.type_ids.contains(&1), "{got:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
