//! The bodies of TEI's routes, read straight into what the handlers take, and TEI's
//! truncation parameters. Arrays are kept only up to [`MAX_TEXTS`] elements and the rest
//! only counted: a body of millions of tiny texts costs no more than a few times its own
//! bytes.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use models::Truncation;

use crate::error::ApiError;
use crate::http::text_handler::Named;
use crate::infer::input::MAX_TEXTS;
use crate::protocol::bounded::{Bounded, BoundedVisitor};
use crate::protocol::text_inputs::Inputs;
use crate::protocol::visit::{scalars, skip_map};

/// TEI's request, with `model` as tandem's own addition for servers of several models.
/// Other fields are ignored, as TEI ignores them: clients send some (LangChain's
/// `parameters`, `huggingface_hub`'s `encoding_format`).
#[derive(Debug, Deserialize)]
pub(crate) struct TeiRequest {
    pub(crate) inputs: Inputs,
    #[serde(default)]
    pub(crate) normalize: Option<bool>,
    #[serde(default)]
    pub(crate) truncate: Option<bool>,
    /// TEI's `Right` (the default: keep the start) or `Left` (keep the end).
    #[serde(default)]
    pub(crate) truncation_direction: Option<String>,
    /// The prompt put before each text, by its name in the model's folder.
    #[serde(default)]
    pub(crate) prompt_name: Option<String>,
    /// TEI's Matryoshka cut, for a model served to be cut ([`crate::infer::dimensions`]).
    #[serde(default)]
    pub(crate) dimensions: Option<u64>,
    #[serde(default)]
    pub(crate) model: Option<String>,
}

/// TEI's `/embed_all` and `/embed_sparse` request: [`TeiRequest`] without what only dense
/// pooled embeddings take (`normalize`, `dimensions`).
#[derive(Debug, Deserialize)]
pub(super) struct EmbedAllRequest {
    pub(super) inputs: Inputs,
    #[serde(default)]
    pub(super) truncate: Option<bool>,
    #[serde(default)]
    pub(super) truncation_direction: Option<String>,
    #[serde(default)]
    pub(super) prompt_name: Option<String>,
    #[serde(default)]
    pub(super) model: Option<String>,
}

/// Whether TEI's routes cut an over-long input when a request does not say: TEI's default
/// since 1.9 (`--auto-truncate`).
pub const TRUNCATE_BY_DEFAULT: bool = true;
/// What TEI's `truncate` (on unless a request says, [`TRUNCATE_BY_DEFAULT`]) and
/// `truncation_direction` (`Right`, the default, cuts the end off; `Left` the start) ask
/// of an over-long input.
pub fn truncation(truncate: Option<bool>, direction: Option<&str>) -> Result<Truncation, ApiError> {
    let cut = match direction {
        None | Some("Right" | "right") => Truncation::Right,
        Some("Left" | "left") => Truncation::Left,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "truncation_direction {other:?}: \"Right\" cuts the end off, \"Left\" the start"
            )));
        }
    };
    Ok(match truncate.unwrap_or(TRUNCATE_BY_DEFAULT) {
        true => cut,
        false => Truncation::Refuse,
    })
}

/// TEI's predict request; `parameters` is what `huggingface_hub` sends beside `inputs`,
/// and `model` tandem's addition for servers of several models. Other fields, here and in
/// `parameters`, are ignored, as TEI ignores them.
#[derive(Deserialize)]
pub(crate) struct PredictRequest {
    pub(crate) inputs: PredictInputs,
    #[serde(default)]
    pub(crate) truncate: Option<bool>,
    #[serde(default)]
    pub(crate) truncation_direction: Option<String>,
    #[serde(default)]
    pub(super) raw_scores: bool,
    #[serde(default)]
    pub(super) parameters: Parameters,
    #[serde(default)]
    pub(super) model: Option<String>,
}

/// The pipeline parameters of Hugging Face's text classification.
#[derive(Deserialize, Default)]
pub(super) struct Parameters {
    /// The most labels to give, best first.
    #[serde(default)]
    pub(super) top_k: Option<usize>,
    /// `"sigmoid"`, `"softmax"` or `"none"` (the logits); the model's own by default.
    #[serde(default)]
    pub(super) function_to_apply: Option<String>,
}

