//! TLS on the client leg (architecture.md §6): the relay terminates MySQL's in-band TLS
//! upgrade (SSLRequest, then a TLS handshake, then the HandshakeResponse41 inside TLS) on the
//! perceptron route, with rustls and its `ring` provider.
//!
//! - [`TlsSettings`]: an instance's `[instance.tls]` as written (paths and options).
//! - [`ServerTls`]: the certificate and key loaded into a rustls `ServerConfig`, swapped in
//!   place on reload; the served certificate's expiry for the metric.
//! - [`ClientStream`]: the client socket, plain or TLS; the login phases and the byte pump
//!   are generic over it, so a connection keeps its TLS for its whole life.
//! - [`accept`]: the handshake itself, with its failures classified ([`TlsFailure`]).
//! - [`not_after`]: the certificate's expiry from its DER (pure, byte fixtures).
//!
//! The key is read like every other secret (`authplugin::read_secret_file`: owner-only
//! permissions, bounded size) and never logged.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use perceptron_io::Rewind;

use crate::config::{ComputeTlsMode, TlsSettings, TlsVersion};

/// Which file of `[instance.tls]` a load error is about (the config key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// `cert`.
    Cert,
    /// `key`.
    Key,
    /// `client_ca`.
    ClientCa,
}

impl TlsFile {
    /// The key's name under `[instance.tls]`.
    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::Cert => "cert",
            Self::Key => "key",
            Self::ClientCa => "client_ca",
        }
    }
}

/// Why `[instance.tls]` cannot be loaded.
#[derive(Debug)]
pub struct TlsLoadError {
    /// The key whose file is to blame.
    pub file: TlsFile,
    /// That file.
    pub path: PathBuf,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for TlsLoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for TlsLoadError {}

/// A loaded certificate, key and client policy.
#[derive(Debug)]
pub struct LoadedTls {
    /// What rustls serves with.
    pub config: Arc<ServerConfig>,
    /// The leaf certificate's `notAfter`, Unix seconds (none if it cannot be read).
    pub not_after: Option<i64>,
}

/// The crypto provider: rustls's `ring` (the design names ring; no aws-lc).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads `settings` into a rustls server configuration.
///
/// # Errors
/// [`TlsLoadError`] naming the key and file: unreadable, a key others can read, no PEM
/// certificate or key in it, a key that does not match the certificate.
pub fn load(settings: &TlsSettings) -> Result<LoadedTls, TlsLoadError> {
    let err = |file: TlsFile, path: &Path, problem: String| TlsLoadError {
        file,
        path: path.to_owned(),
        problem,
    };
    let chain = read_certs(&settings.cert)
        .map_err(|p| err(TlsFile::Cert, &settings.cert, p.to_string()))?;
    let key_text = authplugin::read_secret_file(&settings.key).map_err(|e| {
        err(
            TlsFile::Key,
            &settings.key,
            secret_problem(&e, &settings.key),
        )
    })?;
    let key = PrivateKeyDer::from_pem_slice(key_text.as_bytes()).map_err(|_| {
        err(
            TlsFile::Key,
            &settings.key,
            "no PEM private key (PKCS#8, PKCS#1 or SEC1) in it".into(),
        )
    })?;
    let versions: &[&'static rustls::SupportedProtocolVersion] = match settings.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(|e| err(TlsFile::Cert, &settings.cert, e.to_string()))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs(ca).map_err(|p| err(TlsFile::ClientCa, ca, p.to_string()))? {
                roots
                    .add(cert)
                    .map_err(|e| err(TlsFile::ClientCa, ca, format!("unusable CA: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| err(TlsFile::ClientCa, ca, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let not_after = chain.first().and_then(|c| not_after(c));
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| err(TlsFile::Key, &settings.key, key_problem(&e)))?;
    // No session tickets or resumption state: every client connection is a fresh
    // handshake, and the relay keeps nothing of a client between connections.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(LoadedTls {
        config: Arc::new(config),
        not_after,
    })
}

/// Why a file of PEM certificates is unusable.
#[derive(Debug)]
pub enum CertFileError {
    /// It cannot be read.
    Read(io::Error),
    /// It is not PEM.
    Pem(rustls_pki_types::pem::Error),
    /// It holds no certificate.
    Empty,
}

impl std::fmt::Display for CertFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read(e) => write!(f, "cannot read: {e}"),
            Self::Pem(e) => write!(f, "bad PEM: {e}"),
            Self::Empty => f.write_str("no PEM certificate in it"),
        }
    }
}

impl std::error::Error for CertFileError {}

/// The PEM certificates in `path`.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, CertFileError> {
    let pem = std::fs::read(path).map_err(CertFileError::Read)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(CertFileError::Pem)?;
    if certs.is_empty() {
        return Err(CertFileError::Empty);
    }
    Ok(certs)
}

/// A secret-file error without its leading path (the load error names the file).
fn secret_problem(e: &authplugin::SecretFileError, path: &Path) -> String {
    let text = e.to_string();
    text.strip_prefix(&path.display().to_string())
        .map(|rest| rest.trim_start_matches(':').trim_start().to_owned())
        .unwrap_or(text)
}

