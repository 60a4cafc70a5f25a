//! TLS settings for `rediss://` URLs (feature `tls`): rustls through fred.
//!
//! A TLS URL alone verifies the server against the system's root
//! certificates (what managed Redis services need). [`TlsSettings`] replaces
//! the roots with given CAs and adds a client certificate for servers that
//! require one. Settings given with a URL that does not use TLS are a
//! configuration error rather than silently ignored: a user who set a CA
//! expects an encrypted, verified connection.

use fred::prelude::Config;

use crate::error::{Error, Result};

/// What a client was told about TLS beyond its URLs.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// PEM certificates to trust instead of the system roots.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to the server.
    pub(crate) client_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a private key.
        f.debug_struct("TlsSettings")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.client_pem.is_some())
            .finish()
    }
}

impl TlsSettings {
    fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.client_pem.is_some()
    }

    /// Puts these settings on `config` (one master, Sentinel or Cluster).
    #[cfg(feature = "tls")]
    pub(crate) fn apply(&self, config: &mut Config, url: &str) -> Result<()> {
        if config.tls.is_none() {
            return self.refuse_plain(url);
        }
        if !self.is_set() {
            // fred's default for a TLS URL: the system roots, no client
            // certificate.
            return Ok(());
        }
        let client_config = self.rustls_config()?;
        config.tls = Some(fred::types::config::TlsConnector::from(client_config).into());
        Ok(())
    }

    /// Without the `tls` feature a TLS URL cannot be served at all.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn apply(&self, _config: &mut Config, url: &str) -> Result<()> {
        let scheme = url.split_once("://").map_or("", |(s, _)| s);
        if scheme.starts_with("rediss") || scheme.starts_with("valkeys") {
            return Err(Error::Config(format!(
                "redis url {url:?} uses TLS, but lockwarden was built without its `tls` feature"
            )));
        }
        self.refuse_plain(url)
    }

    fn refuse_plain(&self, url: &str) -> Result<()> {
        if self.is_set() {
            return Err(Error::Config(format!(
                "TLS certificates were given, but redis url {url:?} does not use TLS: use rediss:// (or \
                 rediss-cluster://, rediss-sentinel://)"
            )));
        }
        Ok(())
    }

    #[cfg(feature = "tls")]
    fn rustls_config(&self) -> Result<fred::rustls::ClientConfig> {
        use fred::rustls::pki_types::pem::PemObject;
        use fred::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use fred::rustls::{ClientConfig, RootCertStore};

        let bad = |what: &str, e: &dyn std::fmt::Display| Error::Config(format!("TLS {what}: {e}"));
        let mut roots = RootCertStore::empty();
        match &self.ca_pem {
            Some(pem) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| bad("CA certificates", &e))?;
                if certs.is_empty() {
                    return Err(Error::Config(
                        "TLS CA certificates: no certificate in the PEM given".into(),
                    ));
                }
                for cert in certs {
                    roots.add(cert).map_err(|e| bad("CA certificate", &e))?;
                }
            }
            None => {
                let found = fred::rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    // A system root rustls cannot use is skipped, as fred does.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(Error::Config(
                        "TLS: no system root certificates found; give the server's CA".into(),
                    ));
                }
            }
        }
        let builder = match &self.ca_pem {
            // The given certificates are trusted as CAs and, each one, as the
            // server's own certificate (pinned).
            Some(pem) => {
                let verifier = pinned::Verifier::new(roots, pem)?;
                ClientConfig::builder()
                    .dangerous()
                    .with_custom_certificate_verifier(std::sync::Arc::new(verifier))
            }
            None => ClientConfig::builder().with_root_certificates(roots),
        };
        let config = match &self.client_pem {
            None => builder.with_no_client_auth(),
            Some((chain_pem, key_pem)) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem)
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| bad("client certificate", &e))?;
                if chain.is_empty() {
                    return Err(Error::Config(
                        "TLS client certificate: no certificate in the PEM given".into(),
                    ));
                }
                let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad("client key", &e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad("client certificate and key", &e))?
            }
        };
        Ok(config)
    }
}

/// Server certificates given as CAs are also accepted as the server's own.
///
/// `openssl req -x509` (the usual way to make a certificate for a test or a
/// private server) makes a self-signed certificate marked as a CA;
/// `redis-cli --cacert` accepts a server presenting exactly that
/// certificate, rustls refuses it as "a CA used as an end entity". This
/// verifier asks rustls first; only when rustls refuses a server
/// certificate that is byte for byte one of the given ones and signed by
/// itself does it check that certificate by hand: the host name, the
/// validity dates and its own signature. The handshake's signatures are
/// always checked by rustls.
#[cfg(feature = "tls")]
mod pinned {
    use std::sync::Arc;

    use fred::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use fred::rustls::client::WebPkiServerVerifier;
    use fred::rustls::pki_types::pem::PemObject;
    use fred::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use fred::rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

    use crate::error::{Error, Result};

    #[derive(Debug)]
    pub(super) struct Verifier {
        webpki: Arc<WebPkiServerVerifier>,
        /// The given certificates (DER).
        pinned: Vec<CertificateDer<'static>>,
    }

    impl Verifier {
        pub(super) fn new(roots: RootCertStore, ca_pem: &[u8]) -> Result<Verifier> {
            let webpki = WebPkiServerVerifier::builder(Arc::new(roots))
                .build()
                .map_err(|e| Error::Config(format!("TLS CA certificates: {e}")))?;
            let pinned = CertificateDer::pem_slice_iter(ca_pem)
                .filter_map(std::result::Result::ok)
                .collect();
            Ok(Verifier { webpki, pinned })
        }
    }

    /// The checks rustls would make of a server certificate, but for its
    /// chain: the certificate is one the user gave, and signed by itself
    /// (else rustls's refusal stands).
    fn check_pinned(
        der: &CertificateDer<'_>,
        name: &ServerName<'_>,
        now: UnixTime,
        refused: fred::rustls::Error,
    ) -> std::result::Result<(), fred::rustls::Error> {
        let bad = |e: CertificateError| fred::rustls::Error::InvalidCertificate(e);
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
            return Err(refused);
        };
        if cert.subject() != cert.issuer() {
            return Err(refused);
        }
        cert.verify_signature(None)
            .map_err(|_| bad(CertificateError::BadSignature))?;
        let now = now.as_secs() as i64;
        let validity = cert.validity();
        if now < validity.not_before.timestamp() {
            return Err(bad(CertificateError::NotValidYet));
        }
        if now > validity.not_after.timestamp() {
            return Err(bad(CertificateError::Expired));
        }
        let parsed = fred::rustls::server::ParsedCertificate::try_from(der)?;
        fred::rustls::client::verify_server_name(&parsed, name)
    }

    impl ServerCertVerifier for Verifier {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, fred::rustls::Error> {
            let refused =
                match self
                    .webpki
                    .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                {
                    Ok(verified) => return Ok(verified),
                    Err(e) => e,
                };
            if !self.pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) {
                return Err(refused);
            }
            check_pinned(end_entity, server_name, now, refused)?;
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, fred::rustls::Error> {
            self.webpki.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, fred::rustls::Error> {
            self.webpki.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.webpki.supported_verify_schemes()
        }
    }
}
