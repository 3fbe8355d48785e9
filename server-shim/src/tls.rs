//! TLS for the shim, terminated *under* the byte adapters
//! of [`crate::stream`] so they keep seeing plaintext MySQL packets.
//!
//! opensrv-mysql's own TLS support would wrap TLS around those adapters (the login tee, the
//! ERR rewrite, one packet per read), which would then see ciphertext. Instead
//! [`Transport`] sits between the socket and them:
//! - the greeting opensrv writes gets `CLIENT_SSL` (opensrv without its `tls` feature never
//!   offers it);
//! - a client's SSLRequest is answered with a TLS handshake (rustls, ring) and never reaches
//!   opensrv;
//! - inside TLS the client numbers its login 2, after the SSLRequest; opensrv expects 1, so
//!   until the login's OK or ERR client packets are renumbered down by one and the shim's up
//!   by one, and the login's `CLIENT_SSL` bit is cleared (opensrv would take a login with it
//!   for an SSLRequest).
//!
//! [`TlsOptions::load`] reads the certificate and key like the relay does (the key like
//! every secret: owner-only, bounded).

use std::fmt;
use std::future::Future as _;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use authplugin::packet::framing::parse_packet;
use authplugin::packet::{HandshakeResponse41, HandshakeV10, SslRequest};
use perceptron_io::Rewind;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// `CLIENT_SSL` in byte 1 of `capability_flags` (bit 11: 0x08).
const CLIENT_SSL_BYTE1: u8 = (authplugin::packet::capabilities::CLIENT_SSL >> 8) as u8;
/// Largest login-phase packet buffered while renumbering.
const MAX_LOGIN_PACKET: usize = 64 * 1024;

/// `--tls-cert`, `--tls-key`, `--tls-client-ca`, `--tls-min-version`.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// Certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM), owner-only permissions.
    pub key: PathBuf,
    /// CAs client certificates must chain to (mutual TLS); none asks for none.
    pub client_ca: Option<PathBuf>,
    /// Accept TLS 1.3 only.
    pub tls13_only: bool,
}

/// Why a certificate file (`--tls-cert`, `--tls-client-ca`) cannot be used.
#[derive(Debug)]
pub enum CertFileError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file is not valid PEM.
    BadPem {
        /// The file.
        path: PathBuf,
        /// What the PEM reader found.
        source: rustls_pki_types::pem::Error,
    },
    /// The file holds no PEM certificate.
    Empty {
        /// The file.
        path: PathBuf,
    },
}

impl fmt::Display for CertFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, source } => write!(f, "{}: {source}", path.display()),
            Self::BadPem { path, source } => write!(f, "{}: bad PEM: {source}", path.display()),
            Self::Empty { path } => write!(f, "{}: no PEM certificate in it", path.display()),
        }
    }
}

impl std::error::Error for CertFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { source, .. } => Some(source),
            Self::BadPem { source, .. } => Some(source),
            Self::Empty { .. } => None,
        }
    }
}

