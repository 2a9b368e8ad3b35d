//! Embeddings as base64, as OpenAI's and Cohere's APIs send them.

/// Standard base64 (RFC 4648) of the f32 values' little-endian bytes, as OpenAI encodes
/// embeddings.
pub fn encode_base64(values: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let word = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= n {
                out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_rfc_4648_of_the_little_endian_bytes() {
        // 1.0f32 = 00 00 80 3f; 2.0 = 00 00 00 40.
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
        assert_eq!(encode_base64(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(encode_base64(&[]), "");
    }
}
