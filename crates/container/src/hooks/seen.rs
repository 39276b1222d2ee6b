//! What earlier containers' creates found in images and roots ([`SeenLibraries`]): a library
//! file's soname and cache flags by its [`FileKey`], and the folders and files a create found in
//! place in a root that persists. The shim keeps it between containers as text beside its
//! discovery snapshot ([`SeenLibraries::from_text`], [`SeenLibraries::to_text`]).
//!
//! The text: a header line, then one line per file, `inode size mtime mtime-ns ctime ctime-ns
//! flags soname` (`-` for both where the file is no library), in key order, then one per folder
//! or file found in place, `= inode size mtime mtime-ns ctime ctime-ns digest` (the digest in
//! hex), in key and digest order. A create looks the keys it asks about up by binary search and
//! parses no other line: a node that has run many images holds thousands of lines, and parsing
//! 15,000 of them whole cost a create 8 ms. A line not in this shape, or out of order, is one
//! that is not found, and is dropped when the text is written again.

use foldhash::HashMap;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use super::RootError;
use crate::root::{Dir, Metadata};

/// The text's first line: what shape the rest has.
pub const SEEN_HEADER: &str = "gpuctk image libraries 2";

/// An image's library file by what the kernel says of it: inode, size, modification and
/// status-change times. Not its device: an overlay mount's is new for every container, while
/// a layer's file keeps its inode and times in all of them. The status-change time is the
/// kernel's alone to set, so a file written, replaced or copied up has a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u64),
    /// Status-change time (seconds, nanoseconds).
    pub ctime: (i64, u64),
}

impl FileKey {
    pub(super) fn of(m: &Metadata) -> FileKey {
        FileKey {
            ino: m.ino,
            size: m.size,
            mtime: m.mtime,
            ctime: m.ctime,
        }
    }
}

/// Most entries [`SeenLibraries`] holds: past it, what a scan reads is not added.
pub const MAX_SEEN_LIBRARIES: usize = 16 << 10;

/// Most folders and files found in place [`SeenLibraries`] holds (three for a root that
/// persists: the library folder, the cache, the profile); past it, they are started afresh.
pub const MAX_IN_PLACE: usize = 1 << 10;

/// How long before a look began a folder's or file's status-change time must be for what the
/// look found to be kept by its key ([`SeenLibraries::in_place`]). The kernel stamps that time
/// from a coarse clock (a tick, or a second where the file system keeps no finer time): a
/// change in the same tick as the stamp, after the look, would keep the key. One at least this
/// much older than the look is out of reach of such a change.
pub const SETTLED: Duration = Duration::from_secs(2);

/// Whether `m`'s status-change time was at least [`SETTLED`] before `began`.
fn settled(m: &Metadata, began: SystemTime) -> bool {
    let ctime = u64::try_from(m.ctime.0)
        .ok()
        .map(|s| SystemTime::UNIX_EPOCH + Duration::new(s, m.ctime.1.min(999_999_999) as u32));
    ctime.is_some_and(|c| began.duration_since(c).is_ok_and(|d| d >= SETTLED))
}

/// What reading the image libraries of earlier containers gave, by [`FileKey`]: a library's
/// soname and cache flags, or `None` for a file that is no library (a linker script, an object
/// without a soname). The caller keeps it between containers (the shim, under `/run`), so
/// that the libraries of an image seen before cost one `lstat` each, not an open and three
/// reads; what a scan reads anew is added to it.
///
/// It also holds what earlier creates found in place in a root that persists (a container
/// started again on its old root, enroot's): a folder all of whose links were there, a file
/// holding what would have been written ([`SeenLibraries::in_place`]), so that a create finding
/// the same key looks at nothing more.
#[derive(Debug, Default, Clone)]
pub struct SeenLibraries {
    map: HashMap<FileKey, Option<(String, i32)>>,
    /// Keys of folders and files found in place, each with the digest of what was found
    /// ([`super::fnv1a64`] of the caller's own text of it).
    found: BTreeSet<(FileKey, u64)>,
    /// What the caller kept from earlier containers, in the text it keeps it as, looked up
    /// where asked ([`SeenLibraries::from_text`]).
    base: Option<Sorted>,
    /// The base's folders and files found in place were dropped ([`MAX_IN_PLACE`]).
    base_in_place_dropped: bool,
    learned: usize,
}

impl SeenLibraries {
    /// Adds what a file is, unless [`MAX_SEEN_LIBRARIES`] entries are held; whether it was new.
    pub fn insert(&mut self, key: FileKey, library: Option<(String, i32)>) -> bool {
        let new = self.len() < MAX_SEEN_LIBRARIES && self.get(&key).is_none();
        if new {
            self.map.insert(key, library);
        }
        new
    }