/// TEI's rerank request, with `model` as for predict; other fields are ignored.
#[derive(Deserialize)]
pub(crate) struct RerankRequest {
    pub(crate) query: String,
    pub(crate) texts: Bounded<String>,
    #[serde(default)]
    pub(crate) truncate: Option<bool>,
    #[serde(default)]
    pub(crate) truncation_direction: Option<String>,
    #[serde(default)]
    pub(super) raw_scores: bool,
    #[serde(default)]
    pub(super) return_text: bool,
    #[serde(default)]
    pub(super) model: Option<String>,
}

/// `inputs` of a predict request as TEI reads them: a text, a pair (an array of one or two
/// strings is one text or one pair), or an array of texts and pairs (a pair as an array of
/// two strings, a text as a string or an array of one).
#[derive(Debug, PartialEq)]
pub(crate) enum PredictInputs {
    One(Sequence),
    Many(Vec<Sequence>),
    /// An array of this many, more than [`MAX_TEXTS`].
    TooMany(usize),
    /// Anything else: a number, an object, an array holding anything but texts and pairs.
    Invalid,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Sequence {
    Text(String),
    Pair(String, String),
}

impl<'de> Deserialize<'de> for PredictInputs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PredictInputs, D::Error> {
        d.deserialize_any(PredictVisitor)
    }
}

struct PredictVisitor;

