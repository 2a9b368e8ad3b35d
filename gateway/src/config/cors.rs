//! `cors_allow_origins`: `*` alone, or origins as browsers send them
//! (`scheme://host[:port]`, no path).

use super::ConfigError;

/// An error naming the first origin a browser could never send.
pub fn validate(origins: &[String]) -> Result<(), ConfigError> {
    if origins.len() > 1 && origins.iter().any(|o| o == "*") {
        return Err(ConfigError::Invalid(
            "cors_allow_origins: `*` allows every origin and cannot be listed with others".into(),
        ));
    }
    match origins.iter().find(|o| *o != "*" && !is_origin(o)) {
        Some(bad) => Err(ConfigError::Invalid(format!(
            "cors_allow_origins: {bad:?} is not an origin (scheme://host[:port], e.g. \
             https://app.example.com)"
        ))),
        None => Ok(()),
    }
}

fn is_origin(origin: &str) -> bool {
    let Some((scheme, host)) = origin.split_once("://") else {
        return false;
    };
    !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        && !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(origins: &[&str]) -> Result<(), ConfigError> {
        validate(&origins.iter().map(|o| o.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn origins_as_browsers_send_them_or_a_lone_star() {
        assert!(check(&[]).is_ok());
        assert!(check(&["*"]).is_ok());
        assert!(check(&["https://a.example", "http://localhost:3000"]).is_ok());
        for bad in [
            &["*", "https://a.example"][..],
            &["a.example"],
            &["https://a.example/path"],
            &["https://"],
            &["https://a b"],
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }
}
