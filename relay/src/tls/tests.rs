//! Certificate loading, failure classes and the expiry reader, on certificates made here;
//! [`Pki`] is shared with the perceptron's TLS tests.

use std::os::unix::fs::PermissionsExt as _;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

/// A CA, a server certificate for `localhost` it signed, and a client certificate it
/// signed, written to a fresh directory (keys 0600).
pub struct Pki {
    /// The directory.
    pub dir: PathBuf,
    /// The CA's DER, for rustls clients.
    pub ca_der: CertificateDer<'static>,
    /// The server's settings: cert and key, no client CA.
    pub settings: TlsSettings,
    /// A client certificate and key signed by the CA (for mutual TLS).
    client: (CertificateDer<'static>, PrivateKeyDer<'static>),
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    (params.self_signed(&key).unwrap(), key)
}

impl Pki {
    /// Makes one under the system's temporary directory.
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "perceptron-tls-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca, ca_key) = ca("perceptron test CA");
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2049, 12, 31);
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["client".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "client");
        let client = params.signed_by(&client_key, &ca, &ca_key).unwrap();
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        let settings = TlsSettings {
            cert: write("server.pem", &cert.pem(), 0o644),
            key: write("server.key", &key.serialize_pem(), 0o600),
            client_ca: None,
            min_version: TlsVersion::Tls12,
        };
        write("ca.pem", &ca.pem(), 0o644);
        Self {
            ca_der: ca.der().clone(),
            settings,
            client: (
                client.der().clone(),
                PrivateKeyDer::try_from(client_key.serialize_der()).unwrap(),
            ),
            dir,
        }
    }

    /// A rustls client configuration trusting `ca` (and presenting `client`, if any).
    pub fn client_config(
        ca: &CertificateDer<'static>,
        client: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        Arc::new(match client {
            Some((cert, key)) => builder.with_client_auth_cert(vec![cert], key).unwrap(),
            None => builder.with_no_client_auth(),
        })
    }

    /// A CA nobody here signed with: a client trusting it refuses the relay.
    pub fn stranger_ca() -> CertificateDer<'static> {
        ca("stranger").0.der().clone()
    }

    /// A client certificate signed by a CA the relay does not know.
    pub fn stranger_client() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let (ca, ca_key) = ca("stranger");
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["intruder".to_owned()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        (
            cert.der().clone(),
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
    }

    /// The client certificate and key signed by this CA.
    pub fn client(&self) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        (self.client.0.clone(), self.client.1.clone_key())
    }

    /// Settings that also require a client certificate signed by this CA.
    pub fn mutual(&self) -> TlsSettings {
        TlsSettings {
            client_ca: Some(self.dir.join("ca.pem")),
            ..self.settings.clone()
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn reads_not_after_as_utc_time_and_as_generalized_time() {
    // X.509 writes years before 2050 as UTCTime, from 2050 as GeneralizedTime.
    for ((y, m, d), unix) in [
        ((2049, 12, 31), 2_524_521_600),
        ((2050, 1, 1), 2_524_608_000),
    ] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(y, m, d);
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(not_after(cert.der()), Some(unix), "{y}-{m}-{d}");
    }
}

#[test]
fn reads_the_expiry_of_a_generated_certificate() {
    let pki = Pki::new("expiry");
    let loaded = load(&pki.settings).unwrap();
    // rcgen writes 2049-12-31T00:00:00Z as UTCTime.
    assert_eq!(loaded.not_after, Some(2_524_521_600));
    let der = std::fs::read(&pki.settings.cert).unwrap();
    let der = CertificateDer::from_pem_slice(&der).unwrap();
    // Every truncation is refused, never a panic.
    for n in 0..der.len() {
        assert_eq!(not_after(&der[..n]), None, "prefix of {n} bytes");
    }
    assert_eq!(not_after(b"\x30\x84\xff\xff\xff\xff"), None);
}

#[test]
fn load_errors_name_the_file_at_fault() {
    let pki = Pki::new("errors");
    let key_path = pki.settings.key.clone();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = load(&pki.settings).unwrap_err();
    assert_eq!(e.file, TlsFile::Key);
    assert!(e.problem.contains("mode 0644"), "{}", e.problem);
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();

    let other = KeyPair::generate().unwrap();
    std::fs::write(&key_path, other.serialize_pem()).unwrap();
    let e = load(&pki.settings).unwrap_err();
    assert_eq!(
        (e.file, e.problem.as_str()),
        (TlsFile::Key, "does not match the certificate in cert")
    );

    std::fs::write(&pki.settings.cert, "not a certificate").unwrap();
    let e = load(&pki.settings).unwrap_err();
    assert_eq!(
        (e.file, e.problem.as_str()),
        (TlsFile::Cert, "no PEM certificate in it")
    );

    let missing = TlsSettings {
        client_ca: Some(pki.dir.join("nope.pem")),
        ..pki.settings.clone()
    };
    std::fs::write(&pki.settings.cert, "").unwrap();
    assert_eq!(load(&missing).unwrap_err().file, TlsFile::Cert);
}

#[test]
fn reload_swaps_the_certificate_and_keeps_the_old_one_on_failure() {
    let pki = Pki::new("reload");
    let tls = ServerTls::new(pki.settings.clone()).unwrap();
    let first = tls.current();
    let fresh = Pki::new("reload2");
    std::fs::copy(&fresh.settings.cert, &pki.settings.cert).unwrap();
    std::fs::copy(&fresh.settings.key, &pki.settings.key).unwrap();
    let second = tls.reload().unwrap();
    assert!(!Arc::ptr_eq(&first, &second));
    assert!(Arc::ptr_eq(&tls.current(), &second));
    std::fs::write(&pki.settings.key, "garbage").unwrap();
    assert_eq!(tls.reload().unwrap_err().file, TlsFile::Key);
    assert!(
        Arc::ptr_eq(&tls.current(), &second),
        "a failed reload keeps serving"
    );
}

/// Runs a handshake between `server` and a rustls client; returns the server's outcome.
async fn handshake(
    server: TlsSettings,
    client: Arc<rustls::ClientConfig>,
) -> Result<(), TlsFailure> {
    let config = load(&server).unwrap().config;
    let (a, b) = tokio::io::duplex(1 << 16);
    let client = tokio::spawn(async move {
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        if let Ok(mut s) = tokio_rustls::TlsConnector::from(client)
            .connect(name, b)
            .await
        {
            // TLS 1.3: a refused client certificate shows on the first read.
            let _ = s.write_all(b"x").await;
            let _ = s.read(&mut [0u8; 1]).await;
        }
    });
    let result = accept(config, a, Vec::new()).await.map(|mut s| {
        tokio::spawn(async move {
            let _ = s.read(&mut [0u8; 1]).await;
            let _ = s.shutdown().await;
        })
    });
    client.await.unwrap();
    result.map(drop)
}

#[tokio::test]
async fn handshake_failures_are_classified() {
    let pki = Pki::new("classes");
    let trusting = Pki::client_config(&pki.ca_der, None);
    assert_eq!(
        handshake(pki.settings.clone(), Arc::clone(&trusting)).await,
        Ok(())
    );
    assert_eq!(
        handshake(
            pki.settings.clone(),
            Pki::client_config(&Pki::stranger_ca(), None)
        )
        .await,
        Err(TlsFailure::RefusedByClient)
    );
    assert_eq!(
        handshake(pki.mutual(), Arc::clone(&trusting)).await,
        Err(TlsFailure::ClientCertRefused)
    );
    assert_eq!(
        handshake(
            pki.mutual(),
            Pki::client_config(&pki.ca_der, Some(Pki::stranger_client()))
        )
        .await,
        Err(TlsFailure::ClientCertRefused)
    );
    assert_eq!(
        handshake(
            pki.mutual(),
            Pki::client_config(&pki.ca_der, Some(pki.client()))
        )
        .await,
        Ok(())
    );
    // TLS 1.3 only against a client that stops at 1.2.
    let tls13 = TlsSettings {
        min_version: TlsVersion::Tls13,
        ..pki.settings.clone()
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_der.clone()).unwrap();
    let old = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    assert_eq!(
        handshake(tls13, Arc::new(old)).await,
        Err(TlsFailure::Incompatible)
    );
}

#[tokio::test]
async fn garbage_or_a_close_instead_of_a_client_hello_is_classified() {
    let pki = Pki::new("garbage");
    let config = load(&pki.settings).unwrap().config;
    let (a, mut b) = tokio::io::duplex(1024);
    b.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    assert_eq!(
        accept(Arc::clone(&config), a, Vec::new()).await.err(),
        Some(TlsFailure::Malformed)
    );
    let (a, b) = tokio::io::duplex(1024);
    drop(b);
    // The early bytes (half a record header) come first, then the close.
    assert_eq!(
        accept(config, a, vec![0x16, 0x03]).await.err(),
        Some(TlsFailure::Closed)
    );
}
