//! Held to serde_json: every document, valid or not, must be accepted or refused as
//! serde_json does, and accepted ones must give the same value (floats within two units
//! in the last place, serde_json's own default parse being within one of the truth).

use super::number::{eight_digits, leading_digits};
use super::*;
use crate::protocol::{Datatype, InferRequest};
use models::rng::SplitMix64;
use serde_json::Value;

fn same_value(ours: &Value, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) => {
            if a.is_f64() != b.is_f64() || a.is_u64() != b.is_u64() {
                return false;
            }
            match (a.as_f64(), b.as_f64()) {
                (Some(x), Some(y)) if a.is_f64() => ulps_apart(x, y) <= 2,
                _ => a == b,
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, x)| b.get(k).is_some_and(|y| same_value(x, y)))
        }
        _ => ours == theirs,
    }
}

fn ulps_apart(x: f64, y: f64) -> u64 {
    if x == y {
        return 0;
    }
    if x.is_sign_negative() != y.is_sign_negative() {
        return u64::MAX;
    }
    x.to_bits().abs_diff(y.to_bits())
}

fn agree(doc: &[u8]) {
    let ours = from_slice::<Value>(doc);
    let theirs = serde_json::from_slice::<Value>(doc);
    let shown = String::from_utf8_lossy(doc);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert!(same_value(a, b), "{shown:?}: {a} vs serde_json {b}"),
        (Err(_), Err(_)) => {}
        _ => panic!("{shown:?}: ours {ours:?}, serde_json {theirs:?}"),
    }
}

#[test]
fn a_corpus_of_edge_cases_is_read_as_serde_json_reads_it() {
    let corpus: &[&str] = &[
        "0",
        "-0",
        "1",
        "-1",
        "01",
        "-01",
        "1.",
        ".5",
        "1.5",
        "-1.5",
        "1e5",
        "1E5",
        "1e+5",
        "1e-5",
        "1e",
        "1e+",
        "-",
        "--1",
        "+1",
        "0.0",
        "-0.0",
        "1.0e0",
        "0e0",
        "00",
        "1.e5",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "1e308",
        "1e309",
        "-1e309",
        "1e-400",
        "4.9e-324",
        "2.2250738585072014e-308",
        "0.49671414494514465",
        "-0.13826429843902588",
        "9007199254740993",
        "9007199254740993.0",
        "1234567890.123456789",
        "0.000000000000000000000000001234",
        "12345678901234567890e-10",
        "1e22",
        "1e23",
        "123456789e-22",
        "123456789e-23",
        "1.7976931348623157e308",
        "true",
        "false",
        "null",
        "tru",
        "nul",
        "falsey",
        "\"\"",
        "\"a\"",
        "\"\\n\\t\\\"\\\\\\/\\b\\f\\r\"",
        "\"\\u0041\"",
        "\"\\u00e9\"",
        "\"\\ud83d\\ude00\"",
        "\"\\ud83d\"",
        "\"\\ude00\"",
        "\"\\ud83dx\"",
        "\"\\u12\"",
        "\"\\x\"",
        "\"é\"",
        "\"\u{1F600}\"",
        "\"a\nb\"",
        "\"a\tb\"",
        "\"abc",
        "[]",
        "[1]",
        "[1,]",
        "[,1]",
        "[1,,2]",
        "[1 2]",
        "[",
        "]",
        "[[]]",
        "[[1],[2,3]]",
        "{}",
        "{\"a\":1}",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{a:1}",
        "{\"a\":1 \"b\":2}",
        "{1:2}",
        "{\"a\":{\"b\":[true,null,\"c\"]}}",
        "{\"a\":1,\"a\":2}",
        " \n\t\r[ 1 , 2 ]\r\n ",
        "[1] x",
        "1 2",
        "",
        " ",
        "[1]]",
        "{\"a\":1}}",
        "\u{feff}1",
        "[1e5000]",
        "[-]",
        "[0.5e-3,-7E+2,3.14159]",
        "{\"\":0}",
        "[\"\\u0000\"]",
        "NaN",
        "Infinity",
        "[1,\n2]",
    ];
    for doc in corpus {
        agree(doc.as_bytes());
    }
    agree(b"\"\xff\"");
    agree(b"\"\xc3\"");
    agree(b"[1, \"\xe2\x82\xac\"]");
}

#[test]
fn nesting_stops_where_serde_json_stops() {
    for depth in [1, 64, 127, 128, 129, 130, 1000] {
        let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        agree(doc.as_bytes());
        let doc = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        agree(doc.as_bytes());
    }
}

/// Random documents with every kind of value, number forms and whitespace.
struct Writer {
    rng: SplitMix64,
    out: String,
}

