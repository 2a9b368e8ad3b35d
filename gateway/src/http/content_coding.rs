//! Request bodies sent compressed, as `tritonclient` sends them with
//! `request_compression_algorithm="gzip"` or `"deflate"` (and as Triton accepts them):
//! `Content-Encoding: gzip` (RFC 1952; `x-gzip` too) or `deflate` (the zlib format, RFC
//! 1950, which is what HTTP's "deflate" means). Any other coding is answered with 415 and
//! the codings we take, as RFC 9110 §15.5.16 asks.
//!
//! Decompression is bounded the way an uncompressed body is: the decoded bytes may not pass
//! `limits.max_body_bytes`, so a small "bomb" costs at most that much memory and the time to
//! inflate it, never more. Work that produces nothing is bounded too: at most
//! [`MAX_GZIP_MEMBERS`] gzip members, and a body whose compressed form is larger than what
//! it decodes to (empty members or empty deflate blocks, by the thousand) is refused. A
//! body over [`INLINE_DECODE`] bytes is decoded on the blocking pool, so inflating it never
//! holds up the runtime's other connections. An uncompressed body never comes here: its
//! bytes go to the decoder as read.
//!
//! Responses are compressed when the client's `Accept-Encoding` asks for gzip or deflate
//! (as `response_compression_algorithm` does) and the body is at least [`MIN_COMPRESSED`]
//! bytes: a single-row answer of a few hundred bytes gains nothing from it. Also in
//! slices, at the fastest level.

use std::io::{Read, Write};

use bytes::Bytes;
use flate2::Compression;
use flate2::bufread::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, VARY};
use http::{HeaderMap, HeaderValue, Response};
use http_body_util::Full;

use crate::error::ApiError;

/// What `Accept-Encoding` says to a client whose coding we refuse.
pub const ACCEPTED: &str = "gzip, deflate";

/// Encoded bytes produced between two yields to the runtime.
const SLICE: usize = 256 << 10;

/// Compressed bodies up to this size are decoded on the connection's task: at most this
/// much input bounds the work, whatever it holds. Larger ones go to the blocking pool.
const INLINE_DECODE: usize = 64 << 10;

/// Gzip members in one body at most. Clients send one; a stream of thousands of empty
/// members is work without output.
pub const MAX_GZIP_MEMBERS: usize = 64;

/// A compressed body may be larger than what it decodes to by its headers' worth
/// (incompressible data, a short body), but not by more than this.
const MAX_EXPANSION_SLACK: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    Deflate,
}

impl Coding {
    pub fn name(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
        }
    }
}

/// The body's coding from its `Content-Encoding` header; one coding at most (besides
/// `identity`, which changes nothing).
pub fn coding(headers: &HeaderMap) -> Result<Coding, ApiError> {
    let mut found = Coding::Identity;
    for value in headers.get_all(CONTENT_ENCODING) {
        let text = value.to_str().map_err(|_| {
            ApiError::UnsupportedEncoding(format!(
                "Content-Encoding {value:?} is not a coding; this server takes {ACCEPTED}"
            ))
        })?;
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let this = if token.eq_ignore_ascii_case("identity") {
                continue;
            } else if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip") {
                Coding::Gzip
            } else if token.eq_ignore_ascii_case("deflate") {
                Coding::Deflate
            } else {
                return Err(ApiError::UnsupportedEncoding(format!(
                    "Content-Encoding {token:?} is not supported; this server takes {ACCEPTED}"
                )));
            };
            if found != Coding::Identity {
                return Err(ApiError::UnsupportedEncoding(format!(
                    "Content-Encoding applies {} and {}; this server takes one coding, {ACCEPTED}",
                    found.name(),
                    this.name()
                )));
            }
            found = this;
        }
    }
    Ok(found)
}

/// Smaller response bodies go out as they are.
pub const MIN_COMPRESSED: usize = 1024;

