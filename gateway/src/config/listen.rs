//! A listener's address that may be turned off: `""` in the file (and on the command line)
//! is off, anything else a socket address.

pub mod optional {
    use std::net::SocketAddr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(addr: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
        match addr {
            Some(a) => s.collect_str(a),
            None => s.serialize_str(""),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }

    /// `""` is off; otherwise `HOST:PORT` with an IP address.
    pub fn parse(text: &str) -> Result<Option<SocketAddr>, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(|_| {
            format!("{text:?} is not a listen address: give IP:PORT (\"127.0.0.1:8001\"), or \"\" for none")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::optional::parse;

    #[test]
    fn empty_is_off_and_an_address_is_on() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(
            parse(" 0.0.0.0:8001 ").unwrap(),
            Some("0.0.0.0:8001".parse().unwrap())
        );
        assert!(parse("localhost:8001").unwrap_err().contains("IP:PORT"));
    }
}
