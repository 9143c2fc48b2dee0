//! The state machine's durable form: one snapshot file, replaced whole.
//!
//! The state is held in memory and written nowhere as it changes; what
//! makes it durable is the snapshot (this file) plus the Raft log after it,
//! which openraft purges only once a snapshot covering it is durable. A
//! replica opens by reading the file and re-applying the log.
//!
//! Issue #46: the state used to be persisted record by record in sled as
//! well. A replica holding a million ledgers then held them twice, and one
//! that installed a snapshot held 3.5 to 4 GB afterwards (sled keeps about
//! 2.3 KB of memory for every record freshly written); each snapshot (183
//! MB at a million ledgers) was written into sled too, and the log's
//! appends waited behind its sync.
//!
//! A file is `MAGIC`, the meta's length (u32, little-endian), the meta
//! (postcard), the state's bytes (`encode_snapshot`'s), and a CRC-32C of
//! everything before it. It is written under a temporary name, fsynced,
//! renamed over `current` and the directory fsynced: a power cut leaves the
//! old file or the new one, whole. The same bytes go to a follower as the
//! snapshot's data, so what it installs is checked end to end.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use openraft::{BasicNode, SnapshotMeta};

/// A snapshot file's first bytes.
pub const MAGIC: &[u8; 8] = b"quiresn1";
/// A meta this long is not one (it holds a log id, a membership of a few
/// nodes and an id).
const META_MAX_BYTES: u32 = 1 << 20;

/// A snapshot file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    #[error("snapshot file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("snapshot file {path} is not one: {why}")]
    Corrupt { path: PathBuf, why: String },
}

/// The files of one replica's state machine, in their own directory.
#[derive(Clone, Debug)]
pub struct SnapshotDir {
    dir: PathBuf,
}

/// Writes a snapshot file's bytes, counting its CRC as they pass.
struct Crc<W> {
    inner: W,
    crc: u32,
}

