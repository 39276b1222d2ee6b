//! What the shim's `update-ldcache` found the image libraries of earlier containers to be
//! ([`SeenLibraries`]: soname and cache flags by inode, size and times), kept beside the
//! discovery snapshot (`[gpuctk] snapshot-dir`), so that the libraries of an image seen before
//! cost one `lstat` each on a create instead of an open and three reads: a real image's
//! library folder holds 50 to 300 of them (issue 21).
//!
//! It also keeps what earlier creates found in place in a root that persists (a folder holding
//! every link asked of it, a file holding what would be written: [`SeenLibraries::in_place`]),
//! so that a container started again on its old root looks at none of it again.
//!
//! One line per file: `inode size mtime mtime-ns ctime ctime-ns flags soname`, or `-` for both
//! where the file is no library; one per folder or file found in place: `= inode size mtime
//! mtime-ns ctime ctime-ns digest`, the digest in hex. Each kind is written in key order, and
//! a create looks the keys it asks about up by binary search, parsing no other line: a node
//! that has run many images holds thousands of lines, and parsing 15,000 of them whole cost a
//! create 8 ms. A cache, never a trust boundary: a file that is not ours, too large or of
//! another shape is ignored (a debug line) and replaced by what this create learns; a line not
//! in this shape, or out of order, is one that is not found, and is dropped when the file is
//! written again. Its worst case is a wrong entry, or one missing, in a container's own
//! `ld.so.cache`, links or application profile, which a file or folder of the same inode, size
//! and both times would need (the status-change time is the kernel's).

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use gpuctk_container::hooks::{FileKey, SeenBase, SeenLibraries, MAX_SEEN_LIBRARIES};

/// The file's name in the snapshot folder.
const FILE: &str = "image-libraries";

/// Its first line: what shape the rest has.
const HEADER: &str = "gpuctk image libraries 2";

/// Largest file read: [`MAX_SEEN_LIBRARIES`] lines of at most about 120 bytes each.
const MAX_FILE: u64 = 4 << 20;

/// The libraries recorded in `dir`; none where there is no readable file of ours there.
pub fn load(dir: &Path) -> SeenLibraries {
    let path = dir.join(FILE);
    let euid = crate::capped::euid();
    let text = match crate::capped::read_owned(&path, euid, MAX_FILE) {
        Ok(bytes) => bytes,
        Err(crate::capped::OwnedFileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return SeenLibraries::default()
        }
        Err(e) => {
            tracing::debug!("{}: not used: {e}", path.display());
            return SeenLibraries::default();
        }
    };
    match Sorted::new(text) {
        // Full (a file changed leaves its old line): started afresh, so what this and later
        // creates read is kept again.
        Ok(sorted) if sorted.libs.len() + sorted.found.len() >= MAX_SEEN_LIBRARIES => {
            SeenLibraries::default()
        }
        Ok(sorted) => SeenLibraries::with_base(Arc::new(sorted)),
        Err(e) => {
            tracing::debug!("{}: not used: {e}", path.display());
            SeenLibraries::default()
        }
    }
}

/// Writes `seen` to `dir` when the scans added to it (a failure is a debug line: a cache).
pub fn store(dir: &Path, seen: &SeenLibraries) {
    if seen.learned() == 0 {
        return;
    }
    let path = dir.join(FILE);
    if let Err(e) = crate::snapshot::write_cache(&path, format(seen).as_bytes()) {
        tracing::debug!("{}: not written: {e}", path.display());
    }
}

/// One line of the file.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// What a file was found to be: a library's soname and flags, or no library.
    Library(FileKey, Option<(String, i32)>),
    /// A folder or file found in place, with the digest of what was found.
    InPlace(FileKey, u64),
}

/// `line` read, or `None` where it is not in the file's shape.
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

/// The file as read: its text and where each line of each kind is, in the order written (key
/// order). Lines are parsed when a lookup lands on them.
#[derive(Debug)]
struct Sorted {
    text: Vec<u8>,
    /// Where each library line is (start, end).
    libs: Vec<(u32, u32)>,
    /// Where each line of a folder or file found in place is.
    found: Vec<(u32, u32)>,
}

impl Sorted {
    /// The file's `text` taken apart into lines (one pass); an error where its first line is
    /// not [`HEADER`].
    fn new(text: Vec<u8>) -> Result<Sorted, String> {
        let header = text.split(|b| *b == b'\n').next().unwrap_or_default();
        if header != HEADER.as_bytes() {
            return Err("not a file of this version".into());
        }
        let (mut libs, mut found) = (Vec::new(), Vec::new());
        let mut start = header.len() + 1;
        // `MAX_FILE` bytes: every offset fits in a u32.
        let ends = memchr::memchr_iter(b'\n', &text).chain([text.len()]);
        for end in ends.skip(1) {
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
    /// file out of order only misses).
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
}

impl SeenBase for Sorted {
    fn library(&self, key: &FileKey) -> Option<Option<(String, i32)>> {
        self.library_of(key)
    }

    fn in_place(&self, key: &FileKey, digest: u64) -> bool {
        self.in_place_from(key, digest) == Some((*key, digest))
    }

    fn any_in_place(&self, key: &FileKey) -> bool {
        self.in_place_from(key, 0).is_some_and(|(k, _)| k == *key)
    }

    fn counts(&self) -> (usize, usize) {
        (self.libs.len(), self.found.len())
    }

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

fn format(seen: &SeenLibraries) -> String {
    let (libs, found) = seen.entries();
    let mut out = format!("{HEADER}\n");
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

/// A key's six fields as a line holds them.
fn key_text(k: &FileKey) -> String {
    format!(
        "{} {} {} {} {} {}",
        k.ino, k.size, k.mtime.0, k.mtime.1, k.ctime.0, k.ctime.1
    )
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
        use gpuctk_container::hooks::MAX_IN_PLACE;
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

    /// The file as [`load`] takes it: looked up, not parsed whole.
    fn back(text: &str) -> SeenLibraries {
        SeenLibraries::with_base(Arc::new(Sorted::new(text.as_bytes().to_vec()).unwrap()))
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
            assert!(Sorted::new(bad.as_bytes().to_vec()).is_err(), "{bad:?}");
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
            let mut read = back(&format!("{HEADER}\n{bad}\n"));
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
