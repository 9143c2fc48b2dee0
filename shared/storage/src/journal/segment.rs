//! One journal file ("segment"): zero-filled ahead of the write position,
//! appended with pwrite, made durable with fdatasync.
//!
//! Zero-filling ahead (rather than letting the file grow, or fallocate's
//! unwritten extents) keeps most fdatasyncs free of metadata updates: the size
//! and the extents change only once per `prealloc_bytes`. The zeros are also
//! what replay reads as the clean end of the written part.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A segment's file name: `journal-<id, 16 hex digits>.log`.
pub fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("journal-{id:016x}.log"))
}

/// The id in a segment file name, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("journal-")?.strip_suffix(".log")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The ids of the segments in `dir`, ascending.
pub fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if let Some(id) = e.file_name().to_str().and_then(parse_segment_name) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Makes a directory entry durable (a created or removed file).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// An open segment being appended to.
pub struct Segment {
    id: u64,
    file: File,
    written: u64,
    zeroed: u64,
    prealloc_bytes: u64,
}

impl Segment {
    /// Creates segment `id` in `dir` (which must not exist) and makes its
    /// existence durable.
    pub fn create(dir: &Path, id: u64, prealloc_bytes: u64) -> io::Result<Segment> {
        let path = segment_path(dir, id);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let mut seg = Segment { id, file, written: 0, zeroed: 0, prealloc_bytes: prealloc_bytes.max(4096) };
        seg.zero_ahead(0)?;
        seg.file.sync_all()?;
        sync_dir(dir)?;
        Ok(seg)
    }

    /// The segment id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Bytes written so far (the offset of the next record).
    pub fn written(&self) -> u64 {
        self.written
    }

    fn zero_ahead(&mut self, need: u64) -> io::Result<()> {
        static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
        while self.zeroed < self.written + need {
            let target = self.zeroed + self.prealloc_bytes;
            while self.zeroed < target {
                let n = ((target - self.zeroed) as usize).min(ZEROS.len());
                self.file.write_all_at(&ZEROS[..n], self.zeroed)?;
                self.zeroed += n as u64;
            }
        }
        Ok(())
    }

    /// Appends `buf` (whole records). Not durable until [`Segment::sync`].
    pub fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.zero_ahead(buf.len() as u64)?;
        self.file.write_all_at(buf, self.written)?;
        self.written += buf.len() as u64;
        Ok(())
    }

    /// fdatasync: everything appended so far is durable on return.
    pub fn sync(&self) -> io::Result<()> {
        crate::failpoint::slow_disk();
        self.file.sync_data()
    }
}
