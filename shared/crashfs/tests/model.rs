//! crashfs against a reference model of what POSIX promises after a power cut.
//!
//! Generated sequences of calls (create, write, truncate, fsync, a failing
//! fsync, unlink, rename, directory fsync) run through a real FUSE mount; then
//! the power is cut and the mount started again. The model says which states
//! may come back: with nothing unsynced surviving, exactly the synced bytes
//! under the synced names; with a prefix of writes, one of the file's versions
//! since its sync; torn, every sector from one of them. Needs /dev/fuse and
//! root (make test runs as root).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use proptest::prelude::*;
use quire_crashfs::{Crash, DataLoss, FsyncFault, Mount, NameLoss, SECTOR_BYTES};

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Write { f: usize, offset: u64, len: u64, byte: u8 },
    Truncate { f: usize, size: u64 },
    Fsync(usize),
    FailingFsync(usize),
    Unlink(usize),
    Rename(usize, usize),
    FsyncDir,
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0..NAMES.len();
    prop_oneof![
        2 => f.clone().prop_map(Op::Create),
        6 => (f.clone(), 0u64..3000, 1u64..1500, any::<u8>()).prop_map(|(f, offset, len, byte)| Op::Write { f, offset, len, byte }),
        1 => (f.clone(), 0u64..3000).prop_map(|(f, size)| Op::Truncate { f, size }),
        3 => f.clone().prop_map(Op::Fsync),
        1 => f.clone().prop_map(Op::FailingFsync),
        1 => f.clone().prop_map(Op::Unlink),
        1 => (f.clone(), f.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => Just(Op::FsyncDir),
    ]
}

/// One inode as the model sees it.
#[derive(Debug, Clone, Default)]
struct Inode {
    current: Vec<u8>,
    /// What a sync made durable.
    synced: Vec<u8>,
    /// Every content since the last successful sync, oldest first, as the
    /// disk would hold it (lost bytes at their old values).
    versions: Vec<Vec<u8>>,
    /// Bytes a failed sync lost and no write has covered since: what the
    /// disk holds there whatever a later sync says.
    lost: Vec<Option<u8>>,
}

impl Inode {
    fn changed(&mut self) {
        self.versions.push(self.with_lost(&self.current));
    }

    fn wrote(&mut self, offset: usize, len: usize) {
        for i in offset..(offset + len).min(self.lost.len()) {
            self.lost[i] = None;
        }
    }

    /// `bytes` as the disk has them: lost bytes at their old values.
    fn with_lost(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        for (i, l) in self.lost.iter().enumerate() {
            if let (Some(v), true) = (l, i < out.len()) {
                out[i] = *v;
            }
        }
        out
    }

    fn sync_ok(&mut self) {
        self.synced = self.with_lost(&self.current);
        self.versions = vec![self.current.clone()];
    }

    fn sync_failed(&mut self) {
        // Every byte any content since the sync had that differs from what is
        // durable is lost (the failed writeback may have dropped any of them);
        // a later sync writes only what is written again.
        let n = self.versions.iter().map(Vec::len).max().unwrap_or(0).max(self.current.len());
        if self.lost.len() < n {
            self.lost.resize(n, None);
        }
        for v in self.versions.iter().chain(std::iter::once(&self.current)) {
            for (i, b) in v.iter().enumerate() {
                let disk = *self.synced.get(i).unwrap_or(&0);
                if self.lost[i].is_none() && disk != *b {
                    self.lost[i] = Some(disk);
                }
            }
        }
        // What was written before the failure never reaches the disk now.
        self.versions = self.versions.iter().map(|v| self.with_lost(v)).collect();
    }
}

#[derive(Debug, Clone, Default)]
struct Model {
    names: BTreeMap<usize, usize>,
    /// Names as the last directory fsync left them.
    durable: BTreeMap<usize, usize>,
    /// Namespace maps after each change since the last directory fsync.
    name_versions: Vec<BTreeMap<usize, usize>>,
    inodes: Vec<Inode>,
}

impl Model {
    fn name_changed(&mut self) {
        self.name_versions.push(self.names.clone());
    }
}

fn path(root: &Path, f: usize) -> std::path::PathBuf {
    root.join("dir").join(NAMES[f])
}

