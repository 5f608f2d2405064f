//! `rediss://` nodes: the crypto provider of the binary and `--tls-ca`.
//!
//! The library leaves the choice of a rustls crypto provider to the
//! application; this binary is one, and installs ring's (the only provider
//! its build of rustls has, so that no second one is linked in).

use std::path::Path;

/// A private CA's certificates (PEM), trusted instead of the public roots.
pub(crate) struct TlsCa {
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pem: Vec<u8>,
}

/// Installs the process's rustls crypto provider; call before any
/// connection is made.
pub(crate) fn install_provider() {
    #[cfg(feature = "tls")]
    {
        // Fails only when a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether `url` is a node reached over TLS.
pub(crate) fn is_tls(url: &str) -> bool {
    ["rediss://", "valkeys://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
    })
}

/// Reads `--tls-ca`, or the usage error to print.
pub(crate) fn read_ca(path: &Path) -> Result<TlsCa, String> {
    read_ca_in_build(path, cfg!(feature = "tls"))
}

/// [`read_ca`] in a build with TLS or without it (`tls`): without it, the
/// flag is a usage error naming the feature.
fn read_ca_in_build(path: &Path, tls: bool) -> Result<TlsCa, String> {
    if !tls {
        return Err("--tls-ca needs quorumlock built with the `tls` feature".into());
    }
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| format!("--tls-ca {shown}: cannot read it: {e}"))?;
    // An empty trust store would refuse every server with a message about
    // the server's certificate, not about this file.
    if !pem
        .windows(b"-----BEGIN CERTIFICATE-----".len())
        .any(|w| w == b"-----BEGIN CERTIFICATE-----")
    {
        return Err(format!(
            "--tls-ca {shown}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it"
        ));
    }
    Ok(TlsCa { pem })
}

/// A client for the rediss:// node `url` that trusts `ca`.
#[cfg(feature = "tls")]
pub(crate) fn client(url: &str, ca: &TlsCa) -> Result<redis::Client, String> {
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.pem.clone()),
    };
    redis::Client::build_with_tls(url, certificates)
        .map_err(|e| format!("bad node URL {}: {e}", quorumlock::redact_url(url)))
}

/// Without the `tls` feature no CA is ever read, so this is never called.
#[cfg(not(feature = "tls"))]
pub(crate) fn client(url: &str, _ca: &TlsCa) -> Result<redis::Client, String> {
    Err(format!(
        "node {}: rediss:// needs quorumlock built with the `tls` feature",
        quorumlock::redact_url(url)
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tls_schemes_are_recognised_in_any_case() {
        assert!(super::is_tls("rediss://h:1"));
        assert!(super::is_tls("REDISS://h:1"));
        assert!(super::is_tls("valkeys://h:1"));
        assert!(!super::is_tls("redis://h:1"));
        assert!(!super::is_tls("red"));
    }

    /// Without the `tls` feature `--tls-ca` is a usage error naming the
    /// feature.
    #[test]
    fn a_ca_without_the_tls_feature_is_a_usage_error() {
        let error = super::read_ca_in_build(std::path::Path::new("/dev/null"), false).err();
        let error = error.expect("a usage error");
        assert!(error.contains("`tls` feature"), "{error}");
    }
}
