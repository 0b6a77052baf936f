//! TLS to NATS with a CA made in the test: `[nats.tls]` with the CA and a
//! client certificate connects to a server that verifies clients (mutual
//! TLS) and JetStream works over it; without the CA, or without the client
//! certificate, connecting fails at once with an error that names the fix.

use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_config::{NatsConfig, NatsTlsConfig};
use flotilla_testkit::TempDir;
use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

pub struct Pki {
    dir: TempDir,
}

impl Pki {
    /// A CA, a server certificate for 127.0.0.1/localhost and a client certificate.
    pub fn new() -> Self {
        let dir = TempDir::new("pki");
        let write = |name: &str, pem: String| std::fs::write(dir.path().join(name), pem).expect("pem");
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "Flotilla test CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        write("ca.pem", ca.pem());
        for (name, sans, usage) in [
            ("server", vec!["127.0.0.1".to_string(), "localhost".to_string()], ExtendedKeyUsagePurpose::ServerAuth),
            ("client", vec!["worker.flotilla.test".to_string()], ExtendedKeyUsagePurpose::ClientAuth),
        ] {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(sans).unwrap();
            p.distinguished_name.push(DnType::CommonName, name);
            p.extended_key_usages = vec![usage];
            let cert = p.signed_by(&key, &ca).unwrap();
            write(&format!("{name}.pem"), cert.pem());
            write(&format!("{name}-key.pem"), key.serialize_pem());
        }
        Self { dir }
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// `deploy/nats/nats-server.conf` (and its roles.conf) with this PKI's
    /// files in place of `/etc/nats/tls/`.
    pub fn production_conf(&self) -> std::path::PathBuf {
        let deploy = deploy_dir().join("nats");
        let tls_dir = format!("{}/", self.dir.path().display());
        let conf =
            std::fs::read_to_string(deploy.join("nats-server.conf")).unwrap().replace("/etc/nats/tls/", &tls_dir);
        std::fs::write(self.path("nats-server.conf"), conf).unwrap();
        std::fs::copy(deploy.join("roles.conf"), self.path("roles.conf")).unwrap();
        self.path("nats-server.conf")
    }

    /// A server config with JetStream and mutual TLS.
    fn server_conf(&self) -> std::path::PathBuf {
        let conf = self.path("tls.conf");
        std::fs::write(
            &conf,
            format!(
                "jetstream {{}}\ntls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n  timeout: 2\n}}\n",
                self.path("server.pem").display(),
                self.path("server-key.pem").display(),
                self.path("ca.pem").display()
            ),
        )
        .unwrap();
        conf
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_test_ca() {
    let pki = Pki::new();
    let nats = ConfiguredNats::start("nats-tls", &pki.server_conf(), &[]).await;
    let tls = NatsTlsConfig {
        ca_file: Some(pki.path("ca.pem")),
        cert_file: Some(pki.path("client.pem")),
        key_file: Some(pki.path("client-key.pem")),
        required: true,
    };
    let config = NatsConfig { url: format!("tls://127.0.0.1:{}", nats.port), tls: tls.clone(), ..Default::default() };
    let bus = Bus::connect(&config, "tls-test", Duration::from_secs(10)).await.expect("mutual TLS connects");
    bus.ensure_topology().await.expect("JetStream works over TLS");
    let raw = flotilla_testkit::RawNats::connect(&config).await;
    assert!(raw.client.server_info().tls_required, "the server asked for TLS");

    // Without the test CA the server certificate is not trusted: fail fast, say what to fix.
    let started = std::time::Instant::now();
    let no_ca = NatsConfig { tls: NatsTlsConfig { ca_file: None, ..tls.clone() }, ..config.clone() };
    let e = Bus::connect(&no_ca, "tls-test", Duration::from_secs(30))
        .await
        .map(|_| ())
        .expect_err("untrusted server refused");
    let msg = format!("{e:#}");
    assert!(msg.contains("TLS") && msg.contains("ca_file"), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(15), "a TLS failure is not retried until the deadline");

    // Without a client certificate the server refuses us (verify: true).
    let no_cert = NatsConfig { tls: NatsTlsConfig { cert_file: None, key_file: None, ..tls }, ..config };
    let e = Bus::connect(&no_cert, "tls-test", Duration::from_secs(3))
        .await
        .map(|_| ())
        .expect_err("client without cert refused");
    assert!(!format!("{e:#}").is_empty());
}

/// The production example is TLS-only: a client without TLS is refused,
/// a role user with the CA and a client certificate gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_production_nats_config_accepts_tls_clients_only() {
    let pki = Pki::new();
    let nats = ConfiguredNats::start("nats-prod", &pki.production_conf(), &[]).await;
    let plain = NatsConfig { url: nats.url_as("orchestrator"), ..Default::default() };
    let e = Bus::connect(&plain, "plain", Duration::from_secs(3)).await.map(|_| ()).expect_err("plain client refused");
    assert!(!format!("{e:#}").is_empty());
    let tls = NatsTlsConfig {
        ca_file: Some(pki.path("ca.pem")),
        cert_file: Some(pki.path("client.pem")),
        key_file: Some(pki.path("client-key.pem")),
        required: true,
    };
    let url = nats.url_as("orchestrator").replacen("nats://", "tls://", 1);
    let config = NatsConfig { url, tls, inbox_prefix: "_INBOX.orchestrator".into(), ..Default::default() };
    let bus = Bus::connect(&config, "tls-role", Duration::from_secs(10)).await.expect("TLS role user connects");
    bus.ensure_topology().await.expect("the orchestrator role declares its topology over TLS");
}
