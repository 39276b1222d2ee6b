//! The registry of CDI specs found in spec directories, and resolution of requested device
//! names to container edits.
//!
//! Rules (CDI `pkg/cdi/cache.go`): only `*.json`, `*.yaml` and `*.yml` files directly in each
//! directory are read; a missing directory is fine; a later directory has higher priority, so a
//! device in `/var/run/cdi` overrides the same name in `/etc/cdi`; the same qualified name in two
//! specs of one directory is a conflict, and the device is dropped with an error on both files; a
//! spec that does not parse or validate is skipped with an error, and the rest still load.
//!
//! Where we differ from the Go cache: it drops a conflicting device even when a higher-priority
//! directory defines it too; here the higher-priority definition wins (the conflict is still
//! reported), since overriding a broken lower directory is what the priority order is for.
//! Files are read in name order so results never depend on directory order.
//!
//! The listing ([`list_spec_dir`]: one `readdir` per directory, one `stat` per spec file) is
//! public, with each file's identity, so that a cache of a registry can be keyed on the very
//! listing a load then reads ([`Registry::load_listed`]) and rebuilt from what a load gave
//! ([`Registry::loaded`], [`Registry::from_loaded`]); or, for a create, from a cache whose
//! devices' edits are parsed only for the devices the create asks for
//! ([`Registry::from_cached`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::names::{self, QualifiedName};
use crate::spec::{ContainerEdits, Format, Spec};

/// The CDI spec directories, lowest priority first.
pub const DEFAULT_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// The default spec directories as paths.
pub fn default_spec_dirs() -> Vec<PathBuf> {
    DEFAULT_SPEC_DIRS.iter().map(PathBuf::from).collect()
}

/// One spec file the registry holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LoadedSpec {
    /// Where it was read from.
    pub path: PathBuf,
    /// Index of its directory in the list given to [`Registry::load`]; higher wins.
    pub priority: usize,
    /// The parsed, valid spec.
    pub spec: Spec,
}

#[derive(Debug, Clone, Copy)]
struct DeviceRef {
    spec: usize,
    device: usize,
}

/// CDI specs loaded from spec directories.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    dirs: Vec<PathBuf>,
    specs: Vec<LoadedSpec>,
    devices: BTreeMap<String, DeviceRef>,
    /// Names defined by more than one spec of the same directory: ignored, with the files.
    conflicts: BTreeMap<String, Vec<PathBuf>>,
    errors: Vec<(PathBuf, String)>,
    /// How many of `errors` came from reading the files (the rest are conflicts).
    load_errors: usize,
    /// (spec, device) whose edits were not read ([`Registry::from_cached`]): indexed by name,
    /// for conflicts and messages, but never resolved.
    unread: BTreeSet<(usize, usize)>,
}

/// A spec file as a cache of a registry holds it ([`cache_form`], [`Registry::from_cached`]):
/// [`LoadedSpec`]'s fields, each device's edits replaced by where their JSON text lies in a
/// blob kept beside the index, so that a create parses only the edits of the devices it asks
/// for and skips no others' text (a spec of 64 GPUs has 129 devices: each GPU by index and by
/// UUID, and `all`; parsing them all was half of such a create's instructions, skipping
/// their text a fifth).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachedSpec {
    path: PathBuf,
    priority: usize,
    spec: CachedBody,
}

/// [`Spec`]'s fields, the devices' edits out in the blob.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CachedBody {
    cdi_version: String,
    kind: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
    devices: Vec<CachedDevice>,
    #[serde(default, skip_serializing_if = "ContainerEdits::is_empty")]
    container_edits: ContainerEdits,
}

/// [`crate::spec::Device`]'s fields, its edits as (offset, length) of their JSON in the blob.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CachedDevice {
    name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
    edits: (usize, usize),
}

/// `specs` as a cache holds them: the index, and the blob of the devices' edits as JSON, each
/// text once (a GPU's edits by index and by UUID are the same).
pub fn cache_form(specs: &[LoadedSpec]) -> (Vec<CachedSpec>, String) {
    let mut blob = String::new();
    let mut placed: foldhash::HashMap<String, (usize, usize)> = foldhash::HashMap::default();
    let index = specs
        .iter()
        .map(|s| CachedSpec {
            path: s.path.clone(),
            priority: s.priority,
            spec: CachedBody {
                cdi_version: s.spec.cdi_version.clone(),
                kind: s.spec.kind.clone(),
                annotations: s.spec.annotations.clone(),
                container_edits: s.spec.container_edits.clone(),
                devices: s
                    .spec
                    .devices
                    .iter()
                    .map(|d| {
                        // Serializing plain data into a String cannot fail.
                        let text = serde_json::to_string(&d.container_edits).unwrap_or_default();
                        let edits = *placed.entry(text).or_insert_with_key(|text| {
                            blob.push_str(text);
                            (blob.len() - text.len(), text.len())
                        });
                        CachedDevice {
                            name: d.name.clone(),
                            annotations: d.annotations.clone(),
                            edits,
                        }
                    })
                    .collect(),
            },
        })
        .collect();
    (index, blob)
}

