//! A crashfs mount: start it, cut its power, put back what was lost.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fs::{CrashFs, State};
use crate::rng::Rng;
use crate::{Crash, CrashReport, Error, FsyncFault, Stats};

/// A mounted crashfs. Dropping it unmounts without loss (a clean shutdown);
/// [`Mount::crash`] is the power cut.
#[derive(Debug)]
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    state: Arc<Mutex<State>>,
    mountpoint: PathBuf,
    state_dir: PathBuf,
    /// The mount's device number: its FUSE connection's id in fusectl.
    dev: Option<u64>,
}

impl Mount {
    /// Mounts at `mountpoint` a filesystem whose bytes live in
    /// `state_dir/data` (made if missing; kept across mounts). Needs
    /// `/dev/fuse` and root, or fusermount3.
    pub fn new(state_dir: &Path, mountpoint: &Path) -> Result<Mount, Error> {
        let data = state_dir.join("data");
        let trash = state_dir.join("trash");
        std::fs::create_dir_all(&data).map_err(|e| Error::io(&data, e))?;
        std::fs::create_dir_all(mountpoint).map_err(|e| Error::io(mountpoint, e))?;
        // A trash left by a daemon that stopped without a crash holds inodes
        // whose unlink simply stood.
        let _ = std::fs::remove_dir_all(&trash);
        std::fs::create_dir_all(&trash).map_err(|e| Error::io(&trash, e))?;
        let state = Arc::new(Mutex::new(State::new(data, trash)));
        let fs = CrashFs { state: state.clone() };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("quire-crashfs".into()),
            fuser::MountOption::Subtype("crashfs".into()),
            fuser::MountOption::RW,
            fuser::MountOption::NoAtime,
        ];
        config.acl = fuser::SessionACL::All;
        config.n_threads = Some(2);
        let session = fuser::spawn_mount(fs, mountpoint, &config)
            .map_err(|e| Error::Mount { at: mountpoint.to_path_buf(), source: e })?;
        // Read now: once frozen, the mount answers nothing, not even stat.
        let dev = std::fs::metadata(mountpoint).map(|m| m.dev()).ok();
        Ok(Mount {
            session: Some(session),
            state,
            mountpoint: mountpoint.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            dev,
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The power goes: from now on every call fails with EIO, and nothing
    /// more becomes durable. Processes using the mount should be killed next.
    pub fn freeze(&self) {
        self.state().frozen = true;
    }

    /// Adds a rule that fails fsync or fdatasync calls (EIO) on matching paths.
    pub fn fail_fsync(&self, fault: FsyncFault) {
        self.state().faults.push(fault);
    }

    pub fn stats(&self) -> Stats {
        let st = self.state();
        let mut s = st.stats;
        s.pending_writes = st.files.values().map(|f| f.pending() as u64).sum();
        s.pending_names = st.names.pending() as u64;
        s
    }

    /// The power cut: freezes the mount, unmounts it (processes still using
    /// it get EIO, then ENOTCONN), and puts back in the backing directory what
    /// was never made durable, as `crash` says. Mount again to go on.
    pub fn crash(mut self, crash: Crash) -> Result<CrashReport, Error> {
        self.freeze();
        self.stop()?;
        let mut st = self.state();
        let st = &mut *st;
        let mut rng = Rng::new(crash.seed);
        let mut report = CrashReport::default();
        let mut inos: Vec<u64> = st.files.iter().filter(|(_, f)| !f.is_clean()).map(|(i, _)| *i).collect();
        inos.sort_unstable();
        for ino in inos {
            let Some(path) = st.nodes.data_path(ino).map(Path::to_path_buf) else { continue };
            let file = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&path, e)),
            };
            let rolled = st.files[&ino].roll_back(&file, crash.data, &mut rng).map_err(|e| Error::io(&path, e))?;
            report.files += 1;
            report.writes_undone += rolled.undone;
            report.writes_kept += rolled.kept;
            report.lost_ranges += rolled.lost_ranges;
        }
        let (undone, kept) = st
            .names
            .roll_back(&mut st.nodes, &mut st.trash, crash.names, &mut rng)
            .map_err(|e| Error::io(&st.root, e))?;
        report.names_undone = undone;
        report.names_kept = kept;
        let trash = st.trash.dir().to_path_buf();
        std::fs::remove_dir_all(&trash).map_err(|e| Error::io(&trash, e))?;
        std::fs::create_dir_all(&trash).map_err(|e| Error::io(&trash, e))?;
        Ok(report)
    }

    /// Unmounts, keeping everything (as a clean shutdown that synced all).
    pub fn unmount(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        let Some(session) = self.session.take() else { return Ok(()) };
        // Detach first: a process that still holds a file open must not keep
        // the mount (and the power) on.
        let _ = rustix::mount::unmount(&self.mountpoint, rustix::mount::UnmountFlags::DETACH);
        if let Some(dev) = self.dev {
            abort_connection(dev);
        }
        match session.join() {
            // The abort above ends the session's reads so.
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            res => res.map_err(|e| Error::Mount { at: self.mountpoint.clone(), source: e }),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Ends a FUSE connection at once through fusectl, even while files on it are
/// open (their users get ENOTCONN): the daemon's threads then return.
fn abort_connection(dev: u64) {
    let conns = Path::new("/sys/fs/fuse/connections");
    if std::fs::read_dir(conns).map(|mut d| d.next().is_none()).unwrap_or(true) {
        let _ = rustix::mount::mount("fusectl", conns, "fusectl", rustix::mount::MountFlags::empty(), None);
    }
    let minor = rustix::fs::minor(dev);
    let _ = std::fs::write(conns.join(minor.to_string()).join("abort"), "1");
}
