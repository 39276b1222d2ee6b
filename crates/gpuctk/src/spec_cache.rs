//! The CDI spec cache: the registry a static-spec create loads (every spec file of the spec
//! dirs parsed and validated), kept next to the discovery snapshot (`[gpuctk] snapshot-dir`),
//! so a create lists the spec dirs and reads one file instead: an index as JSON (the specs,
//! each device's edits out of line) and the devices' edits after it, of which a create parses
//! those of the devices it asks for only (`Registry::from_cached`).
//!
//! It is keyed by the spec files as the registry lists them anyway (one `readdir` per dir, one
//! `stat` per file, following links): each file's device, inode, size, mtime and ctime (which
//! every write and rename moves and `utimes` cannot set back), whether a dir is absent or
//! unreadable, and the shape of the load (the dirs in order, the vendor filter, this program's
//! version). It holds the parsed specs and the errors their files gave, so a bad file's warning
//! prints on every create as it did. Like the snapshot it is a cache, never a trust boundary:
//! a file that is not ours, damaged, for another key or holding a spec that does not validate
//! is ignored and rebuilt (`docs/security.md`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use gpuctk_cdi::registry::{list_spec_dir, CachedSpec, DirListing, Registry};

/// Bumped when what the cache holds changes meaning (2: an index, then the devices' edits).
const FORMAT: u32 = 2;

/// Largest cache read or written: spec files are capped at 4 MiB each, and NVIDIA's spec for 64
/// GPUs with every MIG profile is well under 1 MiB.
const MAX_CACHE: u64 = 16 << 20;

/// How long before listing a spec file must have last changed for a cache to be written under
/// its identity. File times move by clock ticks (up to 10 ms) where the kernel does not give
/// fine-grained ones: a file written again in the tick it was listed in could keep its
/// identity, and a cache keyed on it would outlive the change.
const SETTLE: Duration = Duration::from_millis(50);

/// The spec files as listed and the shape of the load: a cache is used only under the same key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Key {
    /// Format, this program's version, the dirs and the vendors, as text (also hashed into the
    /// file name).
    shape: String,
    /// Each spec dir's listing, in the dirs' order.
    listed: Vec<DirListing>,
}

/// The file: this as JSON on one line (serde_json's compact form has no newline), then the
/// blob of the devices' edits that its specs point into ([`gpuctk_cdi::registry::cache_form`]).
#[derive(serde::Serialize, serde::Deserialize)]
struct Index {
    key: Key,
    specs: Vec<CachedSpec>,
    errors: Vec<(PathBuf, String)>,
}

/// The registry of `spec_dirs` for a request of `vendors` ([`Registry::load_for_vendors`]) that
/// resolves `names`: the cache's in `cache_dir` when `read` and it holds for the spec files as
/// they are now (with the edits of those devices only), else loaded from the files and written
/// back.
pub fn registry(
    cache_dir: &Path,
    spec_dirs: &[PathBuf],
    vendors: &[&str],
    names: &[&str],
    read: bool,
) -> Registry {
    let shape = format!(
        "gpuctk {} spec cache format {FORMAT}\nspec dirs {spec_dirs:?}\nvendors {vendors:?}\n",
        env!("CARGO_PKG_VERSION"),
    );
    let path = cache_dir.join(format!(
        "cdi-specs-{:016x}.json",
        gpuctk_container::hooks::fnv1a64(shape.as_bytes())
    ));
    // The key is taken before the files are read: a spec changing meanwhile leaves a cache
    // under the old key, which the next create rebuilds.
    let listed_at = SystemTime::now();
    let key = Key {
        shape,
        listed: spec_dirs.iter().map(|d| list_spec_dir(d)).collect(),
    };
    if read {
        match load(&path, &key, spec_dirs, names) {
            Ok(reg) => {
                tracing::debug!("{}: CDI spec cache used", path.display());
                return reg;
            }
            Err(why) => tracing::debug!(
                "{}: CDI spec cache not used ({why}); reading the spec files",
                path.display()
            ),
        }
    }
    let reg = Registry::load_listed(spec_dirs, &key.listed, Some(vendors));
    let stored = match unsettled(&key.listed, listed_at) {
        Some(file) => Err(format!(
            "{} changed less than {} ms ago",
            file.display(),
            SETTLE.as_millis()
        )),
        None => store(&path, &key, &reg),
    };
    if let Err(e) = stored {
        tracing::debug!("{}: CDI spec cache not written: {e}", path.display());
    }
    reg
}

