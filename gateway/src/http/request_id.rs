//! Request ids: the client's `x-request-id` when it is a sane one, else a fresh UUID v7
//! (time-ordered, so ids sort as the requests came). The id goes back on the response and
//! onto the request's span, and so onto every log line the request causes.

use http::{HeaderMap, HeaderName, HeaderValue};

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longer ids are not believed: they would be copied onto every log line.
const MAX_LEN: usize = 128;

/// The request's id: the one it carries if acceptable, else a new one.
pub fn of(headers: &HeaderMap) -> HeaderValue {
    match headers.get(&HEADER) {
        Some(given) if acceptable(given) => given.clone(),
        Some(_) => {
            tracing::debug!("ignoring a malformed x-request-id: making one");
            fresh()
        }
        None => fresh(),
    }
}

/// Visible ASCII, 1 to `MAX_LEN` bytes: safe to log and to send back.
fn acceptable(id: &HeaderValue) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty() && bytes.len() <= MAX_LEN && bytes.iter().all(u8::is_ascii_graphic)
}

fn fresh() -> HeaderValue {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::now_v7().hyphenated().encode_lower(&mut text);
    HeaderValue::from_str(id).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(id: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_bytes(id).unwrap());
        h
    }

    #[test]
    fn a_sane_id_is_kept_and_anything_else_replaced_by_a_fresh_uuid_v7() {
        assert_eq!(of(&with(b"abc-123")), "abc-123");
        for bad in [&b""[..], b"has space", &[b'x'; 129], b"tab\there"] {
            let made = of(&with(bad));
            let parsed = uuid::Uuid::parse_str(made.to_str().unwrap()).unwrap();
            assert_eq!(parsed.get_version_num(), 7, "{bad:?}");
        }
        let (a, b) = (of(&HeaderMap::new()), of(&HeaderMap::new()));
        assert_ne!(a, b);
        assert!(a.to_str().unwrap() < b.to_str().unwrap(), "time-ordered");
    }
}
