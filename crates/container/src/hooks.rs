//! The `createContainer` hooks our CDI specs declare (`nvidia-cdi-hook
//! update-ldcache | create-symlinks | chmod | enable-cuda-compat`), done
//! natively on a [`Root`].
//!
//! Every file access goes through [`Root`], so it stays inside the
//! container root whatever the image's symlinks say. Nothing from the image
//! is executed: the loader cache is written with `gpuctk-ldcache`, not by
//! an `ldconfig`. Nothing reads the environment.
//!
//! When things are unclear these functions decide as follows:
//! * `update_ldcache` merges into the image's cache (it does not rebuild it
//!   from the image's configuration as ldconfig would); per soname and ABI,
//!   a compat directory beats the given folders, an earlier folder beats a
//!   later one, and all of them beat the image's entries.
//! * Missing folders are skipped with a note; a damaged image cache is an
//!   error (we would otherwise drop every library of the image).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::path::PathBuf;

use gpuctk_ldcache::{Cache, Entry};

use crate::elf::{self, ElfError};
use crate::root::{FileKind, LinkOutcome, Root, RootError};

pub use gpuctk_core::ops::{DEFAULT_COMPAT_ROOT, LD_SO_CACHE, LD_SO_CONF, LD_SO_CONF_D};

/// The drop-in listing the folders [`update_ldcache`] added.
pub const GPUCTK_CONF: &str = "/etc/ld.so.conf.d/00-gpuctk.conf";
/// Name prefix of the drop-ins [`enable_cuda_compat`] writes.
pub const COMPAT_CONF_PREFIX: &str = "00-compat-";
/// The ELF section holding the compat library's forward-compat metadata.
pub const CUDA_FWD_COMPAT_SECTION: &str = ".note.cuda.fwd_compatibility";
/// The owner of that note.
pub const CUDA_NOTE_OWNER: &str = "NVIDIA Corporation";
/// The generator string written into a cache that had none.
pub const GENERATOR: &str = concat!("gpuctk ", env!("CARGO_PKG_VERSION"));

// Caps on what the image controls, so that no image can slow a container start (issue 8).
// Each is far above what real images hold; past one, the input is skipped with a note (or, for
// the cache, refused with an error that names it), never read in full.

/// Largest image cache we read (530 libraries make 34 KiB; 1 MiB holds about 16,000).
pub const MAX_CACHE: u64 = 1 << 20;
/// Largest loader configuration file we read (real ones are a few lines).
pub const MAX_CONF: u64 = 64 << 10;
/// Most `*.conf` files of `/etc/ld.so.conf.d` we read.
pub const MAX_CONF_FILES: usize = 256;
/// Most directories we take from all the `00-compat-*.conf` files together (NVIDIA writes one).
pub const MAX_COMPAT_DIRS: usize = 4;
/// Most entries in a library folder we scan (a Debian multiarch folder holds about 1,100).
pub const MAX_DIR_ENTRIES: usize = 8 << 10;
/// Most entries of a folder over [`MAX_DIR_ENTRIES`] we read to find the libraries mounted into
/// it, which are entered however full the folder is (each costs a `getdents` entry and, for a
/// library name, one `statx`).
pub const MAX_DIR_SCAN: usize = 256 << 10;
/// Most `lib*.so*` files in one folder we open and read (each costs a few microseconds).
pub const MAX_CANDIDATES: usize = 4 << 10;
/// Most library symlinks in one folder that lead out of it we follow: each is a full in-root
/// resolution, which an image can make cost up to 40 links of 4 KiB for the kernel to walk
/// (milliseconds). Links to a name in the same folder (`libfoo.so.1 -> libfoo.so.1.2`, most of
/// them) cost one lookup each and are not counted.
pub const MAX_FAR_LINKS: usize = 256;
/// Most entries in a compat directory we scan (`/usr/local/cuda/compat` holds about 15).
pub const MAX_COMPAT_DIR_ENTRIES: usize = 256;
/// Always searched by glibc's loader, never worth listing.
const TRUSTED_DIRS: &[&str] = &["/lib", "/usr/lib"];

