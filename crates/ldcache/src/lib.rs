//! Reader and writer of glibc's `/etc/ld.so.cache`.
//!
//! gpuctk finds the host's driver libraries by reading the driver root's
//! `etc/ld.so.cache` (rather than walking library folders), and its container
//! hook rewrites a container's cache natively instead of running the image's
//! `ldconfig` on the host. Both need the exact glibc format:
//!
//! * [`parse`] turns bytes into a [`Cache`] (pure, bounded, no panics on any
//!   input, fit for fuzzing);
//! * [`Cache::to_bytes`] writes what glibc ≥ 2.33 `ldconfig` writes: new
//!   format only, entries in the order the dynamic loader's binary search
//!   needs ([`order`]), a deduplicated string table and the extension
//!   directory (generator string, glibc-hwcaps names). A cache `ldconfig`
//!   wrote comes back byte for byte.
//!
//! The only file access is the [`read`] convenience.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod flags;
pub mod order;
mod parse;
mod write;

use std::path::{Path, PathBuf};

pub use flags::{Arch, NATIVE_FLAGS};
pub use order::libcmp;
pub use parse::{parse, Error, StringRef};

/// One library of the cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Type and ABI, e.g. `0x0303` (libc6, x86-64); see [`flags`].
    pub flags: i32,
    /// The soname the loader looks up, e.g. `libcuda.so.1`.
    pub key: String,
    /// The path it resolves to, e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.1`.
    pub value: String,
    /// Minimum kernel version from the ELF ABI note (0: none).
    pub osversion: u32,
    /// Legacy hwcap bits, or a glibc-hwcaps reference (bit 62 set, index in
    /// the low 32 bits; see [`flags::hwcap_extension_index`]).
    pub hwcap: u64,
}

impl Entry {
    /// A plain entry (no hwcap, no OS version) for `key` at `value`.
    pub fn new(key: impl Into<String>, value: impl Into<String>, flags: i32) -> Entry {
        Entry {
            flags,
            key: key.into(),
            value: value.into(),
            osversion: 0,
            hwcap: 0,
        }
    }

    /// The ABI byte of [`Entry::flags`].
    pub fn arch(&self) -> Arch {
        Arch::from_flags(self.flags)
    }

    fn same_arch(&self, arch_flags: i32) -> bool {
        self.flags & flags::FLAG_REQUIRED_MASK == arch_flags & flags::FLAG_REQUIRED_MASK
    }
}

/// Byte order of a written cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian (x86, aarch64, most targets).
    Little,
    /// Big-endian (s390x, big-endian PowerPC, ...).
    Big,
}

impl Endian {
    /// The byte order of the build target, which its loader expects.
    pub const NATIVE: Endian = if cfg!(target_endian = "big") {
        Endian::Big
    } else {
        Endian::Little
    };
}

/// The contents of an ld.so.cache.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cache {
    /// The libraries, in file order when parsed; any order when writing
    /// ([`Cache::to_bytes`] sorts). Entries that tie in glibc's order keep
    /// their relative order, and the loader takes the first that fits, so
    /// among duplicates of one soname the earlier wins.
    pub entries: Vec<Entry>,
    /// Extension tag 0: who wrote the cache (`ldconfig -p` prints it).
    /// Written when `Some`.
    pub generator: Option<String>,
    /// Extension tag 1: names of `glibc-hwcaps` subdirectories (e.g.
    /// `x86-64-v3`), indexed by the low 32 bits of an extension `hwcap`.
    /// Written sorted (the loader requires it), renumbering entries if the
    /// given list is not.
    pub hwcaps_subdirs: Vec<String>,
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Cache {
        Cache::default()
    }

    /// Serializes in the build target's byte order; see
    /// [`Cache::try_to_bytes`].
    ///
    /// # Panics
    ///
    /// If the cache does not fit the format's 32-bit offsets (over 4 GiB).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.try_to_bytes(Endian::NATIVE)
            .expect("ld.so.cache larger than the format's 4 GiB limit")
    }

    /// Serializes as glibc ≥ 2.33 `ldconfig` does (new format only): entries
    /// sorted into glibc's order whatever their order here, string table
    /// deduplicated with shared suffixes, extension directory present when
    /// there is a generator or glibc-hwcaps names.
    ///
    /// Strings are written as C sees them: a key or value containing NUL is
    /// cut at the first NUL.
    pub fn try_to_bytes(&self, endian: Endian) -> Result<Vec<u8>, Error> {
        write::write(self, endian)
    }

    /// Sorts [`Cache::entries`] into the order [`Cache::to_bytes`] writes.
    pub fn sort(&mut self) {
        let names: Vec<&[u8]> = self
            .hwcaps_subdirs
            .iter()
            .map(|s| order::c_bytes(s))
            .collect();
        let mut idx: Vec<usize> = (0..self.entries.len()).collect();
        let entries = &self.entries;
        order::stable_sort(&mut idx, |&a, &b| {
            let (ea, eb) = (&entries[a], &entries[b]);
            order::compare(ea, ea.hwcap, eb, eb.hwcap, &names) != std::cmp::Ordering::Greater
        });
        let sorted = idx.iter().map(|&i| self.entries[i].clone()).collect();
        self.entries = sorted;
    }

    /// The entry for `soname` (exact key match) whose ABI byte equals that of
    /// `arch_flags` (pass [`NATIVE_FLAGS`] for this machine's libraries).
    ///
    /// Among several, prefers entries without hwcap (their use depends on the
    /// running CPU) and then the one the loader tries first.
    pub fn lookup(&self, soname: &str, arch_flags: i32) -> Option<&Entry> {
        let names: Vec<&[u8]> = self
            .hwcaps_subdirs
            .iter()
            .map(|s| order::c_bytes(s))
            .collect();
        let mut best: Option<&Entry> = None;
        for e in self
            .entries
            .iter()
            .filter(|e| e.key == soname && e.same_arch(arch_flags))
        {
            best = match best {
                None => Some(e),
                Some(b) => {
                    let better = match ((e.hwcap != 0), (b.hwcap != 0)) {
                        (false, true) => true,
                        (true, false) => false,
                        _ => order::compare(e, e.hwcap, b, b.hwcap, &names).is_lt(),
                    };
                    Some(if better { e } else { b })
                }
            }
        }
        best
    }

    /// The entries whose ABI byte equals that of `arch_flags`, in stored
    /// order.
    pub fn entries_for_arch(&self, arch_flags: i32) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(move |e| e.same_arch(arch_flags))
    }

    /// Adds `entry`, replacing every entry with the same key, flags and hwcap
    /// (so a library from a newly injected folder wins over the old one);
    /// other entries for the same soname (other ABIs, hwcaps) stay.
    pub fn add(&mut self, entry: Entry) {
        let same =
            |e: &Entry| e.key == entry.key && e.flags == entry.flags && e.hwcap == entry.hwcap;
        match self.entries.iter().position(same) {
            Some(first) => {
                let mut i = 0;
                self.entries.retain(|e| {
                    let keep = i <= first || !same(e);
                    i += 1;
                    keep
                });
                self.entries[first] = entry;
            }
            None => self.entries.push(entry),
        }
    }
}

/// Why [`read`] failed; names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid cache.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: Error,
    },
}

/// Reads and parses the cache file at `path`.
pub fn read(path: impl AsRef<Path>) -> Result<Cache, ReadError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).map_err(|source| ReadError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;