impl<'de> Visitor<'de> for PredictVisitor {
    type Value = PredictInputs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a text, a pair of texts, or an array of texts and pairs")
    }

    fn visit_str<E>(self, s: &str) -> Result<PredictInputs, E> {
        Ok(PredictInputs::One(Sequence::Text(s.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<PredictInputs, A::Error> {
        let list: Bounded<Element> = BoundedVisitor(PhantomData).visit_seq(seq)?;
        if list.count > MAX_TEXTS {
            return Ok(PredictInputs::TooMany(list.count));
        }
        let mut items = list.items.into_iter();
        Ok(match (items.next(), items.next(), items.len()) {
            (Some(Element::Text(a)), None, 0) => PredictInputs::One(Sequence::Text(a)),
            (Some(Element::Text(a)), Some(Element::Text(b)), 0) => {
                PredictInputs::One(Sequence::Pair(a, b))
            }
            (first, second, _) => {
                let all = first.into_iter().chain(second).chain(items);
                match all.map(Element::into_sequence).collect() {
                    Some(sequences) => PredictInputs::Many(sequences),
                    None => PredictInputs::Invalid,
                }
            }
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PredictInputs, A::Error> {
        skip_map(map).map(|_| PredictInputs::Invalid)
    }

    scalars!(PredictInputs::Invalid, |_| PredictInputs::Invalid);
}

/// One element of a predict array: a string, a text or pair written as an array, or
/// anything else.
enum Element {
    Text(String),
    Sequence(Sequence),
    Other,
}

impl Element {
    fn into_sequence(self) -> Option<Sequence> {
        match self {
            Element::Text(t) => Some(Sequence::Text(t)),
            Element::Sequence(s) => Some(s),
            Element::Other => None,
        }
    }
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Element, D::Error> {
        d.deserialize_any(ElementVisitor)
    }
}

struct ElementVisitor;

impl<'de> Visitor<'de> for ElementVisitor {
    type Value = Element;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a text or a pair of texts")
    }

    fn visit_str<E>(self, s: &str) -> Result<Element, E> {
        Ok(Element::Text(s.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element, A::Error> {
        let (a, b) = (seq.next_element::<Text>()?, seq.next_element::<Text>()?);
        let mut more = false;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            more = true;
        }
        Ok(match (a, b, more) {
            (Some(Text(Some(a))), None, false) => Element::Sequence(Sequence::Text(a)),
            (Some(Text(Some(a))), Some(Text(Some(b))), false) => {
                Element::Sequence(Sequence::Pair(a, b))
            }
            _ => Element::Other,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Element, A::Error> {
        skip_map(map).map(|_| Element::Other)
    }

    scalars!(Element::Other, |_| Element::Other);
}

/// An element of a pair: a string, or `None` for anything else (skipped unread).
struct Text(Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a text")
    }

    fn visit_str<E>(self, s: &str) -> Result<Text, E> {
        Ok(Text(Some(s.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text, A::Error> {
        skip_map(map).map(|_| Text(None))
    }

    scalars!(Text(None), |_| Text(None));
}

impl Named for PredictRequest {
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

impl Named for RerankRequest {
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::json_de;

    fn inputs(json: &str) -> PredictInputs {
        json_de::from_slice::<PredictInputs>(json.as_bytes()).unwrap()
    }

    fn text(s: &str) -> Sequence {
        Sequence::Text(s.into())
    }

    fn pair(a: &str, b: &str) -> Sequence {
        Sequence::Pair(a.into(), b.into())
    }

    #[test]
    fn a_one_or_two_string_array_is_one_text_or_pair_as_tei_reads_it() {
        assert_eq!(inputs(r#""a""#), PredictInputs::One(text("a")));
        assert_eq!(inputs(r#"["a"]"#), PredictInputs::One(text("a")));
        assert_eq!(inputs(r#"["a", "b"]"#), PredictInputs::One(pair("a", "b")));
        // TEI's batch form: each text or pair an array of its own.
        assert_eq!(inputs(r#"[["a"]]"#), PredictInputs::Many(vec![text("a")]));
        let batch = PredictInputs::Many(vec![text("a"), pair("b", "c")]);
        assert_eq!(inputs(r#"[["a"], ["b", "c"]]"#), batch);
        let three = PredictInputs::Many(vec![text("a"), text("b"), text("c")]);
        assert_eq!(inputs(r#"["a", "b", "c"]"#), three);
        let mixed = PredictInputs::Many(vec![pair("a", "b"), text("c")]);
        assert_eq!(inputs(r#"[["a", "b"], "c"]"#), mixed);
        let two_pairs = PredictInputs::Many(vec![pair("a", "b"), pair("c", "d")]);
        assert_eq!(inputs(r#"[["a", "b"], ["c", "d"]]"#), two_pairs);
        assert_eq!(inputs("[]"), PredictInputs::Many(vec![]));
        for other in [
            "3",
            "null",
            r#"{"a": "b"}"#,
            r#"[["a", "b", "c"]]"#,
            r#"[[]]"#,
            r#"["a", 3]"#,
            r#"[["a", 3]]"#,
            r#"[["a", ["b"]]]"#,
            r#"[{"text": "a"}]"#,
        ] {
            assert_eq!(inputs(other), PredictInputs::Invalid, "{other}");
        }
        assert!(json_de::from_slice::<PredictInputs>(br#"["a", "#).is_err());
        // Fields TEI does not know are ignored, as TEI ignores them.
        let unknown = br#"{"inputs": "a", "colour": 1, "parameters": {"bogus": 1}}"#;
        assert!(json_de::from_slice::<PredictRequest>(unknown).is_ok());
        let known = br#"{"inputs": "a", "parameters": {"top_k": 1}, "raw_scores": true}"#;
        assert!(json_de::from_slice::<PredictRequest>(known).is_ok());
    }

    #[test]
    fn past_the_limit_texts_are_counted_not_kept() {
        let many = format!("[{}\"a\"]", "\"a\",".repeat(MAX_TEXTS + 9));
        assert_eq!(inputs(&many), PredictInputs::TooMany(MAX_TEXTS + 10));
        let body = format!(
            r#"{{"query": "q", "texts": [{}"a"]}}"#,
            "\"a\",".repeat(MAX_TEXTS)
        );
        let r: RerankRequest = json_de::from_slice(body.as_bytes()).unwrap();
        assert_eq!(
            (r.texts.items.len(), r.texts.count),
            (MAX_TEXTS, MAX_TEXTS + 1)
        );
        assert!(json_de::from_slice::<RerankRequest>(br#"{"query": "q", "texts": "a"}"#).is_err());
    }
}
