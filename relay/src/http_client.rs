//! One HTTP/1.1 request over a fresh TCP connection, with a deadline on the whole exchange:
//! what the http driver (calls to an external control plane) and the CLI (calls to the admin
//! API) need. hyper's client does the protocol, so chunked and `Content-Length` answers are both
//! read correctly; the answer's body is bounded.

use std::error::Error as StdError;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Longest answer body read.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// A request to send.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// `GET`, `POST`, ...
    pub method: Method,
    /// The server.
    pub addr: SocketAddr,
    /// The `Host` header.
    pub host: &'a str,
    /// Path and query.
    pub target: &'a str,
    /// Sent as `Authorization: Bearer ...` when present.
    pub token: Option<&'a str>,
    /// A body, if any, and its content type.
    pub body: Option<(&'static str, String)>,
    /// Bound on the whole exchange: connect, request, answer.
    pub timeout: Duration,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// The body, as text (invalid UTF-8 replaced).
    pub body: String,
}

/// Why a request got no answer.
#[derive(Debug)]
pub enum HttpError {
    /// The request could not be built (a target or token that is not valid in HTTP).
    InvalidRequest(hyper::http::Error),
    /// The TCP connection failed.
    Connect(std::io::Error),
    /// The exchange failed: the server closed early, answered garbage, ...
    Exchange(hyper::Error),
    /// The body was longer than [`MAX_RESPONSE_BYTES`].
    TooLarge,
    /// The body could not be read.
    Body(Box<dyn StdError + Send + Sync>),
    /// No complete answer within the deadline.
    Timeout(Duration),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidRequest(e) => write!(f, "invalid request: {e}"),
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Exchange(e) => write!(f, "{e}"),
            Self::TooLarge => write!(f, "answer larger than {MAX_RESPONSE_BYTES} bytes"),
            Self::Body(e) => write!(f, "reading the answer: {e}"),
            Self::Timeout(t) => write!(f, "no answer within {t:?}"),
        }
    }
}

impl StdError for HttpError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::InvalidRequest(e) => Some(e),
            Self::Connect(e) => Some(e),
            Self::Exchange(e) => Some(e),
            Self::Body(e) => Some(&**e),
            Self::TooLarge | Self::Timeout(_) => None,
        }
    }
}

impl Request<'_> {
    fn build(&self) -> Result<hyper::Request<Full<Bytes>>, HttpError> {
        let mut builder = hyper::Request::builder()
            .method(self.method.clone())
            .uri(self.target)
            .header(header::HOST, self.host)
            .header(header::CONNECTION, "close");
        if let Some(token) = self.token {
            let mut value = HeaderValue::try_from(format!("Bearer {token}"))
                .map_err(|e| HttpError::InvalidRequest(e.into()))?;
            value.set_sensitive(true);
            builder = builder.header(header::AUTHORIZATION, value);
        }
        let body = match &self.body {
            Some((content_type, body)) => {
                builder = builder.header(header::CONTENT_TYPE, *content_type);
                Bytes::from(body.clone())
            }
            None => Bytes::new(),
        };
        builder
            .body(Full::new(body))
            .map_err(HttpError::InvalidRequest)
    }

    /// Sends the request and reads the whole answer, within [`Request::timeout`].
    ///
    /// # Errors
    /// [`HttpError`] when there is no complete answer.
    pub async fn send(&self) -> Result<Reply, HttpError> {
        let request = self.build()?;
        tokio::time::timeout(self.timeout, exchange(self.addr, request))
            .await
            .map_err(|_| HttpError::Timeout(self.timeout))?
    }
}

async fn exchange(
    addr: SocketAddr,
    request: hyper::Request<Full<Bytes>>,
) -> Result<Reply, HttpError> {
    let stream = TcpStream::connect(addr).await.map_err(HttpError::Connect)?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(HttpError::Exchange)?;
    let answer = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(HttpError::Exchange)?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<LengthLimitError>() {
                    HttpError::TooLarge
                } else {
                    HttpError::Body(e)
                }
            })?
            .to_bytes();
        Ok(Reply {
            status: parts.status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    // The connection future does the I/O; it is driven here rather than spawned, so that
    // nothing outlives the caller's deadline.
    let mut conn = std::pin::pin!(conn);
    let mut answer = std::pin::pin!(answer);
    tokio::select! {
        biased;
        reply = answer.as_mut() => return reply,
        done = conn.as_mut() => done.map_err(HttpError::Exchange)?,
    }
    // The connection ended cleanly (the server closed after its answer): what it delivered
    // is buffered in the answer's channel.
    answer.await
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    /// A one-shot server: reads a request head, answers `raw`, closes. Returns its address and
    /// a handle yielding the request head it read.
    pub(crate) async fn answer_once(
        raw: &'static [u8],
    ) -> (SocketAddr, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            s.write_all(raw).await.unwrap();
            s.shutdown().await.unwrap();
            String::from_utf8(head).unwrap()
        });
        (addr, task)
    }

    fn get(addr: SocketAddr) -> Request<'static> {
        Request {
            method: Method::GET,
            addr,
            host: "cp.test",
            target: "/status?instance=demo",
            token: Some("s3cret"),
            body: None,
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn reads_a_chunked_answer() {
        let (addr, server) = answer_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              5\r\n{\"run\r\nc\r\nning\": true}\r\n0\r\n\r\n",
        )
        .await;
        let reply = get(addr).send().await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "{\"running\": true}");
        let head = server.await.unwrap();
        assert!(
            head.starts_with("GET /status?instance=demo HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("authorization: Bearer s3cret\r\n"), "{head}");
        assert!(head.contains("host: cp.test\r\n"), "{head}");
    }

    #[tokio::test]
    async fn reads_a_content_length_answer_and_its_status() {
        let (addr, _server) =
            answer_once(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy").await;
        let reply = get(addr).send().await.unwrap();
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(reply.body, "busy");
    }

    #[tokio::test]
    async fn rejects_an_oversized_answer() {
        static BIG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let raw = BIG.get_or_init(|| {
            let mut v = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                MAX_RESPONSE_BYTES + 1
            )
            .into_bytes();
            v.resize(v.len() + MAX_RESPONSE_BYTES + 1, b'x');
            v
        });
        let (addr, _server) = answer_once(raw).await;
        assert!(matches!(get(addr).send().await, Err(HttpError::TooLarge)));
    }

    #[tokio::test]
    async fn times_out_when_the_server_stalls() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut req = get(listener.local_addr().unwrap());
        req.timeout = Duration::from_millis(100);
        assert!(matches!(req.send().await, Err(HttpError::Timeout(_))));
        drop(listener);
    }

    #[tokio::test]
    async fn reports_a_refused_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert!(matches!(get(addr).send().await, Err(HttpError::Connect(_))));
    }
}
