//! `rediss://` nodes against a real TLS redis-server whose certificate is
//! signed by a private CA made here: the library locks through a client
//! that trusts the CA, and the `quorumlock` binary (built with `tls`) runs
//! a command under a lock and checks the node with `--tls-ca`; without the
//! CA the server is not trusted.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use quorumlock::{Error, Redlock};
use quorumlock_testkit::cli::{Binary, exit, scratch, wait_child};
use quorumlock_testkit::{Persistence, RedisServer, dbsize, get, wait_until_exists};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// How long a `quorumlock` process may take on a loaded machine.
const PROCESS_LIMIT: Duration = Duration::from_secs(20);

/// A redis-server with a TLS port (next to the plain one the harness uses
/// to see that it is ready and to look at its keys), and the CA that signed
/// its certificate.
struct TlsNode {
    server: RedisServer,
    tls_port: u16,
    ca: PathBuf,
    dir: PathBuf,
}

impl TlsNode {
    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }

    fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca).expect("CA file")
    }
}

impl Drop for TlsNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes a private CA and a certificate for 127.0.0.1 and localhost
/// signed by it into `dir`: (ca.pem, server.pem, server.key).
fn make_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "quorumlock test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("server params");
    params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, &issuer).expect("server certificate");

    let paths = (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// Starts a TLS node, or `None` (with a message) when this redis-server was
/// built without TLS support.
fn start_tls_node(name: &str) -> Option<TlsNode> {
    let dir = scratch(&format!("tls-{name}"));
    let (ca, cert, key) = make_certificates(&dir);
    let mut last = None;
    // Another process may take the TLS port between our look and the
    // server's bind: try a few.
    for _ in 0..5 {
        let tls_port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let port = tls_port.to_string();
        let args = [
            "--tls-port",
            &port,
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
            "--tls-ca-cert-file",
            ca.to_str().unwrap(),
            "--tls-auth-clients",
            "no",
        ];
        match RedisServer::try_start(Persistence::AofAlways, &args) {
            Ok(server) => {
                return Some(TlsNode {
                    server,
                    tls_port,
                    ca,
                    dir,
                });
            }
            Err(e) if e.to_string().contains("Bad directive") || e.to_string().contains("not supported") => {
                eprintln!(
                    "skipping: this redis-server has no TLS support (build it with BUILD_TLS=yes, or install \
                     Debian's redis-server, which has it): {e}"
                );
                return None;
            }
            Err(e) => last = Some(e),
        }
    }
    panic!("no TLS redis-server could be started: {last:?}");
}

fn install_provider() {
    // Fails only when a provider is installed already, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn the_library_locks_and_releases_over_tls_with_a_private_ca() {
    let Some(node) = start_tls_node("library") else {
        return;
    };
    install_provider();
    runtime().block_on(async {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(node.ca_pem()),
        };
        let client = redis::Client::build_with_tls(node.url(), certificates).expect("TLS client");
        let redlock = Redlock::builder()
            .client(client)
            .node_timeout(Duration::from_secs(1))
            .build()
            .expect("client over TLS");
        let guard = redlock
            .lock("tls:library", Duration::from_secs(10))
            .await
            .expect("lock over TLS");
        assert!(
            get(&node.server, "tls:library").is_some(),
            "the lock key is on the node"
        );
        let report = guard.release().await.expect("release over TLS");
        assert_eq!(report.confirmed, 1);
        assert_eq!(dbsize(&node.server), 0, "released");
        assert!(redlock.shutdown(Duration::from_secs(5)).await.is_complete());

        // The same node without the CA: its certificate is not trusted.
        let untrusting = Redlock::builder()
            .node(node.url())
            .node_timeout(Duration::from_secs(1))
            .max_attempts(1)
            .build()
            .expect("client");
        let refused = untrusting.lock("tls:library", Duration::from_secs(10)).await;
        assert!(matches!(refused, Err(Error::Unreachable { .. })), "{refused:?}");
        let _ = untrusting.shutdown(Duration::from_secs(5)).await;
        assert_eq!(dbsize(&node.server), 0, "nothing was written without trust");
    });
}