    /// How many folders and files found in place it holds.
    fn in_place_len(&self) -> usize {
        let base = match (&self.base, self.base_in_place_dropped) {
            (Some(b), false) => b.found.len(),
            _ => 0,
        };
        self.found.len() + base
    }

    /// Adds that the folder or file of `key` was found in place for `digest`, unless
    /// [`MAX_SEEN_LIBRARIES`] entries are held; whether it was new. Past [`MAX_IN_PLACE`] of
    /// them, those held are dropped first: each root that persists adds a few, and the file
    /// holding them is read by every create.
    pub fn insert_in_place(&mut self, key: FileKey, digest: u64) -> bool {
        if self.in_place(&key, digest) {
            return false;
        }
        if self.in_place_len() >= MAX_IN_PLACE {
            self.found.clear();
            self.base_in_place_dropped = true;
        }
        self.len() < MAX_SEEN_LIBRARIES && self.found.insert((key, digest))
    }

    /// The base, where its folders and files found in place still count.
    fn base_in_place(&self) -> Option<&Sorted> {
        self.base.as_ref().filter(|_| !self.base_in_place_dropped)
    }

    /// Whether an earlier create found the folder or file of `key` in place for `digest`: a
    /// key is the same only while nothing was made, removed or written there since (its
    /// status-change time is the kernel's to set), and it is kept only once that time had
    /// settled ([`settled`]).
    pub fn in_place(&self, key: &FileKey, digest: u64) -> bool {
        self.found.contains(&(*key, digest))
            || self
                .base_in_place()
                .is_some_and(|b| b.in_place(key, digest))
    }

    /// Whether an earlier create found the folder or file of `key` in place for any digest.
    pub fn any_in_place(&self, key: &FileKey) -> bool {
        self.found
            .range((*key, 0)..=(*key, u64::MAX))
            .next()
            .is_some()
            || self.base_in_place().is_some_and(|b| b.any_in_place(key))
    }

    /// Every library and every folder and file found in place it holds, the base's included
    /// (for writing them all back), each in key order.
    #[allow(clippy::type_complexity)]
    pub fn entries(&self) -> (Vec<(FileKey, Option<(String, i32)>)>, Vec<(FileKey, u64)>) {
        let (mut libs, mut found) = self.base.as_ref().map(Sorted::entries).unwrap_or_default();
        if self.base_in_place_dropped {
            found.clear();
        }
        libs.retain(|(k, _)| !self.map.contains_key(k));
        libs.extend(self.map.iter().map(|(k, l)| (*k, l.clone())));
        libs.sort_by_key(|(k, _)| *k);
        found.extend(self.found.iter().copied());
        found.sort_unstable();
        found.dedup();
        (libs, found)
    }

    /// Records what [`SeenLibraries::in_place`] will answer for `m`, found in place for
    /// `digest` by a look that began at `began`, where `m`'s status-change time had settled.
    pub(super) fn note_in_place(&mut self, m: &Metadata, digest: u64, began: SystemTime) {
        if settled(m, began) && self.insert_in_place(FileKey::of(m), digest) {
            self.learned += 1;
        }
    }

    /// What the file of `key` was found to be, if it was.
    pub fn get(&self, key: &FileKey) -> Option<Option<(String, i32)>> {
        match self.map.get(key) {
            Some(l) => Some(l.clone()),
            None => self.base.as_ref().and_then(|b| b.library_of(key)),
        }
    }

    /// How many entries the scans added (not counting what [`SeenLibraries::insert`] put in).
    pub fn learned(&self) -> usize {
        self.learned
    }

