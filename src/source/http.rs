//! The one HTTP client downloads, index pages and the remote cache use, and what its errors
//! mean. It trusts the system's certificate store (or `SSL_CERT_FILE` / `SSL_CERT_DIR` when
//! either is set, as curl, pip and cargo read them: reqwest's `rustls-tls-native-roots`) beside
//! Mozilla's bundled roots, so an HTTPS proxy that re-signs with its company's CA works once
//! that CA is in the store. A refused certificate is named, with what to do.

use std::error::Error;
use std::time::Duration;

/// A blocking client: `connect` to connect, `timeout` for a whole request.
pub fn client(connect: Duration, timeout: Duration) -> reqwest::Result<reqwest::blocking::Client> {
    reqwest::blocking::Client::builder()
        .connect_timeout(connect)
        .timeout(timeout)
        .user_agent(concat!("rocmforge/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The TLS error behind `e`, wherever it is in the chain. rustls's error arrives inside
/// `io::Error`s (tokio-rustls's, inside hyper-rustls's), whose `source()` skips what they wrap:
/// those are opened by hand.
fn tls_error<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        let mut inner: &(dyn Error + 'static) = c;
        loop {
            if let Some(t) = inner.downcast_ref::<rustls::Error>() {
                return Some(t);
            }
            match inner.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
                Some(wrapped) => inner = wrapped,
                None => break,
            }
        }
        cur = c.source();
    }
    None
}

/// Whether `e` is a TLS failure another try cannot change (a refused certificate).
pub fn is_certificate_error(e: &(dyn Error + 'static)) -> bool {
    matches!(tls_error(e), Some(rustls::Error::InvalidCertificate(_)))
}

/// What the TLS handshake behind `e` refused, in words, with what to do; `None` when `e` is no
/// TLS failure.
pub fn tls_problem(e: &(dyn Error + 'static)) -> Option<String> {
    let t = tls_error(e)?;
    Some(match t {
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => format!(
            "TLS: the server's certificate is not signed by a certificate authority this machine trusts ({t}); rocmforge trusts {}. Behind a proxy that re-signs HTTPS with its own CA, add that CA to the system's store (`update-ca-certificates`) or point SSL_CERT_FILE at it",
            trusted_roots()
        ),
        rustls::Error::InvalidCertificate(_) => format!("TLS: the server's certificate was refused ({t})"),
        _ => format!("TLS: {t}"),
    })
}

/// The roots the client trusts, as the environment sets them.
fn trusted_roots() -> String {
    let mut set = Vec::new();
    for var in ["SSL_CERT_FILE", "SSL_CERT_DIR"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            let shown = v.to_string_lossy().into_owned();
            let unreadable = if var == "SSL_CERT_FILE" {
                std::fs::File::open(&v).err().map(|e| format!(", which cannot be read: {e}")).unwrap_or_default()
            } else {
                String::new()
            };
            set.push(format!("{var}=`{shown}`{unreadable}"));
        }
    }
    if set.is_empty() {
        "the system's certificate store and Mozilla's roots".to_string()
    } else {
        format!("the certificates of {} (instead of the system's store) and Mozilla's roots", set.join(" and "))
    }
}

/// `e`'s causes on one line, without reqwest's own "error sending request for url (...)" when
/// it has a cause; a TLS failure as [`tls_problem`] tells it.
pub fn explain(e: &reqwest::Error) -> String {
    if let Some(t) = tls_problem(e) {
        return t;
    }
    let mut s = String::new();
    let mut cur: Option<&(dyn Error + 'static)> = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            if !s.is_empty() {
                s.push_str(": ");
            }
            s.push_str(&t);
        }
        cur = c.source();
    }
    if s.is_empty() {
        e.to_string()
    } else {
        s
    }
}