/// Runs `ops` on the mount and on the model; `true` if the call succeeded as the model expects.
fn run(mount: &Mount, root: &Path, ops: &[Op], m: &mut Model) {
    for op in ops {
        match *op {
            Op::Create(f) => {
                if m.names.contains_key(&f) {
                    continue;
                }
                OpenOptions::new().write(true).create_new(true).open(path(root, f)).unwrap();
                m.inodes.push(Inode { versions: vec![Vec::new()], ..Inode::default() });
                m.names.insert(f, m.inodes.len() - 1);
                m.name_changed();
            }
            Op::Write { f, offset, len, byte } => {
                let Some(&ino) = m.names.get(&f) else { continue };
                let file = OpenOptions::new().write(true).open(path(root, f)).unwrap();
                file.write_all_at(&vec![byte; len as usize], offset).unwrap();
                // The kernel may pass one write to the filesystem as several,
                // split at page boundaries: each part is a version of its own.
                let i = &mut m.inodes[ino];
                let (mut at, end) = (offset as usize, (offset + len) as usize);
                while at < end {
                    let to = ((at / 4096 + 1) * 4096).min(end);
                    if i.current.len() < to {
                        i.current.resize(to, 0);
                    }
                    i.current[at..to].fill(byte);
                    i.wrote(at, to - at);
                    i.changed();
                    at = to;
                }
            }
            Op::Truncate { f, size } => {
                let Some(&ino) = m.names.get(&f) else { continue };
                OpenOptions::new().write(true).open(path(root, f)).unwrap().set_len(size).unwrap();
                let i = &mut m.inodes[ino];
                let old = i.current.len();
                i.current.resize(size as usize, 0);
                if (size as usize) > old {
                    i.wrote(old, size as usize - old);
                }
                i.changed();
            }
            Op::Fsync(f) => {
                let Some(&ino) = m.names.get(&f) else { continue };
                OpenOptions::new().read(true).open(path(root, f)).unwrap().sync_all().unwrap();
                m.inodes[ino].sync_ok();
            }
            Op::FailingFsync(f) => {
                let Some(&ino) = m.names.get(&f) else { continue };
                mount.fail_fsync(FsyncFault::next_file(&format!("dir/{}", NAMES[f])));
                let err = OpenOptions::new().read(true).open(path(root, f)).unwrap().sync_data().unwrap_err();
                assert_eq!(err.raw_os_error(), Some(libc::EIO), "an injected fsync failure is EIO");
                m.inodes[ino].sync_failed();
            }
            Op::Unlink(f) => {
                if m.names.remove(&f).is_none() {
                    continue;
                }
                std::fs::remove_file(path(root, f)).unwrap();
                m.name_changed();
            }
            Op::Rename(a, b) => {
                let Some(&ino) = m.names.get(&a) else { continue };
                if a == b {
                    continue;
                }
                std::fs::rename(path(root, a), path(root, b)).unwrap();
                m.names.remove(&a);
                m.names.insert(b, ino);
                m.name_changed();
            }
            Op::FsyncDir => {
                std::fs::File::open(root.join("dir")).unwrap().sync_all().unwrap();
                m.durable = m.names.clone();
                m.name_versions.clear();
            }
        }
    }
}

fn sector_from_a_version(got: &[u8], versions: &[Vec<u8>], at: usize) -> bool {
    let end = (at + SECTOR_BYTES as usize).min(got.len());
    versions.iter().any(|v| (at..end).all(|i| got[i] == *v.get(i).unwrap_or(&0)))
}

/// Checks what came back after the cut against what the model allows.
fn check(root: &Path, crash: Crash, m: &Model) -> Result<(), TestCaseError> {
    let mut got = BTreeMap::new();
    for e in std::fs::read_dir(root.join("dir")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let f = NAMES.iter().position(|n| *n == name).unwrap();
        got.insert(f, std::fs::read(e.path()).unwrap());
    }
    // Which name maps may come back.
    let mut candidates = vec![m.durable.clone()];
    if crash.names == NameLoss::Prefix {
        candidates.extend(m.name_versions.iter().cloned());
    }
    // Names alone can match several maps (a rename over a name made again):
    // the state is allowed if one of them also explains every file's bytes.
    let matching: Vec<_> = candidates.iter().filter(|c| c.keys().eq(got.keys())).collect();
    if matching.is_empty() {
        return Err(TestCaseError::fail(format!(
            "names {:?} are none of {:?}",
            got.keys().collect::<Vec<_>>(),
            candidates.iter().map(|c| c.keys().collect::<Vec<_>>()).collect::<Vec<_>>()
        )));
    }
    let mut why = Vec::new();
    for names in matching {
        match check_files(crash, m, names, &got) {
            Ok(()) => return Ok(()),
            Err(e) => why.push(e.to_string()),
        }
    }
    Err(TestCaseError::fail(why.join("; ")))
}

fn check_files(
    crash: Crash,
    m: &Model,
    names: &BTreeMap<usize, usize>,
    got: &BTreeMap<usize, Vec<u8>>,
) -> Result<(), TestCaseError> {
    for (f, bytes) in got {
        let i = &m.inodes[names[f]];
        let versions = i.versions.clone();
        match crash.data {
            DataLoss::Drop => {
                prop_assert_eq!(bytes, &i.synced, "file {} is not its synced bytes", NAMES[*f]);
            }
            DataLoss::Prefix => {
                prop_assert!(
                    versions.iter().any(|v| v == bytes) || bytes == &i.synced,
                    "file {} ({} bytes) is none of its {} versions since its sync",
                    NAMES[*f],
                    bytes.len(),
                    versions.len()
                );
            }
            DataLoss::Torn => {
                // Every sector is one some version had, at a size one had.
                let mut versions = versions;
                versions.push(i.synced.clone());
                let mut at = 0;
                while at < bytes.len() {
                    prop_assert!(
                        sector_from_a_version(bytes, &versions, at),
                        "file {} sector at {} is from no version",
                        NAMES[*f],
                        at
                    );
                    at += SECTOR_BYTES as usize;
                }
                prop_assert!(
                    versions.iter().any(|v| v.len() == bytes.len()),
                    "file {} has a size it never had",
                    NAMES[*f]
                );
            }
        }
    }
    Ok(())
}

