//! What a gRPC client is told: an [`ApiError`] as the gRPC status its HTTP status maps to
//! (the table in docs/api.md), with the retry delay of a shed request in its trailers; and
//! the deadline a call carries in `grpc-timeout`.

use std::time::Duration;

use http::StatusCode;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use crate::error::ApiError;

/// The gRPC code for an HTTP status, as docs/api.md tabulates it.
pub fn code_of(status: StatusCode) -> Code {
    match status.as_u16() {
        400 | 405 | 415 | 422 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        408 | 504 => Code::DeadlineExceeded,
        413 | 429 => Code::ResourceExhausted,
        503 => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// `e` as a status with the same message as HTTP's; a shed request carries its retry delay
/// as `retry-after` (whole seconds, as HTTP's header) and `grpc-retry-pushback-ms` (gRPC's
/// own retry policy reads it).
pub fn status_of(e: &ApiError) -> Status {
    let mut status = Status::new(code_of(e.status()), e.to_string());
    if let Some(after) = e.retry_after() {
        let metadata = status.metadata_mut();
        let secs = e.retry_after_secs().unwrap_or(1);
        metadata.insert("retry-after", MetadataValue::from(secs));
        let ms = after.as_millis().max(1) as u64;
        metadata.insert("grpc-retry-pushback-ms", MetadataValue::from(ms));
    }
    status
}

/// The caller's remaining time from `grpc-timeout` (`<up to 8 digits><H|M|S|m|u|n>`); a
/// malformed value is refused, as HTTP refuses a malformed timeout header.
pub fn timeout_of(metadata: &MetadataMap) -> Result<Option<Duration>, ApiError> {
    let Some(value) = metadata.get("grpc-timeout") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default();
    parse_timeout(text).map(Some).ok_or_else(|| {
        ApiError::malformed(format!(
            "grpc-timeout must be up to 8 digits and a unit (H, M, S, m, u, n), got {text:?}"
        ))
    })
}

fn parse_timeout(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n * 3600),
        'M' => Duration::from_secs(n * 60),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::InferError;
    use crate::infer::outcome::Refusal;

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_refuse_the_rest() {
        assert_eq!(parse_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout("150m"), Some(Duration::from_millis(150)));
        assert_eq!(parse_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn each_http_status_has_its_grpc_code_and_a_shed_its_retry_delay() {
        let cases = [
            (400, Code::InvalidArgument),
            (404, Code::NotFound),
            (413, Code::ResourceExhausted),
            (429, Code::ResourceExhausted),
            (503, Code::Unavailable),
            (504, Code::DeadlineExceeded),
            (500, Code::Internal),
        ];
        for (http, grpc) in cases {
            assert_eq!(code_of(StatusCode::from_u16(http).unwrap()), grpc, "{http}");
        }
        let shed = ApiError::Infer(InferError::Refused(Refusal::Shed {
            message: "shed".into(),
            retry_after: Duration::from_millis(1500),
        }));
        let status = status_of(&shed);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.metadata().get("retry-after").unwrap(), "2");
        assert_eq!(
            status.metadata().get("grpc-retry-pushback-ms").unwrap(),
            "1500"
        );
    }
}
