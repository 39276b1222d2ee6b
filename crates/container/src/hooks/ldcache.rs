//! `update-ldcache`: the container's `/etc/ld.so.cache` rebuilt for the given folders, as
//! `ldconfig` would, without running the image's `ldconfig`.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use gpuctk_ldcache::{Cache, Entry};

use super::{
    join, normalize_dir, unusable, FileKey, HookError, Placed, SeenLibraries, COMPAT_CONF_PREFIX,
    GENERATOR, GPUCTK_CONF, LD_SO_CACHE, LD_SO_CONF, LD_SO_CONF_D, MAX_CACHE, MAX_CANDIDATES,
    MAX_COMPAT_DIRS, MAX_COMPAT_DIR_ENTRIES, MAX_CONF, MAX_CONF_FILES, MAX_DIR_ENTRIES,
    MAX_DIR_SCAN, MAX_FAR_LINKS, TRUSTED_DIRS,
};
use crate::elf::{self, ElfError};
use crate::root::{Dir, FileKind, LinkLook, LinkOutcome, Metadata, Root, RootError};

/// What [`update_ldcache`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LdcacheReport {
    /// Entries written from the scanned directories, in priority order
    /// (compat directories first, then the folders as given).
    pub entries: Vec<Entry>,
    /// How many of the image's entries they replaced.
    pub replaced: usize,
    /// Soname links created or fixed: `(link, target)`.
    pub links: Vec<(String, String)>,
    /// Compat directories taken from `/etc/ld.so.conf.d/00-compat-*.conf`.
    pub compat_dirs: Vec<String>,
    /// Human-readable notes: skipped folders and files.
    pub notes: Vec<String>,
    /// The drop-in written, if any ([`GPUCTK_CONF`]).
    pub conf_file: Option<String>,
    /// Whether `/etc/ld.so.conf` had to be created.
    pub created_ld_so_conf: bool,
    /// Number of entries in the cache written.
    pub total_entries: usize,
}

/// Updates the container's `/etc/ld.so.cache` for the libraries in
/// `folders` (container paths), as `ldconfig` would, without running one.
///
/// For each directory (the compat ones listed in
/// `/etc/ld.so.conf.d/00-compat-*.conf` first, then `folders` in order;
/// missing ones skipped with a note) every regular file that `ldconfig` would
/// look at ([`is_dso_name`]), or symlink resolving in-root to one, that is an ELF shared object
/// with a `DT_SONAME` gets its soname link created when missing and an
/// entry `soname → <dir>/<soname>`. Per soname and ABI the first directory
/// wins and replaces the image's entries. The cache is written atomically
/// (0644); `/etc/ld.so.conf` is created if missing and the folders that the
/// image's configuration does not already list go to [`GPUCTK_CONF`], so a
/// later `ldconfig` in the container keeps them.
pub fn update_ldcache(root: &Root, folders: &[String]) -> Result<LdcacheReport, HookError> {
    update_ldcache_pending(root, folders, &Pending::default())
}

/// Library files the runtime will bind-mount into the container after we have run (the shim
/// does the hooks' work before it execs runc): each shadows whatever the image has at its
/// path, and its soname and ABI are read from the host file, or given where host discovery
/// read them already ([`Pending::add_known`]).
#[derive(Debug, Default)]
pub struct Pending {
    by_dir: BTreeMap<String, Vec<(String, Source)>>,
    /// The minors of the `/dev/nvidiaN` nodes the runtime will make, when the caller knows
    /// them (the shim, from the spec): `None` means read the container's `/dev`.
    gpu_minors: Option<Vec<u32>>,
    /// Links an earlier operation of the same run left in place (`create-symlinks`).
    links: Placed,
    /// What earlier containers' image libraries were ([`Pending::set_seen`]).
    seen: std::cell::RefCell<Option<SeenLibraries>>,
}

/// What is known of a pending mount's file.
#[derive(Debug)]
enum Source {
    /// The host file, open: its ELF is read.
    File(std::fs::File),
    /// A library whose soname and `ld.so.cache` flags are known: nothing is read.
    Known { soname: String, flags: i32 },
    /// Not a library: it only shadows the image's file of that name.
    Other,
}

impl Pending {
    /// The runtime will make `/dev` with GPU nodes of these minors (and no others).
    pub fn set_gpu_minors(&mut self, minors: Vec<u32>) {
        self.gpu_minors = Some(minors);
    }

    /// The GPU minors set by [`Pending::set_gpu_minors`].
    pub fn gpu_minors(&self) -> Option<&[u32]> {
        self.gpu_minors.as_deref()
    }

    /// `container_path` (absolute, in the container) will be a bind mount of `file`.
    pub fn add(&mut self, container_path: &str, file: std::fs::File) {
        self.push(container_path, Source::File(file));
    }

    /// `container_path` will be a bind mount of a shared library with DT_SONAME `soname` and
    /// `ld.so.cache` flags `flags` ([`crate::elf::LibraryInfo::cache_flags`]), as host
    /// discovery read them: its file is not read again.
    pub fn add_known(&mut self, container_path: &str, soname: &str, flags: i32) {
        let soname = soname.to_string();
        self.push(container_path, Source::Known { soname, flags });
    }