fn key_problem(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InconsistentKeys(_) => "does not match the certificate in cert".into(),
        other => format!("unusable key: {other}"),
    }
}

/// An instance's TLS, reloadable in place: connections take the configuration current when
/// they start their handshake.
#[derive(Debug)]
pub struct ServerTls {
    /// Where it was loaded from.
    pub settings: TlsSettings,
    current: RwLock<Arc<LoadedTls>>,
}

impl ServerTls {
    /// Loads `settings`.
    ///
    /// # Errors
    /// [`TlsLoadError`].
    pub fn new(settings: TlsSettings) -> Result<Self, TlsLoadError> {
        let loaded = load(&settings)?;
        Ok(Self {
            settings,
            current: RwLock::new(Arc::new(loaded)),
        })
    }

    /// What new handshakes use.
    #[must_use]
    pub fn current(&self) -> Arc<LoadedTls> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads the files again; on success new handshakes use them (connections already in TLS
    /// keep theirs). On failure the previous certificate stays in use.
    ///
    /// # Errors
    /// [`TlsLoadError`].
    pub fn reload(&self) -> Result<Arc<LoadedTls>, TlsLoadError> {
        let loaded = Arc::new(load(&self.settings)?);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&loaded);
        Ok(loaded)
    }
}

/// How a TLS handshake with a client failed: a closed set, each a metric label
/// (`relay_classifications_total{class=...}`). None of them wakes anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// Mutual TLS: the client's certificate is missing or does not chain to `client_ca`.
    ClientCertRefused,
    /// The client refused the relay's certificate (an alert: unknown CA, bad certificate...).
    RefusedByClient,
    /// No TLS version, cipher suite or key exchange both sides support.
    Incompatible,
    /// Not TLS, or TLS that breaks the protocol.
    Malformed,
    /// The client closed or reset the connection mid-handshake.
    Closed,
    /// The handshake did not finish within `handshake_timeout`.
    TimedOut,
}

impl TlsFailure {
    /// Classifies the error tokio-rustls reports for a failed handshake.
    #[must_use]
    pub fn of(e: &io::Error) -> Self {
        use rustls::AlertDescription as A;
        let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
            return Self::Closed;
        };
        match tls {
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
                Self::ClientCertRefused
            }
            rustls::Error::PeerIncompatible(_)
            | rustls::Error::AlertReceived(
                A::ProtocolVersion | A::HandshakeFailure | A::InsufficientSecurity,
            ) => Self::Incompatible,
            rustls::Error::AlertReceived(_) => Self::RefusedByClient,
            _ => Self::Malformed,
        }
    }

    /// The metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::ClientCertRefused => "tls_client_cert_refused",
            Self::RefusedByClient => "tls_refused_by_client",
            Self::Incompatible => "tls_incompatible",
            Self::Malformed => "tls_malformed",
            Self::Closed => "tls_closed",
            Self::TimedOut => "tls_handshake_timeout",
        }
    }
}

/// The client side of a connection: plain TCP, or TLS once the client asked for it.
#[derive(Debug)]
pub enum ClientStream<S> {
    /// No TLS (yet).
    Plain(S),
    /// TLS terminated by the relay.
    Tls(Box<tokio_rustls::server::TlsStream<Rewind<S>>>),
    /// Between the two, or after a failed handshake: every operation fails.
    Gone,
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "client stream lost in a TLS handshake",
    )
}

impl<S> ClientStream<S> {
    /// The server name (SNI) the client asked for in its TLS handshake, if any.
    #[must_use]
    pub fn server_name(&self) -> Option<&str> {
        match self {
            Self::Tls(tls) => tls.get_ref().1.server_name(),
            Self::Plain(_) | Self::Gone => None,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ClientStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            // Most MySQL clients close after COM_QUIT without a TLS close_notify; the protocol
            // has its own end, so that is an end-of-stream, not a failure.
            Self::Tls(s) => match Pin::new(s.as_mut()).poll_read(cx, buf) {
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    Poll::Ready(Ok(()))
                }
                other => other,
            },
            Self::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ClientStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Self::Gone => Poll::Ready(Ok(())),
        }
    }
}

/// Runs the server side of a TLS handshake on `plain`, a client whose SSLRequest has just
/// been read; `early` holds bytes already read past it (the start of the ClientHello).
/// Unbounded: the caller's login deadline bounds it.
///
/// # Errors
/// [`TlsFailure`].
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    config: Arc<ServerConfig>,
    plain: S,
    early: Vec<u8>,
) -> Result<ClientStream<S>, TlsFailure> {
    let accepted = tokio_rustls::TlsAcceptor::from(config)
        .accept(Rewind::new(early, plain))
        .await
        .map_err(|e| TlsFailure::of(&e))?;
    Ok(ClientStream::Tls(Box::new(accepted)))
}