impl Writer {
    fn pick(&mut self, n: usize) -> usize {
        self.rng.below(n)
    }

    fn space(&mut self) {
        for _ in 0..self.pick(3) {
            let c = [' ', '\n', '\t', '\r'][self.pick(4)];
            self.out.push(c);
        }
    }

    fn number(&mut self) {
        let text = match self.pick(9) {
            0 => (self.rng.next_u64() >> self.pick(64)).to_string(),
            1 => format!("-{}", self.rng.next_u64() >> self.pick(64)),
            2 => {
                let x = f32::from_bits(self.rng.next_u64() as u32);
                if !x.is_finite() {
                    return self.out.push('0');
                }
                format!("{}", x as f64)
            }
            3 => format!("{:.16e}", self.rng.normal() as f64),
            4 => format!(
                "{}",
                self.rng.normal() as f64 * 10f64.powi(self.pick(40) as i32 - 20)
            ),
            5 => format!("{}e{}", self.pick(1000), self.pick(700) as i64 - 350),
            6 => format!(
                "{}.{}E+{}",
                self.pick(10),
                self.rng.next_u64() >> self.pick(64),
                self.pick(30)
            ),
            7 => format!("0.{:020}", self.rng.next_u64()),
            _ => format!("{}", self.rng.next_f64()),
        };
        self.out.push_str(&text);
    }

    fn string(&mut self) {
        self.out.push('"');
        for _ in 0..self.pick(6) {
            let piece = match self.pick(8) {
                0 => "\\n".to_string(),
                1 => "\\\"".to_string(),
                2 => format!("\\u{:04x}", self.pick(0xd000)),
                3 => "\\ud83d\\ude00".to_string(),
                4 => "é€".to_string(),
                5 => "\\\\".to_string(),
                _ => ["a", "data", "shape", " ", "/"][self.pick(5)].to_string(),
            };
            self.out.push_str(&piece);
        }
        self.out.push('"');
    }

    fn value(&mut self, depth: usize) {
        self.space();
        let kinds = if depth > 4 { 4 } else { 6 };
        match self.pick(kinds) {
            0 | 1 => self.number(),
            2 => self.string(),
            3 => {
                let literal = ["true", "false", "null"][self.pick(3)];
                self.out.push_str(literal);
            }
            4 => {
                self.out.push('[');
                for i in 0..self.pick(6) {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(depth + 1);
                }
                self.space();
                self.out.push(']');
            }
            _ => {
                self.out.push('{');
                for i in 0..self.pick(5) {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.space();
                    self.string();
                    self.space();
                    self.out.push(':');
                    self.value(depth + 1);
                }
                self.space();
                self.out.push('}');
            }
        }
        self.space();
    }
}

#[test]
fn random_documents_and_their_mutations_are_read_as_serde_json_reads_them() {
    let mut w = Writer {
        rng: SplitMix64::new(11),
        out: String::new(),
    };
    let mut mutation = SplitMix64::new(12);
    for _ in 0..3000 {
        w.out.clear();
        w.value(0);
        let doc = w.out.clone().into_bytes();
        agree(&doc);
        // A byte deleted, replaced or inserted, or the end cut off: mostly invalid, and
        // the two must agree on which.
        for _ in 0..4 {
            let mut bad = doc.clone();
            let at = mutation.below(bad.len());
            let byte = b"[]{},:\"\\-+.eE0123456789 tfnu\xff"[mutation.below(29)];
            match mutation.below(4) {
                0 => {
                    bad.remove(at);
                }
                1 => bad[at] = byte,
                2 => bad.insert(at, byte),
                _ => bad.truncate(at),
            }
            agree(&bad);
        }
    }
}

#[test]
fn numbers_are_correctly_rounded_where_promised() {
    let mut rng = SplitMix64::new(5);
    for _ in 0..200_000 {
        let x = f32::from_bits(rng.next_u64() as u32);
        if !x.is_finite() {
            continue;
        }
        // An f32 printed in full through an f64, as clients print it, comes back exactly.
        for text in [
            format!("{}", x as f64),
            format!("{:.16e}", x as f64),
            format!("{:e}", x),
        ] {
            let v: f64 = from_slice(text.as_bytes()).unwrap();
            assert_eq!((v as f32).to_bits(), x.to_bits(), "{text}");
        }
        // Any number: within one unit in the last place of the correctly rounded f64, and
        // equal to it when the mantissa has at most 15 digits.
        let y = f64::from_bits(rng.next_u64() >> 2);
        for (digits, text) in [
            (15, format!("{:.14e}", y)),
            (17, format!("{y:e}")),
            (19, format!("{:.18e}", y)),
        ] {
            let exact: f64 = text.parse().unwrap();
            if !exact.is_finite() {
                continue;
            }
            let v: f64 = from_slice(text.as_bytes()).unwrap();
            if digits == 15 {
                assert_eq!(v.to_bits(), exact.to_bits(), "{text}");
            } else {
                assert!(ulps_apart(v, exact) <= 1, "{text}: {v} vs {exact}");
            }
        }
    }
}

