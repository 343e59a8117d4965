#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! TLS: with `sslmode=require` the connection is encrypted and the server's certificate checked
//! (here against a test CA given as extra roots); a certificate nobody vouches for is refused.

mod common;

use std::path::Path;
use std::process::Command;

use common::PrivateServer;
use engram_core::MemoryStore;
use engram_store_postgres::{PgOptions, PgStore};

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA and a certificate it signed for localhost, written beside the server's data.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=engram test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_means_encrypted_and_verified() {
    let certs = tempfile::tempdir().unwrap();
    certificates(certs.path());
    let port = free_port();
    // The pgserver wheel's PostgreSQL is built without OpenSSL; Debian's has it.
    let server = PrivateServer::start_from("ENGRAM_TEST_PG15_BIN");
    // The server reads its certificate and key from its data folder, owned by it.
    let data = server.folder().join("data");
    for file in ["server.crt", "server.key"] {
        std::fs::copy(certs.path().join(file), data.join(file)).unwrap();
        let target = data.join(file);
        std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        server.give(&target);
    }
    server.configure(&format!(
        "listen_addresses = '127.0.0.1'\nport = {port}\nssl = on\n\
         ssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'"
    ));
    server.stop();
    server.resume();

    let url = format!("postgresql://postgres@localhost:{port}/postgres?sslmode=require");
    let store = PgStore::open(
        &url,
        PgOptions {
            ca_file: Some(certs.path().join("ca.pem")),
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(
        stats.details.get("tls").map(String::as_str),
        Some("yes"),
        "{stats:?}"
    );

    // Without the CA, the certificate is not trusted: refused, in one line.
    let err = PgStore::open(&url, PgOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot reach the database at postgresql://postgres@localhost:"),
        "{err}"
    );
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(!err.contains('\n'), "{err}");

    // Without sslmode=require the connection is plain.
    let plain = PgStore::open(
        &format!("postgresql://postgres@localhost:{port}/postgres"),
        PgOptions::default(),
    )
    .await
    .unwrap();
    let stats = plain.stats().await.unwrap();
    assert_eq!(stats.details.get("tls").map(String::as_str), Some("no"));
}
