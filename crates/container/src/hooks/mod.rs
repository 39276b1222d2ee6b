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
//!
//! One module per hook (`ldcache`, `links`, `chmod`, `compat`); this one holds the error type,
//! the caps on what the image controls and the path helpers they share.

use std::path::PathBuf;

use crate::root::{FileKind, RootError};

mod chmod;
mod compat;
mod ldcache;
mod links;
mod seen;

pub use chmod::*;
pub use compat::*;
pub use ldcache::*;
pub use links::*;
pub use seen::*;

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

/// 64-bit FNV-1a: a name that stays the same between releases (a drop-in per compat
/// directory, a cache file per configuration), and the digests of what a create found in place
/// ([`SeenLibraries::in_place`]).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
/// Always searched by glibc's loader, never worth listing.
pub(super) const TRUSTED_DIRS: &[&str] = &["/lib", "/usr/lib"];

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

/// `/dir` without trailing slashes; relative paths refused.
pub(super) fn normalize_dir(dir: &str, what: &'static str) -> Result<String, HookError> {
    if !dir.starts_with('/') || dir.contains('\0') {
        return Err(HookError::NotAbsolute {
            what,
            path: dir.to_string(),
        });
    }
    let t = dir.trim_end_matches('/');
    Ok(if t.is_empty() { "/".into() } else { t.into() })
}

pub(super) fn join(dir: &str, name: &str) -> String {
    // Pushed, not `format!`ted: called per library file, where the formatter's machinery cost
    // several times the copy.
    let dir = if dir == "/" { "" } else { dir };
    let mut path = String::with_capacity(dir.len() + 1 + name.len());
    path.push_str(dir);
    path.push('/');
    path.push_str(name);
    path
}

/// A path the image made unusable on purpose: something other than a regular file where one
/// belongs, a path whose symlinks go past the walk's budget, or a symlink through a magic link (`/proc/self/root/...`, refused by
/// `RESOLVE_NO_MAGICLINKS` with ELOOP). Such input is skipped with a note, never followed; the
/// container still gets its GPUs.
pub(super) fn unusable(e: &RootError) -> bool {
    matches!(
        e,
        RootError::NotRegular { .. }
            | RootError::Loop { .. }
            | RootError::TooManyComponents { .. }
            | RootError::TooLarge { .. }
    ) || e.errno() == Some(libc::ELOOP)
}