/// The coding for a response, from the request's `Accept-Encoding`: gzip, else deflate,
/// when offered with a nonzero `q` (by name or by `*`); otherwise identity.
pub fn accepted(headers: &HeaderMap) -> Coding {
    let mut gzip = None;
    let mut deflate = None;
    let mut any = None;
    for value in headers.get_all(ACCEPT_ENCODING) {
        let Ok(text) = value.to_str() else { continue };
        for item in text.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.trim().parse::<f32>().ok())
                .next_back()
                .unwrap_or(1.0);
            let wanted = q > 0.0;
            if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
                gzip = Some(wanted);
            } else if name.eq_ignore_ascii_case("deflate") {
                deflate = Some(wanted);
            } else if name == "*" {
                any = Some(wanted);
            }
        }
    }
    if gzip.or(any) == Some(true) {
        Coding::Gzip
    } else if deflate.or(any) == Some(true) {
        Coding::Deflate
    } else {
        Coding::Identity
    }
}

/// `body` in `coding`, compressed in slices between which the runtime serves others.
pub async fn encode(body: Vec<u8>, coding: Coding) -> Vec<u8> {
    async fn compress<W: Write>(mut encoder: W, body: &[u8]) -> std::io::Result<W> {
        let mut chunks = body.chunks(SLICE).peekable();
        while let Some(chunk) = chunks.next() {
            encoder.write_all(chunk)?;
            if chunks.peek().is_some() {
                tokio::task::yield_now().await;
            }
        }
        Ok(encoder)
    }
    let out = Vec::with_capacity(body.len() / 2);
    // Writing into a Vec cannot fail; if it somehow did, the body goes out as it is.
    let encoded = match coding {
        Coding::Identity => return body,
        Coding::Gzip => compress(GzEncoder::new(out, Compression::fast()), &body)
            .await
            .and_then(GzEncoder::finish),
        Coding::Deflate => compress(ZlibEncoder::new(out, Compression::fast()), &body)
            .await
            .and_then(ZlibEncoder::finish),
    };
    encoded.unwrap_or(body)
}

/// A 200 of `body`, compressed in `coding` when that is not identity and the body is worth
/// it; `Vary: accept-encoding` whenever the client offered a coding, since the answer
/// depends on it.
pub async fn respond(
    body: Vec<u8>,
    content_type: &'static str,
    coding: Coding,
) -> Response<Full<Bytes>> {
    let compressed = coding != Coding::Identity && body.len() >= MIN_COMPRESSED;
    let body = if compressed {
        encode(body, coding).await
    } else {
        body
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    let headers = resp.headers_mut();
    if compressed {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.name()));
    }
    if coding != Coding::Identity {
        headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// The body as sent before `coding` was applied, at most `limit` bytes of it.
pub async fn decode(body: Bytes, coding: Coding, limit: usize) -> Result<Bytes, ApiError> {
    if coding == Coding::Identity {
        return Ok(body);
    }
    if body.len() <= INLINE_DECODE {
        return decode_now(&body, coding, limit);
    }
    tokio::task::spawn_blocking(move || decode_now(&body, coding, limit))
        .await
        .map_err(|_| corrupt(coding, "the decoder failed".into()))?
}

fn decode_now(body: &[u8], coding: Coding, limit: usize) -> Result<Bytes, ApiError> {
    let decoded = match coding {
        Coding::Identity => return Ok(Bytes::copy_from_slice(body)),
        Coding::Gzip => gunzip(body, limit)?,
        Coding::Deflate => {
            let mut decoder = ZlibDecoder::new(body);
            let decoded = inflate(&mut decoder, coding, limit)?;
            // The zlib format ends with its checksum; bytes after it are not part of the
            // body.
            if !decoder.get_ref().is_empty() {
                return Err(corrupt(
                    coding,
                    format!(
                        "{} bytes follow the end of the stream",
                        decoder.get_ref().len()
                    ),
                ));
            }
            decoded
        }
    };
    if body.len() > decoded.len() + decoded.len() / 8 + MAX_EXPANSION_SLACK {
        return Err(corrupt(
            coding,
            format!(
                "{} compressed bytes decode to only {}: the body is mostly empty blocks",
                body.len(),
                decoded.len()
            ),
        ));
    }
    Ok(Bytes::from(decoded))
}

/// Gzip members one after the other (RFC 1952 §2.2), at most [`MAX_GZIP_MEMBERS`].
fn gunzip(mut body: &[u8], limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    let mut members = 0;
    while !body.is_empty() || members == 0 {
        members += 1;
        if members > MAX_GZIP_MEMBERS {
            return Err(corrupt(
                Coding::Gzip,
                format!("more than {MAX_GZIP_MEMBERS} gzip members"),
            ));
        }
        let mut member = GzDecoder::new(body);
        let room = limit.saturating_sub(out.len());
        out.extend_from_slice(&inflate(&mut member, Coding::Gzip, room)?);
        if out.len() > limit {
            return Err(too_large(Coding::Gzip, limit));
        }
        body = member.into_inner();
    }
    Ok(out)
}

/// Reads `reader` to its end, refusing more than `limit` bytes.
fn inflate(reader: &mut impl Read, coding: Coding, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    // Up to one byte past the limit, so that a body of exactly `limit` passes and one byte
    // more is refused without inflating the rest.
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(coding, e.to_string()))?;
    if out.len() > limit {
        return Err(too_large(coding, limit));
    }
    Ok(out)
}

