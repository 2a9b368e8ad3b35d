//! What the lenient readers of request bodies share: a visitor that notes a JSON value of
//! another kind rather than failing on it (so that the handler can answer it in its API's
//! terms), and skips an object unread.

use serde::de::{IgnoredAny, MapAccess};

/// The visitor methods for JSON values that are not strings, arrays or objects: each is
/// `$none`, whatever its value, except the integers `$int` takes.
macro_rules! scalars {
    ($none:expr, $int:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(v).map_or($none, $int))
        }

        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok($int(v))
        }

        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($none)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}
pub(crate) use scalars;

/// Reads past every entry of an object, keeping none.
pub fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}
