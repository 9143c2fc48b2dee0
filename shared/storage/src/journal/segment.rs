//! One journal file ("segment"): a header block, then batches of records
//! appended with pwrite and made durable with fdatasync. Version 4 (every
//! segment written now) lays each batch out as whole 512-byte sectors, each
//! stamped with the batch that wrote it ([`super::sector`]).
//!
//! An fdatasync that must also record a larger file size or newly written
//! extents costs a metadata commit (on this machine's disk: 2.0 K synced
//! 64 KiB appends per second, against 4.9 K overwrites of blocks already
//! written). So a segment's blocks are written before records land on them:
//! a new file is zero-filled `prealloc_bytes` ahead of the write position
//! (which writes every byte twice, the zeros and then the records), and a
//! segment that a checkpoint has emptied is not deleted but kept as a
//! *spare* and reused by a later segment, whose records then overwrite
//! blocks already written: no zeros, no metadata. A reused file still holds
//! its previous life's records; they are sealed for another segment id
//! ([`super::record::Format`]) and never read as this segment's.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::BytesMut;

use super::record::Format;
use super::sector::{sectors_for, stamp_batch, SECTOR_BYTES};

/// Bytes before a version 2 segment's first record (one block).
pub const HEADER_BYTES: u64 = 4096;

/// A version 2 segment starts with this; version 1 segments have no header.
pub const MAGIC: &[u8; 8] = b"QUIREJ2\n";

/// A version 3 segment starts with this, then its id, its nonce and a
/// CRC32C of the three.
pub const MAGIC_V3: &[u8; 8] = b"QUIREJ3\n";

/// A version 4 segment (every segment written now) starts with this, laid
/// out as version 3's header.
pub const MAGIC_V4: &[u8; 8] = b"QUIREJ4\n";

/// A fresh nonce for a segment's life: 8 bytes of the kernel's randomness.
fn new_nonce() -> io::Result<u64> {
    let mut b = [0u8; 8];
    std::io::Read::read_exact(&mut File::open("/dev/urandom")?, &mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// A segment's file name: `journal-<id, 16 hex digits>.log`.
pub fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("journal-{id:016x}.log"))
}

/// A spare's file name: `spare-<id it last had, 16 hex digits>.log`.
pub fn spare_path(dir: &Path, last_id: u64) -> PathBuf {
    dir.join(format!("spare-{last_id:016x}.log"))
}

fn parse_hex_name(name: &str, prefix: &str) -> Option<u64> {
    let hex = name.strip_prefix(prefix)?.strip_suffix(".log")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The id in a segment file name, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    parse_hex_name(name, "journal-")
}

fn list_named(dir: &Path, parse: fn(&str) -> Option<u64>) -> io::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if let Some(id) = e.file_name().to_str().and_then(parse) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The ids of the segments in `dir`, ascending.
pub fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    list_named(dir, parse_segment_name)
}

/// The last ids of the spares in `dir`, ascending.
pub fn list_spares(dir: &Path) -> io::Result<Vec<u64>> {
    list_named(dir, |n| parse_hex_name(n, "spare-"))
}

/// Makes a directory entry durable (a created or removed file): quire-durable's.
pub use quire_durable::sync_dir;

/// Where the version 3 header's copy starts: the header block's last
/// sector, so that one damaged sector never loses the nonce.
const HEADER_COPY_AT: usize = HEADER_BYTES as usize - 512;

/// The version 3 header at `at`: magic, id, nonce, CRC32C of the three.
fn v3_header(magic: &[u8], id: u64, nonce: u64) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[..8].copy_from_slice(magic);
    h[8..16].copy_from_slice(&id.to_be_bytes());
    h[16..24].copy_from_slice(&nonce.to_be_bytes());
    let crc = crc32c::crc32c(&h[..24]);
    h[24..].copy_from_slice(&crc.to_be_bytes());
    h
}

/// The nonce of a header copy with `magic` at `at` of `data`, if it is whole.
fn nonce_at(data: &[u8], magic: &[u8], at: usize, id: u64) -> Option<u64> {
    let h = data.get(at..at + 28)?;
    let nonce = u64::from_be_bytes(h[16..24].try_into().expect("8 bytes"));
    (h == v3_header(magic, id, nonce)).then_some(nonce)
}

