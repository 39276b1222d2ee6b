//! How doctor reads what it looks at: every file through `crate::capped::read_capped` (capped
//! in size, never a FIFO), every directory through the project's safe reader.

use std::path::Path;

/// The most bytes of an engine's config or drop-in doctor reads.
pub(super) const MAX_CONFIG: u64 = 16 << 20;

/// The most entries doctor reads of one directory (a drop-in dir, a rules dir).
pub(super) const MAX_DIR_ENTRIES: usize = 4096;

/// The entries of `dir` in name order, as (name, is a regular file), read with the project's
/// safe reader and capped; names that are not UTF-8 are left out (no config file has one).
pub(super) fn list_dir(dir: &Path) -> std::io::Result<Vec<(String, bool)>> {
    list_dir_at_most(dir, MAX_DIR_ENTRIES)
}

/// [`list_dir`] of a directory that may be large (a host's library directory).
pub(super) fn list_dir_at_most(dir: &Path, max: usize) -> std::io::Result<Vec<(String, bool)>> {
    let mut v: Vec<(String, bool)> = gpuctk_host::discover::read_dir_entries_at_most(dir, max)?
        .into_iter()
        .filter_map(|e| e.name.into_string().ok().map(|n| (n, e.is_file)))
        .collect();
    v.sort();
    Ok(v)
}
