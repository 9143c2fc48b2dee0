//! The FUSE filesystem: every call passes through to the backing directory,
//! and what is not yet durable is remembered so that a crash can put it back.
//!
//! Every request takes one lock: a test filesystem is correct first. Writes
//! reach this daemon as they are made (no writeback cache), so the kernel's
//! page cache above it never holds what this undo log does not know.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::names::{NameOp, Names, Trash};
use crate::nodes::{Nodes, Place};
use crate::undo::FileLog;
use crate::{FsyncFault, Stats, SyncTarget};

const TTL: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Handle {
    ino: u64,
    file: File,
}

/// Everything the daemon knows; one lock guards it.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) root: PathBuf,
    pub(crate) nodes: Nodes,
    pub(crate) files: HashMap<u64, FileLog>,
    pub(crate) names: Names,
    pub(crate) trash: Trash,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    pub(crate) frozen: bool,
    pub(crate) faults: Vec<FsyncFault>,
    pub(crate) stats: Stats,
}

impl State {
    pub(crate) fn new(root: PathBuf, trash: PathBuf) -> Self {
        State {
            nodes: Nodes::new(&root),
            root,
            files: HashMap::new(),
            names: Names::default(),
            trash: Trash::new(trash),
            handles: HashMap::new(),
            next_fh: 1,
            frozen: false,
            faults: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Whether this sync of `ino` is one a fault says must fail (a fault
    /// that cuts the power freezes the mount too).
    fn sync_fails(&mut self, ino: u64, dir: bool) -> bool {
        let Some(path) = self.nodes.live_path(ino) else { return false };
        let rel = path.strip_prefix(&self.root).unwrap_or(path).to_string_lossy().into_owned();
        for f in &mut self.faults {
            let target = match f.target {
                SyncTarget::Any => true,
                SyncTarget::Files => !dir,
                SyncTarget::Dirs => dir,
            };
            if !target || !rel.contains(&f.path_contains) {
                continue;
            }
            if f.skip > 0 {
                f.skip -= 1;
                continue;
            }
            if f.fail > 0 {
                f.fail -= 1;
                if f.cut {
                    self.frozen = true;
                }
                return true;
            }
        }
        false
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<PathBuf, Errno> {
        self.nodes.live_path(parent).map(|p| p.join(name)).ok_or(Errno::ENOENT)
    }

    fn entry(&mut self, path: &Path) -> Result<FileAttr, Errno> {
        let md = std::fs::symlink_metadata(path).map_err(Errno::from)?;
        kind_of(&md)?;
        let ino = self.nodes.intern(path);
        Ok(attr(ino, &md))
    }
}

/// Only files and directories: symlinks, devices and fifos are not modelled.
fn kind_of(md: &Metadata) -> Result<(), Errno> {
    if md.is_dir() || md.is_file() {
        Ok(())
    } else {
        // Symlinks, devices and fifos are not modelled: nothing here makes them.
        Err(Errno::EPERM)
    }
}

fn attr(ino: u64, md: &Metadata) -> FileAttr {
    let time = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns.clamp(0, 999_999_999) as u32);
    FileAttr {
        ino: INodeNo(ino),
        size: md.len(),
        blocks: md.blocks(),
        atime: time(md.atime(), md.atime_nsec()),
        mtime: time(md.mtime(), md.mtime_nsec()),
        ctime: time(md.ctime(), md.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: if md.is_dir() { FileType::Directory } else { FileType::RegularFile },
        perm: (md.mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn open_options(flags: i32) -> OpenOptions {
    let mut o = OpenOptions::new();
    // Write access reads too: a write first reads what it overwrites.
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY => o.read(true),
        _ => o.read(true).write(true),
    };
    // The kernel gives each write its offset (also for O_APPEND), and
    // synchronous writes reach this daemon as fsync calls of their own.
    let drop = libc::O_ACCMODE
        | libc::O_CREAT
        | libc::O_EXCL
        | libc::O_TRUNC
        | libc::O_APPEND
        | libc::O_DIRECT
        | libc::O_SYNC
        | libc::O_DSYNC
        | libc::O_NOCTTY;
    o.custom_flags(flags & !drop);
    o
}

/// The filesystem handed to fuser; clones share one state.
#[derive(Debug, Clone)]
pub(crate) struct CrashFs {
    pub(crate) state: Arc<Mutex<State>>,
}

impl CrashFs {
    fn lock(&self) -> Result<MutexGuard<'_, State>, Errno> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.frozen {
            // The power is off: nothing answers any more.
            return Err(Errno::EIO);
        }
        Ok(st)
    }
}

macro_rules! tri {
    ($reply:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(err) => {
                $reply.error(Errno::from(err));
                return;
            }
        }
    };
}

fn io<T>(r: std::io::Result<T>) -> Result<T, Errno> {
    r.map_err(Errno::from)
}

impl Filesystem for CrashFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = tri!(reply, self.lock());
        let path = tri!(reply, st.child(parent.0, name));
        let a = tri!(reply, st.entry(&path));
        reply.entry(&TTL, &a, Generation(0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = tri!(reply, self.lock());
        let path = tri!(reply, st.nodes.data_path(ino.0).ok_or(Errno::ENOENT));
        let md = tri!(reply, io(std::fs::symlink_metadata(path)));
        reply.attr(&TTL, &attr(ino.0, &md));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = tri!(reply, self.lock());
        let st = &mut *st;
        let path = tri!(reply, st.nodes.data_path(ino.0).map(Path::to_path_buf).ok_or(Errno::ENOENT));
        if let Some(size) = size {
            let opened;
            let file = match fh.and_then(|fh| st.handles.get(&fh.0)) {
                Some(h) => &h.file,
                None => {
                    opened = tri!(reply, io(OpenOptions::new().read(true).write(true).open(&path)));
                    &opened
                }
            };
            let before = tri!(reply, io(file.metadata())).len();
            let mut cut = vec![0u8; before.saturating_sub(size) as usize];
            tri!(reply, io(file.read_exact_at(&mut cut, size.min(before))));
            tri!(reply, io(file.set_len(size)));
            st.files.entry(ino.0).or_default().set_len(before, size, cut);
        }
        if let Some(mode) = mode {
            // Permissions are not modelled: they pass through and survive any crash.
            tri!(reply, io(std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))));
        }
        let md = tri!(reply, io(std::fs::symlink_metadata(&path)));
        reply.attr(&TTL, &attr(ino.0, &md));
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let mut st = tri!(reply, self.lock());
        let path = tri!(reply, st.child(parent.0, name));
        tri!(reply, io(std::fs::create_dir(&path)));
        tri!(reply, io(std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & !umask & 0o7777))));
        let a = tri!(reply, st.entry(&path));
        st.names.push(NameOp::Made { parent: parent.0, name: name.to_owned(), ino: a.ino.0 });
        reply.entry(&TTL, &a, Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent.0, name, false, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent.0, name, true, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut st = tri!(reply, self.lock());
        let st = &mut *st;
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let from = tri!(reply, st.child(parent.0, name));
        let to = tri!(reply, st.child(newparent.0, newname));
        let a = tri!(reply, st.entry(&from));
        let ino = a.ino.0;
        if from == to {
            reply.ok();
            return;
        }
        let mut replaced = None;
        if let Ok(md) = std::fs::symlink_metadata(&to) {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                reply.error(Errno::EEXIST);
                return;
            }
            let src_dir = a.kind == FileType::Directory;
            if md.is_dir() && !src_dir {
                reply.error(Errno::EISDIR);
                return;
            }
            if !md.is_dir() && src_dir {
                reply.error(Errno::ENOTDIR);
                return;
            }
            if md.is_dir() && tri!(reply, io(std::fs::read_dir(&to))).next().is_some() {
                reply.error(Errno::ENOTEMPTY);
                return;
            }
            let t = tri!(reply, st.entry(&to));
            let slot = st.trash.slot();
            tri!(reply, io(std::fs::rename(&to, &slot)));
            st.nodes.relocate(&to, &slot, false);
            replaced = Some(t.ino.0);
        }
        tri!(reply, io(std::fs::rename(&from, &to)));
        st.nodes.relocate(&from, &to, true);
        st.names.push(NameOp::Moved {
            from: (parent.0, name.to_owned()),
            to: (newparent.0, newname.to_owned()),
            ino,
            replaced,
        });
        reply.ok();
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut st = tri!(reply, self.lock());
        let path = tri!(reply, st.nodes.data_path(ino.0).map(Path::to_path_buf).ok_or(Errno::ENOENT));
        let file = tri!(reply, io(open_options(flags.0).open(&path)));
        let fh = st.next_fh;
        st.next_fh += 1;
        st.handles.insert(fh, Handle { ino: ino.0, file });
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = tri!(reply, self.lock());
        let st = &mut *st;
        let path = tri!(reply, st.child(parent.0, name));
        let before = std::fs::symlink_metadata(&path).ok();
        if before.is_some() && flags & libc::O_EXCL != 0 {
            reply.error(Errno::EEXIST);
            return;
        }
        let mut o = open_options(flags);
        o.create(true).mode(mode & !umask & 0o7777);
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            // create(2) with O_RDONLY still makes the file; std wants write access for that.
            o.write(true);
        }
        let file = tri!(reply, io(o.open(&path)));
        let a = tri!(reply, st.entry(&path));
        let ino = a.ino.0;
        match before {
            None => st.names.push(NameOp::Made { parent: parent.0, name: name.to_owned(), ino }),
            Some(md) if flags & libc::O_TRUNC != 0 && md.len() > 0 => {
                let mut cut = vec![0u8; md.len() as usize];
                tri!(reply, io(file.read_exact_at(&mut cut, 0)));
                tri!(reply, io(file.set_len(0)));
                st.files.entry(ino).or_default().set_len(md.len(), 0, cut);
            }
            Some(_) => {}
        }
        let md = tri!(reply, io(file.metadata()));
        let fh = st.next_fh;
        st.next_fh += 1;
        st.handles.insert(fh, Handle { ino, file });
        reply.created(&TTL, &attr(ino, &md), Generation(0), FileHandle(fh), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let st = tri!(reply, self.lock());
        let h = tri!(reply, st.handles.get(&fh.0).ok_or(Errno::EBADF));
        let mut buf = vec![0u8; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match h.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    reply.error(Errno::from(e));
                    return;
                }
            }
        }
        reply.data(&buf[..got]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = tri!(reply, self.lock());
        let st = &mut *st;
        let h = tri!(reply, st.handles.get(&fh.0).ok_or(Errno::EBADF));
        let size_before = tri!(reply, io(h.file.metadata())).len();
        let old_len = if offset < size_before { (size_before - offset).min(data.len() as u64) } else { 0 };
        let mut old = vec![0u8; old_len as usize];
        tri!(reply, io(h.file.read_exact_at(&mut old, offset)));
        tri!(reply, io(h.file.write_all_at(data, offset)));
        st.files.entry(h.ino).or_default().wrote(offset, data.len() as u64, old, size_before);
        st.stats.writes += 1;
        reply.written(data.len() as u32);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut st = tri!(reply, self.lock());
        let st = &mut *st;
        if st.sync_fails(ino.0, false) {
            st.stats.failed_syncs += 1;
            if st.frozen {
                // The power went as this sync arrived: its writes are unsynced, not lost.
                reply.error(Errno::EIO);
                return;
            }
            if let (Some(log), Some(path)) = (st.files.get_mut(&ino.0), st.nodes.data_path(ino.0)) {
                let file = tri!(reply, io(File::open(path)));
                tri!(reply, io(log.sync_failed(&file)));
            }
            reply.error(Errno::EIO);
            return;
        }
        st.stats.syncs += 1;
        if let Some(log) = st.files.get_mut(&ino.0) {
            log.synced();
        }
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let mut st = tri!(reply, self.lock());
        let path = tri!(reply, st.nodes.live_path(ino.0).map(Path::to_path_buf).ok_or(Errno::ENOENT));
        let mut names: Vec<_> = tri!(reply, io(std::fs::read_dir(&path)))
            .filter_map(|e| e.ok())
            .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let mut all = vec![(INodeNo(ino.0), FileType::Directory, OsStr::new(".").to_owned())];
        all.push((INodeNo(ino.0), FileType::Directory, OsStr::new("..").to_owned()));
        for (name, ft) in names {
            let ft = if ft.is_dir() {
                FileType::Directory
            } else if ft.is_file() {
                FileType::RegularFile
            } else {
                continue;
            };
            let child = st.nodes.intern(&path.join(&name));
            all.push((INodeNo(child), ft, name));
        }
        for (i, (ino, ft, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, i as u64 + 1, ft, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut st = tri!(reply, self.lock());
        let st = &mut *st;
        if st.sync_fails(ino.0, true) {
            st.stats.failed_syncs += 1;
            reply.error(Errno::EIO);
            return;
        }
        st.stats.dir_syncs += 1;
        for gone in st.names.dir_synced(ino.0) {
            if let Some(Place::Trash(p)) = st.nodes.get(gone).map(|n| n.place.clone()) {
                let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
                st.nodes.bury(&p);
            }
            st.files.remove(&gone);
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let st = tri!(reply, self.lock());
        let s = tri!(reply, rustix::fs::statvfs(&st.root).map_err(|e| Errno::from_i32(e.raw_os_error())));
        reply.statfs(s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree, s.f_bsize as u32, 255, s.f_frsize as u32);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        // Not modelled; callers fall back to writing (posix_fallocate does).
        reply.error(Errno::EOPNOTSUPP);
    }
}

impl CrashFs {
    fn remove(&self, parent: u64, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        let mut st = tri!(reply, self.lock());
        let st = &mut *st;
        let path = tri!(reply, st.child(parent, name));
        let md = tri!(reply, io(std::fs::symlink_metadata(&path)));
        match (dir, md.is_dir()) {
            (false, true) => return reply.error(Errno::EISDIR),
            (true, false) => return reply.error(Errno::ENOTDIR),
            (true, true) if tri!(reply, io(std::fs::read_dir(&path))).next().is_some() => {
                return reply.error(Errno::ENOTEMPTY)
            }
            _ => {}
        }
        let ino = st.nodes.intern(&path);
        let slot = st.trash.slot();
        tri!(reply, io(std::fs::rename(&path, &slot)));
        st.nodes.relocate(&path, &slot, false);
        st.names.push(NameOp::Removed { parent, name: name.to_owned(), ino });
        reply.ok();
    }
}