    /// `container_path` will be a bind mount of a file that is not a library: it hides the
    /// image's file of that name and is never read.
    pub fn add_other(&mut self, container_path: &str) {
        self.push(container_path, Source::Other);
    }

    /// What the image libraries of earlier containers were: a library file of the image with
    /// the same [`FileKey`] is not read, and what is read is added ([`Pending::take_seen`]).
    pub fn set_seen(&mut self, seen: SeenLibraries) {
        *self.seen.get_mut() = Some(seen);
    }

    /// The [`SeenLibraries`] given, with what the scans added.
    pub fn take_seen(&mut self) -> Option<SeenLibraries> {
        self.seen.get_mut().take()
    }

    /// The [`SeenLibraries`] given, if any, for an operation to consult and add to.
    pub fn seen_mut(&mut self) -> Option<&mut SeenLibraries> {
        self.seen.get_mut().as_mut()
    }

    /// Links left in place by an earlier operation of the same run: the folders holding them
    /// are not asked again what these names are.
    pub fn add_links(&mut self, placed: Placed) {
        for (dir, links) in placed.by_dir {
            self.links.by_dir.entry(dir).or_default().extend(links);
        }
    }

    fn push(&mut self, container_path: &str, source: Source) {
        if let Some((dir, name)) = container_path.rsplit_once('/') {
            if is_plain_name(name) {
                let dir = if dir.is_empty() { "/" } else { dir };
                self.by_dir
                    .entry(dir.trim_end_matches('/').to_string())
                    .or_default()
                    .push((name.to_string(), source));
            }
        }
    }

    fn in_dir(&self, dir: &str) -> &[(String, Source)] {
        self.by_dir.get(dir).map_or(&[], Vec::as_slice)
    }
}

