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
        let builder = ClientConfig::builder().with_root_certificates(roots);
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
