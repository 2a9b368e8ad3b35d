//! Arrays of a request body kept only up to [`MAX_TEXTS`] elements, the rest only counted:
//! a body of millions of tiny texts costs no more than a few times its own bytes.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};

use crate::infer::input::MAX_TEXTS;

/// An array of which the first [`MAX_TEXTS`] elements are kept; `count` says how many it had.
pub struct Bounded<T> {
    pub items: Vec<T>,
    pub count: usize,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Bounded<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bounded<T>, D::Error> {
        d.deserialize_seq(BoundedVisitor(PhantomData))
    }
}

/// Reads a [`Bounded`] from any sequence, for visitors that take an array as one case of several.
pub struct BoundedVisitor<T>(pub PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for BoundedVisitor<T> {
    type Value = Bounded<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bounded<T>, A::Error> {
        let mut items = Vec::new();
        while items.len() < MAX_TEXTS {
            match seq.next_element::<T>()? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        let mut count = items.len();
        while seq.next_element::<IgnoredAny>()?.is_some() {
            count += 1;
        }
        Ok(Bounded { items, count })
    }
}
