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
//! mtime-ns ctime ctime-ns digest`, the digest in hex. A cache, never a trust boundary: a file
//! that is not ours, too large, or not in this shape is ignored (a debug line) and replaced by
//! what this create learns. Its worst case is a wrong entry, or one missing, in a container's
//! own `ld.so.cache`, links or application profile, which a file or folder of the same inode,
//! size and both times would need (the status-change time is the kernel's).

use std::path::Path;

use gpuctk_container::hooks::{FileKey, SeenLibraries, MAX_SEEN_LIBRARIES};

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
    match std::str::from_utf8(&text)
        .map_err(|_| "not UTF-8".to_string())
        .and_then(parse)
    {
        // Full (a file changed leaves its old line): started afresh, so what this and later
        // creates read is kept again.
        Ok(seen) if seen.len() >= MAX_SEEN_LIBRARIES => SeenLibraries::default(),
        Ok(seen) => seen,
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

fn parse(text: &str) -> Result<SeenLibraries, String> {
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err("not a file of this version".into());
    }
    let mut seen = SeenLibraries::default();
    for (n, line) in lines.enumerate() {
        let bad = || {
            format!(
                "line {}: not `inode size mtime ns ctime ns flags soname`",
                n + 2
            )
        };
        let (found, line) = match line.strip_prefix("= ") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let mut fields = line.splitn(if found { 7 } else { 8 }, ' ');
        let mut next = || fields.next().ok_or_else(bad);
        let mut key = [0u64; 6];
        let mut secs = [0i64; 2];
        for (i, k) in key.iter_mut().enumerate() {
            let f = next()?;
            // Seconds may be before 1970.
            if i == 2 || i == 4 {
                secs[i / 2 - 1] = f.parse().map_err(|_| bad())?;
            } else {
                *k = f.parse().map_err(|_| bad())?;
            }
        }
        let key = FileKey {
            ino: key[0],
            size: key[1],
            mtime: (secs[0], key[3]),
            ctime: (secs[1], key[5]),
        };
        if seen.len() == MAX_SEEN_LIBRARIES {
            break;
        }
        if found {
            let digest = u64::from_str_radix(next()?, 16).map_err(|_| bad())?;
            seen.insert_in_place(key, digest);
            continue;
        }
        let (flags, soname) = (next()?, next()?);
        let library = match (flags, soname) {
            ("-", "-") => None,
            (flags, soname) => Some((soname.to_string(), flags.parse::<i32>().map_err(|_| bad())?)),
        };
        seen.insert(key, library);
    }
    Ok(seen)
}

fn format(seen: &SeenLibraries) -> String {
    let mut entries: Vec<_> = seen.iter().collect();
    entries.sort_by_key(|(k, _)| **k);
    let mut out = format!("{HEADER}\n");
    for (k, library) in entries {
        let (flags, soname) = match library {
            // A soname the line could not hold back (a newline, or the `-` of no library).
            Some((soname, _)) if soname.contains('\n') || soname == "-" => continue,
            Some((soname, flags)) => (flags.to_string(), soname.as_str()),
            None => ("-".to_string(), "-"),
        };
        out.push_str(&format!("{} {flags} {soname}\n", key_text(k)));
    }
    let mut found: Vec<_> = seen.iter_in_place().collect();
    found.sort_unstable();
    for (k, digest) in found {
        out.push_str(&format!("= {} {digest:x}\n", key_text(k)));
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
        assert_eq!(seen.get(&key(1)), Some(&None));
    }

    #[test]
    fn what_is_written_reads_back_and_bad_files_are_refused() {
        let mut seen = SeenLibraries::default();
        seen.insert(key(1), Some(("libfoo.so.1".into(), 0x0303)));
        seen.insert(key(2), None);
        seen.insert(key(3), Some(("lib with space.so".into(), 3)));
        seen.insert(key(4), Some(("libnl\n.so".into(), 3)));
        let text = format(&seen);
        let back = parse(&text).unwrap();
        assert_eq!(back.len(), 3, "{text}");
        for k in [1, 2, 3] {
            assert_eq!(back.get(&key(k)), seen.get(&key(k)), "{text}");
        }
        assert_eq!(back.get(&key(4)), None);
        // What was found in place reads back too, by key and digest.
        seen.insert_in_place(key(5), 0xdead_beef_0123_4567);
        seen.insert_in_place(key(1), 7);
        let text = format(&seen);
        let back = parse(&text).unwrap();
        assert!(back.in_place(&key(5), 0xdead_beef_0123_4567), "{text}");
        assert!(back.in_place(&key(1), 7), "{text}");
        assert!(!back.in_place(&key(5), 7), "{text}");
        assert_eq!(back.len(), 5, "{text}");
        for bad in [
            "",
            "gpuctk image libraries 1\n1 2 3 4 5 6 7 libx.so\n",
            "gpuctk image libraries 2\n1 2 3 4 5 6\n",
            "gpuctk image libraries 2\n1 2 3 4 5 x 7 libx.so\n",
            "gpuctk image libraries 2\n1 2 3 4 5 6 z libx.so\n",
            "gpuctk image libraries 2\n1 2 99999999999999999999 4 5 6 7 libx.so\n",
            "gpuctk image libraries 2\n= 1 2 3 4 5 6\n",
            "gpuctk image libraries 2\n= 1 2 3 4 5 6 xyz\n",
            "gpuctk image libraries 2\n= 1 2 3 4 5 6 7 8\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