    /// How many entries it holds, libraries and what was found in place, the base's included.
    pub fn len(&self) -> usize {
        let base_libs = self.base.as_ref().map_or(0, |b| b.libs.len());
        self.map.len() + base_libs + self.in_place_len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn learn(&mut self, key: FileKey, library: Option<(String, i32)>) {
        if self.insert(key, library) {
            self.learned += 1;
        }
    }
}

/// [`Dir::write_file_if_changed`] of entry `name` of `dir`, taking what earlier creates found in
/// place (`seen`): a file an earlier create found holding `bytes` with `mode`, unchanged since,
/// is not read again; one found holding them now is added to `seen`. Returns whether it wrote.
pub fn write_file_if_changed_seen(
    dir: &Dir<'_>,
    name: &str,
    bytes: &[u8],
    mode: u32,
    seen: Option<&mut SeenLibraries>,
) -> Result<bool, RootError> {
    let Some(seen) = seen else {
        return dir.write_file_if_changed(name, bytes, mode, None);
    };
    let began = SystemTime::now();
    let there = dir.lstat(name)?;
    let mut text = format!("file {mode:o}\0").into_bytes();
    text.extend_from_slice(bytes);
    let digest = super::fnv1a64(&text);
    if let Some(m) = there.as_ref().filter(|m| m.may_hold(bytes.len(), mode)) {
        if seen.in_place(&FileKey::of(m), digest) {
            return Ok(false);
        }
    }
    let wrote = dir.write_file_if_changed_as(name, bytes, mode, None, there)?;
    if let Some(m) = there.filter(|m| !wrote && m.may_hold(bytes.len(), mode)) {
        seen.note_in_place(&m, digest, began);
    }
    Ok(wrote)
}

impl SeenLibraries {
    /// What a create's caller kept as [`SeenLibraries::to_text`] wrote it, taken apart into
    /// lines (one pass) and looked up where asked; an error where its first line is not
    /// [`SEEN_HEADER`].
    pub fn from_text(text: Vec<u8>) -> Result<SeenLibraries, String> {
        Ok(SeenLibraries {
            base: Some(Sorted::new(text)?),
            ..SeenLibraries::default()
        })
    }

    /// Every entry, the kept text's and this create's, as text.
    pub fn to_text(&self) -> String {
        let (libs, found) = self.entries();
        let mut out = format!("{SEEN_HEADER}\n");
        for (k, library) in libs {
            let (flags, soname) = match &library {
                // A soname the line could not hold back (a newline, or the `-` of no library).
                Some((soname, _)) if soname.contains('\n') || soname == "-" => continue,
                Some((soname, flags)) => (flags.to_string(), soname.as_str()),
                None => ("-".to_string(), "-"),
            };
            out.push_str(&format!("{} {flags} {soname}\n", key_text(&k)));
        }
        for (k, digest) in found {
            out.push_str(&format!("= {} {digest:x}\n", key_text(&k)));
        }
        out
    }
}

/// A key's six fields as a line holds them.
fn key_text(k: &FileKey) -> String {
    format!(
        "{} {} {} {} {} {}",
        k.ino, k.size, k.mtime.0, k.mtime.1, k.ctime.0, k.ctime.1
    )
}

/// One line of the text.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// What a file was found to be: a library's soname and flags, or no library.
    Library(FileKey, Option<(String, i32)>),
    /// A folder or file found in place, with the digest of what was found.
    InPlace(FileKey, u64),
}

/// `line` read, or `None` where it is not in the text's shape.
fn parse_line(line: &[u8]) -> Option<Line> {
    let line = std::str::from_utf8(line).ok()?;
    let (found, line) = match line.strip_prefix("= ") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let mut fields = line.splitn(if found { 7 } else { 8 }, ' ');
    let mut key = [0u64; 6];
    let mut secs = [0i64; 2];
    for (i, k) in key.iter_mut().enumerate() {
        let f = fields.next()?;
        // Seconds may be before 1970.
        if i == 2 || i == 4 {
            secs[i / 2 - 1] = f.parse().ok()?;
        } else {
            *k = f.parse().ok()?;
        }
    }
    let key = FileKey {
        ino: key[0],
        size: key[1],
        mtime: (secs[0], key[3]),
        ctime: (secs[1], key[5]),
    };
    if found {
        return Some(Line::InPlace(
            key,
            u64::from_str_radix(fields.next()?, 16).ok()?,
        ));
    }
    let library = match (fields.next()?, fields.next()?) {
        ("-", "-") => None,
        (flags, soname) => Some((soname.to_string(), flags.parse::<i32>().ok()?)),
    };
    Some(Line::Library(key, library))
}

/// The kept text and where each line of each kind is, in the order written (key order). Lines
/// are parsed when a lookup lands on them.
#[derive(Debug, Clone)]
struct Sorted {
    text: Vec<u8>,
    /// Where each library line is (start, end).
    libs: Vec<(u32, u32)>,
    /// Where each line of a folder or file found in place is.
    found: Vec<(u32, u32)>,
}

/// Where the first newline in `text` is. Not `memchr::memchr`: its first call asks the CPU
/// which vector extensions it has (`cpuid`, which on a VM traps to the hypervisor: about 30 µs
/// of a create's CPU); SSE2, which every x86_64 has, or a word at a time elsewhere, is enough
/// for a file of at most a few MB.
fn newline(text: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(sse2) = memchr::arch::x86_64::sse2::memchr::One::new(b'\n') {
        return sse2.find(text);
    }
    memchr::arch::all::memchr::One::new(b'\n').find(text)
}

