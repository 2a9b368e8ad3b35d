//! A Cohere document, as its rerank API takes it.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

/// A Cohere document: a string, or an object with its text under `text` (other fields
/// skipped unread).
pub(crate) struct Document(pub(crate) String);

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Document, D::Error> {
        d.deserialize_any(DocumentVisitor)
    }
}

struct DocumentVisitor;

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = Document;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a document: a string, or an object with a \"text\" string")
    }

    fn visit_str<E>(self, s: &str) -> Result<Document, E> {
        Ok(Document(s.to_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
        let mut text = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "text" && text.is_none() {
                text = Some(map.next_value::<String>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        text.map(Document)
            .ok_or_else(|| serde::de::Error::missing_field("text"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::bounded::Bounded;
    use crate::protocol::json_de;

    #[test]
    fn a_document_is_a_string_or_an_object_with_a_text() {
        let docs = br#"["a", {"text": "b", "title": [1, [2]]}, {"title": "c", "text": "d"}]"#;
        let docs = json_de::from_slice::<Bounded<Document>>(docs).unwrap();
        let texts: Vec<&str> = docs.items.iter().map(|d| d.0.as_str()).collect();
        assert_eq!(texts, ["a", "b", "d"]);
        for bad in [
            &br#"[{"title": "a"}]"#[..],
            br#"[3]"#,
            br#"[{"text": 3}]"#,
            br#"[["a"]]"#,
        ] {
            assert!(json_de::from_slice::<Bounded<Document>>(bad).is_err());
        }
    }
}
