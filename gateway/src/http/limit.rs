//! A tower middleware that bounds request bodies: a `Content-Length` over the limit is
//! answered 413 at once, before any of the body is read; a body without one is wrapped so
//! that reading past the limit fails (the handler answers 413 then).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use tower::{Layer, Service};

use super::errors::error_response;
use crate::error::ApiError;

#[derive(Clone, Copy, Debug)]
pub struct BodyLimitLayer {
    pub limit: usize,
}

impl<S> Layer<S> for BodyLimitLayer {
    type Service = BodyLimit<S>;

    fn layer(&self, inner: S) -> BodyLimit<S> {
        BodyLimit {
            inner,
            limit: self.limit,
        }
    }
}

#[derive(Clone, Debug)]
pub struct BodyLimit<S> {
    inner: S,
    limit: usize,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<Request<B>> for BodyLimit<S>
where
    S: Service<Request<Limited<B>>, Response = Response<Full<Bytes>>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Full<Bytes>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let declared = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.limit as u64) {
            let response = error_response(&ApiError::BodyTooLarge { limit: self.limit });
            return Box::pin(std::future::ready(Ok(response)));
        }
        let limit = self.limit;
        Box::pin(self.inner.call(req.map(|b| Limited::new(b, limit))))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn echo_len(
        req: Request<Limited<Full<Bytes>>>,
    ) -> Result<Response<Full<Bytes>>, Infallible> {
        let status = match req.into_body().collect().await {
            Ok(b) => b.to_bytes().len().to_string(),
            Err(_) => "too large".into(),
        };
        Ok(Response::new(Full::new(Bytes::from(status))))
    }

    async fn call(declared: Option<usize>, body: &'static [u8]) -> (u16, String) {
        let svc = BodyLimitLayer { limit: 8 }.layer(tower::service_fn(echo_len));
        let mut req = Request::new(Full::new(Bytes::from_static(body)));
        if let Some(n) = declared {
            req.headers_mut()
                .insert(http::header::CONTENT_LENGTH, n.into());
        }
        let resp = svc.oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn declared_lengths_over_the_limit_are_refused_unread() {
        let (status, body) = call(Some(9), b"123456789").await;
        assert_eq!(status, 413);
        assert!(
            body.contains("\"error\"") && body.contains("8-byte limit"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn undeclared_bodies_are_cut_at_the_limit() {
        assert_eq!(call(None, b"12345678").await, (200, "8".into()));
        assert_eq!(call(None, b"123456789").await, (200, "too large".into()));
    }
}
