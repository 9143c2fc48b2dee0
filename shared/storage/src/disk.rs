//! The disk guard: above a high-water mark of disk use the bookie turns
//! read-only (adds refused with a clear code), and writable again only below a
//! low-water mark, so it does not flap around one threshold.

use std::path::Path;

use crate::error::StorageError;

/// Disk usage of the filesystem holding a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    /// Filesystem size.
    pub total_bytes: u64,
    /// Bytes available to this process.
    pub free_bytes: u64,
}

impl DiskUsage {
    /// Fraction used, 0.0 to 1.0.
    pub fn used_fraction(&self) -> f64 {
        if self.total_bytes == 0 {
            return 1.0;
        }
        1.0 - self.free_bytes as f64 / self.total_bytes as f64
    }
}

/// Reads the usage of the filesystem holding `path` (statvfs).
pub fn usage(path: &Path) -> Result<DiskUsage, StorageError> {
    let s = rustix::fs::statvfs(path).map_err(|e| StorageError::io(path, e.into()))?;
    Ok(DiskUsage { total_bytes: s.f_blocks * s.f_frsize, free_bytes: s.f_bavail * s.f_frsize })
}

/// Hysteresis between writable and read-only.
#[derive(Debug, Clone, Copy)]
pub struct DiskGuard {
    /// Turn read-only at or above this used fraction.
    pub high_water: f64,
    /// Turn writable again at or below this used fraction.
    pub low_water: f64,
    read_only: bool,
}

impl DiskGuard {
    /// A guard, initially writable.
    pub fn new(high_water: f64, low_water: f64) -> Self {
        assert!(low_water <= high_water, "low water {low_water} above high water {high_water}");
        DiskGuard { high_water, low_water, read_only: false }
    }

    /// Feeds a reading; returns whether the bookie is now read-only.
    pub fn observe(&mut self, used_fraction: f64) -> bool {
        if self.read_only {
            if used_fraction <= self.low_water {
                self.read_only = false;
            }
        } else if used_fraction >= self.high_water {
            self.read_only = true;
        }
        self.read_only
    }

    /// Whether read-only.
    pub fn read_only(&self) -> bool {
        self.read_only
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_between_the_marks_keeps_its_state() {
        let mut g = DiskGuard::new(0.95, 0.90);
        assert!(!g.observe(0.93));
        assert!(g.observe(0.95));
        assert!(g.observe(0.92), "stays read-only above the low mark");
        assert!(!g.observe(0.90));
        assert!(!g.observe(0.94), "stays writable below the high mark");
    }

    #[test]
    fn usage_of_a_real_filesystem() {
        let u = usage(Path::new("/")).unwrap();
        assert!(u.total_bytes > 0 && u.free_bytes <= u.total_bytes);
    }
}
