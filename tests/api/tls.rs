//! TLS on the listener, with certificates the test makes: HTTP/1.1 and HTTP/2 chosen by
//! ALPN; plain HTTP to a TLS port refused while TLS clients go on being served; the
//! certificate read again on SIGHUP (new connections see the new one, an open connection
//! keeps serving, an unusable file keeps the one in force); client certificates required
//! with a client CA; missing, unreadable or mismatched files stop the start clearly.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A CA and what it signs, as PEM.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf certificate for `names` and its key, PEM.
    fn sign(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    #[allow(deprecated)]
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client trusting `ca`, offering `alpn`, with a client certificate if given.
fn client(
    ca: &str,
    alpn: &[u8],
    identity: Option<&(String, String)>,
) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn connect(addr: SocketAddr, connector: &tokio_rustls::TlsConnector) -> std::io::Result<Tls> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await?;
    // TLS 1.3 reports a refused client certificate only on the first read.
    Ok(tls)
}

/// One GET over a TLS connection in the protocol ALPN chose: status and version.
async fn get(tls: Tls, path: &str) -> Result<(u16, http::Version), hyper::Error> {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let req = http::Request::get(format!("https://localhost{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = if h2 {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        send.send_request(req).await?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        send.send_request(req).await?
    };
    let (status, version) = (response.status().as_u16(), response.version());
    response.into_body().collect().await?;
    Ok((status, version))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

struct Setup {
    server: Server,
    dir: TempDir,
}

/// `tandem serve` with TLS from the files `cert`, `key` (and `client_ca`) in `dir`, ready.
fn start(dir: TempDir, extra: &[&str]) -> Setup {
    let repo = dir.path().join("models");
    write_version(&repo, "mlp", 1, &[4, 8, 3], 1);
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let mut args = vec![
        "--model-repository".to_string(),
        repo.display().to_string(),
        "--tls-cert".into(),
        cert.display().to_string(),
        "--tls-key".into(),
        key.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::spawn(&args);
    server.assert_logs_within(Duration::from_secs(60), "serving");
    Setup { server, dir }
}

fn metric(addr: SocketAddr, ca: &str, name: &str) -> f64 {
    runtime().block_on(async {
        let tls = connect(addr, &client(ca, b"http/1.1", None)).await.unwrap();
        let req = http::Request::get("https://localhost/metrics")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let body = send
            .send_request(req)
            .await
            .unwrap()
            .into_body()
            .collect()
            .await
            .unwrap();
        let text = String::from_utf8(body.to_bytes().to_vec()).unwrap();
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    })
}

#[test]
fn tls_serves_http1_and_http2_by_alpn_and_refuses_plain_http() {
    let dir = TempDir::new("tls");
    let ca = Ca::new("tandem test CA");
    let (cert, key) = ca.sign(&["localhost", "127.0.0.1"]);
    write(dir.path(), "cert.pem", &cert);
    write(dir.path(), "key.pem", &key);
    let s = start(dir, &[]);
    let addr = s.server.addr;
    runtime().block_on(async {
        for (alpn, version) in [
            (&b"h2"[..], http::Version::HTTP_2),
            (b"http/1.1", http::Version::HTTP_11),
        ] {
            let tls = connect(addr, &client(&ca.pem(), alpn, None)).await.unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
            assert_eq!(get(tls, "/v2/health/ready").await.unwrap(), (200, version));
        }
    });
    // Plain HTTP to the TLS port: no HTTP answer; TLS clients are served as before.
    let plain = raw(
        addr,
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(plain.map_or(true, |r| r.status != 200));
    let failed = metric(
        addr,
        &ca.pem(),
        "tandem_http_tls_handshakes_failed_total{reason=\"handshake\"}",
    );
    assert!(failed >= 1.0, "{failed}");
    // A client that does not trust the CA refuses the server.
    let stranger = Ca::new("another CA");
    runtime().block_on(async {
        let refused = connect(addr, &client(&stranger.pem(), b"h2", None)).await;
        assert!(refused.is_err());
    });
}

#[test]
fn the_certificate_is_read_again_on_sighup_and_open_connections_keep_serving() {
    let dir = TempDir::new("tls-reload");
    let (old_ca, new_ca) = (Ca::new("old CA"), Ca::new("new CA"));
    let (cert, key) = old_ca.sign(&["localhost"]);
    write(dir.path(), "cert.pem", &cert);
    write(dir.path(), "key.pem", &key);
    let s = start(dir, &[]);
    let addr = s.server.addr;
    let rt = runtime();
    // An HTTP/1.1 connection opened under the old certificate.
    let tls = rt
        .block_on(connect(addr, &client(&old_ca.pem(), b"http/1.1", None)))
        .unwrap();
    let (mut open, conn) = rt
        .block_on(hyper::client::conn::http1::handshake(TokioIo::new(tls)))
        .unwrap();
    rt.spawn(conn);

    let (cert, key) = new_ca.sign(&["localhost"]);
    write(s.dir.path(), "cert.pem", &cert);
    write(s.dir.path(), "key.pem", &key);
    s.server.signal(libc::SIGHUP);
    s.server.assert_logs_within(
        Duration::from_secs(10),
        "TLS certificate and key read again",
    );
    rt.block_on(async {
        assert!(
            connect(addr, &client(&old_ca.pem(), b"h2", None))
                .await
                .is_err()
        );
        let tls = connect(addr, &client(&new_ca.pem(), b"h2", None))
            .await
            .unwrap();
        assert_eq!(get(tls, "/v2/health/ready").await.unwrap().0, 200);
        let req = http::Request::get("https://localhost/v2/health/live")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let still = open.send_request(req).await.unwrap();
        assert_eq!(
            still.status(),
            200,
            "the connection opened before the reload"
        );
    });

    // A broken certificate file on the next reload: refused, the new certificate stays.
    write(s.dir.path(), "cert.pem", "not a certificate\n");
    s.server.signal(libc::SIGHUP);
    s.server
        .assert_logs_within(Duration::from_secs(10), "TLS reload failed");
    rt.block_on(async {
        let tls = connect(addr, &client(&new_ca.pem(), b"h2", None))
            .await
            .unwrap();
        assert_eq!(get(tls, "/v2/health/ready").await.unwrap().0, 200);
    });
}

#[test]
fn with_a_client_ca_only_clients_it_signed_are_served() {
    let dir = TempDir::new("tls-mtls");
    let (server_ca, client_ca) = (Ca::new("server CA"), Ca::new("client CA"));
    let (cert, key) = server_ca.sign(&["localhost"]);
    write(dir.path(), "cert.pem", &cert);
    write(dir.path(), "key.pem", &key);
    let ca_path = write(dir.path(), "clients.pem", &client_ca.pem());
    let s = start(dir, &["--tls-client-ca", ca_path.to_str().unwrap()]);
    let addr = s.server.addr;
    let signed = client_ca.sign(&["client.example"]);
    let other = Ca::new("other").sign(&["client.example"]);
    runtime().block_on(async {
        let tls = connect(addr, &client(&server_ca.pem(), b"h2", Some(&signed)))
            .await
            .unwrap();
        assert_eq!(get(tls, "/v2/health/ready").await.unwrap().0, 200);
        for identity in [None, Some(&other)] {
            // TLS 1.3: the server's refusal arrives with the first exchange after the handshake.
            let refused = match connect(addr, &client(&server_ca.pem(), b"h2", identity)).await {
                Err(_) => true,
                Ok(tls) => get(tls, "/v2/health/ready").await.is_err(),
            };
            assert!(
                refused,
                "{:?}",
                identity.map(|_| "a certificate of another CA")
            );
        }
    });
}

#[test]
fn missing_unreadable_or_mismatched_files_stop_the_start() {
    let dir = TempDir::new("tls-bad");
    let repo = dir.path().join("models");
    write_version(&repo, "mlp", 1, &[4, 8, 3], 1);
    let ca = Ca::new("CA");
    let (cert, key) = ca.sign(&["localhost"]);
    let (_, other_key) = ca.sign(&["localhost"]);
    let cert = write(dir.path(), "cert.pem", &cert);
    let key = write(dir.path(), "key.pem", &key);
    let other_key = write(dir.path(), "other-key.pem", &other_key);
    let garbage = write(
        dir.path(),
        "garbage.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64!\n",
    );
    let missing = dir.path().join("missing.pem");
    let fails = |cert: &Path, key: &Path, says: &[&str]| {
        let args = [
            "--model-repository".as_ref(),
            repo.as_os_str(),
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ];
        assert_start_fails(&args, says)
    };
    fails(
        &missing,
        &key,
        &["TLS certificate", "missing.pem", "cannot read"],
    );
    fails(&cert, &missing, &["TLS key", "missing.pem"]);
    fails(&garbage, &key, &["TLS certificate", "garbage.pem"]);
    fails(&key, &key, &["TLS certificate", "no PEM certificate"]);
    fails(&cert, &other_key, &["does not go with the certificate"]);
    assert_start_fails(&["--tls-cert".as_ref(), cert.as_os_str()], &["--tls-key"]);
}
