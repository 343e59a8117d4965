//! TLS to the database: with `sslmode=require` in the URL, connections are encrypted and the
//! server's certificate is checked against the system's trusted roots (as engram's HTTPS
//! clients check theirs), plus a PEM file of extra roots for a private CA
//! ([`crate::PgOptions::ca_file`]). Otherwise (`prefer`, the default, or `disable`) they are
//! plain: a server on the same machine or network needs no certificate.

use std::path::Path;
use std::sync::Arc;

use engram_core::StoreError;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres::config::SslMode;

/// How connections are made.
#[derive(Clone)]
pub(crate) enum Tls {
    /// Plain TCP or a Unix socket.
    Plain,
    /// Encrypted, the certificate verified.
    Verified(tokio_postgres_rustls::MakeRustlsConnect),
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tls::Plain => "Plain",
            Tls::Verified(_) => "Verified",
        })
    }
}

impl Tls {
    /// What the URL's `sslmode` asks for.
    pub(crate) fn for_config(
        config: &tokio_postgres::Config,
        ca_file: Option<&Path>,
    ) -> Result<Self, StoreError> {
        if config.get_ssl_mode() != SslMode::Require {
            return Ok(Tls::Plain);
        }
        let bad = |detail: String| StoreError::Backend(format!("cannot set up TLS: {detail}"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let extra: Vec<CertificateDer<'static>> = match ca_file {
            None => Vec::new(),
            Some(path) => CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    bad(format!(
                        "{} holds no readable PEM certificates ({e})",
                        path.display()
                    ))
                })?,
        };
        let verifier =
            rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider.clone())
                .map_err(|e| bad(e.to_string()))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        Ok(Tls::Verified(
            tokio_postgres_rustls::MakeRustlsConnect::new(config),
        ))
    }
}
