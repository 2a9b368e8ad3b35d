//! The keys the inference routes require: from the configuration (`api_keys`, or
//! `--api-key`) and a file of one key a line (`api_keys_file`), read at start and again with
//! the whole configuration on SIGHUP. A key is never printed: its `Debug` and its
//! serialized form (the admin API's `/config`) are redacted.

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ConfigError;

#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key given on the command line, checked as one from a file is.
    pub fn parse(key: &str) -> Result<ApiKey, String> {
        check(key)?;
        Ok(ApiKey(key.to_string()))
    }

    #[cfg(test)]
    pub fn new(key: &str) -> ApiKey {
        ApiKey(key.to_string())
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl Serialize for ApiKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for ApiKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ApiKey, D::Error> {
        let key = String::deserialize(d)?;
        check(&key).map_err(serde::de::Error::custom)?;
        Ok(ApiKey(key))
    }
}

/// A key is printable ASCII without spaces (what fits an `Authorization` header as
/// written), and not empty.
fn check(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("an API key is empty".into());
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("an API key holds a space or a character outside printable ASCII".into());
    }
    Ok(())
}

/// The keys in `path`, one a line; a trailing newline is allowed, an empty line is not (a
/// stray blank line would otherwise pass unnoticed, and so would an edit that cut a key).
pub fn read_file(path: &Path) -> Result<Vec<ApiKey>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let mut keys = Vec::new();
    for (i, line) in body.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        check(line).map_err(|e| {
            ConfigError::Invalid(format!(
                "api_keys_file {}: line {}: {e}",
                path.display(),
                i + 1
            ))
        })?;
        keys.push(ApiKey(line.to_string()));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_one_key_a_line_and_an_empty_line_is_an_error() {
        let dir = std::env::temp_dir().join(format!("tandem-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys");
        std::fs::write(&file, "alpha\r\nbeta\n").unwrap();
        assert_eq!(
            read_file(&file).unwrap(),
            vec![ApiKey::new("alpha"), ApiKey::new("beta")]
        );
        std::fs::write(&file, "alpha\n\nbeta\n").unwrap();
        let e = read_file(&file).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("empty"), "{e}");
        std::fs::write(&file, "al pha\n").unwrap();
        assert!(read_file(&file).is_err());
        assert!(read_file(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_is_never_printed() {
        let key = ApiKey::new("s3cret");
        assert!(!format!("{key:?}").contains("s3cret"));
        assert_eq!(serde_json::to_string(&key).unwrap(), "\"<redacted>\"");
    }
}