impl<W: Write> Write for Crc<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A file written with at most `PACE_BYTES` of it dirty at a time (synced
/// as it goes). On ext4 (data=ordered), the Raft log's fdatasync commits
/// the journal, and that commit writes out the data of every file whose
/// blocks were allocated meanwhile: a snapshot of a million ledgers is 183
/// MB, and the log's writes waited behind it.
struct Paced {
    file: File,
    unsynced: usize,
}

/// Bytes written between two syncs of a snapshot file.
const PACE_BYTES: usize = 8 << 20;

impl Paced {
    fn new(file: File) -> Paced {
        Paced { file, unsynced: 0 }
    }
}

impl Write for Paced {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.unsynced += n;
        if self.unsynced >= PACE_BYTES {
            self.file.sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Writes a whole snapshot file to `w`: the header, what `body` writes,
/// the CRC.
pub fn write_file<W: Write>(
    w: W,
    meta: &SnapshotMeta<u64, BasicNode>,
    body: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<W> {
    let mut w = Crc { inner: w, crc: 0 };
    let meta_bytes = postcard::to_stdvec(meta).map_err(io::Error::other)?;
    w.write_all(MAGIC)?;
    w.write_all(&(meta_bytes.len() as u32).to_le_bytes())?;
    w.write_all(&meta_bytes)?;
    body(&mut w)?;
    let crc = w.crc;
    w.inner.write_all(&crc.to_le_bytes())?;
    Ok(w.inner)
}

/// A whole snapshot file in memory (tests, benchmarks).
pub fn file_bytes(meta: &SnapshotMeta<u64, BasicNode>, data: &[u8]) -> Vec<u8> {
    write_file(Vec::new(), meta, |w| w.write_all(data)).expect("writing to memory")
}

/// Splits a whole snapshot file into its meta and its state's bytes,
/// checking its magic, lengths and CRC.
pub fn parse(
    path: &Path,
    bytes: &[u8],
) -> Result<(SnapshotMeta<u64, BasicNode>, std::ops::Range<usize>), SnapshotFileError> {
    let corrupt = |why: String| SnapshotFileError::Corrupt { path: path.to_path_buf(), why };
    let header = MAGIC.len() + 4;
    if bytes.len() < header + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt(format!("{} bytes, without the magic {MAGIC:?}", bytes.len())));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    let want = u32::from_le_bytes(tail.try_into().expect("four bytes"));
    let got = crc32c::crc32c(body);
    if want != got {
        return Err(corrupt(format!("CRC {got:#010x}, stored {want:#010x}")));
    }
    let meta_len = u32::from_le_bytes(bytes[MAGIC.len()..header].try_into().expect("four bytes"));
    if meta_len > META_MAX_BYTES || header + meta_len as usize > body.len() {
        return Err(corrupt(format!("a meta of {meta_len} bytes")));
    }
    let meta_end = header + meta_len as usize;
    let meta = postcard::from_bytes(&bytes[header..meta_end]).map_err(|e| corrupt(format!("its meta: {e}")))?;
    Ok((meta, meta_end..body.len()))
}

impl SnapshotDir {
    /// The directory `dir`, made durably if missing; a file a crash left
    /// half written there is removed.
    pub fn open(dir: &Path) -> Result<SnapshotDir, SnapshotFileError> {
        let io = |source| SnapshotFileError::Io { path: dir.to_path_buf(), source };
        quire_durable::create_dir_all_durable(dir).map_err(io)?;
        let d = SnapshotDir { dir: dir.to_path_buf() };
        for p in [d.building(), d.receiving_path()] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(SnapshotFileError::Io { path: p, source: e }),
            }
        }
        Ok(d)
    }

    /// The current snapshot's file.
    pub fn current(&self) -> PathBuf {
        self.dir.join("current")
    }

    fn building(&self) -> PathBuf {
        self.dir.join("building")
    }

    /// Where a snapshot sent by the leader is written as it arrives.
    pub fn receiving_path(&self) -> PathBuf {
        self.dir.join("receiving")
    }

    /// The current snapshot, whole (`None` if there is none yet).
    pub fn read_current(&self) -> Result<Option<Vec<u8>>, SnapshotFileError> {
        let path = self.current();
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SnapshotFileError::Io { path, source }),
        }
    }

    /// Writes a new current snapshot, durably: its header, what `body`
    /// writes, its CRC.
    pub fn write_current(
        &self,
        meta: &SnapshotMeta<u64, BasicNode>,
        body: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<(), SnapshotFileError> {
        let path = self.building();
        let io = |source| SnapshotFileError::Io { path: path.clone(), source };
        let f = File::create(&path).map_err(io)?;
        let w = write_file(BufWriter::with_capacity(1 << 20, Paced::new(f)), meta, body).map_err(io)?;
        let f = w.into_inner().map_err(|e| io(e.into_error()))?.file;
        f.sync_all().map_err(io)?;
        drop(f);
        self.replace_current(&path)
    }

    fn replace_current(&self, from: &Path) -> Result<(), SnapshotFileError> {
        let io = |source| SnapshotFileError::Io { path: from.to_path_buf(), source };
        std::fs::rename(from, self.current()).map_err(io)?;
        quire_durable::sync_dir(&self.dir).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{LogId, StoredMembership};

    fn meta() -> SnapshotMeta<u64, BasicNode> {
        SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(2, 1), 9)),
            last_membership: StoredMembership::default(),
            snapshot_id: "s9".into(),
        }
    }

    #[test]
    fn a_file_reads_back_and_any_flipped_bit_or_cut_is_refused() {
        let bytes = file_bytes(&meta(), b"the state");
        let p = Path::new("x");
        let (m, range) = parse(p, &bytes).unwrap();
        assert_eq!((m, &bytes[range]), (meta(), &b"the state"[..]));
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(parse(p, &bad).is_err(), "byte {i} bit {bit} flipped was accepted");
            }
            assert!(parse(p, &bytes[..i]).is_err(), "cut to {i} bytes was accepted");
        }
    }

    #[test]
    fn a_new_current_replaces_the_old_and_leftovers_go_at_open() {
        let tmp = tempfile::tempdir().unwrap();
        let d = SnapshotDir::open(&tmp.path().join("sm")).unwrap();
        assert!(d.read_current().unwrap().is_none());
        d.write_current(&meta(), |w| w.write_all(b"one")).unwrap();
        d.write_current(&meta(), |w| w.write_all(b"two")).unwrap();
        let bytes = d.read_current().unwrap().unwrap();
        let (_, range) = parse(&d.current(), &bytes).unwrap();
        assert_eq!(&bytes[range], b"two");
        std::fs::write(d.building(), b"half").unwrap();
        std::fs::write(d.receiving_path(), b"half").unwrap();
        let d = SnapshotDir::open(&tmp.path().join("sm")).unwrap();
        assert!(!d.building().exists() && !d.receiving_path().exists());
        assert!(d.read_current().unwrap().is_some());
    }
}