fn case(mut ops: Vec<Op>, crash: Crash) -> Result<(), TestCaseError> {
    if crash.data == DataLoss::Torn {
        // A failed sync's lost bytes are put back byte-exact, over whatever
        // sectors the torn cut chose: not a state of whole sectors, so the
        // sector check below cannot judge it. Failures are checked with the
        // other two modes, which say exactly what comes back.
        ops.retain(|op| !matches!(op, Op::FailingFsync(_)));
    }
    let tmp = tempfile::tempdir().unwrap();
    let (state, mnt) = (tmp.path().join("state"), tmp.path().join("mnt"));
    let mount = Mount::new(&state, &mnt).expect("mount crashfs (needs /dev/fuse and root)");
    std::fs::create_dir(mnt.join("dir")).unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    let mut m = Model::default();
    run(&mount, &mnt, &ops, &mut m);
    mount.crash(crash).unwrap();
    let mount = Mount::new(&state, &mnt).unwrap();
    let res = check(&mnt, crash, &m);
    mount.unmount().unwrap();
    res
}

fn crash() -> impl Strategy<Value = Crash> {
    (
        any::<u64>(),
        prop_oneof![Just(DataLoss::Drop), Just(DataLoss::Torn), Just(DataLoss::Prefix)],
        prop_oneof![Just(NameLoss::All), Just(NameLoss::Prefix)],
    )
        .prop_map(|(seed, data, names)| Crash { seed, data, names })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn what_comes_back_after_a_power_cut_is_what_posix_allows(ops in prop::collection::vec(op(), 1..40), crash in crash()) {
        case(ops, crash)?;
    }
}

/// The test can fail: a crash that kept unsynced bytes would be caught.
#[test]
fn an_unsynced_write_is_gone_and_a_synced_one_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let (state, mnt) = (tmp.path().join("state"), tmp.path().join("mnt"));
    let mount = Mount::new(&state, &mnt).unwrap();
    std::fs::write(mnt.join("synced"), b"kept").unwrap();
    std::fs::File::open(mnt.join("synced")).unwrap().sync_all().unwrap();
    std::fs::write(mnt.join("unsynced-name"), b"gone").unwrap();
    std::fs::File::open(mnt.join("unsynced-name")).unwrap().sync_all().unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    // After the directory fsync: a new file (name not durable) and a rewrite of
    // a durable one (data not synced).
    std::fs::write(mnt.join("late"), b"late").unwrap();
    OpenOptions::new().write(true).open(mnt.join("synced")).unwrap().write_all_at(b"LOST", 0).unwrap();
    let report = mount.crash(Crash::drop_all(1)).unwrap();
    assert!(report.writes_undone >= 1 && report.names_undone == 1, "{report:?}");
    let mount = Mount::new(&state, &mnt).unwrap();
    assert_eq!(std::fs::read(mnt.join("synced")).unwrap(), b"kept");
    assert_eq!(std::fs::read(mnt.join("unsynced-name")).unwrap(), b"gone");
    assert!(!mnt.join("late").exists());
    mount.unmount().unwrap();
}

/// A fault that cuts the power at a chosen fsync: the mount freezes as the
/// sync arrives, so the writes it was to make durable are simply unsynced
/// (a torn or dropped batch at the crash), not lost to a failed writeback.
#[test]
fn the_power_can_go_at_a_chosen_fsync() {
    let tmp = tempfile::tempdir().unwrap();
    let (state, mnt) = (tmp.path().join("state"), tmp.path().join("mnt"));
    let mount = Mount::new(&state, &mnt).unwrap();
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(mnt.join("log")).unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    f.write_all_at(&[1u8; 2000], 0).unwrap();
    f.sync_data().unwrap();
    mount.fail_fsync(FsyncFault::cut_at_next_file("log"));
    f.write_all_at(&[2u8; 3000], 2000).unwrap();
    let err = f.sync_data().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert!(f.write_all_at(b"after", 0).is_err(), "after the cut nothing answers");
    // One write, or two where the kernel split it at a page boundary.
    assert!(mount.stats().pending_writes >= 1, "the cut sync's write stays pending, not lost");
    drop(f);
    mount.crash(Crash { seed: 3, data: DataLoss::Prefix, names: NameLoss::All }).unwrap();
    let mount = Mount::new(&state, &mnt).unwrap();
    let got = std::fs::read(mnt.join("log")).unwrap();
    // The synced bytes, then a prefix of the unsynced write.
    assert!((2000..=5000).contains(&got.len()), "{} bytes", got.len());
    assert!(got[..2000].iter().all(|b| *b == 1) && got[2000..].iter().all(|b| *b == 2), "not a prefix");
    mount.unmount().unwrap();
}