/// The format of segment `id` whose bytes are `data`.
/// - Version 4: a whole copy of its header; with both damaged, the nonce
///   the first sector's stamp was made with, if one of the header's
///   damaged copies holds it.
/// - Version 3: a whole copy of its header (the first sector, or the copy in
///   the header block's last) gives the nonce; with both damaged, the nonce
///   the first record carries, if that record decodes with it.
/// - Version 2: its magic; or, the header damaged, its first record or tail
///   marker sealed for it, or its id in place.
/// - Else version 1.
///
/// A version 2 header is believed before any version 3 guess: a version 2
/// record's ledger id sits where a version 3 record keeps its nonce, and a
/// ledger id whose halves fold to the segment id would seal alike.
pub fn format_of(data: &[u8], id: u64) -> Format {
    if let Some(nonce) = nonce_at(data, MAGIC_V4, 0, id).or_else(|| nonce_at(data, MAGIC_V4, HEADER_COPY_AT, id)) {
        return Format::V4 { nonce };
    }
    if let Some(nonce) = nonce_at(data, MAGIC_V3, 0, id).or_else(|| nonce_at(data, MAGIC_V3, HEADER_COPY_AT, id)) {
        return Format::V3 { nonce };
    }
    let first_sector = data.get(HEADER_BYTES as usize..);
    let v4_nonce = [0usize, HEADER_COPY_AT].into_iter().find_map(|at| {
        let nonce = u64::from_be_bytes(data.get(at + 16..at + 24)?.try_into().expect("8 bytes"));
        first_sector.and_then(|s| super::sector::Stamp::decode(s, nonce)).map(|_| nonce)
    });
    if let Some(nonce) = v4_nonce {
        return Format::V4 { nonce };
    }
    if data.get(..MAGIC_V4.len()) == Some(&MAGIC_V4[..]) {
        // Both header copies damaged and no stamp to confirm a nonce: the
        // header's bytes are the best guess (nothing decodes with a wrong
        // one: the segment then reads as empty, never as another's records).
        let nonce = data.get(16..24).map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
        return Format::V4 { nonce };
    }
    let v2 = Format::v2(id);
    if data.get(..MAGIC.len()) == Some(&MAGIC[..]) {
        return v2;
    }
    let h = HEADER_BYTES as usize;
    let first = data.get(h..).map(bytes::Bytes::copy_from_slice);
    let decodes = |f: Format| {
        first
            .as_ref()
            .is_some_and(|b| matches!(super::record::Record::decode(b, f), Ok(_) | Err(super::record::RecordEnd::Tail)))
    };
    if decodes(v2) {
        return v2;
    }
    let v3_magic = data.get(..MAGIC_V3.len()) == Some(&MAGIC_V3[..]);
    let id_in_place = data.get(8..16) == Some(&id.to_be_bytes()[..]);
    if v3_magic || id_in_place {
        if let Some(b) = data.get(h + 9..h + 17) {
            let v3 = Format::V3 { nonce: u64::from_be_bytes(b.try_into().expect("8 bytes")) };
            if decodes(v3) {
                return v3;
            }
        }
    }
    if v3_magic {
        // Both header copies and the first record damaged: the nonce is
        // unknown. The header's bytes are the best guess; what does not
        // decode with them is damage or a torn tail, as replay judges.
        let nonce = data.get(16..24).map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
        return Format::V3 { nonce };
    }
    if id_in_place {
        return v2;
    }
    Format::V1
}

/// An open segment being appended to.
pub struct Segment {
    id: u64,
    file: File,
    written: u64,
    /// Bytes of the file already written (zeros, or a previous life's
    /// records): appends below this overwrite, above it they would grow it.
    zeroed: u64,
    prealloc_bytes: u64,
    /// Whether the file was a spare's (its previous life's bytes follow).
    reused: bool,
    /// This life's seal.
    nonce: u64,
    /// The next batch's number in this life.
    next_seq: u32,
    /// The last batch as written: stamped sectors.
    stamped: BytesMut,
}

impl Segment {
    /// Creates segment `id` in `dir` (which must not exist) and makes its
    /// existence durable.
    pub fn create(dir: &Path, id: u64, prealloc_bytes: u64) -> io::Result<Segment> {
        let path = segment_path(dir, id);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let nonce = new_nonce()?;
        let mut seg = Segment {
            id,
            file,
            written: 0,
            zeroed: 0,
            prealloc_bytes: prealloc_bytes.max(4096),
            reused: false,
            nonce,
            next_seq: 1,
            stamped: BytesMut::new(),
        };
        seg.zero_ahead(HEADER_BYTES)?;
        seg.write_header()?;
        seg.file.sync_all()?;
        sync_dir(dir)?;
        Ok(seg)
    }

    /// Makes the spare that last was segment `last_id` segment `id`: a new
    /// header, synced, then renamed into place (durably).
    /// Until the rename, a crash leaves a spare (ignored by replay); after
    /// it, an empty segment.
    pub fn reuse(dir: &Path, last_id: u64, id: u64, prealloc_bytes: u64) -> io::Result<Segment> {
        let spare = spare_path(dir, last_id);
        let file = OpenOptions::new().read(true).write(true).open(&spare)?;
        let len = file.metadata()?.len();
        let nonce = new_nonce()?;
        let mut seg = Segment {
            id,
            file,
            written: 0,
            zeroed: len,
            prealloc_bytes: prealloc_bytes.max(4096),
            reused: true,
            nonce,
            next_seq: 1,
            stamped: BytesMut::new(),
        };
        seg.zero_ahead(HEADER_BYTES)?;
        seg.write_header()?;
        seg.file.sync_data()?;
        std::fs::rename(&spare, segment_path(dir, id))?;
        sync_dir(dir)?;
        Ok(seg)
    }

