#![allow(dead_code)] // each test binary uses a different part
//! A real cluster for the client's tests: 3 metadata replicas and bookies as
//! processes on loopback, with mTLS, and clients holding `client` certificates.

use std::sync::Arc;
use std::time::Duration;

use quire_client::{Client, ClientOptions};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::{v1, Role};
use quire_rpc::{Credentials, RpcClient, TlsFiles};
use quire_testkit::TestCluster;

pub struct Setup {
    pub _dir: tempfile::TempDir,
    pub cluster: TestCluster,
}

impl Setup {
    /// A cluster with one bookie per rack entry; leases of 3 s so that a
    /// killed bookie leaves the registry quickly.
    pub fn start(racks: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: racks.len() as u32 }, &IssueOptions::default())
            .unwrap();
        let cluster = TestCluster::start(dir.path(), &certs, racks, &["--lease-ms", "3000"]).unwrap();
        Setup { _dir: dir, cluster }
    }

    /// As [`Setup::start`], every process serving Prometheus metrics
    /// (`cluster.metrics`: role and address).
    pub fn start_with_metrics(racks: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: racks.len() as u32 }, &IssueOptions::default())
            .unwrap();
        let cluster = TestCluster::start_with_metrics(dir.path(), &certs, racks, &["--lease-ms", "3000"], &[]).unwrap();
        Setup { _dir: dir, cluster }
    }

    /// As [`Setup::start`], the metadata replicas with `timing`.
    pub fn start_with_raft_timing(racks: &[&str], timing: quire_testkit::RaftTiming) -> Setup {
        let timing = Some(timing);
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: racks.len() as u32 }, &IssueOptions::default())
            .unwrap();
        let cluster =
            TestCluster::start_with_raft_timing(dir.path(), &certs, racks, &["--lease-ms", "3000"], timing).unwrap();
        Setup { _dir: dir, cluster }
    }

    pub fn rpc(&self, role: Role) -> RpcClient {
        let creds = Credentials::load(&TlsFiles::in_dir(&self.cluster.certs, role, "1")).unwrap();
        RpcClient::new(&creds, quire_rpc::ClientOptions::default()).unwrap()
    }

    pub fn meta(&self, rpc: &RpcClient) -> Arc<MetaClient> {
        Arc::new(MetaClient::new(rpc.clone(), self.cluster.metadata.addrs.clone(), MetaClientOptions::default()))
    }

    /// A client with short timeouts, so that failures show within a test.
    pub fn client(&self) -> Client {
        let rpc = self.rpc(Role::Client);
        let opts = ClientOptions {
            add_timeout: Duration::from_secs(2),
            ensemble_change_deadline: Duration::from_secs(10),
            read_timeout: Duration::from_secs(3),
            ..ClientOptions::default()
        };
        Client::new(rpc.clone(), self.meta(&rpc), opts)
    }

    /// A client holding the certificate of `role`/`id` (issued now if the
    /// cluster's directory has none).
    pub fn client_as(&self, role: Role, id: &str) -> Client {
        let certs = &self.cluster.certs;
        if !quire_pki::cert_paths(certs, role, id).0.exists() {
            let ca = quire_pki::CertAuthority::load(certs).unwrap();
            ca.issue(role, id, &IssueOptions::default()).unwrap().write(certs, role, id).unwrap();
        }
        let creds = Credentials::load(&TlsFiles::in_dir(certs, role, id)).unwrap();
        let rpc = RpcClient::new(&creds, quire_rpc::ClientOptions::default()).unwrap();
        Client::new(rpc.clone(), self.meta(&rpc), ClientOptions::default())
    }

    /// Waits until `n` bookies are registered.
    pub async fn wait_for_bookies(&self, n: usize) {
        let rpc = self.rpc(Role::Admin);
        let meta = self.meta(&rpc);
        let got = meta.wait_for_registry(Duration::from_secs(20), |b| b.len() >= n).await.unwrap();
        assert!(got.is_some(), "fewer than {n} bookies registered:\n{}", self.cluster.logs());
    }
}

impl Setup {
    /// Waits until `bookie_id` is registered by an instance other than `old`; returns it.
    pub async fn wait_for_new_instance(&self, bookie_id: &str, old: &str) -> String {
        let rpc = self.rpc(Role::Admin);
        let meta = self.meta(&rpc);
        let fresh = |b: &v1::BookieRecord| b.bookie_id == bookie_id && b.instance_id != old;
        let list = meta.wait_for_registry(Duration::from_secs(20), |l| l.iter().any(fresh)).await.unwrap();
        let list = list.unwrap_or_else(|| panic!("bookie {bookie_id} never re-registered:\n{}", self.cluster.logs()));
        list.into_iter().find(fresh).expect("found").instance_id
    }
}
