//! `input` (OpenAI) and `inputs` (TEI) read straight into texts: a string or an array of
//! strings. Anything else is noted, not refused, so that the endpoint can answer it after
//! it has resolved the model. An array is kept only up to [`MAX_TEXTS`] (the rest only
//! counted), so a body of millions of tiny strings costs no more than its own bytes.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The most texts one request may hold, as OpenAI allows; a model's `max_batch_size` may
/// allow fewer.
pub const MAX_TEXTS: usize = 2048;

/// The visitor methods for JSON values that are not strings, arrays or objects: each is
/// `$none`, whatever its value.
macro_rules! not_text {
    ($none:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}

/// What `input(s)` held.
#[derive(Debug, PartialEq)]
pub enum Inputs {
    Texts(Vec<String>),
    /// An array of this many strings, more than [`MAX_TEXTS`].
    TooMany(usize),
    /// A number, an object, token ids, or an array with anything but strings in it.
    NotTexts,
}

impl<'de> Deserialize<'de> for Inputs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Inputs, D::Error> {
        d.deserialize_any(InputsVisitor)
    }
}

struct InputsVisitor;

impl<'de> Visitor<'de> for InputsVisitor {
    type Value = Inputs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of strings")
    }

    fn visit_str<E>(self, s: &str) -> Result<Inputs, E> {
        Ok(Inputs::Texts(vec![s.to_owned()]))
    }

    fn visit_string<E>(self, s: String) -> Result<Inputs, E> {
        Ok(Inputs::Texts(vec![s]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Inputs, A::Error> {
        let (mut texts, mut count, mut only_texts) = (Vec::new(), 0, true);
        while let Some(item) = seq.next_element::<Item>()? {
            count += 1;
            match item {
                Item::Text(t) if count <= MAX_TEXTS => texts.push(t),
                Item::Text(_) => {}
                Item::Other => only_texts = false,
            }
        }
        Ok(match (only_texts, count > MAX_TEXTS) {
            (false, _) => Inputs::NotTexts,
            (true, true) => Inputs::TooMany(count),
            (true, false) => Inputs::Texts(texts),
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Inputs, A::Error> {
        skip_map(map).map(|_| Inputs::NotTexts)
    }

    not_text!(Inputs::NotTexts);
}

/// One element of an `input(s)` array.
enum Item {
    Text(String),
    Other,
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Item, D::Error> {
        d.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, s: &str) -> Result<Item, E> {
        Ok(Item::Text(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Item, E> {
        Ok(Item::Text(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Item::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Item, A::Error> {
        skip_map(map).map(|_| Item::Other)
    }

    not_text!(Item::Other);
}

fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Inputs {
        crate::protocol::json_de::from_slice::<Inputs>(json.as_bytes()).unwrap()
    }

    #[test]
    fn a_string_or_strings_are_texts_and_anything_else_is_noted() {
        assert_eq!(read(r#""a cat""#), Inputs::Texts(vec!["a cat".into()]));
        assert_eq!(
            read(r#"["a", "b\u00e9"]"#),
            Inputs::Texts(vec!["a".into(), "bé".into()])
        );
        assert_eq!(read("[]"), Inputs::Texts(vec![]));
        for other in [
            "1",
            "true",
            "null",
            r#"{"a": [1]}"#,
            "[[1, 2]]",
            r#"["a", 3]"#,
        ] {
            assert_eq!(read(other), Inputs::NotTexts, "{other}");
        }
        // Malformed JSON is still an error of the body.
        assert!(crate::protocol::json_de::from_slice::<Inputs>(b"[\"a\",").is_err());
    }

    #[test]
    fn past_the_limit_strings_are_counted_not_kept() {
        let many = format!("[{}\"\"]", "\"\",".repeat(MAX_TEXTS + 9));
        assert_eq!(read(&many), Inputs::TooMany(MAX_TEXTS + 10));
        let most = format!("[{}\"\"]", "\"x\",".repeat(MAX_TEXTS - 1));
        assert!(matches!(read(&most), Inputs::Texts(t) if t.len() == MAX_TEXTS));
    }
}