/// What the relay needs to speak TLS to a compute.
#[derive(Debug, Clone)]
pub struct ComputeTls {
    /// The rustls client configuration.
    pub config: Arc<rustls::ClientConfig>,
    /// The name the compute's certificate must carry (`verify`; its IP address by default).
    pub name: rustls_pki_types::ServerName<'static>,
}

/// Why the compute leg's TLS client cannot be built.
#[derive(Debug)]
pub enum ComputeTlsError {
    /// `compute_tls = "verify"` without `compute_ca`.
    NoCa,
    /// `compute_ca` is unreadable, holds no certificate or an unusable one.
    Ca {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The name the certificate must carry is neither a DNS name nor an IP address.
    Name(String),
    /// rustls refused the protocol versions (not with the `ring` provider's defaults).
    Protocol(rustls::Error),
}

impl ComputeTlsError {
    /// The instance key to blame.
    #[must_use]
    pub const fn key(&self) -> &'static str {
        match self {
            Self::NoCa | Self::Protocol(_) => "compute_tls",
            Self::Ca { .. } => "compute_ca",
            Self::Name(_) => "compute_tls_name",
        }
    }
}

impl std::fmt::Display for ComputeTlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoCa => f.write_str("compute_tls = \"verify\" needs compute_ca"),
            Self::Ca { path, problem } => write!(f, "{}: {problem}", path.display()),
            Self::Name(name) => write!(f, "'{name}' is not a DNS name or an IP address"),
            Self::Protocol(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ComputeTlsError {}

/// Builds the compute leg's TLS client for `mode` (`None` for `off`).
///
/// # Errors
/// [`ComputeTlsError`]: about `ca` (missing, unreadable, no certificate) or `name`.
pub fn compute_client(
    mode: ComputeTlsMode,
    ca: Option<&Path>,
    name: &str,
) -> Result<Option<ComputeTls>, ComputeTlsError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(ComputeTlsError::Protocol)?;
    let config = match mode {
        ComputeTlsMode::Off => return Ok(None),
        ComputeTlsMode::On => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
        ComputeTlsMode::Verify => {
            let ca = ca.ok_or(ComputeTlsError::NoCa)?;
            let ca_error = |problem| ComputeTlsError::Ca {
                path: ca.to_owned(),
                problem,
            };
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs(ca).map_err(|p| ca_error(p.to_string()))? {
                roots
                    .add(cert)
                    .map_err(|e| ca_error(format!("unusable CA: {e}")))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    let name = rustls_pki_types::ServerName::try_from(name.to_owned())
        .map_err(|_| ComputeTlsError::Name(name.to_owned()))?;
    Ok(Some(ComputeTls {
        config: Arc::new(config),
        name,
    }))
}

/// `compute_tls = "on"`: accepts any certificate (signatures are still checked, so the
/// handshake is sound; who holds the key is not).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The compute side of a relayed connection: plain TCP, or TLS with `compute_tls`.
#[derive(Debug)]
pub enum ComputeStream<S> {
    /// Plaintext.
    Plain(S),
    /// TLS the relay started after the compute's greeting.
    Tls(Box<tokio_rustls::client::TlsStream<S>>),
}

impl<S: AsyncRead + AsyncWrite + Unpin> ComputeStream<S> {
    /// Runs the client side of a TLS handshake on a plain stream whose SSLRequest has been
    /// sent.
    ///
    /// # Errors
    /// The handshake's error (an untrusted certificate, no common version, a close).
    pub async fn start_tls(self, tls: &ComputeTls) -> io::Result<Self> {
        let Self::Plain(plain) = self else {
            // Already TLS.
            return Ok(self);
        };
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config))
            .connect(tls.name.clone(), plain)
            .await?;
        Ok(Self::Tls(Box::new(stream)))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ComputeStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => match Pin::new(s.as_mut()).poll_read(cx, buf) {
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    Poll::Ready(Ok(()))
                }
                other => other,
            },
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ComputeStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The `notAfter` of an X.509 certificate, in Unix seconds; `None` if the DER is not one
/// certificate (`x509-cert` decodes it with every length checked).
#[must_use]
pub fn not_after(der: &[u8]) -> Option<i64> {
    use x509_cert::der::Decode as _;
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let at = cert.tbs_certificate.validity.not_after.to_unix_duration();
    i64::try_from(at.as_secs()).ok()
}

impl ClientStream<tokio::net::TcpStream> {
    /// The TCP socket, when the relay adds no layer on it (no TLS): what the kernel splice
    /// (`crate::kernel_splice`) can take.
    #[must_use]
    pub const fn tcp(&self) -> Option<&tokio::net::TcpStream> {
        match self {
            Self::Plain(s) => Some(s),
            Self::Tls(_) | Self::Gone => None,
        }
    }
}

impl ComputeStream<tokio::net::TcpStream> {
    /// See [`ClientStream::tcp`].
    #[must_use]
    pub const fn tcp(&self) -> Option<&tokio::net::TcpStream> {
        match self {
            Self::Plain(s) => Some(s),
            Self::Tls(_) => None,
        }
    }
}

#[cfg(test)]
pub mod tests;
