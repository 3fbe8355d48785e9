//! S3 and S3-compatible stores (`store = "s3://bucket/prefix"`), through object_store's S3
//! client. object_store brings no HTTP client here (its `reqwest` one would add a second TLS
//! stack and a C crypto library to the build), so this module gives it one: hyper's pooled
//! HTTP/1.1 client over rustls with the ring provider, the TLS the relay already uses, and the
//! system's CA certificates.
//!
//! Credentials come from a file (`credentials_file`, owner-only like every secret the relay
//! reads) or, without one, from the environment as for any AWS tool (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and the instance or container credentials
//! those tools find); never from the configuration's text.

use std::error::Error as StdError;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::rt::TokioExecutor;
use object_store::aws::AmazonS3Builder;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest,
    HttpRequestBody, HttpResponse, HttpResponseBody, HttpService,
};
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use serde::Deserialize;

use crate::config::S3Settings;
use crate::config::store_url::S3Location;

/// Bound on connecting to the store.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one request: sending it and reading the whole answer (a chunk is 4 MiB at most).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A failed request (refused, timed out, a 5xx) is tried again this many times, with backoff,
/// and no more once this long has passed since the first try: a wake restoring from a store
/// that is down fails in seconds with 1053 instead of waiting out object_store's default of
/// 10 tries over 3 minutes.
const RETRIES: usize = 3;
const RETRY_WITHIN: Duration = Duration::from_secs(20);
/// Longest answer read: a chunk (4 MiB), a manifest or a listing page are far smaller.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// `credentials_file` as written: TOML, owner-only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

/// Why an S3 store could not be opened.
#[derive(Debug)]
pub enum S3OpenError {
    /// The credentials file cannot be read (missing, or readable by others).
    Credentials(authplugin::SecretFileError),
    /// The credentials file is not TOML with the expected keys; the line, where known (the
    /// parser's own message is not kept: it quotes the line, which may hold a key).
    CredentialsSyntax {
        /// The file.
        path: std::path::PathBuf,
        /// The offending line.
        line: Option<usize>,
    },
    /// object_store refused the settings.
    Build {
        /// The bucket.
        bucket: String,
        /// Its refusal.
        source: object_store::Error,
    },
}

impl std::fmt::Display for S3OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const EXPECTED: &str = "not a credentials file (access_key_id, secret_access_key, and \
                                optionally session_token, as TOML strings)";
        match self {
            Self::Credentials(e) => write!(f, "{e}"),
            Self::CredentialsSyntax {
                path,
                line: Some(line),
            } => write!(f, "{}: line {line}: {EXPECTED}", path.display()),
            Self::CredentialsSyntax { path, line: None } => {
                write!(f, "{}: {EXPECTED}", path.display())
            }
            Self::Build { bucket, source } => write!(f, "s3://{bucket}: {source}"),
        }
    }
}

impl std::error::Error for S3OpenError {}

/// Opens the S3 store at `location` with `settings`.
///
/// # Errors
/// [`S3OpenError`]: the credentials file, or what object_store refused.
pub fn open(
    location: &S3Location,
    settings: &S3Settings,
) -> Result<Arc<dyn ObjectStore>, S3OpenError> {
    // The environment's AWS settings first (credentials, region, endpoint), so a deployment
    // that provides them the usual way needs no keys here; the configuration's win.
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(&location.bucket)
        .with_http_connector(HyperConnector)
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: RETRIES,
            retry_timeout: RETRY_WITHIN,
        });
    if let Some(region) = &settings.region {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = &settings.endpoint {
        // A plain-HTTP endpoint is allowed only because it was named: an S3-compatible server
        // on the same host or network.
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    if let Some(path) = &settings.credentials_file {
        let keys = read_credentials(path)?;
        builder = builder
            .with_access_key_id(keys.access_key_id)
            .with_secret_access_key(keys.secret_access_key);
        if let Some(token) = keys.session_token {
            builder = builder.with_token(token);
        }
    }
    let store = builder.build().map_err(|source| S3OpenError::Build {
        bucket: location.bucket.clone(),
        source,
    })?;
    Ok(if location.prefix.is_empty() {
        Arc::new(store)
    } else {
        Arc::new(PrefixStore::new(store, location.prefix.as_str()))
    })
}

fn read_credentials(path: &Path) -> Result<CredentialsFile, S3OpenError> {
    let text = authplugin::read_secret_file(path).map_err(S3OpenError::Credentials)?;
    toml::from_str(&text).map_err(|e| S3OpenError::CredentialsSyntax {
        path: path.to_owned(),
        line: e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1)),
    })
}