#[test]
fn quorumlock_run_over_tls_trusts_the_given_ca() {
    let Some(node) = start_tls_node("run") else { return };
    let (started, go) = (node.dir.join("started"), node.dir.join("go"));
    let script = format!(
        "echo > {}; while [ ! -e {} ]; do sleep 0.02; done",
        started.display(),
        go.display()
    );
    let ca = node.ca.display().to_string();
    let mut run = QUORUMLOCK
        .command(&[])
        .args(["run", "--key", "tls:run", "--node-timeout", "1s", "--verbose"])
        .args(["--tls-ca", &ca, "--nodes", &node.url(), "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quorumlock run");
    wait_until_exists(&started, PROCESS_LIMIT);
    assert_eq!(
        dbsize(&node.server),
        1,
        "the lock is held over TLS while the command runs"
    );
    std::fs::write(&go, "").unwrap();
    let status = wait_child(&mut run, PROCESS_LIMIT);
    let stderr = run
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("acquired"), "{stderr}");
    assert_eq!(dbsize(&node.server), 0, "released");

    // Without --tls-ca the node's certificate is not trusted: no lock, no command.
    let marker = node.dir.join("ran");
    let out = QUORUMLOCK
        .command(&[])
        .args(["run", "--key", "tls:run", "--wait", "0", "--node-timeout", "1s"])
        .args(["--nodes", &node.url(), "--", "touch", marker.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(exit::UNREACHABLE),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!marker.exists(), "the command did not run");

    // A CA file that holds no certificate is a usage error.
    let out = QUORUMLOCK
        .command(&[])
        .args([
            "run",
            "--key",
            "tls:run",
            "--tls-ca",
            node.dir.join("server.key").to_str().unwrap(),
        ])
        .args(["--nodes", &node.url(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(exit::USAGE));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no PEM certificate"));
}

#[test]
fn quorumlock_check_over_tls_trusts_the_given_ca() {
    let Some(node) = start_tls_node("check") else {
        return;
    };
    let ca = node.ca.display().to_string();
    let out = QUORUMLOCK
        .command(&[])
        .args([
            "check",
            "--timeout",
            "5s",
            "--node-timeout",
            "1s",
            "--tls-ca",
            &ca,
            "--nodes",
            &node.url(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("all nodes fit for Redlock"), "{stdout}");
    assert_eq!(dbsize(&node.server), 0, "the check's keys are gone");

    let out = QUORUMLOCK
        .command(&[])
        .args(["check", "--timeout", "5s", "--nodes", &node.url()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "an untrusted certificate makes the node unusable"
    );
}

/// `etcds://` against a real etcd member serving TLS with a certificate of
/// the private CA: trusted through the URL's `ca`, refused without it.
#[cfg(feature = "etcd")]
mod etcd {
    use std::process::{Child, Command};

    use super::*;

    /// One etcd member serving its clients over TLS, killed on drop.
    struct TlsEtcd {
        child: Child,
        port: u16,
        ca: PathBuf,
        dir: PathBuf,
    }

    impl Drop for TlsEtcd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn free_port() -> u16 {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn start() -> TlsEtcd {
        let dir = scratch("tls-etcd");
        let (ca, cert, key) = make_certificates(&dir);
        let (port, peer) = (free_port(), free_port());
        let client = format!("https://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args([
                "--name",
                "t",
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("t={peer}"), "--logger", "zap"])
            .arg("--cert-file")
            .arg(&cert)
            .arg("--key-file")
            .arg(&key)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap())
            .spawn()
            .expect("etcd on PATH");
        TlsEtcd { child, port, ca, dir }
    }

    #[test]
    fn etcds_urls_trust_the_ca_they_name_and_refuse_an_unknown_one() {
        install_provider();
        let etcd = start();
        let ca = etcd.ca.display();
        let trusted = format!("etcds://127.0.0.1:{}?ca={ca}", etcd.port);
        let untrusted = format!("etcds://127.0.0.1:{}", etcd.port);
        runtime().block_on(async {
            let redlock = Redlock::builder().node(trusted.as_str()).build().unwrap();
            let ttl = Duration::from_secs(2);
            // The member may still be starting: its first answers come within seconds.
            let mut guard = None;
            for _ in 0..100 {
                if let Ok(Some(taken)) = redlock.try_lock("tls", ttl).await {
                    guard = Some(taken);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let guard = guard.expect("a lock over TLS");
            assert!(guard.fence_token().is_some());
            guard.release().await.unwrap();
            let stranger = Redlock::builder().node(untrusted.as_str()).build().unwrap();
            match stranger.try_lock("tls", ttl).await {
                Err(Error::Unreachable { .. }) => {}
                other => panic!("a server of an unknown CA was trusted: {other:?}"),
            }
        });
        let mut run = QUORUMLOCK
            .command(&[])
            .args(["run", "--nodes", &trusted, "--key", "tls-cli", "--", "true"])
            .spawn()
            .unwrap();
        let status = wait_child(&mut run, PROCESS_LIMIT);
        assert_eq!(status.code(), Some(0));
        let missing = QUORUMLOCK
            .command(&[])
            .args([
                "run",
                "--nodes",
                "etcds://127.0.0.1:1?ca=/nonexistent/ca.pem",
                "--",
                "true",
            ])
            .output()
            .unwrap();
        assert_eq!(
            missing.status.code(),
            Some(exit::USAGE),
            "{}",
            String::from_utf8_lossy(&missing.stderr)
        );
    }
}
