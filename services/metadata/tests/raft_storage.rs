//! openraft's own storage conformance suite run against quire's sled log
//! store and state machine store: the contract every Raft storage must keep
//! (log state, truncation, purge, vote, apply, snapshots).

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use quire_metadata::raft::log_store::LogStore;
use quire_metadata::raft::state_machine::StateMachineStore;
use quire_metadata::raft::TypeConfig;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for SledBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, sm) = quire_metadata::raft::open_storage(&dir.path().join("raft")).expect("open storage");
        Ok((dir, log, sm))
    }
}

#[test]
fn sled_stores_pass_openraft_storage_suite() {
    Suite::test_all(SledBuilder).unwrap();
}
