//! An HTTPS front on 127.0.0.1 for a plain [`super::http::HttpServer`], as a company's
//! TLS-terminating proxy is: its certificate (for `127.0.0.1`) is signed by a CA the test
//! makes, whose PEM file a test hands the client through `SSL_CERT_FILE`, or withholds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct TlsFront {
    pub port: u16,
    /// The CA's certificate (PEM), the one to trust.
    pub ca_pem: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TlsFront {
    /// A front for the plain server on `backend`, its CA's PEM written into `dir`.
    pub fn start(backend: u16, dir: &Path) -> TlsFront {
        let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "rocmforge test proxy CA");
        ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let mut leaf_params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();
        let ca_pem = dir.join("proxy-ca.pem");
        std::fs::write(&ca_pem, ca.pem()).unwrap();

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let sp = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    // A refused handshake (the untrusted case) is an error here: the next one.
                    let _ = relay(c, config.clone(), backend);
                }
            }
        });
        TlsFront { port, ca_pem, stop, thread: Some(thread) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One request: its head read through TLS and sent to the backend, the backend's whole answer
/// (it closes each connection) sent back.
fn relay(conn: TcpStream, config: Arc<rustls::ServerConfig>, backend: u16) -> std::io::Result<()> {
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    let tls = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut reader = BufReader::new(rustls::StreamOwned::new(tls, conn));
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let end = line == b"\r\n" || line == b"\n";
        head.extend_from_slice(&line);
        if end {
            break;
        }
    }
    let mut up = TcpStream::connect(("127.0.0.1", backend))?;
    up.write_all(&head)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    let tls = reader.get_mut();
    tls.write_all(&answer)?;
    tls.conn.send_close_notify();
    tls.flush()
}
