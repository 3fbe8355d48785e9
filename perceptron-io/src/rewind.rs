//! A socket with bytes already read from it put back in front.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A socket with bytes already read from it put back in front: a client may send its TLS
/// ClientHello in the same segment as its SSLRequest, so the packet reader can hold the start
/// of the handshake. Writes go straight to the socket.
#[derive(Debug)]
pub struct Rewind<S> {
    early: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    /// `early` is read before `inner`.
    pub const fn new(early: Vec<u8>, inner: S) -> Self {
        Self {
            early,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(rest) = this.early.get(this.at..).filter(|r| !r.is_empty()) {
            let n = rest.len().min(buf.remaining());
            buf.put_slice(rest.get(..n).unwrap_or_default());
            this.at += n;
            if this.at == this.early.len() {
                // Given back once read: a long-lived connection keeps no copy of its start.
                this.early = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn reads_the_early_bytes_then_the_socket_and_writes_through() {
        let (ours, mut peer) = tokio::io::duplex(64);
        let mut s = Rewind::new(b"hello ".to_vec(), ours);
        peer.write_all(b"world").await.unwrap();
        let mut small = [0u8; 4];
        s.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"hell");
        let mut rest = [0u8; 7];
        s.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"o world");
        assert!(
            s.early.is_empty(),
            "the early bytes are given back once read"
        );
        s.write_all(b"back").await.unwrap();
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"back");
    }
}
