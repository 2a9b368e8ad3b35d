//! TLS on the listeners, with rustls: the certificate chain and key from PEM files, ALPN
//! `h2` and `http/1.1`, and, with a client CA, clients' certificates required. The files are
//! read again on SIGHUP; connections open at the time keep the session they have, new ones
//! get the new certificate. A reload that cannot be used keeps the one in force.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS certificate {path}: {reason}")]
    Cert { path: String, reason: String },
    #[error("TLS key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("TLS client CA {path}: {reason}")]
    ClientCa { path: String, reason: String },
    #[error("TLS: {0}")]
    Config(String),
}

/// The server's TLS settings in force, swapped whole on a reload.
pub struct Tls {
    current: RwLock<Arc<ServerConfig>>,
}

impl Tls {
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        Ok(Tls {
            current: RwLock::new(server_config(files)?),
        })
    }

    /// Reads the files again; on failure the settings in force stay, and the error is
    /// returned for the caller to log.
    pub fn reload(&self, files: &TlsFiles) -> Result<(), TlsError> {
        let fresh = server_config(files)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// An acceptor with the settings in force now.
    pub fn acceptor(&self) -> TlsAcceptor {
        let config = self.current.read().unwrap_or_else(|p| p.into_inner());
        TlsAcceptor::from(config.clone())
    }
}

fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates(&files.cert).map_err(|reason| TlsError::Cert {
        path: files.cert.display().to_string(),
        reason,
    })?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::Key {
        path: files.key.display().to_string(),
        reason: pem_reason(e, "private key"),
    })?;
    // ring lacks rustls' post-quantum key exchange (X25519MLKEM768), hence the deprecation;
    // aws-lc-rs has it, at a C library's build of minutes on two cores. Clients still agree
    // on X25519 or the NIST curves.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let ca_error = |reason| TlsError::ClientCa {
                path: path.display().to_string(),
                reason,
            };
            let mut roots = rustls::RootCertStore::empty();
            for ca in certificates(path).map_err(ca_error)? {
                roots.add(ca).map_err(|e| ca_error(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| ca_error(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    // The key is checked against the chain's first certificate here.
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Key {
            path: files.key.display().to_string(),
            reason: format!("does not go with the certificate: {e}"),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Every certificate in a PEM file, at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_reason(e, "certificate"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_reason(e, "certificate"))?;
    if chain.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(chain)
}

fn pem_reason(e: rustls::pki_types::pem::Error, what: &str) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(io) => format!("cannot read it: {io}"),
        Error::NoItemsFound => format!("no PEM {what} in it"),
        other => format!("not a PEM {what}: {other:?}"),
    }
}