/// Why [`TlsOptions::load`] failed; the message names the option and the file.
#[derive(Debug)]
pub enum TlsError {
    /// `--tls-cert` cannot be used.
    Cert(CertFileError),
    /// `--tls-key` cannot be read (permissions, size, owner, I/O).
    Key(authplugin::key_file::SecretFileError),
    /// `--tls-key` holds no PEM private key.
    KeyNotPem {
        /// The key file.
        path: PathBuf,
    },
    /// `--tls-key` does not match the certificate of `--tls-cert`.
    KeyMismatch {
        /// The key file.
        path: PathBuf,
    },
    /// rustls refused the certificate and key.
    KeyRejected {
        /// The key file.
        path: PathBuf,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// rustls refused the protocol versions.
    Versions(rustls::Error),
    /// `--tls-client-ca` cannot be used.
    ClientCa(CertFileError),
    /// A certificate in `--tls-client-ca` is not a usable CA.
    ClientCaRejected {
        /// The CA file.
        path: PathBuf,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// No client certificate verifier could be built from `--tls-client-ca`.
    ClientVerifier {
        /// The CA file.
        path: PathBuf,
        /// rustls' reason.
        source: rustls::server::VerifierBuilderError,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cert(e) => write!(f, "--tls-cert {e}"),
            Self::Key(e) => write!(f, "--tls-key {e}"),
            Self::KeyNotPem { path } => write!(
                f,
                "--tls-key {}: no PEM private key (PKCS#8, PKCS#1 or SEC1) in it",
                path.display()
            ),
            Self::KeyMismatch { path } => write!(
                f,
                "--tls-key {}: does not match the certificate of --tls-cert",
                path.display()
            ),
            Self::KeyRejected { path, source } => {
                write!(f, "--tls-key {}: {source}", path.display())
            }
            Self::Versions(e) => write!(f, "TLS: {e}"),
            Self::ClientCa(e) => write!(f, "--tls-client-ca {e}"),
            Self::ClientCaRejected { path, source } => {
                write!(f, "--tls-client-ca {}: {source}", path.display())
            }
            Self::ClientVerifier { path, source } => {
                write!(f, "--tls-client-ca {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Cert(e) | Self::ClientCa(e) => Some(e),
            Self::Key(e) => Some(e),
            Self::KeyRejected { source, .. }
            | Self::Versions(source)
            | Self::ClientCaRejected { source, .. } => Some(source),
            Self::ClientVerifier { source, .. } => Some(source),
            Self::KeyNotPem { .. } | Self::KeyMismatch { .. } => None,
        }
    }
}

impl TlsOptions {
    /// Loads the certificate, key and client policy.
    ///
    /// # Errors
    /// [`TlsError`], naming the option and the file.
    pub fn load(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let chain = read_certs(&self.cert).map_err(TlsError::Cert)?;
        let key_text = authplugin::read_secret_file(&self.key).map_err(TlsError::Key)?;
        let key = PrivateKeyDer::from_pem_slice(key_text.as_bytes()).map_err(|_| {
            TlsError::KeyNotPem {
                path: self.key.clone(),
            }
        })?;
        let versions: &[&'static rustls::SupportedProtocolVersion] = if self.tls13_only {
            &[&rustls::version::TLS13]
        } else {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .map_err(TlsError::Versions)?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in read_certs(ca).map_err(TlsError::ClientCa)? {
                    roots
                        .add(cert)
                        .map_err(|source| TlsError::ClientCaRejected {
                            path: ca.clone(),
                            source,
                        })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|source| TlsError::ClientVerifier {
                            path: ca.clone(),
                            source,
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(chain, key).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                path: self.key.clone(),
            },
            source => TlsError::KeyRejected {
                path: self.key.clone(),
                source,
            },
        })?;
        Ok(Arc::new(config))
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, CertFileError> {
    let pem = std::fs::read(path).map_err(|source| CertFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|source| CertFileError::BadPem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(CertFileError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// Sets `CLIENT_SSL` in a framed HandshakeV10 (`packet`: header and payload). `None` if it is
/// not one (too short, no version terminator).
#[must_use]
pub fn offer_tls_in_greeting(packet: &mut [u8]) -> Option<()> {
    // header(4) protocol(1) server_version NUL connection_id(4) auth_plugin_data_part_1(8)
    // filler(1) capability_flags_1(2)
    let version_end = packet.get(5..)?.iter().position(|b| *b == 0)? + 5;
    let caps = version_end + 1 + 4 + 8 + 1;
    let byte = packet.get_mut(caps + 1)?;
    *byte |= CLIENT_SSL_BYTE1;
    Some(())
}

/// The socket under the stream adapters: plain, in a TLS handshake, or TLS.
enum Io {
    Plain(TcpStream),
    Accepting(Box<tokio_rustls::Accept<Rewind<TcpStream>>>),
    Tls(Box<tokio_rustls::server::TlsStream<Rewind<TcpStream>>>),
    Gone,
}

/// Where the client side of the conversation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadPhase {
    /// Waiting for the client's first packet (SSLRequest or login).
    First,
    /// Inside TLS, before the login's verdict: packets renumbered down by one.
    Renumbered,
    /// Bytes as they come.
    Through,
    /// A plaintext login refused with ERR 3159: end-of-stream once it is sent.
    Refused,
}

/// Where the shim's side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WritePhase {
    /// The greeting, buffered until whole so `CLIENT_SSL` can be set.
    Greeting,
    /// Inside TLS, before the login's verdict: packets renumbered up by one.
    Renumbered,
    /// Bytes as they go.
    Through,
}

/// The shim's socket with TLS on request; see the module docs.
pub struct Transport {
    io: Io,
    tls: Arc<ServerConfig>,
    /// Refuse a plaintext login with ERR 3159 (`--require-secure-transport`).
    require_tls: bool,
    /// The TLS version once the handshake is done (`TLSv1.3`), for `Ssl_version`.
    negotiated: Arc<OnceLock<&'static str>>,
    read_phase: ReadPhase,
    write_phase: WritePhase,
    /// The capability flags of the shim's greeting (they decide a login's fields).
    greeting_flags: u32,
    /// Client bytes read and not yet whole packets (before [`ReadPhase::Through`]).
    inbound: Vec<u8>,
    /// Packets ready for the adapters above.
    ready: Vec<u8>,
    ready_at: usize,
    /// The shim's bytes not yet whole packets (greeting, renumbered login phase).
    pending: Vec<u8>,
    /// Bytes due to the socket before anything else.
    outbound: Vec<u8>,
    outbound_at: usize,
}

impl Transport {
    /// Wraps an accepted client socket.
    #[must_use]
    pub const fn new(
        socket: TcpStream,
        tls: Arc<ServerConfig>,
        require_tls: bool,
        negotiated: Arc<OnceLock<&'static str>>,
    ) -> Self {
        Self {
            io: Io::Plain(socket),
            tls,
            require_tls,
            negotiated,
            read_phase: ReadPhase::First,
            write_phase: WritePhase::Greeting,
            greeting_flags: 0,
            inbound: Vec::new(),
            ready: Vec::new(),
            ready_at: 0,
            pending: Vec::new(),
            outbound: Vec::new(),
            outbound_at: 0,
        }
    }

    /// Reads from the socket (plain or TLS) into `inbound`; `Ok(false)` at end-of-stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let mut chunk = [0u8; 4096];
        let mut buf = ReadBuf::new(&mut chunk);
        match &mut self.io {
            Io::Plain(s) => ready!(Pin::new(s).poll_read(cx, &mut buf))?,
            Io::Tls(s) => ready!(Pin::new(s.as_mut()).poll_read(cx, &mut buf))?,
            Io::Accepting(_) | Io::Gone => return Poll::Ready(Err(gone())),
        }
        let n = buf.filled().len();
        self.inbound.extend_from_slice(buf.filled());
        if self.inbound.len() > MAX_LOGIN_PACKET + 4 {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "login packet too large",
            )));
        }
        Poll::Ready(Ok(n > 0))
    }

    /// Takes one whole packet off `inbound`: `(sequence_id, framed bytes)`.
    fn take_packet(&mut self) -> io::Result<Option<(u8, Vec<u8>)>> {
        let parsed = parse_packet(&self.inbound, MAX_LOGIN_PACKET)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        Ok(parsed.map(|(packet, used)| {
            let framed: Vec<u8> = self.inbound.drain(..used).collect();
            (packet.sequence_id, framed)
        }))
    }

    /// Handles the client's packets until one is ready for the adapters (or the socket has
    /// nothing more for now).
    fn poll_login_packet(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if let Io::Accepting(accept) = &mut self.io {
                let tls = ready!(Pin::new(accept.as_mut()).poll(cx))?;
                // Versions are named as MariaDB's `Ssl_version` names them; the shim offers
                // only these two (`--tls-min-version`).
                let _ = self
                    .negotiated
                    .set(match tls.get_ref().1.protocol_version() {
                        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                        _ => "TLS",
                    });
                self.io = Io::Tls(Box::new(tls));
                self.read_phase = ReadPhase::Renumbered;
                continue;
            }
            if self.read_phase == ReadPhase::Refused {
                ready!(self.poll_drain(cx))?;
                return Poll::Ready(Ok(()));
            }
            if self.read_phase == ReadPhase::Through {
                // Bytes read past the login (a pipelined command) go up as they are.
                self.ready.append(&mut self.inbound);
                return Poll::Ready(Ok(()));
            }
            let Some((sequence_id, mut framed)) = self.take_packet()? else {
                if !ready!(self.poll_fill(cx))? {
                    // End-of-stream: hand over what there is; opensrv sees the close.
                    self.ready.append(&mut self.inbound);
                    self.read_phase = ReadPhase::Through;
                    return Poll::Ready(Ok(()));
                }
                continue;
            };
            match self.read_phase {
                ReadPhase::First => {
                    if sequence_id == 1 && SslRequest::matches(framed.get(4..).unwrap_or_default())
                    {
                        let early = std::mem::take(&mut self.inbound);
                        let Io::Plain(socket) = std::mem::replace(&mut self.io, Io::Gone) else {
                            return Poll::Ready(Err(gone()));
                        };
                        self.io = Io::Accepting(Box::new(
                            tokio_rustls::TlsAcceptor::from(Arc::clone(&self.tls))
                                .accept(Rewind::new(early, socket)),
                        ));
                        continue;
                    }
                    if self.require_tls && !self.is_relayed(&framed) {
                        // MySQL's answer, sent here: opensrv never sees the login, and the
                        // end-of-stream that follows ends its connection.
                        let mut err = Vec::new();
                        authplugin::packet::write_packet(&mut err, 2, &insecure_transport_err());
                        self.outbound.extend_from_slice(&err);
                        self.inbound.clear();
                        self.read_phase = ReadPhase::Refused;
                        continue;
                    }
                    clear_client_ssl(&mut framed);
                    self.read_phase = ReadPhase::Through;
                    self.ready.extend_from_slice(&framed);
                    self.ready.append(&mut self.inbound);
                    return Poll::Ready(Ok(()));
                }
                ReadPhase::Renumbered => {
                    if let Some(seq) = framed.get_mut(3) {
                        *seq = seq.wrapping_sub(1);
                    }
                    if sequence_id == 2 {
                        clear_client_ssl(&mut framed);
                    }
                    self.ready.extend_from_slice(&framed);
                    return Poll::Ready(Ok(()));
                }
                ReadPhase::Through | ReadPhase::Refused => {
                    self.ready.extend_from_slice(&framed);
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }

    /// Writes `outbound` to the socket.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.outbound_at < self.outbound.len() {
            let rest = self.outbound.get(self.outbound_at..).unwrap_or_default();
            let n = ready!(write_io(&mut self.io, cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.outbound_at += n;
        }
        self.outbound.clear();
        self.outbound_at = 0;
        Poll::Ready(Ok(()))
    }

    fn poll_write_io(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        write_io(&mut self.io, cx, bytes)
    }

    /// Moves whole packets from `pending` to `outbound`, patched for the phase.
    fn frame_pending(&mut self) -> io::Result<()> {
        loop {
            let parsed = parse_packet(&self.pending, usize::MAX >> 8)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let Some((packet, used)) = parsed else {
                return Ok(());
            };
            let mut framed: Vec<u8> = self.pending.drain(..used).collect();
            match self.write_phase {
                WritePhase::Greeting => {
                    self.greeting_flags = HandshakeV10::decode(&packet.payload)
                        .map(|g| g.capability_flags)
                        .unwrap_or_default();
                    offer_tls_in_greeting(&mut framed).ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "not a greeting")
                    })?;
                    self.write_phase = WritePhase::Renumbered;
                }
                WritePhase::Renumbered => {
                    if let Some(seq) = framed.get_mut(3) {
                        *seq = seq.wrapping_add(1);
                    }
                    // OK or ERR: the login's verdict; commands follow with their own numbers.
                    if matches!(packet.payload.first(), Some(0x00 | 0xFF)) {
                        self.write_phase = WritePhase::Through;
                        self.read_phase = ReadPhase::Through;
                        self.outbound.extend_from_slice(&framed);
                        self.outbound.append(&mut self.pending);
                        return Ok(());
                    }
                }
                WritePhase::Through => {}
            }
            self.outbound.extend_from_slice(&framed);
        }
    }
}

fn write_io(io: &mut Io, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
    match io {
        Io::Plain(s) => Pin::new(s).poll_write(cx, bytes),
        Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, bytes),
        Io::Accepting(_) | Io::Gone => Poll::Ready(Err(gone())),
    }
}