/// object_store's [`HttpConnector`]: one pooled hyper client per store.
#[derive(Debug)]
struct HyperConnector;

impl HttpConnector for HyperConnector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let roots = system_roots();
        let tls = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut tcp = TcpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        tcp.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(HttpClient::new(HyperService { client }))
    }
}

/// The system's CA certificates; none found leaves the store reachable over plain HTTP only
/// (an HTTPS endpoint then fails its handshake, naming the unknown issuer).
fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "reading the system's CA certificates for the S3 store");
    }
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        tracing::warn!(
            "no CA certificates found (Debian: the ca-certificates package); an https:// S3 \
             endpoint cannot be verified"
        );
    }
    roots
}

type HyperClient = Client<hyper_rustls::HttpsConnector<TcpConnector>, HttpRequestBody>;

struct HyperService {
    client: HyperClient,
}

impl fmt::Debug for HyperService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HyperService")
    }
}

#[async_trait::async_trait]
impl HttpService for HyperService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let exchange = async {
            let answer = self.client.request(req).await.map_err(|e| {
                let kind = if e.is_connect() {
                    HttpErrorKind::Connect
                } else {
                    HttpErrorKind::Request
                };
                HttpError::new(kind, e)
            })?;
            // Read whole within the deadline, so a peer that stalls mid-body cannot hold a
            // restore (and the wake waiting on it) forever.
            let (parts, body) = answer.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| HttpError::new_boxed(HttpErrorKind::Decode, e))?
                .to_bytes();
            Ok(HttpResponse::from_parts(
                parts,
                HttpResponseBody::from(body),
            ))
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(HttpError::new(HttpErrorKind::Timeout, TimedOut)),
        }
    }
}

#[derive(Debug)]
struct TimedOut;

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no whole answer within {} s", REQUEST_TIMEOUT.as_secs())
    }
}

impl StdError for TimedOut {}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn credentials(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("relay-s3-{name}-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_credentials_file_is_owner_only_toml_and_its_errors_never_quote_it() {
        let good = credentials(
            "good",
            "access_key_id = \"AKIAEXAMPLE\"\nsecret_access_key = \"s3cr3t\"\n",
            0o600,
        );
        let keys = read_credentials(&good).unwrap();
        assert_eq!(keys.access_key_id, "AKIAEXAMPLE");
        assert_eq!(keys.secret_access_key, "s3cr3t");
        assert_eq!(keys.session_token, None);

        let open = credentials(
            "open",
            "access_key_id = \"AKIAEXAMPLE\"\nsecret_access_key = \"s3cr3t\"\n",
            0o644,
        );
        let err = read_credentials(&open).err().unwrap().to_string();
        assert!(err.contains("group or others"), "{err}");

        // A secret on a line that does not parse, and a key misspelled: the file and the line
        // are named, the text is not.
        let bad = credentials(
            "bad",
            "access_key_id = \"AKIAEXAMPLE\"\nsecret_access_key = s3cr3t-unquoted\n",
            0o600,
        );
        let err = read_credentials(&bad).err().unwrap().to_string();
        assert!(
            err.contains(&format!("{}: line 2:", bad.display())),
            "{err}"
        );
        let misspelled = credentials(
            "misspelled",
            "access_key = \"AKIAEXAMPLE\"\nsecret_access_key = \"s3cr3t\"\n",
            0o600,
        );
        let err2 = read_credentials(&misspelled).err().unwrap().to_string();
        assert!(err2.contains("line 1:"), "{err2}");
        for e in [&err, &err2] {
            assert!(!e.contains("s3cr3t") && !e.contains("AKIA"), "{e}");
        }
        for path in [good, open, bad, misspelled] {
            std::fs::remove_file(path).unwrap();
        }
    }
}