    /// The header block. No tail marker follows: the first sector after it
    /// holds zeros or a previous life's bytes, which no stamp of this life
    /// matches, so an empty segment reads as empty.
    fn write_header(&mut self) -> io::Result<()> {
        let mut h = BytesMut::with_capacity(HEADER_BYTES as usize);
        let header = v3_header(MAGIC_V4, self.id, self.nonce);
        h.extend_from_slice(&header);
        h.resize(HEADER_COPY_AT, 0);
        h.extend_from_slice(&header);
        h.resize(HEADER_BYTES as usize, 0);
        self.zero_ahead(h.len() as u64)?;
        self.file.write_all_at(&h, 0)?;
        self.written = HEADER_BYTES;
        Ok(())
    }

    /// The segment id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// How its records are sealed.
    pub fn format(&self) -> Format {
        Format::V4 { nonce: self.nonce }
    }

    /// Whether this segment reuses a spare's file.
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Bytes written so far (the offset of the next batch's first sector).
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

    /// File bytes a batch of `len` record bytes (tail marker included) takes.
    pub fn batch_bytes(len: usize) -> u64 {
        (sectors_for(len) * SECTOR_BYTES) as u64
    }

    /// Appends one batch: `batch` is whole records sealed for this segment
    /// and a tail marker, written as stamped sectors. Returns the offset of
    /// its first sector. Not durable until [`Segment::sync`].
    pub fn append_batch(&mut self, batch: &[u8]) -> io::Result<u64> {
        self.stamped.clear();
        stamp_batch(batch, self.next_seq, self.nonce, &mut self.stamped);
        let base = self.written;
        self.zero_ahead(self.stamped.len() as u64)?;
        self.file.write_all_at(&self.stamped, base)?;
        self.written += self.stamped.len() as u64;
        self.next_seq += 1;
        Ok(base)
    }

    /// fdatasync: everything appended so far is durable on return.
    pub fn sync(&self) -> io::Result<()> {
        crate::failpoint::slow_disk();
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::record::Record;

    fn header_v2(id: u64) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&id.to_be_bytes());
        let crc = crc32c::crc32c(&h);
        h.extend_from_slice(&crc.to_be_bytes());
        h.resize(HEADER_BYTES as usize, 0);
        h
    }

    fn fence(ledger_id: u64, format: Format) -> Vec<u8> {
        let mut b = BytesMut::new();
        Record::Fence { ledger_id }.encode(&mut b, format);
        b.to_vec()
    }

    fn entry(ledger_id: u64, format: Format) -> Vec<u8> {
        let mut b = BytesMut::new();
        Record::Entry {
            ledger_id,
            entry_id: 0,
            last_add_confirmed: -1,
            ledger_length: 16,
            crc32c: 1,
            payload: bytes::Bytes::from_static(b"sixteen bytes..."),
        }
        .encode(&mut b, format);
        b.to_vec()
    }

    /// A version 2 segment whose first record's ledger id folds to the
    /// segment id (segment 1, ledger 1) seals like a version 3 record
    /// carrying that id as its nonce: it must still read as version 2.
    #[test]
    fn a_version_2_segment_is_never_taken_for_version_3() {
        for (id, ledger) in [(1u64, 1u64), (7, 7), (0x1234, 0x1234)] {
            let mut data = header_v2(id);
            data.extend(entry(ledger, Format::v2(id)));
            data.extend(fence(ledger + 1, Format::v2(id)));
            assert_eq!(format_of(&data, id), Format::v2(id), "segment {id}, ledger {ledger}");
        }
    }

    /// A version 3 segment keeps its nonce through a damaged first sector
    /// and a damaged first record: the header's copy in the block's last sector.
    #[test]
    fn a_version_3_nonce_survives_a_damaged_header_sector() {
        let (id, nonce) = (9u64, 0xfeed_beef_0bad_cafe_u64);
        let f = Format::V3 { nonce };
        let mut data = vec![0u8; HEADER_BYTES as usize];
        let h = v3_header(MAGIC_V3, id, nonce);
        data[..28].copy_from_slice(&h);
        data[HEADER_COPY_AT..HEADER_COPY_AT + 28].copy_from_slice(&h);
        data.extend(fence(3, f));
        assert_eq!(format_of(&data, id), f);
        data[20] ^= 1; // the first copy's nonce
        let first = HEADER_BYTES as usize;
        data[first + 12] ^= 1; // and the first record's
        assert_eq!(format_of(&data, id), f);
        data[HEADER_COPY_AT + 3] ^= 1; // and the copy: the first record is the last resort, damaged too
        assert!(matches!(format_of(&data, id), Format::V3 { .. }), "a version 3 magic never reads as version 2");
    }
}
