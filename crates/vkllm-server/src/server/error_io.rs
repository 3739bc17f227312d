//! hyper answers a request whose headers overflow its buffer with its own `431` and an empty
//! body, before any handler runs. [`JsonErrors`] wraps a connection's stream and swaps that one
//! response for the same status with the error JSON every other refusal carries (vkllm's
//! handlers never answer 431 themselves, so a 431 on the wire is always hyper's).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const HYPER_431: &[u8] = b"HTTP/1.1 431 ";

fn reply_431() -> Vec<u8> {
    let body = r#"{"error":{"message":"the request headers are over the size limit","type":"invalid_request_error","param":null,"code":"request_header_fields_too_large"}}"#;
    format!(
        "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A stream whose writes pass through, except hyper's bodiless 431 (see the module docs).
pub struct JsonErrors<S> {
    inner: S,
    /// The replacement still to be written, and how much of it is out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> JsonErrors<S> {
    pub fn new(inner: S) -> Self {
        JsonErrors {
            inner,
            pending: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() && buf.starts_with(HYPER_431) {
            self.pending = Some((reply_431(), 0));
        }
        let me = &mut *self;
        if let Some((out, at)) = me.pending.as_mut() {
            // hyper's whole response is in `buf` (writes are not vectored, see below): it is
            // taken as written once the replacement is.
            while *at < out.len() {
                match Pin::new(&mut me.inner).poll_write(cx, &out[*at..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => *at += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut me.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then flattens a response into one buffer, so a 431's status line
    // starts a write.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn hypers_431_gets_a_json_body_and_the_rest_passes() {
        let mut w = JsonErrors::new(Vec::new());
        w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        assert_eq!(w.inner, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        let mut w = JsonErrors::new(Vec::new());
        w.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        let text = String::from_utf8(w.inner).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 ") && head.contains("application/json"));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(head.contains(&format!("content-length: {}", body.len())));
    }
}
