//! `input` (OpenAI) and `inputs` (TEI) read straight into what a text model takes: a
//! string, an array of token ids, or an array of strings and arrays of ids. Anything else
//! is noted, not refused, so that the endpoint can answer it after it has resolved the
//! model. Arrays are kept only up to [`MAX_TEXTS`] inputs and [`MAX_IDS`] ids per input (the
//! rest only counted), so a body of millions of tiny elements costs no more than a few times
//! its own bytes (an id kept is 4 bytes, from at least 2 of JSON), within the body limit.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::visit::{scalars, skip_map};
use crate::error::ApiError;
pub use crate::infer::input::{Input, MAX_IDS, MAX_TEXTS, TokenIds};

/// What `input(s)` held.
#[derive(Debug, PartialEq)]
pub enum Inputs {
    List(Vec<Input>),
    /// An array of this many inputs, more than [`MAX_TEXTS`].
    TooMany(usize),
    /// A number, an object, or an array with anything but strings, ids or arrays of ids in
    /// it (ids are integers from 0 to 2³² - 1), or with ids beside other inputs.
    Invalid,
}

impl Inputs {
    /// The inputs of `field` (`input`, `inputs`): at least one, no text empty.
    pub fn checked(self, field: &str) -> Result<Vec<Input>, ApiError> {
        let inputs = match self {
            Inputs::List(inputs) => inputs,
            Inputs::TooMany(n) => {
                return Err(ApiError::too_large(format!(
                    "{field} holds {n} texts; a request takes at most {MAX_TEXTS}"
                )));
            }
            Inputs::Invalid => {
                return Err(ApiError::invalid(format!(
                    "{field} must be a string, an array of token ids, or an array of strings and \
                     arrays of token ids (integers from 0)"
                )));
            }
        };
        if inputs.is_empty() {
            return Err(ApiError::empty(format!("{field} holds no text")));
        }
        let empty = |input: &Input| matches!(input, Input::Text(t) if t.is_empty());
        if let Some(i) = inputs.iter().position(empty) {
            return Err(ApiError::empty(format!("{field}: text {i} is empty")));
        }
        Ok(inputs)
    }
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
        f.write_str("a string, an array of token ids, or an array of strings and arrays of ids")
    }

    fn visit_str<E>(self, s: &str) -> Result<Inputs, E> {
        Ok(Inputs::List(vec![Input::Text(s.to_owned())]))
    }

    fn visit_string<E>(self, s: String) -> Result<Inputs, E> {
        Ok(Inputs::List(vec![Input::Text(s)]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Inputs, A::Error> {
        let (mut list, mut count, mut flat) = (Vec::new(), 0, TokenIds::default());
        let mut valid = true;
        while let Some(item) = seq.next_element::<Item>()? {
            match item {
                Item::Id(id) => flat.push(id),
                Item::Input(input) => {
                    count += 1;
                    if count <= MAX_TEXTS {
                        list.push(input);
                    }
                }
                Item::Other => valid = false,
            }
        }
        Ok(match (valid, flat.count, count) {
            (false, _, _) => Inputs::Invalid,
            (true, 0, n) if n > MAX_TEXTS => Inputs::TooMany(n),
            (true, 0, _) => Inputs::List(list),
            (true, _, 0) => Inputs::List(vec![Input::Ids(flat)]),
            (true, _, _) => Inputs::Invalid,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Inputs, A::Error> {
        skip_map(map).map(|_| Inputs::Invalid)
    }

    scalars!(Inputs::Invalid, |_| Inputs::Invalid);
}

/// One element of an `input(s)` array.
enum Item {
    Input(Input),
    /// An element of a flat array of ids: one input as a whole.
    Id(u32),
    Other,
}

fn id_item(v: u64) -> Item {
    u32::try_from(v).map_or(Item::Other, Item::Id)
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
        f.write_str("a string, a token id or an array of token ids")
    }

    fn visit_str<E>(self, s: &str) -> Result<Item, E> {
        Ok(Item::Input(Input::Text(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Item, E> {
        Ok(Item::Input(Input::Text(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        let (mut ids, mut valid) = (TokenIds::default(), true);
        while let Some(id) = seq.next_element::<Id>()? {
            match id {
                Id(Some(id)) => ids.push(id),
                Id(None) => valid = false,
            }
        }
        Ok(if valid {
            Item::Input(Input::Ids(ids))
        } else {
            Item::Other
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Item, A::Error> {
        skip_map(map).map(|_| Item::Other)
    }

    scalars!(Item::Other, id_item);
}

/// One element of an array of ids: `None` for anything but an integer that fits in `u32`.
struct Id(Option<u32>);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        d.deserialize_any(IdVisitor)
    }
}

struct IdVisitor;

impl<'de> Visitor<'de> for IdVisitor {
    type Value = Id;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a token id")
    }

    fn visit_str<E>(self, _: &str) -> Result<Id, E> {
        Ok(Id(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Id, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Id(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Id, A::Error> {
        skip_map(map).map(|_| Id(None))
    }

    scalars!(Id(None), |v| Id(u32::try_from(v).ok()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Inputs {
        crate::protocol::json_de::from_slice::<Inputs>(json.as_bytes()).unwrap()
    }

    fn text(s: &str) -> Input {
        Input::Text(s.into())
    }

    fn ids(ids: &[u32]) -> Input {
        Input::Ids(TokenIds {
            ids: ids.to_vec(),
            count: ids.len(),
            last: ids.last().copied(),
        })
    }

    #[test]
    fn strings_and_token_ids_are_inputs_and_anything_else_is_noted() {
        assert_eq!(read(r#""a cat""#), Inputs::List(vec![text("a cat")]));
        assert_eq!(
            read(r#"["a", "b\u00e9"]"#),
            Inputs::List(vec![text("a"), text("bé")])
        );
        assert_eq!(read("[]"), Inputs::List(vec![]));
        assert_eq!(
            read("[101, 0, 102]"),
            Inputs::List(vec![ids(&[101, 0, 102])])
        );
        assert_eq!(
            read(r#"[[101, 102], "a", [], [4294967295]]"#),
            Inputs::List(vec![
                ids(&[101, 102]),
                text("a"),
                ids(&[]),
                ids(&[u32::MAX])
            ])
        );
        for other in [
            "1",
            "true",
            "null",
            r#"{"a": [1]}"#,
            r#"["a", 3]"#,
            "[1, [2]]",
            "[-1]",
            "[[1, -1]]",
            "[4294967296]",
            "[[1.5]]",
            "[1.0]",
            r#"[["a"]]"#,
            "[[[1]]]",
            r#"[[{"a": 1}]]"#,
        ] {
            assert_eq!(read(other), Inputs::Invalid, "{other}");
        }
        // Malformed JSON is still an error of the body.
        assert!(crate::protocol::json_de::from_slice::<Inputs>(b"[\"a\",").is_err());
        assert!(crate::protocol::json_de::from_slice::<Inputs>(b"[[1, 2]").is_err());
    }

    #[test]
    fn past_the_limits_inputs_and_ids_are_counted_not_kept() {
        let many = format!("[{}\"\"]", "\"\",".repeat(MAX_TEXTS + 9));
        assert_eq!(read(&many), Inputs::TooMany(MAX_TEXTS + 10));
        let most = format!("[{}[1]]", "\"x\",".repeat(MAX_TEXTS - 1));
        assert!(matches!(read(&most), Inputs::List(t) if t.len() == MAX_TEXTS));
        for long in [
            format!("[{}7]", "7,".repeat(MAX_IDS + 99)),
            format!("[\"a\", [{}7]]", "7,".repeat(MAX_IDS + 99)),
        ] {
            let Inputs::List(list) = read(&long) else {
                panic!("not a list")
            };
            let Some(Input::Ids(ids)) = list.last() else {
                panic!("no ids: {list:?}")
            };
            assert_eq!((ids.ids.len(), ids.count), (MAX_IDS, MAX_IDS + 100));
            assert!(ids.ends_with(&[7]) && !ids.ends_with(&[8]) && ids.ends_with(&[]));
        }
    }
}
