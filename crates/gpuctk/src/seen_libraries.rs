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
//! The text is `gpuctk_container::hooks::SeenLibraries`'s own (`to_text`, `from_text`): looked
//! up key by key, never parsed whole. A cache, never a trust boundary: a file that is not
//! ours, too large or of another shape is ignored (a debug line) and replaced by what this
//! create learns. Its worst case is a wrong entry, or one missing, in a container's own
//! `ld.so.cache`, links or application profile, which a file or folder of the same inode, size
//! and both times would need (the status-change time is the kernel's).

use std::path::Path;

use gpuctk_container::hooks::{SeenLibraries, MAX_SEEN_LIBRARIES};

/// The file's name in the snapshot folder.
const FILE: &str = "image-libraries";

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
    match SeenLibraries::from_text(text) {
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
    if let Err(e) = crate::snapshot::write_cache(&path, seen.to_text().as_bytes()) {
        tracing::debug!("{}: not written: {e}", path.display());
    }
}