#[test]
fn eight_digits_at_a_time_agrees_with_one_at_a_time() {
    let mut rng = SplitMix64::new(3);
    for _ in 0..100_000 {
        let n = rng.next_u64() % 100_000_000;
        let text = format!("{n:08}");
        let word = u64::from_le_bytes(text.as_bytes().try_into().unwrap());
        assert_eq!(leading_digits(word), 8);
        assert_eq!(eight_digits(word), n);
        // Whatever follows the first non-digit, the digits before it are counted.
        let mut bytes = text.clone().into_bytes();
        let at = rng.below(8);
        for b in [
            b'/', b':', b'.', b'e', b'-', b',', 0, 0x80, 0xb0, 0xc0, 0xff,
        ] {
            bytes[at] = b;
            for later in &mut bytes[at + 1..] {
                *later = [b'0', b'9', b']', 0xff, b' '][rng.below(5)];
            }
            let word = u64::from_le_bytes(bytes.clone().try_into().unwrap());
            assert_eq!(leading_digits(word), at, "{bytes:?}");
        }
    }
}

#[test]
fn an_inference_request_decodes_as_with_serde_json() {
    let mut rng = SplitMix64::new(7);
    let values: Vec<f32> = (0..784).map(|_| rng.normal()).collect();
    let body = serde_json::json!({
        "id": "r\u{e9}q-1",
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 784], "data": values,
                    "parameters": {"binary_data_size": null}}],
        "outputs": [{"name": "output-0", "parameters": {"binary_data": true}}],
        "parameters": {"priority": 2, "timeout": 5000, "client_key": {"nested": [1, "x"]}}
    })
    .to_string();
    let mut ours: InferRequest = from_slice(body.as_bytes()).unwrap();
    let theirs: InferRequest = serde_json::from_slice(body.as_bytes()).unwrap();
    assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
    let data = ours.inputs.remove(0).data.unwrap();
    assert_eq!(data.into_model_f32(Datatype::Fp32).unwrap(), values);

    for (bad, mentions) in [
        (r#"{"inputs": [], "extra": 1}"#, "unknown field `extra`"),
        (r#"{"outputs": []}"#, "missing field `inputs`"),
        (r#"{"inputs": [{"name": 1}]}"#, "invalid type: integer `1`"),
        ("{\"inputs\":\n [}", "expected value at line 2 column 3"),
        (
            r#"{"inputs": [], "parameters": {"priority": -1}}"#,
            "invalid value",
        ),
    ] {
        let e = from_slice::<InferRequest>(bad.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains(mentions), "{bad}: {e}");
    }
}

/// An error is a data error (JSON of another shape) exactly where serde_json's is.
#[test]
fn errors_are_data_errors_where_serde_json_says_so() {
    let deep = format!(
        r#"{{"inputs": [{{"name": "a", "datatype": "FP32", "shape": [1], "data": {}{}}}]}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let bodies = [
        r#"{"inputs": [], "extra": 1}"#,
        r#"{"outputs": []}"#,
        r#"{"inputs": [{"name": 1}]}"#,
        r#"{"inputs": [], "parameters": {"priority": -1}}"#,
        r#"[1, 2]"#,
        r#"{"inputs": [], "parameters": {"priority": "high"}}"#,
        "{\"inputs\":\n [}",
        r#"{"inputs": ["#,
        r#"{"inputs": [1e400]}"#,
        r#"{"inputs": []} x"#,
        "{\"inputs\": [\"\\ud800\"]}",
        &deep,
    ];
    for body in bodies {
        let ours = from_slice::<InferRequest>(body.as_bytes()).unwrap_err();
        let theirs = serde_json::from_slice::<InferRequest>(body.as_bytes()).unwrap_err();
        let data = theirs.classify() == serde_json::error::Category::Data;
        assert_eq!(ours.is_data(), data, "{body}: {ours} / {theirs}");
    }
    // An array for a request is read through first (serde_json would read it as the
    // fields in order, and stop at the first of the wrong type): not JSON is not JSON.
    let e = from_slice::<InferRequest>(b"[1, 2").unwrap_err();
    assert!(!e.is_data(), "{e}");
}