impl Sorted {
    fn new(text: Vec<u8>) -> Result<Sorted, String> {
        let header = text.split(|b| *b == b'\n').next().unwrap_or_default();
        if header != SEEN_HEADER.as_bytes() {
            return Err("not a file of this version".into());
        }
        // The caller caps the text well under 4 GiB: every offset fits in a u32.
        if u32::try_from(text.len()).is_err() {
            return Err("too large".into());
        }
        let (mut libs, mut found) = (Vec::new(), Vec::new());
        let mut start = header.len() + 1;
        while start < text.len() {
            let end = newline(&text[start..]).map_or(text.len(), |i| start + i);
            if end > start {
                let span = (start as u32, end as u32);
                if text[start..end].starts_with(b"= ") {
                    found.push(span);
                } else {
                    libs.push(span);
                }
            }
            start = end + 1;
        }
        Ok(Sorted { text, libs, found })
    }

    fn line(&self, (start, end): (u32, u32)) -> Option<Line> {
        parse_line(self.text.get(start as usize..end as usize)?)
    }

    /// The library line of `key`, by binary search (a line not in shape compares low, so a
    /// text out of order only misses).
    fn library_of(&self, key: &FileKey) -> Option<Option<(String, i32)>> {
        let i = self.libs.partition_point(|span| match self.line(*span) {
            Some(Line::Library(k, _)) => k < *key,
            _ => true,
        });
        match self.line(*self.libs.get(i)?)? {
            Line::Library(k, library) if k == *key => Some(library),
            _ => None,
        }
    }

    /// The first line found in place at or after (`key`, `digest`), by binary search.
    fn in_place_from(&self, key: &FileKey, digest: u64) -> Option<(FileKey, u64)> {
        let i = self.found.partition_point(|span| match self.line(*span) {
            Some(Line::InPlace(k, d)) => (k, d).cmp(&(*key, digest)) == Ordering::Less,
            _ => true,
        });
        match self.line(*self.found.get(i)?)? {
            Line::InPlace(k, d) => Some((k, d)),
            Line::Library(..) => None,
        }
    }

    fn in_place(&self, key: &FileKey, digest: u64) -> bool {
        self.in_place_from(key, digest) == Some((*key, digest))
    }

    fn any_in_place(&self, key: &FileKey) -> bool {
        self.in_place_from(key, 0).is_some_and(|(k, _)| k == *key)
    }