/// [`update_ldcache`] as it will look once `pending` is mounted: the result is the same as
/// running the hook after the mounts.
pub fn update_ldcache_pending(
    root: &Root,
    folders: &[String],
    pending: &Pending,
) -> Result<LdcacheReport, HookError> {
    let mut report = LdcacheReport::default();
    let folders: Vec<String> = folders
        .iter()
        .map(|f| normalize_dir(f, "--folder"))
        .collect::<Result<_, _>>()?;

    // `/etc`, opened once: the cache is read and written, `ld.so.conf` looked at and
    // `ld.so.conf.d` opened through it. Where it does not open (missing, led through a magic
    // link), and for anything in it but a plain file, the full paths are resolved in the root
    // as ever, which says what is wrong.
    let etc = root.open_dir("/etc").ok();
    // Where earlier creates' findings are at hand (the shim's), the cache is looked at first,
    // and read only where no earlier create found it in place for what this one makes of it
    // (a container started again on its old root). One no earlier create found in place at
    // all is read first, as ever: one the image damaged fails the container before anything
    // is made in the root.
    let began = SystemTime::now();
    let mut there = match (&etc, pending.seen.borrow().is_some()) {
        (Some(d), true) => Some(d.lstat(base(LD_SO_CACHE))),
        _ => None,
    };
    // Only a cache as we write it is kept as found in place.
    let ours = |m: &Metadata| m.kind == FileKind::File && m.mode == 0o644;
    let in_place = |m: &Metadata, digest: Option<u64>| {
        ours(m)
            && pending.seen.borrow().as_ref().is_some_and(|s| {
                let key = FileKey::of(m);
                digest.map_or_else(|| s.any_in_place(&key), |d| s.in_place(&key, d))
            })
    };
    let maybe_in_place = matches!(&there, Some(Ok(Some(m))) if in_place(m, None));
    let mut read = if maybe_in_place {
        None
    } else {
        Some(read_cache(
            root,
            etc.as_ref(),
            there.take(),
            &mut report.notes,
        )?)
    };

    let conf_d = read_conf_d(root, etc.as_ref(), &mut report.notes)?;
    let mut compat_seen = HashSet::new();
    'conf: for (name, dirs) in &conf_d {
        if name.starts_with(COMPAT_CONF_PREFIX) {
            for d in dirs {
                match normalize_dir(d, "compat directory") {
                    Ok(d) if compat_seen.contains(&d) => {}
                    Ok(_) if report.compat_dirs.len() >= MAX_COMPAT_DIRS => {
                        report.notes.push(format!(
                            "{LD_SO_CONF_D}: more than {MAX_COMPAT_DIRS} compat directories; the rest ignored"
                        ));
                        break 'conf;
                    }
                    Ok(d) => {
                        compat_seen.insert(d.clone());
                        report.compat_dirs.push(d);
                    }
                    Err(_) => report.notes.push(format!(
                        "{LD_SO_CONF_D}/{name}: ignoring relative directory {:?}",
                        d.chars().take(80).collect::<String>()
                    )),
                }
            }
        }
    }

    // What create-symlinks left in place, kept true as the scans below make links.
    let mut placed = pending.links.clone();
    let mut seen = BTreeSet::new();
    let mut present_folders = Vec::new();
    // Folders read whole: every library in them is among our entries.
    let mut scanned: HashSet<String> = HashSet::new();
    let dirs: Vec<(String, bool)> = report
        .compat_dirs
        .iter()
        .map(|d| (d.clone(), true))
        .chain(folders.iter().map(|f| (f.clone(), false)))
        .collect();
    for (dir, is_compat) in dirs {
        let cap = if is_compat {
            MAX_COMPAT_DIR_ENTRIES
        } else {
            MAX_DIR_ENTRIES
        };
        let Some((found, whole)) = scan_dir(
            root,
            &dir,
            cap,
            (pending.in_dir(&dir), &mut pending.seen.borrow_mut()),
            &mut placed,
            &mut report,
        )?
        else {
            continue;
        };
        if whole {
            scanned.insert(dir.clone());
        }
        if !is_compat {
            present_folders.push(dir.clone());
        }
        for e in found {
            if seen.insert((e.key.clone(), e.flags)) {
                report.entries.push(e);
            }
        }
    }

    let digest = cache_digest(&report.entries, &scanned);
    let found = matches!(&there, Some(Ok(Some(m))) if in_place(m, Some(digest)));
    let etc = match (found, etc) {
        (true, Some(etc)) => {
            report.notes.push(format!(
                "{LD_SO_CACHE}: as an earlier create found it, with these entries; not read"
            ));
            etc
        }
        (_, etc) => {
            let (mut cache, current) = match read.take() {
                Some(r) => r,
                None => read_cache(root, etc.as_ref(), there.take(), &mut report.notes)?,
            };
            merge(&mut cache, &mut report, &scanned);
            // An `/etc` the image leads through a magic link cannot be written in-root: noted,
            // and the container keeps the loader's default search path.
            let etc = match etc {
                Some(d) => Ok(d),
                None => root.mkdir_all_open("/etc", 0o755),
            };
            let bytes = cache.to_bytes();
            let written = etc.and_then(|etc| {
                let current = current.as_ref().map(|(seen, old)| (seen, &old[..]));
                let wrote = etc.write_file_if_changed(base(LD_SO_CACHE), &bytes, 0o644, current)?;
                // As it was: kept as found in place, for a later create on this root.
                if let (false, Some((m, _))) = (wrote, current.filter(|(m, _)| ours(m))) {
                    if let Some(seen) = pending.seen.borrow_mut().as_mut() {
                        seen.note_in_place(m, digest, began);
                    }
                }
                Ok(etc)
            });
            match written {
                Ok(etc) => etc,
                Err(e) if unusable(&e) => {
                    report.notes.push(format!("{e}; no cache written"));
                    return Ok(report);
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    match etc.lstat(base(LD_SO_CONF)) {
        Ok(None) => {
            etc.write_file_atomic(
                base(LD_SO_CONF),
                b"include /etc/ld.so.conf.d/*.conf\n",
                0o644,
            )?;
            report.created_ld_so_conf = true;
        }
        Ok(Some(_)) => {}
        Err(e) if unusable(&e) => report.notes.push(format!("{e}; left alone")),
        Err(e) => return Err(e.into()),
    }
    let gpuctk_name = base(GPUCTK_CONF);
    let known: BTreeSet<&str> = conf_d
        .iter()
        .filter(|(name, _)| name != gpuctk_name)
        .flat_map(|(_, dirs)| dirs.iter().map(|d| d.trim_end_matches('/')))
        .chain(TRUSTED_DIRS.iter().copied())
        .collect();
    let listed: Vec<&String> = present_folders
        .iter()
        .filter(|f| !known.contains(f.as_str()))
        .collect();
    if !listed.is_empty() {
        let mut text = String::from("# Written by gpuctk update-ldcache\n");
        for f in listed {
            text.push_str(f);
            text.push('\n');
        }
        let written = root
            .mkdir_all_open(LD_SO_CONF_D, 0o755)
            .and_then(|d| d.write_file_if_changed(base(GPUCTK_CONF), text.as_bytes(), 0o644, None));
        match written {
            Ok(_) => report.conf_file = Some(GPUCTK_CONF.to_string()),
            Err(e) if unusable(&e) => report.notes.push(format!("{e}; drop-in not written")),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(report)
}

/// The image's cache as [`read_cache`] found it: parsed, and its `lstat` and bytes where it was
/// read from `/etc` (what is written back only if it changed).
type ReadCache = (Cache, Option<(Metadata, Vec<u8>)>);

/// The image's cache, parsed (empty where there is none, or what is there is no file to read),
/// with its `lstat` and bytes where it was read from `/etc` (`etc`; `there`: its `lstat` there,
/// taken already).
fn read_cache(
    root: &Root,
    etc: Option<&Dir<'_>>,
    there: Option<Result<Option<Metadata>, RootError>>,
    notes: &mut Vec<String>,
) -> Result<ReadCache, HookError> {
    let mut current = None;
    let mut elsewhere = None;
    let read: Result<&[u8], RootError> = match etc.map(|d| match there {
        Some(looked) => looked.and_then(|m| d.read_file_as(base(LD_SO_CACHE), m, MAX_CACHE)),
        None => d.read_file(base(LD_SO_CACHE), MAX_CACHE),
    }) {
        Some(Ok(Some((bytes, seen)))) => Ok(&current.insert((seen, bytes)).1),
        Some(Err(e)) => Err(e),
        Some(Ok(None)) | None => match root.read_to_vec(LD_SO_CACHE, MAX_CACHE) {
            Ok(bytes) => Ok(elsewhere.insert(bytes)),
            Err(e) => Err(e),
        },
    };
    let cache = match read {
        // What a power cut can leave of a cache renamed into place unsynced; the loader ignores
        // it too. Start afresh rather than refuse the container forever.
        Ok([]) => {
            notes.push(format!("{LD_SO_CACHE}: empty in the image; starting empty"));
            Cache::new()
        }
        Ok(bytes) => gpuctk_ldcache::parse(bytes).map_err(|source| HookError::CorruptCache {
            root: root.host_path().to_path_buf(),
            source,
        })?,
        Err(e) if e.is_not_found() => {
            notes.push(format!("{LD_SO_CACHE}: none in the image; starting empty"));
            Cache::new()
        }
        // A FIFO, socket or device where the cache belongs, or a link through a magic link
        // (`/proc/self/root/...`): never read; replaced by the new cache, as ldconfig's
        // rename would replace it.
        Err(e) if unusable(&e) => {
            notes.push(format!("{e}; not read, replaced by a new cache"));
            Cache::new()
        }
        Err(e) => return Err(e.into()),
    };
    Ok((cache, current))
}

/// Our entries (`report`'s) into the image's `cache`, as ldconfig would have it had it scanned
/// the folders read whole (`scanned`).
fn merge(cache: &mut Cache, report: &mut LdcacheReport, scanned: &HashSet<String>) {
    // Our entries replace the image's with the same soname, ABI and hwcap: one pass over the
    // cache (Cache::add per entry would be quadratic on a large image cache).
    let ours: HashSet<(&str, i32, u64)> = report
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.flags, e.hwcap))
        .collect();
    let before = cache.entries.len();
    cache
        .entries
        .retain(|o| !ours.contains(&(o.key.as_str(), o.flags, o.hwcap)));
    report.replaced = before - cache.entries.len();
    // The image's entries into a folder we read whole that our scan did not find again are
    // stale: a library gone, or the empty mount point an earlier injection left in a root that
    // persists (enroot), which the loader would take for a "file too short". ldconfig, which
    // rebuilds from scratch, drops them too.
    let our_paths: HashSet<&str> = report.entries.iter().map(|e| e.value.as_str()).collect();
    let before = cache.entries.len();
    cache.entries.retain(|o| {
        let dir = o.value.rsplit_once('/').map_or("", |(d, _)| d);
        let dir = if dir.is_empty() { "/" } else { dir };
        !scanned.contains(dir) || our_paths.contains(o.value.as_str())
    });
    let stale = before - cache.entries.len();
    if stale > 0 {
        report.notes.push(format!(
            "{stale} entries of the image's cache into the folders read no longer name a library; dropped"
        ));
    }
    cache.entries.extend(report.entries.iter().cloned());
    if cache.generator.is_none() {
        cache.generator = Some(GENERATOR.to_string());
    }
    report.total_entries = cache.entries.len();
}

/// The digest of what merging makes of a cache ([`SeenLibraries::in_place`]): our entries in
/// order, the folders read whole (whose other entries are dropped) and the generator a cache
/// without one gets. Merging the same into a cache that such a merge made changes nothing.
fn cache_digest(entries: &[Entry], scanned: &HashSet<String>) -> u64 {
    let mut text = format!("ld.so.cache {GENERATOR}\0").into_bytes();
    for e in entries {
        let numbers = format!("{} {} {}", e.flags, e.hwcap, e.osversion);
        for part in [e.key.as_bytes(), e.value.as_bytes(), numbers.as_bytes()] {
            text.extend_from_slice(part);
            text.push(0);
        }
    }
    // Folder names hold no NUL: a second NUL ends the entries.
    text.push(0);
    let mut dirs: Vec<&String> = scanned.iter().collect();
    dirs.sort_unstable();
    for d in dirs {
        text.extend_from_slice(d.as_bytes());
        text.push(0);
    }
    super::fnv1a64(&text)
}

/// The `*.conf` files of `/etc/ld.so.conf.d` (sorted by name) with the
/// directories they list (comments, blank and `include` lines dropped).
fn read_conf_d(
    root: &Root,
    etc: Option<&Dir<'_>>,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<String>)>, HookError> {
    let opened = match etc {
        Some(etc) => etc.open_dir(base(LD_SO_CONF_D)),
        None => root.open_dir(LD_SO_CONF_D),
    };
    let (dir, names) = match opened.and_then(|d| {
        let names = d.names_and_kinds(MAX_DIR_ENTRIES)?;
        Ok((d, names))
    }) {
        Ok(n) => n,
        Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) => return Ok(Vec::new()),
        Err(e) if unusable(&e) => {
            notes.push(format!("{e}; not read"));
            return Ok(Vec::new());
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    let confs: Vec<(String, Option<FileKind>)> = names
        .into_iter()
        .filter(|(n, _)| n.ends_with(".conf"))
        .collect();
    if confs.len() > MAX_CONF_FILES {
        notes.push(format!(
            "{LD_SO_CONF_D}: {} *.conf files, only the first {MAX_CONF_FILES} read",
            confs.len()
        ));
    }
    for (name, kind) in confs.into_iter().take(MAX_CONF_FILES) {
        let path = join(LD_SO_CONF_D, &name);
        // A plain file from the open folder (one the listing calls so, opened with no `lstat`
        // first); anything else resolved in the root.
        let here = if kind == Some(FileKind::File) {
            dir.read_listed_file(&name, MAX_CONF)
        } else {
            dir.read_file(&name, MAX_CONF)
        };
        let read = match here {
            Ok(Some((bytes, _))) => Ok(bytes),
            Ok(None) => root.read_to_vec(&path, MAX_CONF),
            Err(e) => Err(e),
        };
        let bytes = match read {
            Ok(b) => b,
            // Dangling links, directories named *.conf: ldconfig skips them too.
            Err(RootError::NotRegular { .. }) => continue,
            Err(e) if e.is_not_found() => continue,
            Err(e @ RootError::TooLarge { .. }) => {
                notes.push(format!("{e}; skipped"));
                continue;
            }
            Err(e) if unusable(&e) => {
                notes.push(format!("{e}; skipped"));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let text = String::from_utf8_lossy(&bytes);
        let dirs = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty() && !l.starts_with("include") && !l.starts_with("hwcap"))
            .map(str::to_string)
            .collect();
        out.push((name, dirs));
    }
    Ok(out)
}

/// The last name of a container path constant (`/etc/ld.so.cache` → `ld.so.cache`).
fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `ldconfig`'s own test for a file worth looking at (glibc's `_dl_is_dso`, plus its skip of
/// prelink's temporary files): `lib*.so*`, `ld-*.so*`, `ld.so.*`, `ld64.so.*`. So
/// `preloadable_libintl.so` is not a candidate, as it is not for ldconfig.
pub fn is_dso_name(name: &str) -> bool {
    if name.ends_with(".#prelink#") || name.contains(".#prelink#.") {
        return false;
    }
    ((name.starts_with("lib") || name.starts_with("ld-")) && name.contains(".so"))
        || name.starts_with("ld.so.")
        || name.starts_with("ld64.so.")
}

struct Candidate {
    name: String,
    soname: String,
    flags: i32,
    is_link: bool,
}

/// A plain file name, usable as a soname link in the same directory.
fn is_plain_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')
}

/// ldconfig's work on one directory: soname links and cache entries, and whether the whole
/// directory was read. `None` if the directory does not exist in the container.
///
/// In a directory over [`MAX_DIR_ENTRIES`] entries or [`MAX_CANDIDATES`] library files the
/// image's own files are skipped with a note, but not the libraries delivered into it: those
/// mounted there ([`crate::root::Dir::is_mounted_file`]) and those about to be (`pending`).
/// Skipping them too left the cache without the driver, and `libcuda.so.1` did not load.
///
/// The links of `placed` in this folder are taken as they say, not looked at; those it makes
/// are added.
fn scan_dir(
    root: &Root,
    dir: &str,
    cap: usize,
    (pending, seen): (&[(String, Source)], &mut Option<SeenLibraries>),
    placed: &mut Placed,
    report: &mut LdcacheReport,
) -> Result<Option<(Vec<Entry>, bool)>, HookError> {
    let opened = match root.open_dir(dir) {
        Ok(d) => d,
        // The runtime creates a mount's directory; so do we, ahead of it.
        Err(e) if e.is_not_found() && !pending.is_empty() => {
            root.mkdir_all(dir, 0o755)?;
            root.open_dir(dir)?
        }
        Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) => {
            report.notes.push(format!(
                "{dir}: no such directory in the container; skipped"
            ));
            return Ok(None);
        }
        Err(e) if unusable(&e) => {
            report.notes.push(format!("{e}; skipped"));
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let mut whole = true;
    let names = match opened.names_and_kinds(cap) {
        Ok(n) => n,
        Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) => {
            report.notes.push(format!(
                "{dir}: no such directory in the container; skipped"
            ));
            return Ok(None);
        }
        Err(e @ RootError::TooManyEntries { .. }) => {
            whole = false;
            let mounted = match opened.names_where(MAX_DIR_SCAN, |n| {
                Ok(is_dso_name(n) && opened.is_mounted_file(n)?)
            }) {
                Ok(m) => m,
                Err(e @ RootError::TooManyEntries { .. }) => {
                    report
                        .notes
                        .push(format!("{e}; not searched for mounted libraries"));
                    Vec::new()
                }
                Err(e) => return Err(e.into()),
            };
            report.notes.push(format!(
                "{e}; the image's files skipped, the {} libraries mounted into it read",
                mounted.len()
            ));
            mounted.into_iter().map(|n| (n, None)).collect()
        }
        Err(e) => return Err(e.into()),
    };
    let shadowed: HashSet<&str> = pending.iter().map(|(n, _)| n.as_str()).collect();
    // The whole listing: a name it does not hold is not there, and costs no lookup.
    let mut looks = Looks {
        dir: &opened,
        listed: whole.then(|| names.iter().cloned().collect()),
        stat: HashMap::new(),
        link: HashMap::new(),
    };
    let names = names.into_iter().map(|(n, _)| n);
    // Which folder this is, by device and inode, only where links were placed at all.
    let id = if placed.is_empty() {
        None
    } else {
        Some(opened.id()?)
    };
    for (name, target) in id.and_then(|id| placed.in_dir(id)).into_iter().flatten() {
        looks
            .link
            .insert(name.clone(), Some(std::ffi::OsString::from(target)));
    }
    let mut names: Vec<String> = names
        .filter(|n| is_dso_name(n) && !shadowed.contains(n.as_str()))
        .collect();
    if names.len() > MAX_CANDIDATES {
        let found = names.len();
        whole = false;
        let mut mounted = Vec::new();
        for n in names {
            if opened.is_mounted_file(&n)? {
                mounted.push(n);
            }
        }
        report.notes.push(format!(
            "{dir}: {found} library files, more than the {MAX_CANDIDATES} we read; the image's skipped, the {} mounted into it read",
            mounted.len()
        ));
        names = mounted;
    }
    let mut candidates = Vec::new();
    // The pending files are read where they are (`pread`), not copied; those known not read.
    let mut files: Vec<(String, bool, Held<'_>)> = Vec::with_capacity(names.len());
    for (name, source) in pending.iter().filter(|(n, _)| is_dso_name(n)) {
        let held = match source {
            Source::File(file) => Held::Borrowed(file),
            Source::Known { soname, flags } => Held::Known(soname, *flags),
            Source::Other => continue,
        };
        files.push((name.clone(), false, held));
    }
    let mut far = 0usize;
    for name in names {
        // One component from the open directory: the cost per file an image can multiply.
        let Some(kind) = looks.kind(&name)? else {
            continue;
        };
        let (is_link, file) = match kind {
            FileKind::File => match library_file(&mut looks, &name, seen.as_ref())? {
                Some(held) => (false, held),
                None => continue, // no library, or changed under us: not one we can trust
            },
            FileKind::Symlink => match near_link(&mut looks, &name, &shadowed)? {
                Near::File(target) => match library_file(&mut looks, &target, seen.as_ref())? {
                    Some(held) => (true, held),
                    None => continue,
                },
                Near::None | Near::Shadowed => continue,
                Near::Far => {
                    far += 1;
                    if far > MAX_FAR_LINKS {
                        continue;
                    }
                    match root.open_read(&join(dir, &name)) {
                        Ok(f) => (true, Held::Owned(f, None)),
                        // Dangling links and links to non-files are not libraries.
                        Err(e) if e.is_not_found() || matches!(e, RootError::NotRegular { .. }) => {
                            continue
                        }
                        // A loop, or a path through a magic link: not followed.
                        Err(e) if unusable(&e) => {
                            report.notes.push(format!("{e}; skipped"));
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            },
            _ => continue,
        };
        files.push((name, is_link, file));
    }
    if far > MAX_FAR_LINKS {
        report.notes.push(format!(
            "{dir}: {far} library links lead out of the folder, more than the {MAX_FAR_LINKS} we follow; the rest skipped"
        ));
    }
    for (name, is_link, file) in files {
        let path = join(dir, &name);
        let key = match &file {
            Held::Owned(_, key) => *key,
            _ => None,
        };
        // What a library read anew was, for the next container: only what gives no note.
        let mut learn = |library: Option<(String, i32)>| {
            if let (Some(seen), Some(key)) = (seen.as_mut(), key) {
                seen.learn(key, library);
            }
        };
        let (soname, flags, machine) = match file {
            Held::Known(soname, flags) => (soname.to_string(), Some(flags), None),
            Held::Seen(soname, flags) => (soname, Some(flags), None),
            Held::Owned(..) | Held::Borrowed(_) => {
                let Some(f) = file.get() else { continue };
                let info = match elf::library_info(f) {
                    Ok(i) => i,
                    Err(ElfError::NotElf) => {
                        // Linker scripts such as libc.so.
                        learn(None);
                        continue;
                    }
                    Err(e) => {
                        report.notes.push(format!("{path}: skipped: {e}"));
                        continue;
                    }
                };
                let Some(soname) = info.soname.clone().filter(|_| info.is_shared_library()) else {
                    learn(None);
                    continue;
                };
                let flags = info.cache_flags();
                if let Some(flags) = flags.filter(|_| is_plain_name(&soname)) {
                    learn(Some((soname.clone(), flags)));
                }
                (soname, flags, Some(info.header.machine))
            }
        };
        if !is_plain_name(&soname) {
            report.notes.push(format!(
                "{path}: skipped: soname {soname:?} is not a file name"
            ));
            continue;
        }
        let Some(flags) = flags else {
            report.notes.push(format!(
                "{path}: skipped: ELF machine {} is not supported",
                machine.unwrap_or_default()
            ));
            continue;
        };
        candidates.push(Candidate {
            name,
            soname,
            flags,
            is_link,
        });
    }

    let mut groups: BTreeMap<(String, i32), Vec<&Candidate>> = BTreeMap::new();
    for c in &candidates {
        groups
            .entry((c.soname.clone(), c.flags))
            .or_default()
            .push(c);
    }
    let mut entries = Vec::new();
    for ((soname, flags), group) in groups {
        let link_path = join(dir, &soname);
        if !group.iter().any(|c| c.name == soname) {
            // Prefer real files, then the highest version, as ldconfig does.
            let best = group
                .iter()
                .max_by(|a, b| {
                    (!a.is_link)
                        .cmp(&!b.is_link)
                        .then_with(|| gpuctk_ldcache::libcmp(&a.name, &b.name))
                })
                .expect("groups are never empty");
            // The folder is open already, and most sonames were looked at above (or placed by
            // create-symlinks): at most one readlink, and an lstat for what is not a link.
            let there = looks.read_link(&soname)?;
            if there.is_none() {
                match looks.kind(&soname)? {
                    None | Some(FileKind::Symlink) => {}
                    Some(kind) => {
                        report.notes.push(format!(
                            "{link_path}: a {kind} that is not a library with soname {soname}; left alone, no entry"
                        ));
                        continue;
                    }
                }
            }
            if there.as_deref() != Some(std::ffi::OsStr::new(&best.name)) {
                // What it is now is known only to the next lookup.
                looks.forget(&soname);
                if opened.symlink_force(&best.name, &soname)? != LinkOutcome::Unchanged {
                    report.links.push((link_path.clone(), best.name.clone()));
                }
                if let Some(id) = id {
                    placed.insert(id, &soname, &best.name);
                }
            }
        }
        entries.push(Entry::new(soname, link_path, flags));
    }
    Ok(Some((entries, whole)))
}

/// A file to read: one of the folder's, or a pending mount's, read in place; or a pending
/// library already known (soname, flags).
enum Held<'p> {
    /// Opened here; with its key where what it is goes to [`SeenLibraries`].
    Owned(std::fs::File, Option<FileKey>),
    Borrowed(&'p std::fs::File),
    Known(&'p str, i32),
    /// An image's library as an earlier container's scan found it.
    Seen(String, i32),
}

impl Held<'_> {
    fn get(&self) -> Option<&std::fs::File> {
        match self {
            Held::Owned(f, _) => Some(f),
            Held::Borrowed(f) => Some(f),
            Held::Known(..) | Held::Seen(..) => None,
        }
    }
}

/// Regular file `name` of the scanned folder as a library to read: opened, or, where earlier
/// containers' libraries are known ([`SeenLibraries`]), taken from them by its `lstat` when it
/// is one of them (`None` for one that is no library, or no longer a regular file).
fn library_file(
    looks: &mut Looks<'_, '_>,
    name: &str,
    seen: Option<&SeenLibraries>,
) -> Result<Option<Held<'static>>, RootError> {
    if let Some(seen) = seen {
        let Some(m) = looks.lstat(name)? else {
            return Ok(None);
        };
        if m.kind != FileKind::File {
            return Ok(None);
        }
        if let Some(library) = seen.get(&FileKey::of(&m)) {
            return Ok(library.map(|(soname, flags)| Held::Seen(soname, flags)));
        }
    }
    // The key is the open file's: what is read is what it names.
    Ok(looks
        .dir
        .open_regular(name)?
        .map(|(f, m)| Held::Owned(f, seen.map(|_| FileKey::of(&m)))))
}

/// The names of one scanned folder, each looked at once (`lstat`, `readlink`) however many
/// links lead to it; names a whole listing does not hold are absent without a call. Nothing is
/// created in the folder while it is scanned, but the soname links at its end.
struct Looks<'a, 'r> {
    dir: &'a Dir<'r>,
    /// Every name of the folder, when it was read whole, with the kind its entry said.
    listed: Option<HashMap<String, Option<FileKind>>>,
    stat: HashMap<String, Option<Metadata>>,
    link: HashMap<String, Option<std::ffi::OsString>>,
}

impl Looks<'_, '_> {
    fn absent(&self, name: &str) -> bool {
        self.listed.as_ref().is_some_and(|l| !l.contains_key(name))
    }

    /// What `name` is: a link known already costs nothing; one the listing calls a link is
    /// asked for its target first (one call for what it most likely is); one it calls a
    /// regular file is taken as one (what opens it checks again, [`Dir::open_regular`]); else
    /// [`Looks::lstat`].
    fn kind(&mut self, name: &str) -> Result<Option<FileKind>, RootError> {
        if self.absent(name) {
            return Ok(None);
        }
        let hint = self
            .listed
            .as_ref()
            .and_then(|l| l.get(name).copied().flatten());
        let unlooked = !self.stat.contains_key(name) && !self.link.contains_key(name);
        if unlooked && hint == Some(FileKind::File) {
            return Ok(Some(FileKind::File));
        }
        if unlooked && hint == Some(FileKind::Symlink) {
            self.read_link(name)?;
        }
        if let Some(Some(_)) = self.link.get(name) {
            return Ok(Some(FileKind::Symlink));
        }
        Ok(self.lstat(name)?.map(|m| m.kind))
    }

    /// [`Dir::lstat`], once per name.
    fn lstat(&mut self, name: &str) -> Result<Option<Metadata>, RootError> {
        if self.absent(name) {
            return Ok(None);
        }
        if let Some(m) = self.stat.get(name) {
            return Ok(*m);
        }
        let m = self.dir.lstat(name)?;
        self.stat.insert(name.to_string(), m);
        Ok(m)
    }

    /// Looks at `name` again next time (it was just made or replaced: a listing taken before
    /// does not hold it either).
    fn forget(&mut self, name: &str) {
        self.stat.remove(name);
        self.link.remove(name);
        if let Some(l) = &mut self.listed {
            l.insert(name.to_string(), None);
        }
    }

    /// [`Dir::read_link`], once per name: one `readlinkat` (for a name not known already not
    /// to be a link), which says too whether it is there.
    fn read_link(&mut self, name: &str) -> Result<Option<std::ffi::OsString>, RootError> {
        if self.absent(name) {
            return Ok(None);
        }
        if let Some(t) = self.link.get(name) {
            return Ok(t.clone());
        }
        if let Some(m) = self.stat.get(name) {
            if m.is_none_or(|m| m.kind != FileKind::Symlink) {
                return Ok(None);
            }
        }
        let t = match self.dir.look_link(name)? {
            LinkLook::Target(t) => Some(t),
            LinkLook::Absent => {
                self.stat.insert(name.to_string(), None);
                None
            }
            LinkLook::NotLink => None,
        };
        self.link.insert(name.to_string(), t.clone());
        Ok(t)
    }
}

/// Where a library symlink in an open folder leads, followed through names in that folder only.
enum Near {
    /// A regular file of the folder, by its name.
    File(String),
    /// Nothing usable: dangling, or not a regular file.
    None,
    /// Out of the folder (a target with a `/`), or a chain longer than the kernel follows.
    Far,
    /// A name a pending mount will cover: what the link leads to is that mount's file, which
    /// is a candidate of its own (and, being no link, always the better one of its soname).
    Shadowed,
}

/// Follows symlink `name` of `dir` while its target is a plain name in `dir`, one lookup each;
/// a library name in `shadowed` (a pending mount's) ends it unlooked at: the image's file there, often
/// the empty mount point a runtime left in a root that persists, is not what the link will
/// lead to.
fn near_link(
    looks: &mut Looks<'_, '_>,
    name: &str,
    shadowed: &HashSet<&str>,
) -> Result<Near, HookError> {
    let mut cur = name.to_string();
    for _ in 0..crate::root::MAX_SYMLINKS {
        let Some(target) = looks.read_link(&cur)? else {
            return Ok(Near::None);
        };
        let Some(target) = target.to_str().filter(|t| is_plain_name(t)) else {
            return Ok(Near::Far);
        };
        // A library name only: that pending mount is a candidate of the scan itself.
        if shadowed.contains(target) && is_dso_name(target) {
            return Ok(Near::Shadowed);
        }
        let Some(kind) = looks.kind(target)? else {
            return Ok(Near::None);
        };
        match kind {
            FileKind::File => return Ok(Near::File(target.to_string())),
            FileKind::Symlink => cur = target.to_string(),
            _ => return Ok(Near::None),
        }
    }
    Ok(Near::Far)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 21): the `*.conf` files of `ld.so.conf.d` that its listing calls
    /// regular are read with no `lstat` first; a symlink among them is looked at as before.
    #[test]
    fn conf_files_the_listing_calls_regular_are_read_with_no_lstat() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("etc/ld.so.conf.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("a.conf"), b"/opt/a\n# no\n").unwrap();
        std::fs::write(tmp.path().join("etc/real"), b"/opt/b\n").unwrap();
        std::os::unix::fs::symlink("../real", d.join("b.conf")).unwrap();
        std::os::unix::fs::symlink("/etc/ld.so.conf.d/c.conf", d.join("c.conf")).unwrap();
        let root = Root::open(tmp.path()).unwrap();
        let etc = root.open_dir("/etc").unwrap();
        let mut notes = Vec::new();
        crate::root::LSTATS.with(|c| c.set(0));
        let read = read_conf_d(&root, Some(&etc), &mut notes).unwrap();
        assert_eq!(
            read,
            vec![
                ("a.conf".to_string(), vec!["/opt/a".to_string()]),
                ("b.conf".to_string(), vec!["/opt/b".to_string()]),
            ],
            "{notes:?}"
        );
        // The two symlinks only; the loop (c.conf) is noted and skipped.
        assert_eq!(crate::root::LSTATS.with(|c| c.get()), 2);
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    /// Regression (issue 21): a name the folder's listing calls a regular file is taken as one
    /// with no `lstat` (one call per library of the image's folder, on every create): here it
    /// is gone before it is looked at, which only an `lstat` would have seen. Opening it then
    /// finds nothing, and a library swapped for another kind is not opened as one.
    #[test]
    fn a_listed_file_is_not_looked_at_again() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("usr/lib");
        std::fs::create_dir_all(&lib).unwrap();
        for n in ["libgone.so.1", "libfifo.so.1", "libdir.so.1"] {
            std::fs::write(lib.join(n), b"").unwrap();
        }
        let root = Root::open(tmp.path()).unwrap();
        let dir = root.open_dir("/usr/lib").unwrap();
        let mut looks = Looks {
            dir: &dir,
            listed: Some(dir.names_and_kinds(10).unwrap().into_iter().collect()),
            stat: HashMap::new(),
            link: HashMap::new(),
        };
        std::fs::remove_file(lib.join("libgone.so.1")).unwrap();
        std::fs::remove_file(lib.join("libfifo.so.1")).unwrap();
        std::fs::remove_file(lib.join("libdir.so.1")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            lib.join("libfifo.so.1"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        std::fs::create_dir(lib.join("libdir.so.1")).unwrap();
        for n in ["libgone.so.1", "libfifo.so.1", "libdir.so.1"] {
            assert_eq!(looks.kind(n).unwrap(), Some(FileKind::File), "{n}");
            assert!(dir.open_regular(n).unwrap().is_none(), "{n}");
            assert!(library_file(&mut looks, n, None).unwrap().is_none(), "{n}");
        }
        assert!(looks.stat.is_empty(), "{:?}", looks.stat);
    }
}