/// Edits for a set of requested devices, ready to apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The qualified names resolved, in request order, without duplicates.
    pub devices: Vec<String>,
    /// Each used spec's top-level edits once (before its first device), then each device's edits,
    /// in request order.
    pub edits: ContainerEdits,
    /// The spec files used, in first-use order.
    pub spec_paths: Vec<PathBuf>,
}

/// A requested device name that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// The name as requested.
    pub name: String,
    /// Why it failed.
    pub reason: String,
}

/// Some requested devices could not be resolved. Displays one `unresolvable CDI device …`
/// clause per name, joined by `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ResolveError {
    /// Every name that failed, in request order.
    pub unresolved: Vec<Unresolved>,
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, u) in self.unresolved.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "unresolvable CDI device {}: {}", u.name, u.reason)?;
        }
        Ok(())
    }
}

/// Whether `needle` occurs in `hay` (a plain linear scan on the first byte; spec files are
/// capped, so this stays well under a millisecond).
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return true;
    }
    let first = needle[0];
    hay.iter().enumerate().any(|(i, &b)| {
        b == first && hay.len() - i >= needle.len() && &hay[i..i + needle.len()] == needle
    })
}

/// What `stat` (following a symlink, as the registry reads through one) said of a spec file:
/// enough to tell a file changed, rewritten or replaced since (ctime moves on every write and
/// rename and, unlike mtime, cannot be set back by `utimes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    /// Device of the file system.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds.
    pub mtime: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: i64,
    /// Status change time, seconds.
    pub ctime: i64,
    /// Status change time, nanoseconds.
    pub ctime_nsec: i64,
}

impl FileIdentity {
    fn of(md: &std::fs::Metadata) -> FileIdentity {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: md.mtime(),
            mtime_nsec: md.mtime_nsec(),
            ctime: md.ctime(),
            ctime_nsec: md.ctime_nsec(),
        }
    }
}

/// One spec file of a directory, as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpecFile {
    /// The file (the directory joined with its name).
    pub path: PathBuf,
    /// What it was when listed.
    pub id: FileIdentity,
}

/// What one spec directory held for the registry: the files [`Registry::load_listed`] reads,
/// from one `readdir` of the directory and one `stat` per spec file. A caller can key a cache of
/// the registry on it (the same listing, not a second one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DirListing {
    /// The directory does not exist: nothing to read, and no error.
    Absent,
    /// Listing it failed (the error's text); the registry records it as an error.
    Unreadable(String),
    /// Its `*.json`, `*.yaml` and `*.yml` regular files (after following links), in name order.
    Files(Vec<SpecFile>),
}

/// Lists the spec files of `dir` as the registry reads them.
pub fn list_spec_dir(dir: &Path) -> DirListing {
    match spec_files(dir) {
        Ok(files) => DirListing::Files(files),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => DirListing::Absent,
        Err(e) => DirListing::Unreadable(e.to_string()),
    }
}