/// Why a hook failed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// A file operation inside the root failed (the error names the path).
    #[error(transparent)]
    Root(#[from] RootError),
    /// The image's `/etc/ld.so.cache` cannot be parsed.
    #[error(
        "/etc/ld.so.cache in the container (root {}): the image's loader cache is damaged: \
         {source}; rebuild it in the image (ldconfig) or remove it",
        root.display()
    )]
    CorruptCache {
        /// The container root.
        root: PathBuf,
        /// What is wrong with it.
        #[source]
        source: gpuctk_ldcache::Error,
    },
    /// An operation's value is malformed (a `--link` that is not `TARGET::LINK`).
    #[error(transparent)]
    Op(#[from] gpuctk_core::OpError),
    /// A folder or path is not container-absolute.
    #[error("{what} {path:?}: must be an absolute path inside the container")]
    NotAbsolute {
        /// Which argument.
        what: &'static str,
        /// The value.
        path: String,
    },
    /// A path to chmod does not exist.
    #[error("chmod: {path} does not exist in the container (root {})", root.display())]
    ChmodMissing {
        /// The container root.
        root: PathBuf,
        /// The container path.
        path: String,
    },
    /// A chmod mode has bits beyond `0o777` (setuid, setgid, sticky or more).
    #[error("chmod: mode {mode:o} is not a plain permission mode (at most 777 octal: setuid, setgid and sticky bits are never set)")]
    BadMode {
        /// The mode.
        mode: u32,
    },
    /// An operation that is a mount into the live container was run on a root.
    #[error("{0}: a mount into the created container: run it as its hook, or as a mount of the delivery")]
    NeedsLiveContainer(&'static str),
    /// A driver guard failed.
    #[error(transparent)]
    Guard(#[from] crate::guard::GuardError),
    /// A chmod path is not one of the device paths we inject.
    #[error("chmod: {path} resolves to {resolved} ({kind}) in the container (root {}): only device nodes and directories under /dev are changed", root.display())]
    ChmodRefused {
        /// The container root.
        root: PathBuf,
        /// The container path.
        path: String,
        /// What it resolved to.
        resolved: String,
        /// Its kind.
        kind: FileKind,
    },
}

// ---------------------------------------------------------------- update-ldcache

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
/// path, and its ELF is read from the host file.
#[derive(Debug, Default)]
pub struct Pending {
    by_dir: BTreeMap<String, Vec<(String, std::fs::File)>>,
    /// The minors of the `/dev/nvidiaN` nodes the runtime will make, when the caller knows
    /// them (the shim, from the spec): `None` means read the container's `/dev`.
    gpu_minors: Option<Vec<u32>>,
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
        if let Some((dir, name)) = container_path.rsplit_once('/') {
            if is_plain_name(name) {
                let dir = if dir.is_empty() { "/" } else { dir };
                self.by_dir
                    .entry(dir.trim_end_matches('/').to_string())
                    .or_default()
                    .push((name.to_string(), file));
            }
        }
    }

    fn in_dir(&self, dir: &str) -> &[(String, std::fs::File)] {
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

    let mut cache = match root.read_to_vec(LD_SO_CACHE, MAX_CACHE) {
        // What a power cut can leave of a cache renamed into place unsynced; the loader ignores
        // it too. Start afresh rather than refuse the container forever.
        Ok(bytes) if bytes.is_empty() => {
            report
                .notes
                .push(format!("{LD_SO_CACHE}: empty in the image; starting empty"));
            Cache::new()
        }
        Ok(bytes) => gpuctk_ldcache::parse(&bytes).map_err(|source| HookError::CorruptCache {
            root: root.host_path().to_path_buf(),
            source,
        })?,
        Err(e) if e.is_not_found() => {
            report
                .notes
                .push(format!("{LD_SO_CACHE}: none in the image; starting empty"));
            Cache::new()
        }
        // A FIFO, socket or device where the cache belongs, or a link through a magic link
        // (`/proc/self/root/...`): never read; replaced by the new cache, as ldconfig's
        // rename would replace it.
        Err(e) if unusable(&e) => {
            report
                .notes
                .push(format!("{e}; not read, replaced by a new cache"));
            Cache::new()
        }
        Err(e) => return Err(e.into()),
    };

    let conf_d = read_conf_d(root, &mut report.notes)?;
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
        let Some((found, whole)) = scan_dir(root, &dir, cap, pending.in_dir(&dir), &mut report)?
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
    // An `/etc` the image leads through a magic link cannot be written in-root: noted, and
    // the container keeps the loader's default search path.
    let written = root
        .mkdir_all("/etc", 0o755)
        .and_then(|()| root.write_file_atomic(LD_SO_CACHE, &cache.to_bytes(), 0o644));
    match written {
        Ok(()) => {}
        Err(e) if unusable(&e) => {
            report.notes.push(format!("{e}; no cache written"));
            return Ok(report);
        }
        Err(e) => return Err(e.into()),
    }
    match root.try_symlink_metadata(LD_SO_CONF) {
        Ok(None) => {
            root.write_file_atomic(LD_SO_CONF, b"include /etc/ld.so.conf.d/*.conf\n", 0o644)?;
            report.created_ld_so_conf = true;
        }
        Ok(Some(_)) => {}
        Err(e) if unusable(&e) => report.notes.push(format!("{e}; left alone")),
        Err(e) => return Err(e.into()),
    }
    let gpuctk_name = GPUCTK_CONF.rsplit('/').next().unwrap_or_default();
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
            .mkdir_all(LD_SO_CONF_D, 0o755)
            .and_then(|()| root.write_file_atomic(GPUCTK_CONF, text.as_bytes(), 0o644));
        match written {
            Ok(()) => report.conf_file = Some(GPUCTK_CONF.to_string()),
            Err(e) if unusable(&e) => report.notes.push(format!("{e}; drop-in not written")),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(report)
}

/// `/dir` without trailing slashes; relative paths refused.
fn normalize_dir(dir: &str, what: &'static str) -> Result<String, HookError> {
    if !dir.starts_with('/') || dir.contains('\0') {
        return Err(HookError::NotAbsolute {
            what,
            path: dir.to_string(),
        });
    }
    let t = dir.trim_end_matches('/');
    Ok(if t.is_empty() { "/".into() } else { t.into() })
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The `*.conf` files of `/etc/ld.so.conf.d` (sorted by name) with the
/// directories they list (comments, blank and `include` lines dropped).
fn read_conf_d(
    root: &Root,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<String>)>, HookError> {
    let names = match root.read_dir_names_limited(LD_SO_CONF_D, MAX_DIR_ENTRIES) {
        Ok(n) => n,
        Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) => return Ok(Vec::new()),
        Err(e) if unusable(&e) => {
            notes.push(format!("{e}; not read"));
            return Ok(Vec::new());
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    let confs: Vec<String> = names.into_iter().filter(|n| n.ends_with(".conf")).collect();
    if confs.len() > MAX_CONF_FILES {
        notes.push(format!(
            "{LD_SO_CONF_D}: {} *.conf files, only the first {MAX_CONF_FILES} read",
            confs.len()
        ));
    }
    for name in confs.into_iter().take(MAX_CONF_FILES) {
        let path = join(LD_SO_CONF_D, &name);
        let bytes = match root.read_to_vec(&path, MAX_CONF) {
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

/// A path the image made unusable on purpose: something other than a regular file where one
/// belongs, a path whose symlinks go past the walk's budget, or a symlink through a magic link (`/proc/self/root/...`, refused by
/// `RESOLVE_NO_MAGICLINKS` with ELOOP). Such input is skipped with a note, never followed; the
/// container still gets its GPUs.
fn unusable(e: &RootError) -> bool {
    matches!(
        e,
        RootError::NotRegular { .. }
            | RootError::Loop { .. }
            | RootError::TooManyComponents { .. }
            | RootError::TooLarge { .. }
    ) || e.errno() == Some(libc::ELOOP)
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
fn scan_dir(
    root: &Root,
    dir: &str,
    cap: usize,
    pending: &[(String, std::fs::File)],
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
    let names = match opened.names(cap) {
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
            mounted
        }
        Err(e) => return Err(e.into()),
    };
    let shadowed: HashSet<&str> = pending.iter().map(|(n, _)| n.as_str()).collect();
    let mut names: Vec<String> = names
        .into_iter()
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
    let mut files: Vec<(String, bool, std::fs::File)> = Vec::with_capacity(names.len());
    for (name, file) in pending.iter().filter(|(n, _)| is_dso_name(n)) {
        let file = file
            .try_clone()
            .map_err(|e| root.io_err(&join(dir, name), "dup", e))?;
        files.push((name.clone(), false, file));
    }
    let mut far = 0usize;
    for name in names {
        let path = join(dir, &name);
        // One component from the open directory: the cost per file an image can multiply.
        let Some(lmeta) = opened.lstat(&name)? else {
            continue;
        };
        let (is_link, file) = match lmeta.kind {
            FileKind::File => match opened.open_file(&name, &lmeta)? {
                Some(f) => (false, f),
                None => continue, // changed under us: not a library we can trust
            },
            FileKind::Symlink => match near_link(&opened, &name)? {
                Near::File(f) => (true, f),
                Near::None => continue,
                Near::Far => {
                    far += 1;
                    if far > MAX_FAR_LINKS {
                        continue;
                    }
                    match root.open_read(&path) {
                        Ok(f) => (true, f),
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
        let info = match elf::library_info(&file) {
            Ok(i) => i,
            Err(ElfError::NotElf) => continue, // linker scripts such as libc.so
            Err(e) => {
                report.notes.push(format!("{path}: skipped: {e}"));
                continue;
            }
        };
        let Some(soname) = info.soname.clone().filter(|_| info.is_shared_library()) else {
            continue;
        };
        if !is_plain_name(&soname) {
            report.notes.push(format!(
                "{path}: skipped: soname {soname:?} is not a file name"
            ));
            continue;
        }
        let Some(flags) = info.cache_flags() else {
            report.notes.push(format!(
                "{path}: skipped: ELF machine {} is not supported",
                info.header.machine
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
            // The folder is open already: one lstat, no walk.
            match opened.lstat(&soname)? {
                None => {}
                Some(m) if m.kind == FileKind::Symlink => {}
                Some(m) => {
                    report.notes.push(format!(
                        "{link_path}: a {} that is not a library with soname {soname}; left alone, no entry",
                        m.kind
                    ));
                    continue;
                }
            }
            if root.symlink_force(&best.name, &link_path)? != LinkOutcome::Unchanged {
                report.links.push((link_path.clone(), best.name.clone()));
            }
        }
        entries.push(Entry::new(soname, link_path, flags));
    }
    Ok(Some((entries, whole)))
}

/// Where a library symlink in an open folder leads, followed through names in that folder only.
enum Near {
    /// A regular file of the folder.
    File(std::fs::File),
    /// Nothing usable: dangling, or not a regular file.
    None,
    /// Out of the folder (a target with a `/`), or a chain longer than the kernel follows.
    Far,
}

/// Follows symlink `name` of `dir` while its target is a plain name in `dir`, one lookup each.
fn near_link(dir: &crate::root::Dir<'_>, name: &str) -> Result<Near, HookError> {
    let mut cur = name.to_string();
    for _ in 0..crate::root::MAX_SYMLINKS {
        let Some(target) = dir.read_link(&cur)? else {
            return Ok(Near::None);
        };
        let Some(target) = target.to_str().filter(|t| is_plain_name(t)) else {
            return Ok(Near::Far);
        };
        let Some(m) = dir.lstat(target)? else {
            return Ok(Near::None);
        };
        match m.kind {
            FileKind::File => {
                return Ok(match dir.open_file(target, &m)? {
                    Some(f) => Near::File(f),
                    None => Near::None,
                })
            }
            FileKind::Symlink => cur = target.to_string(),
            _ => return Ok(Near::None),
        }
    }
    Ok(Near::Far)
}

// ---------------------------------------------------------------- create-symlinks

pub use gpuctk_core::ops::Link;

/// `ln -sf` for each link inside the root: parents created (0755), links
/// already pointing at their target left alone, files and other links
/// replaced, directories refused.
pub fn create_symlinks(root: &Root, links: &[Link]) -> Result<(), HookError> {
    // Most links share one folder: it is walked and made once (nothing else runs in the root
    // meanwhile; `symlink_force` still opens it in-root for each link).
    let mut made = std::collections::HashSet::new();
    for l in links {
        let (parent, _) = crate::root::split_parent(&l.link)?;
        if !made.contains(&parent) {
            root.mkdir_all(&parent, 0o755)?;
            made.insert(parent);
        }
        root.symlink_force(&l.target, &l.link)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- chmod

/// `chmod mode` each path inside the root (symlinks followed in-root). A
/// missing path is an error; EPERM is ignored, as NVIDIA's hook does (a
/// read-only bind mount or a user namespace may forbid it).
///
/// NVIDIA's specs use this hook for the device directories that the runtime
/// creates for injected nodes (`/dev/dri`), so it changes nothing else:
/// only permission bits (no setuid, setgid or sticky bit), and only device
/// nodes and directories strictly under the container's `/dev`. Anything
/// else (an image's `/etc/shadow`, a system directory reached through a
/// confused root) is refused with an error.
pub fn chmod(root: &Root, mode: u32, paths: &[String]) -> Result<(), HookError> {
    if mode & !0o777 != 0 {
        return Err(HookError::BadMode { mode });
    }
    for p in paths {
        let missing = || HookError::ChmodMissing {
            root: root.host_path().to_path_buf(),
            path: p.clone(),
        };
        let (resolved, md) = match root.canonicalize(p).and_then(|c| {
            let md = root.metadata(&c)?;
            Ok((c, md))
        }) {
            Ok(x) => x,
            Err(e) if e.is_not_found() => return Err(missing()),
            Err(e) => return Err(e.into()),
        };
        let under_dev = resolved.starts_with("/dev/") && resolved.len() > "/dev/".len();
        if !under_dev || !matches!(md.kind, FileKind::CharDevice | FileKind::Dir) {
            return Err(HookError::ChmodRefused {
                root: root.host_path().to_path_buf(),
                path: p.clone(),
                resolved,
                kind: md.kind,
            });
        }
        match root.chmod(&resolved, mode) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {
                return Err(HookError::ChmodMissing {
                    root: root.host_path().to_path_buf(),
                    path: p.clone(),
                })
            }
            Err(e) if e.errno() == Some(libc::EPERM) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- enable-cuda-compat

/// What [`enable_cuda_compat`] decided, and why (for debug logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompatOutcome {
    /// Neither a host driver nor a host CUDA version was given.
    NoVersionGiven,
    /// The compat root does not exist (or is not a directory).
    NoCompatDir {
        /// The compat root looked at.
        compat_root: String,
    },
    /// Not exactly one `libcuda.so.*.*` in the compat root.
    NoSingleLibrary {
        /// The compat root.
        compat_root: String,
        /// The matches found (zero or several).
        found: Vec<String>,
    },
    /// A compat library was found but is not to be used.
    NotUsed {
        /// Its container path.
        library: String,
        /// Its version (the file suffix).
        compat_version: String,
        /// Why not.
        reason: String,
    },
    /// The compat library is to be used; the drop-in was written.
    Enabled {
        /// Its container path.
        library: String,
        /// Its version.
        compat_version: String,
        /// The compat root resolved inside the container (the drop-in's content).
        compat_dir: String,
        /// The drop-in written.
        conf_file: String,
        /// Why.
        reason: String,
    },
}

impl CompatOutcome {
    /// Whether the compat libraries were enabled.
    pub fn enabled(&self) -> bool {
        matches!(self, CompatOutcome::Enabled { .. })
    }
}

impl fmt::Display for CompatOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompatOutcome::NoVersionGiven => {
                f.write_str("CUDA compat: no host driver or CUDA version given; nothing to do")
            }
            CompatOutcome::NoCompatDir { compat_root } => {
                write!(f, "CUDA compat: {compat_root} does not exist in the container; nothing to do")
            }
            CompatOutcome::NoSingleLibrary { compat_root, found } => write!(
                f,
                "CUDA compat: expected exactly one libcuda.so.*.* in {compat_root}, found {} ({}); not used",
                found.len(),
                found.join(", ")
            ),
            CompatOutcome::NotUsed {
                library, reason, ..
            } => write!(f, "CUDA compat: {library} not used: {reason}"),
            CompatOutcome::Enabled {
                library,
                compat_dir,
                conf_file,
                reason,
                ..
            } => write!(
                f,
                "CUDA compat: using {library}: {reason}; wrote {compat_dir} to {conf_file}"
            ),
        }
    }
}

/// A dotted version as numbers (`575.57.08` → `[575, 57, 8]`).
fn parse_version(s: &str) -> Option<Vec<u64>> {
    let parts: Option<Vec<u64>> = s
        .trim()
        .split('.')
        .map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                p.parse().ok()
            }
        })
        .collect();
    parts.filter(|p| !p.is_empty())
}

/// Component-wise numeric comparison, missing components counting as 0.
fn cmp_versions(a: &[u64], b: &[u64]) -> Ordering {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            a.get(i)
                .copied()
                .unwrap_or(0)
                .cmp(&b.get(i).copied().unwrap_or(0))
        })
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Why [`decide`] leaves the compat libraries out (the `reason` of [`CompatOutcome::NotUsed`]).
#[derive(Debug, thiserror::Error)]
enum CompatSkip {
    #[error("host driver branch {host_major} is not among the branches the compat library supports ({branches:?})")]
    BranchNotSupported { host_major: u64, branches: Vec<u64> },
    #[error("compat {compat} is not newer than host driver {driver}")]
    NotNewerThanDriver { compat: String, driver: String },
    #[error("cannot compare CUDA versions (compat note {note:?}, host {host:?})")]
    CudaNotComparable { note: Option<String>, host: String },
    #[error("compat CUDA {note} is not newer than host CUDA {host}")]
    CudaNotNewer { note: String, host: String },
    #[error("cannot compare: host driver version {driver:?} or compat version {compat:?} does not parse")]
    Unparsable {
        driver: Option<String>,
        compat: String,
    },
    #[error("the compat library has no forward-compat note and a host CUDA version was given")]
    NoNoteButHostCuda,
    #[error("no forward-compat note; host driver major {driver} is not older than compat major {compat}")]
    MajorNotOlder { driver: u64, compat: u64 },
}

/// The decision of NVIDIA's `enable-cuda-compat` (facts §5.1 step 4), pure: why the compat
/// libraries are used, or why not. `note` is the JSON payload of the forward-compat note, when
/// present.
fn decide(
    host_driver: Option<&str>,
    host_cuda: Option<&str>,
    compat_version: &str,
    note: Option<&serde_json::Value>,
) -> Result<String, CompatSkip> {
    let unparsable = || CompatSkip::Unparsable {
        driver: host_driver.map(str::to_string),
        compat: compat_version.to_string(),
    };
    let compat = parse_version(compat_version);
    let driver = host_driver.and_then(parse_version);
    match note {
        Some(note) => {
            if let (Some(driver), Some(compat)) = (&driver, &compat) {
                let host_major = driver[0];
                let branches: Vec<u64> = note_field(note, "Driver")
                    .and_then(|d| d.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| {
                                v.as_u64()
                                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if !branches.contains(&host_major) {
                    return Err(CompatSkip::BranchNotSupported {
                        host_major,
                        branches,
                    });
                }
                return match cmp_versions(compat, driver) {
                    Ordering::Greater => Ok(format!(
                        "compat {compat_version} is newer than host driver {} and supports branch {host_major}",
                        host_driver.unwrap_or_default()
                    )),
                    _ => Err(CompatSkip::NotNewerThanDriver {
                        compat: compat_version.to_string(),
                        driver: host_driver.unwrap_or_default().to_string(),
                    }),
                };
            }
            if let Some(host_cuda) = host_cuda {
                let note_cuda = note_field(note, "CUDA Version").and_then(|v| v.as_str());
                let (Some(note_v), Some(host_v)) =
                    (note_cuda.and_then(parse_version), parse_version(host_cuda))
                else {
                    return Err(CompatSkip::CudaNotComparable {
                        note: note_cuda.map(str::to_string),
                        host: host_cuda.to_string(),
                    });
                };
                return if cmp_versions(&note_v, &host_v).is_gt() {
                    Ok(format!(
                        "compat CUDA {} is newer than host CUDA {host_cuda}",
                        note_cuda.unwrap_or_default()
                    ))
                } else {
                    Err(CompatSkip::CudaNotNewer {
                        note: note_cuda.unwrap_or_default().to_string(),
                        host: host_cuda.to_string(),
                    })
                };
            }
            Err(unparsable())
        }
        None => {
            if host_cuda.is_some() {
                return Err(CompatSkip::NoNoteButHostCuda);
            }
            let (Some(driver), Some(compat)) = (driver, compat) else {
                return Err(unparsable());
            };
            if driver[0] < compat[0] {
                Ok(format!(
                    "no forward-compat note; host driver major {} is older than compat major {}",
                    driver[0], compat[0]
                ))
            } else {
                Err(CompatSkip::MajorNotOlder {
                    driver: driver[0],
                    compat: compat[0],
                })
            }
        }
    }
}

/// A field of the forward-compat note. Real libraries write `"driver"` and `"CUDA version"`
/// where older ones wrote `"Driver"` and `"CUDA Version"`; NVIDIA's decoder (Go's
/// `encoding/json`) matches keys without regard to ASCII case, and so do we. An exact match wins.
fn note_field<'a>(note: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    let obj = note.as_object()?;
    obj.get(key).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

/// 64-bit FNV-1a, for a stable drop-in name per compat directory.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A compat library [`judge_cuda_compat`] found fit to use on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatUse {
    /// Its container path.
    pub library: String,
    /// Its version (the file suffix), e.g. `575.57.08`.
    pub compat_version: String,
    /// The compat root looked at, normalized (not resolved).
    pub compat_root: String,
    /// The `CUDA Version` of its forward-compat note, when it has one.
    pub note_cuda_version: Option<String>,
    /// Why it is used.
    pub reason: String,
}

/// What [`judge_cuda_compat`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompatJudgement {
    /// The compat library is to be used.
    Use(CompatUse),
    /// It is not (or there is none), and why.
    Skip(CompatOutcome),
}

/// Decides, as NVIDIA's `enable-cuda-compat` does, whether the container's
/// CUDA forward-compat libraries in `compat_root` should be used on this host,
/// without writing anything into the container (what [`enable_cuda_compat`]
/// and `gpuctk doctor` both ask).
pub fn judge_cuda_compat(
    root: &Root,
    host_driver_version: Option<&str>,
    host_cuda_version: Option<&str>,
    compat_root: &str,
) -> Result<CompatJudgement, HookError> {
    use CompatJudgement::Skip;
    let host_driver_version = host_driver_version.filter(|v| !v.is_empty());
    let host_cuda_version = host_cuda_version.filter(|v| !v.is_empty());
    if host_driver_version.is_none() && host_cuda_version.is_none() {
        return Ok(Skip(CompatOutcome::NoVersionGiven));
    }
    // NVIDIA's hook takes a relative root as relative to the container root.
    let compat_root = if compat_root.starts_with('/') || compat_root.is_empty() {
        normalize_dir(compat_root, "--cuda-compat-container-root")?
    } else {
        normalize_dir(&format!("/{compat_root}"), "--cuda-compat-container-root")?
    };
    let no_dir = || CompatOutcome::NoCompatDir {
        compat_root: compat_root.clone(),
    };
    let names = match root.read_dir_names_limited(&compat_root, MAX_DIR_ENTRIES) {
        Ok(n) => n,
        Err(e) if e.is_not_found() || e.errno() == Some(libc::ENOTDIR) || unusable(&e) => {
            return Ok(Skip(no_dir()))
        }
        Err(e) => return Err(e.into()),
    };
    let found: Vec<String> = names
        .into_iter()
        .filter(|n| {
            n.strip_prefix("libcuda.so.")
                .is_some_and(|rest| rest.contains('.'))
        })
        .collect();
    if found.len() != 1 {
        return Ok(Skip(CompatOutcome::NoSingleLibrary { compat_root, found }));
    }
    let name = &found[0];
    let compat_version = name["libcuda.so.".len()..].to_string();
    let library = join(&compat_root, name);
    let not_used = |reason: String| CompatOutcome::NotUsed {
        library: library.clone(),
        compat_version: compat_version.clone(),
        reason,
    };

    let file = match root.open_read(&library) {
        Ok(f) => f,
        Err(e) if e.is_not_found() || unusable(&e) => {
            return Ok(Skip(not_used(format!("cannot open it: {e}"))))
        }
        Err(e) => return Err(e.into()),
    };
    // When the library cannot be read as ELF, or its note is not JSON, NVIDIA falls back to the
    // rule for libraries without a note (driver majors from the file names); so do we, noting why.
    let mut warning = None;
    let notes = match elf::note_section(&file, CUDA_FWD_COMPAT_SECTION) {
        Ok(n) => n,
        Err(e) => {
            warning = Some(format!("{library} is not a readable ELF file ({e})"));
            None
        }
    };
    let note = notes
        .unwrap_or_default()
        .into_iter()
        .find(|n| n.owner == CUDA_NOTE_OWNER);
    let payload = match note {
        None => None,
        Some(n) => {
            let end = n.desc.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            match serde_json::from_slice::<serde_json::Value>(&n.desc[..end]) {
                Ok(v) if v.is_object() => Some(v),
                Ok(_) | Err(_) => {
                    warning = Some(format!(
                        "the {CUDA_FWD_COMPAT_SECTION} note of {library} is not a JSON object"
                    ));
                    None
                }
            }
        }
    };
    let with_warning = |reason: String| match &warning {
        Some(w) => format!("{w}; judged by the driver majors in the file names: {reason}"),
        None => reason,
    };
    let reason = match decide(
        host_driver_version,
        host_cuda_version,
        &compat_version,
        payload.as_ref(),
    ) {
        Ok(reason) => with_warning(reason),
        Err(reason) => return Ok(Skip(not_used(with_warning(reason.to_string())))),
    };

    let note_cuda_version = payload
        .as_ref()
        .and_then(|p| note_field(p, "CUDA Version"))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Ok(CompatJudgement::Use(CompatUse {
        library,
        compat_version,
        compat_root,
        note_cuda_version,
        reason,
    }))
}

/// Decides as [`judge_cuda_compat`] whether the container's CUDA
/// forward-compat libraries in `compat_root` (default
/// [`DEFAULT_COMPAT_ROOT`]) should be used on this host, and if so writes
/// `/etc/ld.so.conf.d/00-compat-<hash of the directory>.conf` (0644)
/// holding the compat directory resolved inside the container, for
/// [`update_ldcache`] to pick up.
pub fn enable_cuda_compat(
    root: &Root,
    host_driver_version: Option<&str>,
    host_cuda_version: Option<&str>,
    compat_root: &str,
) -> Result<CompatOutcome, HookError> {
    let CompatUse {
        library,
        compat_version,
        compat_root,
        reason,
        ..
    } = match judge_cuda_compat(root, host_driver_version, host_cuda_version, compat_root)? {
        CompatJudgement::Use(u) => u,
        CompatJudgement::Skip(outcome) => return Ok(outcome),
    };
    let compat_dir = root.canonicalize(&compat_root)?;
    let conf_file = format!(
        "{LD_SO_CONF_D}/{COMPAT_CONF_PREFIX}{:016x}.conf",
        fnv1a64(compat_dir.as_bytes())
    );
    root.mkdir_all(LD_SO_CONF_D, 0o755)?;
    root.write_file_atomic(&conf_file, format!("{compat_dir}\n").as_bytes(), 0o644)?;
    Ok(CompatOutcome::Enabled {
        library,
        compat_version,
        compat_dir,
        conf_file,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_compare_numerically() {
        let v = |s| parse_version(s).unwrap();
        assert_eq!(v("575.57.08"), vec![575, 57, 8]);
        assert!(cmp_versions(&v("575.57.08"), &v("570.124.06")).is_gt());
        assert!(cmp_versions(&v("570.9"), &v("570.10")).is_lt());
        assert!(cmp_versions(&v("12.10"), &v("12.9")).is_gt());
        assert!(cmp_versions(&v("570.124"), &v("570.124.0")).is_eq());
        assert_eq!(parse_version("570.x"), None);
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("1..2"), None);
    }

    #[test]
    fn decision_with_note() {
        let note = json!({"Format":1,"CUDA Version":"12.9","Driver":[535,550,570],"Device":[]});
        assert!(decide(Some("570.124.06"), None, "575.57.08", Some(&note)).is_ok());
        // Branch not listed.
        assert!(decide(Some("560.35.03"), None, "575.57.08", Some(&note)).is_err());
        // Compat older than host.
        let new_host = json!({"Driver":[580]});
        assert!(decide(Some("580.65.06"), None, "575.57.08", Some(&new_host)).is_err());
        // Same version is not newer.
        let same = json!({"Driver":[575]});
        assert!(decide(Some("575.57.08"), None, "575.57.08", Some(&same)).is_err());
        // String branches accepted.
        let strs = json!({"Driver":["570"]});
        assert!(decide(Some("570.1"), None, "575.57.08", Some(&strs)).is_ok());
        // Tegra path: CUDA versions.
        assert!(decide(None, Some("12.6"), "575.57.08", Some(&note)).is_ok());
        assert!(decide(None, Some("12.9"), "575.57.08", Some(&note)).is_err());
        assert!(decide(None, Some("13.0"), "575.57.08", Some(&note)).is_err());
    }

    #[test]
    fn decision_without_note() {
        assert!(decide(Some("560.35.03"), None, "575.57.08", None).is_ok());
        assert!(decide(Some("575.10"), None, "575.57.08", None).is_err());
        assert!(decide(Some("580.1"), None, "575.57.08", None).is_err());
        assert!(decide(Some("560.35.03"), Some("12.6"), "575.57.08", None).is_err());
        assert!(decide(Some("bogus"), None, "575.57.08", None).is_err());
        assert!(decide(Some("560.1"), None, "x.y", None).is_err());
    }

    #[test]
    fn link_parse() {
        let l = Link::parse("libcuda.so.1::/usr/lib64/libcuda.so").unwrap();
        assert_eq!(l.target, "libcuda.so.1");
        assert_eq!(l.link, "/usr/lib64/libcuda.so");
        let l: Link = "../lib/x.so::/a/b::c".parse().unwrap();
        assert_eq!(
            (l.target.as_str(), l.link.as_str()),
            ("../lib/x.so", "/a/b::c")
        );
        for bad in ["", "abc", "::/x", "a::", "a::rel/path", "a:/x"] {
            let e = Link::parse(bad).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(msg.contains("TARGET::LINK"), "{msg}");
        }
    }

    #[test]
    fn stable_conf_name() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a64(b"/a"), fnv1a64(b"/b"));
    }
}