/// The cache's registry for `names` when it is ours and made under `key`; why not otherwise.
fn load(path: &Path, key: &Key, spec_dirs: &[PathBuf], names: &[&str]) -> Result<Registry, String> {
    let euid = crate::capped::euid();
    let buf = crate::capped::read_owned(path, euid, MAX_CACHE).map_err(|e| e.to_string())?;
    // Without a newline (cut short, or not ours) the whole is read as the index, which then
    // says why it is no index; a blob cut short leaves edits outside it, which `from_cached`
    // refuses.
    let (index, blob) = match buf.iter().position(|&b| b == b'\n') {
        Some(at) => (&buf[..at], &buf[at + 1..]),
        None => (&buf[..], &[][..]),
    };
    let index: Index = crate::capped::parse_json(index).map_err(|e| e.to_string())?;
    if &index.key != key {
        return Err("made for other spec files".into());
    }
    Registry::from_cached(spec_dirs, index.specs, blob, index.errors, names)
        .map_err(|e| e.to_string())
}

fn store(path: &Path, key: &Key, reg: &Registry) -> Result<(), String> {
    if reg.is_partial() {
        return Err("a registry read from the cache for some devices only".into());
    }
    let (specs, errors) = reg.loaded();
    let (specs, blob) = gpuctk_cdi::registry::cache_form(specs);
    let index = Index {
        key: key.clone(),
        specs,
        errors: errors.to_vec(),
    };
    let mut bytes = serde_json::to_vec(&index).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    bytes.extend_from_slice(blob.as_bytes());
    if bytes.len() as u64 > MAX_CACHE {
        return Err(format!("larger than {MAX_CACHE} bytes"));
    }
    crate::snapshot::write_cache(path, &bytes)
}

/// A spec file listed whose ctime is less than [`SETTLE`] before `at` (or after it).
fn unsettled(listed: &[DirListing], at: SystemTime) -> Option<&Path> {
    let nanos = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
    // A clock before 1970 (or a SystemTime that cannot go back): nothing is settled.
    let limit = at
        .checked_sub(SETTLE)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(i128::MIN, |d| {
            i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)
        });
    listed
        .iter()
        .filter_map(|l| match l {
            DirListing::Files(files) => Some(files),
            _ => None,
        })
        .flatten()
        .find(|f| nanos(f.id.ctime, f.id.ctime_nsec) >= limit)
        .map(|f| f.path.as_path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuctk_cdi::registry::{FileIdentity, SpecFile};

    #[test]
    fn a_file_changed_just_now_is_not_keyed_on() {
        let at = SystemTime::UNIX_EPOCH + Duration::new(1_000, 500_000_000);
        let file = |ctime: i64, ctime_nsec: i64| SpecFile {
            path: PathBuf::from(format!("/cdi/{ctime}.{ctime_nsec}.json")),
            id: FileIdentity {
                dev: 1,
                ino: 2,
                size: 3,
                mtime: 0,
                mtime_nsec: 0,
                ctime,
                ctime_nsec,
            },
        };
        let listed = |files| vec![DirListing::Absent, DirListing::Files(files)];
        let settled = listed(vec![file(999, 0), file(1_000, 449_999_999)]);
        assert_eq!(unsettled(&settled, at), None);
        for (s, ns) in [(1_000, 450_000_000), (1_000, 500_000_000), (2_000, 0)] {
            let l = listed(vec![file(999, 0), file(s, ns)]);
            assert_eq!(
                unsettled(&l, at),
                Some(Path::new(&format!("/cdi/{s}.{ns}.json")))
            );
        }
        // A clock before 1970: nothing is.
        let early = listed(vec![file(-5, 0)]);
        assert!(unsettled(&early, SystemTime::UNIX_EPOCH).is_some());
    }

    #[test]
    fn the_shape_names_the_file_apart_from_the_snapshots() {
        let d = tempfile::tempdir().unwrap();
        let dirs = [d.path().join("none")];
        registry(d.path(), &dirs, &["a.com"], &[], true);
        registry(d.path(), &dirs, &["b.com"], &[], true);
        let mut names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names.iter().all(|n| n.starts_with("cdi-specs-")),
            "{names:?}"
        );
    }
}