fn spec_files(dir: &Path) -> Result<Vec<SpecFile>, std::io::Error> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if Format::from_path(&path).is_none() {
            continue;
        }
        // Follow symlinks (spec files are often links into /usr/share), but skip directories.
        match std::fs::metadata(&path) {
            Ok(md) if md.is_file() => files.push(SpecFile {
                id: FileIdentity::of(&md),
                path,
            }),
            _ => {}
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Why [`Registry::from_loaded`] or [`Registry::from_cached`] refused its parts.
#[derive(Debug, thiserror::Error)]
pub enum FromLoadedError {
    /// A device's edits, asked for, lie outside the cache's blob of edits, or are not UTF-8.
    #[error("{}: device {device:?}: its edits lie outside the cache, or are not UTF-8", path.display())]
    EditsOutside {
        /// The spec file.
        path: PathBuf,
        /// The device.
        device: String,
    },
    /// A device's edits, asked for, do not parse.
    #[error("{}: device {device:?}: containerEdits: {source}", path.display())]
    Edits {
        /// The spec file.
        path: PathBuf,
        /// The device.
        device: String,
        /// What serde_json says.
        source: serde_json::Error,
    },
    /// A spec breaks CDI rules.
    #[error("{0}")]
    Invalid(crate::validate::ValidationError),
    /// A spec's priority names no directory.
    #[error("{}: priority {priority} but {dirs} spec directories", path.display())]
    Priority {
        /// The spec file.
        path: PathBuf,
        /// Its priority.
        priority: usize,
        /// How many directories there are.
        dirs: usize,
    },
}

impl Registry {
    /// Load every spec in `dirs` (lowest priority first). Never fails: problems are recorded in
    /// [`Registry::errors`].
    pub fn load(dirs: &[PathBuf]) -> Registry {
        Registry::load_filtered(dirs, None)
    }

    /// [`Registry::load`] for a request that names devices of `vendors` only: a file whose
    /// bytes never mention one of them cannot define such a device, so it is not parsed (and
    /// its problems are not reported). A stale or hostile spec of another vendor in a shared
    /// spec dir then costs a read and a byte search (capped at the spec size limit), never a
    /// parse, on the container start path.
    pub fn load_for_vendors(dirs: &[PathBuf], vendors: &[&str]) -> Registry {
        Registry::load_filtered(dirs, Some(vendors))
    }

    fn load_filtered(dirs: &[PathBuf], vendors: Option<&[&str]>) -> Registry {
        let listed: Vec<DirListing> = dirs.iter().map(|d| list_spec_dir(d)).collect();
        Registry::load_listed(dirs, &listed, vendors)
    }

    /// [`Registry::load`] (`vendors` `None`) or [`Registry::load_for_vendors`] of `dirs`, whose
    /// listings ([`list_spec_dir`], one per directory, in the same order) were taken already.
    pub fn load_listed(
        dirs: &[PathBuf],
        listed: &[DirListing],
        vendors: Option<&[&str]>,
    ) -> Registry {
        let mut reg = Registry {
            dirs: dirs.to_vec(),
            ..Default::default()
        };
        for (priority, (dir, listing)) in dirs.iter().zip(listed).enumerate() {
            let files = match listing {
                DirListing::Files(f) => f,
                DirListing::Absent => continue,
                DirListing::Unreadable(e) => {
                    reg.errors
                        .push((dir.clone(), format!("cannot read CDI spec directory: {e}")));
                    continue;
                }
            };
            for SpecFile { path, .. } in files {
                let loaded = crate::limits::read_spec_file(path).and_then(|bytes| {
                    if let Some(vendors) = vendors {
                        if !vendors.iter().any(|v| contains(&bytes, v.as_bytes())) {
                            return Ok(None);
                        }
                    }
                    Spec::from_bytes_valid(path, &bytes).map(Some)
                });
                match loaded.transpose() {
                    None => {}
                    Some(Ok(spec)) => reg.specs.push(LoadedSpec {
                        path: path.clone(),
                        priority,
                        spec,
                    }),
                    Some(Err(e)) => {
                        let msg = e.to_string();
                        reg.errors.push((path.clone(), msg));
                    }
                }
            }
        }
        reg.index_devices();
        reg
    }

    /// A registry of `dirs` from what loading them gave ([`Registry::loaded`]): the specs
    /// (validated again) and the errors recorded while reading them, in their order. The
    /// devices are indexed again, so conflicts and priorities resolve as from the files, and
    /// [`Registry::errors`] is what loading the files gave. For a cache of the registry.
    pub fn from_loaded(
        dirs: &[PathBuf],
        specs: Vec<LoadedSpec>,
        errors: Vec<(PathBuf, String)>,
    ) -> Result<Registry, FromLoadedError> {
        Registry::checked(dirs, specs, errors, |_, spec| {
            crate::validate::validate(spec)
        })
    }

    /// A registry of `specs`, each checked by `validate` (given its index), and indexed.
    fn checked(
        dirs: &[PathBuf],
        specs: Vec<LoadedSpec>,
        errors: Vec<(PathBuf, String)>,
        validate: impl Fn(usize, &Spec) -> Vec<crate::validate::Issue>,
    ) -> Result<Registry, FromLoadedError> {
        for (si, s) in specs.iter().enumerate() {
            if s.priority >= dirs.len() {
                return Err(FromLoadedError::Priority {
                    path: s.path.clone(),
                    priority: s.priority,
                    dirs: dirs.len(),
                });
            }
            let issues = validate(si, &s.spec);
            if !issues.is_empty() {
                return Err(FromLoadedError::Invalid(crate::validate::ValidationError {
                    file: s.path.clone(),
                    issues,
                }));
            }
        }
        let mut reg = Registry {
            dirs: dirs.to_vec(),
            specs,
            errors,
            ..Default::default()
        };
        reg.index_devices();
        Ok(reg)
    }

    /// [`Registry::from_loaded`] from a cache ([`cache_form`]: `cached` and the `blob` of
    /// edits), for a create that will resolve `wanted` (qualified names) and nothing else: only
    /// those devices' edits are parsed and validated; every other device is indexed by name (so
    /// conflicts, priorities and [`Registry::errors`] are what loading the files gave) but
    /// [`Registry::resolve`] refuses it and [`Registry::device`] does not give it. Not a
    /// registry to cache again ([`Registry::is_partial`]).
    pub fn from_cached(
        dirs: &[PathBuf],
        cached: Vec<CachedSpec>,
        blob: &[u8],
        errors: Vec<(PathBuf, String)>,
        wanted: &[&str],
    ) -> Result<Registry, FromLoadedError> {
        // (kind, name) of each: a name that does not parse resolves to nothing anyway.
        let wanted: Vec<(String, String)> = wanted
            .iter()
            .filter_map(|w| names::parse_qualified_name(w).ok())
            .map(|q| (q.kind(), q.name))
            .collect();
        let mut unread = BTreeSet::new();
        let mut specs = Vec::with_capacity(cached.len());
        for (si, c) in cached.into_iter().enumerate() {
            let CachedBody {
                cdi_version,
                kind,
                annotations,
                devices: cached_devices,
                container_edits,
            } = c.spec;
            let mut devices = Vec::with_capacity(cached_devices.len());
            for (di, d) in cached_devices.into_iter().enumerate() {
                let container_edits = if wanted.iter().any(|(k, n)| *n == d.name && *k == kind) {
                    // Only the text read is checked as UTF-8, not the whole blob.
                    let (at, len) = d.edits;
                    let text = at
                        .checked_add(len)
                        .and_then(|end| blob.get(at..end))
                        .and_then(|b| std::str::from_utf8(b).ok())
                        .ok_or_else(|| FromLoadedError::EditsOutside {
                            path: c.path.clone(),
                            device: d.name.clone(),
                        })?;
                    serde_json::from_str(text).map_err(|source| FromLoadedError::Edits {
                        path: c.path.clone(),
                        device: d.name.clone(),
                        source,
                    })?
                } else {
                    unread.insert((si, di));
                    ContainerEdits::default()
                };
                devices.push(crate::spec::Device {
                    name: d.name,
                    annotations: d.annotations,
                    container_edits,
                });
            }
            specs.push(LoadedSpec {
                path: c.path,
                priority: c.priority,
                spec: Spec {
                    cdi_version,
                    kind,
                    annotations,
                    devices,
                    container_edits,
                },
            });
        }
        let unread_ref = &unread;
        let mut reg = Registry::checked(dirs, specs, errors, |si, spec| {
            crate::validate::validate_read(spec, |di| !unread_ref.contains(&(si, di)))
        })?;
        reg.unread = unread;
        Ok(reg)
    }

    /// Whether some devices' edits were not read ([`Registry::from_cached`]).
    pub fn is_partial(&self) -> bool {
        !self.unread.is_empty()
    }

    /// What loading the spec files gave, for [`Registry::from_loaded`]: the valid specs, and
    /// the errors of reading, parsing and validating (not the conflicts, which indexing finds).
    pub fn loaded(&self) -> (&[LoadedSpec], &[(PathBuf, String)]) {
        let errors = self.errors.get(..self.load_errors).unwrap_or(&self.errors);
        (&self.specs, errors)
    }

    /// Build a registry from specs already in memory (`path`, priority, spec), validated like
    /// files: for tests of what reads a registry (feature `test-support`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn from_specs(specs: Vec<LoadedSpec>) -> Registry {
        let mut reg = Registry::default();
        for s in specs {
            let issues = crate::validate::validate(&s.spec);
            if issues.is_empty() {
                reg.specs.push(s);
            } else {
                let e = crate::validate::ValidationError {
                    file: s.path.clone(),
                    issues,
                };
                reg.errors.push((s.path, e.to_string()));
            }
        }
        reg.index_devices();
        reg
    }

    /// Indexes the specs' devices, recording conflicts as errors after those the files gave
    /// (which [`Registry::loaded`] hands out).
    fn index_devices(&mut self) {
        self.load_errors = self.errors.len();
        // qualified name -> every (spec, device) defining it
        let mut all: BTreeMap<String, Vec<DeviceRef>> = BTreeMap::new();
        for (si, s) in self.specs.iter().enumerate() {
            for (di, d) in s.spec.devices.iter().enumerate() {
                let q = format!("{}={}", s.spec.kind, d.name);
                all.entry(q).or_default().push(DeviceRef {
                    spec: si,
                    device: di,
                });
            }
        }
        for (name, refs) in all {
            let mut by_prio: BTreeMap<usize, Vec<DeviceRef>> = BTreeMap::new();
            for r in refs {
                by_prio
                    .entry(self.specs[r.spec].priority)
                    .or_default()
                    .push(r);
            }
            for group in by_prio.values().filter(|g| g.len() > 1) {
                let paths: Vec<String> = group
                    .iter()
                    .map(|r| self.specs[r.spec].path.display().to_string())
                    .collect();
                for r in group {
                    let others: Vec<&str> = paths
                        .iter()
                        .map(String::as_str)
                        .filter(|p| *p != self.specs[r.spec].path.display().to_string())
                        .collect();
                    self.errors.push((
                        self.specs[r.spec].path.clone(),
                        format!(
                            "conflicting CDI device {name}: also defined in {}; the device is \
                             ignored until only one spec of this directory defines it",
                            others.join(", ")
                        ),
                    ));
                }
            }
            if let Some((_, top)) = by_prio.iter().next_back() {
                if top.len() == 1 {
                    self.devices.insert(name, top[0]);
                } else {
                    let files = top
                        .iter()
                        .map(|r| self.specs[r.spec].path.clone())
                        .collect();
                    self.conflicts.insert(name, files);
                }
            }
        }
    }

    /// The directories searched, lowest priority first.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The valid specs loaded, in load order.
    pub fn specs(&self) -> &[LoadedSpec] {
        &self.specs
    }

    /// Problems found while loading: (file or directory, message).
    pub fn errors(&self) -> &[(PathBuf, String)] {
        &self.errors
    }

    /// Every resolvable qualified device name, sorted.
    pub fn device_names(&self) -> Vec<String> {
        self.devices.keys().cloned().collect()
    }

    /// The spec loaded from `path`, if it loaded.
    pub fn spec_for_path(&self, path: &Path) -> Option<&Spec> {
        self.specs.iter().find(|s| s.path == path).map(|s| &s.spec)
    }

    /// The spec file and device a qualified name resolves to.
    pub fn device(&self, qualified: &str) -> Option<(&Path, &crate::spec::Device)> {
        let r = self.devices.get(qualified)?;
        if self.unread.contains(&(r.spec, r.device)) {
            return None;
        }
        let s = &self.specs[r.spec];
        Some((&s.path, &s.spec.devices[r.device]))
    }

    /// Resolvable device names (not qualified) of `kind`, in device-name order.
    pub fn names_of_kind(&self, kind: &str) -> Vec<String> {
        self.devices
            .keys()
            .filter_map(|q| crate::names::parse_qualified_name(q).ok())
            .filter(|q| q.kind() == kind)
            .map(|q| q.name)
            .collect()
    }

    /// Resolve `requested` qualified names to the edits to apply. Fails, listing every bad
    /// name, if any name is malformed or unknown.
    pub fn resolve(&self, requested: &[&str]) -> Result<Resolved, ResolveError> {
        let mut out = Resolved::default();
        let mut unresolved = Vec::new();
        let mut seen_dev = BTreeSet::new();
        let mut seen_spec = BTreeSet::new();
        for &name in requested {
            let q = match names::parse_qualified_name(name) {
                Ok(q) => q,
                Err(e) => {
                    unresolved.push(Unresolved {
                        name: name.to_string(),
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            let key = q.to_string();
            let Some(r) = self.devices.get(&key) else {
                unresolved.push(Unresolved {
                    name: name.to_string(),
                    reason: self.why_unknown(&q),
                });
                continue;
            };
            if self.unread.contains(&(r.spec, r.device)) {
                // A registry from a cache resolves what it was built for (`from_cached`); a
                // device it did not read is an error, never a device without edits.
                unresolved.push(Unresolved {
                    name: name.to_string(),
                    reason: "its edits were not read from the CDI spec cache (the registry was \
                             built for other devices)"
                        .into(),
                });
                continue;
            }
            if !seen_dev.insert(key.clone()) {
                continue;
            }
            let s = &self.specs[r.spec];
            if seen_spec.insert(r.spec) {
                out.edits.append(&s.spec.container_edits);
                out.spec_paths.push(s.path.clone());
            }
            out.edits.append(&s.spec.devices[r.device].container_edits);
            out.devices.push(key);
        }
        if unresolved.is_empty() {
            Ok(out)
        } else {
            Err(ResolveError { unresolved })
        }
    }

    fn why_unknown(&self, q: &QualifiedName) -> String {
        if let Some(files) = self.conflicts.get(&q.to_string()) {
            let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
            return format!(
                "defined by {} (the same spec directory): remove all but one of them",
                files.join(" and ")
            );
        }
        let kind = q.kind();
        let have = self.names_of_kind(&kind);
        let mut msg = if !have.is_empty() {
            format!("{kind} has {}", have.join(", "))
        } else {
            let dirs: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
            if dirs.is_empty() {
                format!("no CDI spec defines kind {kind}")
            } else {
                format!(
                    "no CDI spec in {} defines kind {kind} (generate one, e.g. with `cdi generate`)",
                    dirs.join(", ")
                )
            }
        };
        if !self.errors.is_empty() {
            let files: BTreeSet<String> = self
                .errors
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect();
            msg.push_str(&format!(
                " ({} had errors: {})",
                if files.len() == 1 {
                    "this file"
                } else {
                    "these files"
                },
                files.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, names: &[&str], env: &str) -> String {
        let devs: Vec<String> = names
            .iter()
            .map(|n| {
                format!(
                    r#"{{"name":"{n}","containerEdits":{{"env":["DEV_{n}={env}"]}}}}"#,
                    n = n
                )
            })
            .collect();
        format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{}],"containerEdits":{{"env":["COMMON={env}"]}}}}"#,
            devs.join(",")
        )
    }

    #[test]
    fn resolve_orders_edits_and_dedupes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.json"), spec("x.com/a", &["0", "1"], "a")).unwrap();
        let r = Registry::load(&[d.path().to_path_buf()]);
        assert!(r.errors().is_empty(), "{:?}", r.errors());
        let res = r.resolve(&["x.com/a=1", "x.com/a=0", "x.com/a=1"]).unwrap();
        assert_eq!(res.edits.env, ["COMMON=a", "DEV_1=a", "DEV_0=a"]);
        assert_eq!(res.devices, ["x.com/a=1", "x.com/a=0"]);
        assert_eq!(res.spec_paths, [d.path().join("a.json")]);
        let e = r.resolve(&["x.com/a=9", "bogus", "y.com/b=0"]).unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("unresolvable CDI device x.com/a=9: x.com/a has 0, 1; "),
            "{m}"
        );
        assert!(m.contains("unresolvable CDI device bogus: "), "{m}");
        assert!(m.contains("defines kind y.com/b"), "{m}");
        assert_eq!(e.unresolved.len(), 3);
    }

    /// Everything a caller sees of a registry: its errors, names, and what some requests resolve
    /// to (or why not).
    fn seen(r: &Registry) -> (Vec<(PathBuf, String)>, Vec<String>, Vec<String>) {
        let resolved = [
            &["x.com/a=0"][..],
            &["x.com/a=1"],
            &["x.com/a=2"],
            &["x.com/a=9"],
        ]
        .iter()
        .map(|names| format!("{:?}", r.resolve(names)))
        .collect();
        (r.errors().to_vec(), r.device_names(), resolved)
    }

    #[test]
    fn from_loaded_resolves_as_from_files() {
        let d = tempfile::tempdir().unwrap();
        let (low, high) = (d.path().join("low"), d.path().join("high"));
        std::fs::create_dir(&low).unwrap();
        std::fs::create_dir(&high).unwrap();
        // `0` is defined twice in the low dir (a conflict), `1` in both dirs (the high one
        // wins), `2` only in the low dir; one file there does not validate.
        std::fs::write(
            low.join("a.json"),
            spec("x.com/a", &["0", "1", "2"], "low-a"),
        )
        .unwrap();
        std::fs::write(low.join("b.json"), spec("x.com/a", &["0"], "low-b")).unwrap();
        std::fs::write(low.join("c.json"), spec("x.com/a", &["bad name!"], "c")).unwrap();
        std::fs::write(high.join("d.json"), spec("x.com/a", &["1"], "high")).unwrap();
        let dirs = [low.clone(), high.clone()];
        let files = Registry::load(&dirs);
        assert_eq!(files.errors().len(), 3, "{:?}", files.errors());
        assert_eq!(files.device_names(), ["x.com/a=1", "x.com/a=2"]);
        assert_eq!(
            files.resolve(&["x.com/a=1"]).unwrap().edits.env,
            ["COMMON=high", "DEV_1=high"]
        );
        // Through JSON, as a cache keeps them.
        let (specs, errors) = files.loaded();
        assert_eq!(errors.len(), 1);
        let specs: Vec<LoadedSpec> =
            serde_json::from_slice(&serde_json::to_vec(specs).unwrap()).unwrap();
        let rebuilt = Registry::from_loaded(&dirs, specs, errors.to_vec()).unwrap();
        assert_eq!(seen(&rebuilt), seen(&files));
        assert_eq!(rebuilt.loaded().1, files.loaded().1);
        // The priorities matter: the same specs with the dirs' order swapped resolve otherwise.
        let swapped: Vec<LoadedSpec> = files
            .specs()
            .iter()
            .cloned()
            .map(|mut s| {
                s.priority = 1 - s.priority;
                s
            })
            .collect();
        let other = Registry::from_loaded(&dirs, swapped, errors.to_vec()).unwrap();
        assert_eq!(
            other.resolve(&["x.com/a=1"]).unwrap().edits.env,
            ["COMMON=low-a", "DEV_1=low-a"]
        );
    }

    /// A registry from a cache read for some devices: those resolve as from the files, the
    /// files' errors and conflicts are all there, and every other device is refused, never
    /// resolved to no edits.
    #[test]
    fn from_cached_reads_the_devices_asked_for_and_refuses_the_others() {
        let d = tempfile::tempdir().unwrap();
        let (low, high) = (d.path().join("low"), d.path().join("high"));
        std::fs::create_dir(&low).unwrap();
        std::fs::create_dir(&high).unwrap();
        std::fs::write(
            low.join("a.json"),
            spec("x.com/a", &["0", "1", "2"], "low-a"),
        )
        .unwrap();
        std::fs::write(low.join("b.json"), spec("x.com/a", &["0"], "low-b")).unwrap();
        std::fs::write(high.join("d.json"), spec("x.com/a", &["1"], "high")).unwrap();
        let dirs = [low, high];
        let files = Registry::load(&dirs);
        let (specs, errors) = files.loaded();
        // Through JSON, as the cache keeps the index.
        let (index, blob) = cache_form(specs);
        let bytes = serde_json::to_vec(&index).unwrap();
        for wanted in [
            &["x.com/a=1"][..],
            &["x.com/a=2", "x.com/a=1"],
            &["x.com/a=2"],
        ] {
            let cached: Vec<CachedSpec> = serde_json::from_slice(&bytes).unwrap();
            let reg =
                Registry::from_cached(&dirs, cached, blob.as_bytes(), errors.to_vec(), wanted)
                    .unwrap();
            assert!(reg.is_partial());
            assert_eq!(reg.errors(), files.errors(), "{wanted:?}");
            assert_eq!(reg.device_names(), files.device_names());
            assert_eq!(reg.resolve(wanted).unwrap(), files.resolve(wanted).unwrap());
            for other in ["x.com/a=1", "x.com/a=2"] {
                if wanted.contains(&other) {
                    assert!(reg.device(other).is_some());
                    continue;
                }
                assert!(reg.device(other).is_none(), "{other}");
                let e = reg.resolve(&[other]).unwrap_err();
                assert!(
                    e.to_string().contains("not read from the CDI spec cache"),
                    "{e}"
                );
            }
            // A conflict is still one, and an unknown name still unknown.
            assert_eq!(
                reg.resolve(&["x.com/a=0"]).unwrap_err().to_string(),
                files.resolve(&["x.com/a=0"]).unwrap_err().to_string()
            );
        }
        // Asked for every device, it is the whole registry.
        let cached: Vec<CachedSpec> = serde_json::from_slice(&bytes).unwrap();
        let all = ["x.com/a=0", "x.com/a=1", "x.com/a=2"];
        let reg =
            Registry::from_cached(&dirs, cached, blob.as_bytes(), errors.to_vec(), &all).unwrap();
        assert!(!reg.is_partial());
        assert_eq!(seen(&reg), seen(&files));
    }

    /// Edits asked for are parsed and validated, and must lie in the blob; edits not asked for
    /// are never read. Devices with the same edits share their text.
    #[test]
    fn from_cached_checks_the_edits_it_reads_only() {
        let index = |one: (usize, usize)| {
            format!(
                r#"[{{"path":"/etc/cdi/a.json","priority":0,"spec":{{"cdiVersion":"0.5.0","kind":"x.com/a","devices":[{{"name":"0","edits":[0,15]}},{{"name":"1","edits":[{},{}]}}]}}}}]"#,
                one.0, one.1
            )
        };
        let dirs = [PathBuf::from("/etc/cdi")];
        let load = |t: &str, blob: &str, wanted: &[&str]| {
            let cached: Vec<CachedSpec> = serde_json::from_str(t).unwrap();
            Registry::from_cached(&dirs, cached, blob.as_bytes(), Vec::new(), wanted)
        };
        let good = r#"{"env":["A=1"]}"#;
        for broken in [
            r#"{"env":[1]}"#,
            r#"{"bogus":true}"#,
            "{}",
            r#"{"env":["no equals"]}"#,
        ] {
            let blob = format!("{good}{broken}");
            let t = index((good.len(), broken.len()));
            let reg = load(&t, &blob, &["x.com/a=0"]).unwrap();
            assert_eq!(reg.resolve(&["x.com/a=0"]).unwrap().edits.env, ["A=1"]);
            let e = load(&t, &blob, &["x.com/a=1"]).unwrap_err();
            assert!(
                matches!(
                    e,
                    FromLoadedError::Edits { .. } | FromLoadedError::Invalid(_)
                ),
                "{broken}: {e}"
            );
        }
        // Out of the blob, or across its end, or overflowing: refused when asked for only.
        for range in [(15, 1), (14, 2), (usize::MAX, 2)] {
            let t = index(range);
            assert!(load(&t, good, &["x.com/a=0"]).is_ok());
            let e = load(&t, good, &["x.com/a=1"]).unwrap_err();
            assert!(matches!(e, FromLoadedError::EditsOutside { .. }), "{e}");
        }
        // Not UTF-8 where it is read: refused; elsewhere in the blob: never looked at.
        let mut blob = good.as_bytes().to_vec();
        blob.extend_from_slice(b"{\"env\":[\"\xff\"]}");
        let cached = |one| serde_json::from_str::<Vec<CachedSpec>>(&index(one)).unwrap();
        let bad = (good.len(), blob.len() - good.len());
        assert!(
            Registry::from_cached(&dirs, cached(bad), &blob, Vec::new(), &["x.com/a=0"]).is_ok()
        );
        let e = Registry::from_cached(&dirs, cached(bad), &blob, Vec::new(), &["x.com/a=1"])
            .unwrap_err();
        assert!(matches!(e, FromLoadedError::EditsOutside { .. }), "{e}");
        // The same edits, one text.
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.json"), spec("x.com/a", &["0", "1"], "a")).unwrap();
        let mut files = Registry::load(&[d.path().to_path_buf()]);
        files.specs[0].spec.devices[1].container_edits =
            files.specs[0].spec.devices[0].container_edits.clone();
        let (index, blob) = cache_form(files.specs());
        let devs = &index[0].spec.devices;
        assert_eq!(devs[0].edits, devs[1].edits);
        assert_eq!(blob, r#"{"env":["DEV_0=a"]}"#);
    }

    #[test]
    fn from_loaded_refuses_what_loading_would_not_give() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.json"), spec("x.com/a", &["0"], "a")).unwrap();
        let dirs = [d.path().to_path_buf()];
        let good = Registry::load(&dirs).specs().to_vec();
        let mut bad = good.clone();
        bad[0].spec.devices[0].name = "../0".into();
        let e = Registry::from_loaded(&dirs, bad, Vec::new()).unwrap_err();
        assert!(matches!(e, FromLoadedError::Invalid(_)), "{e}");
        let mut far = good;
        far[0].priority = 1;
        let e = Registry::from_loaded(&dirs, far, Vec::new()).unwrap_err();
        assert!(
            e.to_string().ends_with("priority 1 but 1 spec directories"),
            "{e}"
        );
    }

    #[test]
    fn listing_names_each_spec_file_with_its_identity() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        assert_eq!(list_spec_dir(&d.path().join("none")), DirListing::Absent);
        let file = d.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(list_spec_dir(&file), DirListing::Unreadable(_)));
        let dir = d.path().join("cdi");
        std::fs::create_dir(&dir).unwrap();
        for f in ["b.yaml", "a.json", "c.txt"] {
            std::fs::write(dir.join(f), spec("x.com/a", &["0"], f)).unwrap();
        }
        std::fs::create_dir(dir.join("d.json")).unwrap();
        std::os::unix::fs::symlink(dir.join("b.yaml"), dir.join("e.yml")).unwrap();
        std::os::unix::fs::symlink(dir.join("gone"), dir.join("f.json")).unwrap();
        let DirListing::Files(files) = list_spec_dir(&dir) else {
            panic!("not listed")
        };
        let names: Vec<_> = files.iter().map(|f| f.path.file_name().unwrap()).collect();
        assert_eq!(names, ["a.json", "b.yaml", "e.yml"]);
        // The link's identity is its target's.
        let md = std::fs::metadata(dir.join("b.yaml")).unwrap();
        assert_eq!(files[2].id, files[1].id);
        assert_eq!(
            (files[1].id.ino, files[1].id.ctime, files[1].id.ctime_nsec),
            (md.ino(), md.ctime(), md.ctime_nsec())
        );
    }
}