/// MySQL's ERR 3159 for a login without TLS where TLS is required.
fn insecure_transport_err() -> Vec<u8> {
    let (code, state) = authplugin::packet::err::codes::ER_SECURE_TRANSPORT_REQUIRED;
    authplugin::packet::ErrPacket::new(
        code,
        state,
        "Connections using insecure transport are prohibited while \
         --require_secure_transport=ON.",
    )
    .to_bytes()
}

impl Transport {
    /// Whether a framed login is a relay's (plugin `perceptron_dual_auth`): the relay applies
    /// `require_secure_transport` to the client's leg itself, and its own leg to the shim is
    /// authenticated by the key. A client that only claims the plugin still needs the key.
    fn is_relayed(&self, framed: &[u8]) -> bool {
        HandshakeResponse41::decode_for_server(
            framed.get(4..).unwrap_or_default(),
            self.greeting_flags,
        )
        .is_ok_and(|login| {
            login.client_plugin_name.as_deref() == Some(authplugin::payload::PLUGIN_NAME.as_bytes())
        })
    }
}

/// Clears `CLIENT_SSL` in a framed HandshakeResponse41.
fn clear_client_ssl(framed: &mut [u8]) {
    if let Some(b) = framed.get_mut(5) {
        *b &= !CLIENT_SSL_BYTE1;
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "TLS handshake failed or protocol error",
    )
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ready_at >= this.ready.len() {
            this.ready.clear();
            this.ready_at = 0;
            ready!(this.poll_login_packet(cx))?;
        }
        if this.ready_at < this.ready.len() {
            let rest = this.ready.get(this.ready_at..).unwrap_or_default();
            let n = rest.len().min(buf.remaining());
            buf.put_slice(rest.get(..n).unwrap_or_default());
            this.ready_at += n;
            return Poll::Ready(Ok(()));
        }
        if this.read_phase == ReadPhase::Refused {
            return Poll::Ready(Ok(()));
        }
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Io::Accepting(_) | Io::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        let renumber = this.write_phase == WritePhase::Greeting
            || (this.write_phase == WritePhase::Renumbered
                && this.read_phase == ReadPhase::Renumbered);
        if !renumber {
            if this.write_phase == WritePhase::Renumbered {
                // A plaintext client: nothing to renumber.
                this.write_phase = WritePhase::Through;
            }
            return this.poll_write_io(cx, bytes);
        }
        this.pending.extend_from_slice(bytes);
        this.frame_pending()?;
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Io::Accepting(_) | Io::Gone => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Io::Accepting(_) | Io::Gone => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_client_ssl_in_an_opensrv_greeting() {
        // header, protocol 10, "8.0.0-shim\0", id 7, 8 scramble bytes, filler, caps 0xa20f.
        let mut g = vec![0, 0, 0, 0, 10];
        g.extend_from_slice(b"8.0.0-shim\0");
        g.extend_from_slice(&[7, 0, 0, 0]);
        g.extend_from_slice(b"abcdefgh");
        g.push(0);
        g.extend_from_slice(&[0x0f, 0xa2]);
        g.extend_from_slice(&[0x21, 0x02, 0, 0x3f, 0x00]);
        offer_tls_in_greeting(&mut g).unwrap();
        let caps_at = 5 + 11 + 4 + 8 + 1;
        assert_eq!(&g[caps_at..caps_at + 2], &[0x0f, 0xaa]);
        assert!(offer_tls_in_greeting(&mut [0, 0, 0, 0, 10, b'x']).is_none());
        for n in 0..caps_at + 2 {
            assert!(offer_tls_in_greeting(&mut g.clone()[..n]).is_none(), "{n}");
        }
    }

    #[test]
    fn load_errors_name_the_option_and_the_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("shim-tls-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            path
        };
        let key = rcgen::KeyPair::generate().unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let options = |cert: &Path, key: &Path| TlsOptions {
            cert: cert.to_owned(),
            key: key.to_owned(),
            client_ca: None,
            tls13_only: false,
        };
        let cert_pem = write("cert.pem", &cert.pem());
        let key_pem = write("key.pem", &key.serialize_pem());
        let other_pem = write("other.pem", &other.serialize_pem());
        let not_pem = write("not.pem", "not PEM");
        let missing = dir.join("missing.pem");
        let message = |o: TlsOptions| o.load().err().map(|e| e.to_string()).unwrap_or_default();

        assert!(options(&cert_pem, &key_pem).load().is_ok());
        assert!(
            message(options(&missing, &key_pem))
                .starts_with(&format!("--tls-cert {}: ", missing.display()))
        );
        assert_eq!(
            message(options(&not_pem, &key_pem)),
            format!("--tls-cert {}: no PEM certificate in it", not_pem.display())
        );
        assert_eq!(
            message(options(&cert_pem, &not_pem)),
            format!(
                "--tls-key {}: no PEM private key (PKCS#8, PKCS#1 or SEC1) in it",
                not_pem.display()
            )
        );
        assert_eq!(
            message(options(&cert_pem, &other_pem)),
            format!(
                "--tls-key {}: does not match the certificate of --tls-cert",
                other_pem.display()
            )
        );
        let with_ca = TlsOptions {
            client_ca: Some(not_pem.clone()),
            ..options(&cert_pem, &key_pem)
        };
        assert_eq!(
            message(with_ca),
            format!(
                "--tls-client-ca {}: no PEM certificate in it",
                not_pem.display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    use authplugin::Scramble;
    use authplugin::packet::capabilities::*;
    use authplugin::packet::write_packet;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Reads one packet: `(sequence_id, payload)`.
    async fn read<S: AsyncRead + Unpin>(s: &mut S, buf: &mut Vec<u8>) -> (u8, Vec<u8>) {
        loop {
            if let Some((p, used)) = parse_packet(buf, 1 << 20).unwrap() {
                buf.drain(..used);
                return (p.sequence_id, p.payload);
            }
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn write<S: AsyncWrite + Unpin>(s: &mut S, seq: u8, payload: &[u8]) {
        let mut out = Vec::new();
        write_packet(&mut out, seq, payload);
        s.write_all(&out).await.unwrap();
        s.flush().await.unwrap();
    }

    fn pki() -> (Arc<ServerConfig>, Arc<rustls::ClientConfig>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    }

    const GREETING_FLAGS: u32 =
        CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH | CLIENT_CONNECT_WITH_DB;

    fn login(flags: u32) -> Vec<u8> {
        HandshakeResponse41 {
            client_flag: GREETING_FLAGS | flags,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
            username: b"app".to_vec(),
            auth_response: zeroize::Zeroizing::new(vec![7; 20]),
            database: Some(Vec::new()),
            client_plugin_name: Some(b"mysql_native_password".to_vec()),
            connect_attrs: None,
            zstd_compression_level: None,
        }
        .to_bytes()
    }

    /// The shim's side as opensrv plays it (greeting 0, login 1, switch 2, answer 3, OK 4,
    /// then a command 0 and its reply 1), over a [`Transport`]; the client speaks TLS and its
    /// own numbering.
    #[tokio::test]
    async fn a_tls_login_is_renumbered_for_opensrv_and_back() {
        let (server_tls, client_tls) = pki();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shim = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut t = Transport::new(socket, server_tls, true, Arc::default());
            let scramble = Scramble::from_bytes(*b"abcdefghijklmnopqrst");
            let g = HandshakeV10::new(
                b"8.0.36-shim".to_vec(),
                1,
                &scramble,
                GREETING_FLAGS,
                45,
                2,
                "mysql_native_password",
            );
            write(&mut t, 0, &g.to_bytes()).await;
            let mut buf = Vec::new();
            let (seq, payload) = read(&mut t, &mut buf).await;
            assert_eq!(seq, 1, "opensrv sees the login as packet 1");
            let login = HandshakeResponse41::decode_for_server(&payload, GREETING_FLAGS).unwrap();
            assert_eq!(login.client_flag & CLIENT_SSL, 0, "and without CLIENT_SSL");
            assert_eq!(login.username, b"app");
            write(
                &mut t,
                2,
                b"\xfemysql_native_password\0abcdefghijklmnopqrst\0",
            )
            .await;
            assert_eq!(read(&mut t, &mut buf).await, (3, vec![9; 20]));
            write(&mut t, 4, &[0, 0, 0, 2, 0, 0, 0]).await;
            assert_eq!(read(&mut t, &mut buf).await, (0, b"\x03SELECT 1".to_vec()));
            write(&mut t, 1, b"reply").await;
        });
        let mut plain = TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        let (seq, greeting) = read(&mut plain, &mut buf).await;
        assert_eq!(seq, 0);
        let flags = HandshakeV10::decode(&greeting).unwrap().capability_flags;
        assert_ne!(flags & CLIENT_SSL, 0, "the greeting offers TLS");
        let mut ssl = Vec::new();
        SslRequest {
            client_flag: GREETING_FLAGS | CLIENT_SSL,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
        }
        .encode(&mut ssl);
        write(&mut plain, 1, &ssl).await;
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(client_tls)
            .connect(name, plain)
            .await
            .unwrap();
        write(&mut tls, 2, &login(CLIENT_SSL)).await;
        let mut buf = Vec::new();
        let (seq, switch) = read(&mut tls, &mut buf).await;
        assert_eq!((seq, switch[0]), (3, 0xfe));
        write(&mut tls, 4, &[9; 20]).await;
        assert_eq!(
            read(&mut tls, &mut buf).await,
            (5, vec![0, 0, 0, 2, 0, 0, 0])
        );
        write(&mut tls, 0, b"\x03SELECT 1").await;
        assert_eq!(read(&mut tls, &mut buf).await, (1, b"reply".to_vec()));
        shim.await.unwrap();
    }

    #[tokio::test]
    async fn a_plaintext_login_gets_3159_when_tls_is_required() {
        let (server_tls, _) = pki();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shim = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut t = Transport::new(socket, server_tls, true, Arc::default());
            let scramble = Scramble::from_bytes(*b"abcdefghijklmnopqrst");
            let g = HandshakeV10::new(
                b"8.0.36-shim".to_vec(),
                1,
                &scramble,
                GREETING_FLAGS,
                45,
                2,
                "mysql_native_password",
            );
            write(&mut t, 0, &g.to_bytes()).await;
            // opensrv never sees the login: end-of-stream.
            assert_eq!(t.read(&mut [0u8; 64]).await.unwrap(), 0);
        });
        let mut plain = TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        let _greeting = read(&mut plain, &mut buf).await;
        write(&mut plain, 1, &login(0)).await;
        let (seq, err) = read(&mut plain, &mut buf).await;
        assert_eq!(seq, 2);
        assert_eq!(err, insecure_transport_err());
        assert_eq!(&err[..3], &[0xff, 0x57, 0x0c], "ERR 3159");
        shim.await.unwrap();
    }

    #[test]
    fn clears_client_ssl_in_a_login() {
        let mut login = vec![40, 0, 0, 2, 0x85, 0xae, 0x0f, 0x00];
        clear_client_ssl(&mut login);
        assert_eq!(login[5], 0xa6);
    }
}