fn too_large(coding: Coding, limit: usize) -> ApiError {
    ApiError::DecodedBodyTooLarge {
        coding: coding.name(),
        limit,
    }
}

fn corrupt(coding: Coding, why: String) -> ApiError {
    ApiError::malformed(format!(
        "the request body is not valid {} data: {why}",
        coding.name()
    ))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::{GzEncoder, ZlibEncoder};
    use http::HeaderValue;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(CONTENT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Bytes that compress well and are not all alike.
    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| b"0123456789.,[] "[i * 7 % 15]).collect()
    }

    #[test]
    fn the_header_names_one_coding_at_most() {
        assert_eq!(coding(&headers(&[])).unwrap(), Coding::Identity);
        assert_eq!(coding(&headers(&["identity"])).unwrap(), Coding::Identity);
        assert_eq!(coding(&headers(&["gzip"])).unwrap(), Coding::Gzip);
        assert_eq!(coding(&headers(&[" GZip "])).unwrap(), Coding::Gzip);
        assert_eq!(coding(&headers(&["x-gzip"])).unwrap(), Coding::Gzip);
        assert_eq!(coding(&headers(&["deflate"])).unwrap(), Coding::Deflate);
        assert_eq!(
            coding(&headers(&["identity, deflate"])).unwrap(),
            Coding::Deflate
        );
        for refused in [
            &["br"][..],
            &["zstd"],
            &["gzip, gzip"],
            &["gzip", "deflate"],
        ] {
            let e = coding(&headers(refused)).unwrap_err();
            assert_eq!(
                e.status(),
                http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{refused:?}"
            );
            assert!(e.to_string().contains(ACCEPTED), "{e}");
        }
    }

    #[test]
    fn gzip_and_deflate_bodies_come_back_as_sent() {
        for n in [0, 1, 1000, 3 * SLICE + 17] {
            let data = sample(n);
            let g = run(decode(Bytes::from(gzip(&data)), Coding::Gzip, 4 * SLICE)).unwrap();
            assert_eq!(&g[..], &data[..], "gzip, {n} bytes");
            let d = run(decode(Bytes::from(zlib(&data)), Coding::Deflate, 4 * SLICE)).unwrap();
            assert_eq!(&d[..], &data[..], "deflate, {n} bytes");
        }
        // gzip may come in several members, read one after the other.
        let two = [gzip(b"{\"inputs\":"), gzip(b" []}")].concat();
        let got = run(decode(Bytes::from(two), Coding::Gzip, 1024)).unwrap();
        assert_eq!(&got[..], b"{\"inputs\": []}");
    }

    #[test]
    fn accept_encoding_picks_gzip_then_deflate_when_offered() {
        let pick = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            accepted(&h)
        };
        assert_eq!(accepted(&HeaderMap::new()), Coding::Identity);
        assert_eq!(pick("gzip"), Coding::Gzip);
        assert_eq!(pick("deflate"), Coding::Deflate);
        assert_eq!(pick("br, deflate;q=0.5, gzip;q=0.8"), Coding::Gzip);
        assert_eq!(pick("gzip;q=0, deflate"), Coding::Deflate);
        assert_eq!(pick("*"), Coding::Gzip);
        assert_eq!(pick("*;q=0"), Coding::Identity);
        assert_eq!(pick("gzip;q=0, *"), Coding::Deflate);
        assert_eq!(pick("identity, br"), Coding::Identity);
    }

    #[test]
    fn encoded_responses_decode_to_the_body() {
        let body = sample(3 * SLICE + 5);
        for coding in [Coding::Gzip, Coding::Deflate] {
            let packed = run(encode(body.clone(), coding));
            assert!(
                packed.len() < body.len() / 4,
                "{coding:?}: {}",
                packed.len()
            );
            let back = run(decode(Bytes::from(packed), coding, body.len())).unwrap();
            assert_eq!(&back[..], &body[..], "{coding:?}");
        }
        assert_eq!(run(encode(body.clone(), Coding::Identity)), body);
    }

    #[test]
    fn the_decoded_size_is_held_to_the_limit() {
        let limit = SLICE + 100;
        let exact = sample(limit);
        let got = run(decode(Bytes::from(gzip(&exact)), Coding::Gzip, limit)).unwrap();
        assert_eq!(got.len(), limit);
        // A bomb: 64 MiB of zeros in about 64 KiB, refused after inflating just past the limit.
        let bomb = zlib(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 128 << 10, "{}", bomb.len());
        let e = run(decode(Bytes::from(bomb), Coding::Deflate, limit)).unwrap_err();
        assert_eq!(e.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.to_string().contains(&limit.to_string()), "{e}");
        let one_more = gzip(&sample(limit + 1));
        assert!(run(decode(Bytes::from(one_more), Coding::Gzip, limit)).is_err());
    }

    #[test]
    fn bodies_of_empty_members_or_blocks_are_refused_quickly() {
        // 100,000 empty gzip members, then a real one: refused at the member cap, without
        // reading them all.
        let empty = gzip(b"");
        let mut body: Vec<u8> = empty
            .iter()
            .copied()
            .cycle()
            .take(empty.len() * 100_000)
            .collect();
        body.extend(gzip(b"{\"inputs\": []}"));
        let started = std::time::Instant::now();
        let e = run(decode(Bytes::from(body), Coding::Gzip, 1 << 24)).unwrap_err();
        assert_eq!(e.status(), http::StatusCode::BAD_REQUEST, "{e}");
        assert!(e.to_string().contains("members"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // A few members are fine.
        let few = [gzip(b"{\"a\":"), gzip(b""), gzip(b"1}")].concat();
        assert_eq!(
            &run(decode(Bytes::from(few), Coding::Gzip, 1024)).unwrap()[..],
            b"{\"a\":1}"
        );
        // A deflate stream of empty stored blocks: 5 bytes each, no output.
        let mut raw = vec![0x78, 0x01];
        for _ in 0..200_000 {
            raw.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
        }
        raw.extend_from_slice(&[0x03, 0x00]); // a final empty fixed block
        raw.extend_from_slice(&1u32.to_be_bytes()); // adler32 of nothing
        let e = run(decode(Bytes::from(raw), Coding::Deflate, 1 << 24)).unwrap_err();
        assert_eq!(e.status(), http::StatusCode::BAD_REQUEST, "{e}");
        assert!(e.to_string().contains("empty blocks"), "{e}");
    }

    #[test]
    fn corrupt_truncated_or_trailing_data_is_malformed() {
        let data = sample(5000);
        let good_gzip = gzip(&data);
        let good_zlib = zlib(&data);
        let mut flipped = good_gzip.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x55;
        let cases: Vec<(Coding, Vec<u8>)> = vec![
            (Coding::Gzip, b"{\"inputs\": []}".to_vec()),
            (Coding::Gzip, good_gzip[..good_gzip.len() - 5].to_vec()),
            (Coding::Gzip, flipped),
            (Coding::Gzip, [good_gzip.clone(), b"xyz".to_vec()].concat()),
            (Coding::Deflate, good_zlib[..good_zlib.len() / 2].to_vec()),
            (
                Coding::Deflate,
                [good_zlib.clone(), b"xyz".to_vec()].concat(),
            ),
            (Coding::Deflate, good_gzip),
        ];
        for (i, (c, body)) in cases.into_iter().enumerate() {
            let e = run(decode(Bytes::from(body), c, 1 << 20)).unwrap_err();
            assert_eq!(e.status(), http::StatusCode::BAD_REQUEST, "case {i}: {e}");
            assert!(e.to_string().contains(c.name()), "case {i}: {e}");
        }
    }
}