    /// Every library, and every folder and file found in place, its lines parsed.
    #[allow(clippy::type_complexity)]
    fn entries(&self) -> (Vec<(FileKey, Option<(String, i32)>)>, Vec<(FileKey, u64)>) {
        let (mut libs, mut found) = (Vec::new(), Vec::new());
        for span in self.libs.iter().chain(&self.found) {
            match self.line(*span) {
                Some(Line::Library(k, l)) => libs.push((k, l)),
                Some(Line::InPlace(k, d)) => found.push((k, d)),
                None => {}
            }
        }
        (libs, found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ino: u64) -> FileKey {
        FileKey {
            ino,
            size: 10 * ino,
            mtime: (-1_700_000_000, 5),
            ctime: (1_700_000_001, 999_999_999),
        }
    }

    /// What was found in place is held up to its own cap, past which it starts afresh: the
    /// libraries stay, and so does what was just added.
    #[test]
    fn what_was_found_in_place_is_capped_apart_from_the_libraries() {
        let mut seen = SeenLibraries::default();
        seen.insert(key(1), None);
        for i in 0..MAX_IN_PLACE as u64 {
            assert!(seen.insert_in_place(key(i + 10), i));
        }
        assert_eq!(seen.len(), MAX_IN_PLACE + 1);
        // Held already: nothing dropped.
        assert!(!seen.insert_in_place(key(10), 0));
        assert_eq!(seen.len(), MAX_IN_PLACE + 1);
        assert!(seen.insert_in_place(key(1), 7));
        assert_eq!(seen.len(), 2);
        assert!(seen.in_place(&key(1), 7) && !seen.in_place(&key(10), 0));
        assert_eq!(seen.get(&key(1)), Some(None));
    }

    /// The text as the shim's load takes it: looked up, not parsed whole.
    fn back(text: &str) -> SeenLibraries {
        SeenLibraries::from_text(text.as_bytes().to_vec()).unwrap()
    }

    fn format(seen: &SeenLibraries) -> String {
        seen.to_text()
    }

    #[test]
    fn what_is_written_reads_back_and_bad_files_are_refused() {
        let mut seen = SeenLibraries::default();
        seen.insert(key(1), Some(("libfoo.so.1".into(), 0x0303)));
        seen.insert(key(2), None);
        seen.insert(key(3), Some(("lib with space.so".into(), 3)));
        seen.insert(key(4), Some(("libnl\n.so".into(), 3)));
        let text = format(&seen);
        let read = back(&text);
        assert_eq!(read.len(), 3, "{text}");
        for k in [1, 2, 3] {
            assert_eq!(read.get(&key(k)), seen.get(&key(k)), "{text}");
        }
        assert_eq!(read.get(&key(4)), None);
        assert_eq!(read.get(&key(0)), None);
        assert_eq!(read.get(&key(9)), None);
        // What was found in place reads back too, by key and digest.
        seen.insert_in_place(key(5), 0xdead_beef_0123_4567);
        seen.insert_in_place(key(1), 7);
        let text = format(&seen);
        let read = back(&text);
        assert!(read.in_place(&key(5), 0xdead_beef_0123_4567), "{text}");
        assert!(read.in_place(&key(1), 7), "{text}");
        assert!(!read.in_place(&key(5), 7), "{text}");
        assert!(read.any_in_place(&key(5)) && !read.any_in_place(&key(2)));
        assert_eq!(read.len(), 5, "{text}");
        // Written again with what a create added: the base's lines and the new ones, in order.
        let mut more = back(&text);
        assert!(more.insert(key(0), Some(("libzero.so".into(), 1))));
        assert!(!more.insert(key(2), Some(("libtwo.so".into(), 1))));
        assert!(more.insert_in_place(key(2), 3));
        let again = format(&more);
        let read = back(&again);
        assert_eq!(read.get(&key(0)), Some(Some(("libzero.so".into(), 1))));
        assert_eq!(read.get(&key(2)), Some(None));
        assert!(read.in_place(&key(2), 3) && read.in_place(&key(5), 0xdead_beef_0123_4567));
        assert_eq!(read.len(), 7, "{again}");
        for bad in ["", "gpuctk image libraries 1\n1 2 3 4 5 6 7 libx.so\n"] {
            assert!(
                SeenLibraries::from_text(bad.as_bytes().to_vec()).is_err(),
                "{bad:?}"
            );
        }
        // A line not in shape is one not found, and is not written again.
        for bad in [
            "1 2 3 4 5 6",
            "1 2 3 4 5 x 7 libx.so",
            "1 2 3 4 5 6 z libx.so",
            "1 2 99999999999999999999 4 5 6 7 libx.so",
            "= 1 2 3 4 5 6",
            "= 1 2 3 4 5 6 xyz",
            "= 1 2 3 4 5 6 7 8",
            "\u{ff}",
        ] {
            assert_eq!(parse_line(bad.as_bytes()), None, "{bad:?}");
            let mut read = back(&format!("{SEEN_HEADER}\n{bad}\n"));
            let k = FileKey {
                ino: 1,
                size: 2,
                mtime: (3, 4),
                ctime: (5, 6),
            };
            assert_eq!(read.get(&k), None, "{bad:?}");
            assert!(!read.any_in_place(&k), "{bad:?}");
            read.insert(key(1), None);
            assert_eq!(format(&read).lines().count(), 2, "{bad:?}");
        }
    }

    /// Lookups in a file of many lines land on the right one, whatever its place, and a file
    /// out of order only misses.
    #[test]
    fn lookups_find_every_line_of_a_large_file() {
        let mut seen = SeenLibraries::default();
        for i in 1..=3000u64 {
            seen.insert(key(i * 7), Some((format!("lib{i}.so"), i as i32)));
            if i % 3 == 0 {
                seen.insert_in_place(key(i * 5), i);
            }
        }
        let text = format(&seen);
        let read = back(&text);
        for i in 1..=3000u64 {
            assert_eq!(
                read.get(&key(i * 7)),
                Some(Some((format!("lib{i}.so"), i as i32)))
            );
            assert_eq!(read.get(&key(i * 7 + 1)), None);
            assert_eq!(read.in_place(&key(i * 5), i), i % 3 == 0);
        }
        let mut lines: Vec<&str> = text.lines().collect();
        lines[1..].reverse();
        let reversed = back(&(lines.join("\n") + "\n"));
        let found = (1..=3000u64)
            .filter(|i| reversed.get(&key(i * 7)).is_some())
            .count();
        assert!(found < 3000);
    }
}
