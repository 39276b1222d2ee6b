//! Reading cache bytes into a [`Cache`]: pure, bounded, never panics.
//!
//! Three layouts exist (see `sysdeps/generic/dl-cache.h`):
//! * new format only (what glibc ≥ 2.32 ldconfig writes by default),
//! * old libc5 format with the new format hidden in its string area
//!   ("compat", glibc 2.2 – 2.31 default),
//! * old libc5 format only (glibc < 2.2, or `ldconfig -c old`).
//!
//! Every offset read from the file is bounds-checked before use, counts are
//! checked against the file size before anything is allocated, and the total
//! size of decoded strings is capped at a small multiple of the file size so
//! that a hostile file cannot make us allocate (or scan) without bound.

use crate::{Cache, Endian, Entry};

/// Magic of the old libc5 format (11 bytes, followed by one padding byte).
pub(crate) const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
/// Magic + version of the new format (20 bytes).
pub(crate) const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
/// `sizeof (struct cache_file)`: magic, padding, `nlibs`.
pub(crate) const OLD_HEADER_SIZE: u64 = 16;
/// `sizeof (struct file_entry)`.
pub(crate) const OLD_ENTRY_SIZE: u64 = 12;
/// `sizeof (struct cache_file_new)`.
pub(crate) const NEW_HEADER_SIZE: u64 = 48;
/// `sizeof (struct file_entry_new)`.
pub(crate) const NEW_ENTRY_SIZE: u64 = 24;
/// `cache_extension_magic`.
pub(crate) const EXTENSION_MAGIC: u32 = 0xeaa4_2174;
/// `sizeof (struct cache_extension)` (magic, count).
pub(crate) const EXTENSION_HEADER_SIZE: u64 = 8;
/// `sizeof (struct cache_extension_section)`.
pub(crate) const EXTENSION_SECTION_SIZE: u64 = 16;
/// Extension tag of the generator string.
pub(crate) const TAG_GENERATOR: u32 = 0;
/// Extension tag of the glibc-hwcaps subdirectory name array.
pub(crate) const TAG_GLIBC_HWCAPS: u32 = 1;

/// Which string of the file an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringRef {
    /// The key (soname) of the entry with this index.
    Key(usize),
    /// The value (path) of the entry with this index.
    Value(usize),
    /// The glibc-hwcaps subdirectory name with this index.
    HwcapsSubdir(usize),
}

impl std::fmt::Display for StringRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StringRef::Key(i) => write!(f, "key of entry {i}"),
            StringRef::Value(i) => write!(f, "value of entry {i}"),
            StringRef::HwcapsSubdir(i) => write!(f, "glibc-hwcaps subdirectory name {i}"),
        }
    }
}

/// Everything that can be wrong with cache bytes (and the one thing that can
/// stop [`Cache::try_to_bytes`]). Offsets are byte offsets from the start of
/// the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Zero-length input.
    #[error("empty file: not an ld.so.cache")]
    Empty,
    /// The file starts (or the embedded new header would start) with
    /// something that is neither cache magic.
    #[error("not an ld.so.cache: unknown magic at byte {offset}")]
    BadMagic {
        /// Where the magic was expected.
        offset: u64,
    },
    /// A fixed-size structure runs past the end of the file.
    #[error("truncated: the {what} ends at byte {end} but the file ends at byte {len}")]
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it would end.
        end: u64,
        /// The file length.
        len: u64,
    },
    /// The entry table the header announces does not fit in the file.
    #[error(
        "truncated: header says {count} entries ({entry_size} bytes each, ending at byte {end}) \
         but the file ends at byte {len}"
    )]
    TooManyEntries {
        /// Entry count from the header.
        count: u32,
        /// Size of one entry in this format.
        entry_size: u64,
        /// Where the table would end.
        end: u64,
        /// The file length.
        len: u64,
    },
    /// The new-format header carries the "invalid" endianness marker
    /// (glibc writes it to make a cache unusable).
    #[error("cache header at byte {offset} is marked invalid (endianness flags value 1)")]
    InvalidEndianness {
        /// Offset of the new-format header.
        offset: u64,
    },
    /// A string offset points past the end of the file.
    #[error("{string}: string offset {offset} points at byte {at}, past the end of the file (byte {len})")]
    StringOffsetOutOfBounds {
        /// Which string.
        string: StringRef,
        /// The offset as stored (relative to the string table base).
        offset: u32,
        /// The absolute position it resolves to.
        at: u64,
        /// The file length.
        len: u64,
    },
    /// No NUL terminator between a string's start and the end of the file.
    #[error("{string}: string at byte {at} is not NUL-terminated before the end of the file (byte {len})")]
    UnterminatedString {
        /// Which string.
        string: StringRef,
        /// Where it starts.
        at: u64,
        /// The file length.
        len: u64,
    },
    /// A string is not UTF-8.
    #[error("{string}: string at byte {at} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which string.
        string: StringRef,
        /// Where it starts.
        at: u64,
    },
    /// The strings referenced by the entries add up to far more than the
    /// file could hold without sharing them abnormally (a decompression bomb).
    #[error(
        "{string}: the strings referenced so far exceed {limit} bytes, too much for a \
         {len}-byte file (entries share strings abnormally)"
    )]
    StringBudgetExceeded {
        /// The string that crossed the limit.
        string: StringRef,
        /// The limit for this file.
        limit: u64,
        /// The file length.
        len: u64,
    },
    /// `extension_offset` is not a multiple of 4.
    #[error("extension directory offset {offset} is not a multiple of 4")]
    ExtensionMisaligned {
        /// The offset from the header.
        offset: u32,
    },
    /// The extension directory does not start with `0xeaa42174`.
    #[error("extension directory at byte {offset}: bad magic {found:#010x} (expected 0xeaa42174)")]
    BadExtensionMagic {
        /// Where the directory is.
        offset: u64,
        /// What was found.
        found: u32,
    },
    /// An extension section's data runs past the end of the file.
    #[error(
        "extension section {index} (tag {tag}): data at bytes {offset}..{end} is past the end \
         of the file (byte {len})"
    )]
    ExtensionSectionOutOfBounds {
        /// Index of the section in the directory.
        index: u32,
        /// Its tag.
        tag: u32,
        /// Data offset.
        offset: u32,
        /// Data end (offset + size).
        end: u64,
        /// The file length.
        len: u64,
    },
    /// The glibc-hwcaps section is misaligned or not a whole number of
    /// `u32` indices.
    #[error(
        "glibc-hwcaps extension section at byte {offset} with size {size}: must be 4-byte \
         aligned and a multiple of 4 bytes"
    )]
    InvalidHwcapsSection {
        /// Data offset.
        offset: u32,
        /// Data size.
        size: u32,
    },
    /// Writing: the cache does not fit the format's 32-bit counts/offsets.
    #[error("cache too large to write: {what} exceeds the format's 32-bit limit")]
    TooLarge {
        /// What overflowed.
        what: &'static str,
    },
}

/// Bounds-checked, endian-aware reads from the input.
struct Reader<'a> {
    bytes: &'a [u8],
    endian: Endian,
}

impl Reader<'_> {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Caller has checked `off + 4 <= len`.
    fn u32_at(&self, off: u64) -> u32 {
        let o = off as usize;
        let b = [
            self.bytes[o],
            self.bytes[o + 1],
            self.bytes[o + 2],
            self.bytes[o + 3],
        ];
        match self.endian {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        }
    }

    /// Caller has checked `off + 8 <= len`.
    fn u64_at(&self, off: u64) -> u64 {
        let lo = u64::from(self.u32_at(off));
        let hi = u64::from(self.u32_at(off + 4));
        match self.endian {
            Endian::Little => lo | (hi << 32),
            Endian::Big => (lo << 32) | hi,
        }
    }

    fn need(&self, what: &'static str, end: u64) -> Result<(), Error> {
        if end > self.len() {
            Err(Error::Truncated {
                what,
                end,
                len: self.len(),
            })
        } else {
            Ok(())
        }
    }
}

/// Caps the bytes spent on decoded strings (see the module docs).
struct Budget {
    left: u64,
    limit: u64,
}

impl Budget {
    fn for_len(len: u64) -> Budget {
        // Real caches decode to at most about twice their size (keys are
        // tail-merged into values); 8x + 1 MiB leaves ample room.
        let limit = len.saturating_mul(8).saturating_add(1 << 20);
        Budget { left: limit, limit }
    }
}

/// Reads the NUL-terminated string at `base + offset`.
fn read_str(
    r: &Reader<'_>,
    base: u64,
    offset: u32,
    string: StringRef,
    budget: &mut Budget,
) -> Result<String, Error> {
    let len = r.len();
    let at = base + u64::from(offset);
    if at >= len {
        return Err(Error::StringOffsetOutOfBounds {
            string,
            offset,
            at,
            len,
        });
    }
    let rest = &r.bytes[at as usize..];
    // Never scan further than the budget allows: bounds CPU time as well.
    let window = (rest.len() as u64).min(budget.left) as usize;
    match rest[..window].iter().position(|&b| b == 0) {
        Some(n) => {
            budget.left -= n as u64 + 1;
            String::from_utf8(rest[..n].to_vec()).map_err(|_| Error::InvalidUtf8 { string, at })
        }
        None if window < rest.len() => Err(Error::StringBudgetExceeded {
            string,
            limit: budget.limit,
            len,
        }),
        None => Err(Error::UnterminatedString { string, at, len }),
    }
}

/// Parses an ld.so.cache image.
///
/// Accepts the new format, the old+new "compat" layout (the old entries are
/// skipped, as every glibc since 2.2 does) and, for completeness, an old
/// libc5-only file, whose entries come back with `osversion` and `hwcap` 0 and
/// no extensions. Big-endian new-format files are read according to their
/// endianness flag; files without that flag (ldconfig < 2.33) and the old
/// format, which has none, are read in the byte order of the build target,
/// as the dynamic loader reads them.
///
/// Extension sections with unknown tags are ignored, like glibc does. The
/// glibc-hwcaps name indices are taken relative to the new-format header
/// (that is how ldconfig writes them; in the compat layout glibc's readers
/// disagree with its writer, and the new-only layout glibc writes today makes
/// the two bases coincide).
pub fn parse(bytes: &[u8]) -> Result<Cache, Error> {
    let len = bytes.len() as u64;
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    if bytes.starts_with(NEW_MAGIC) {
        return parse_new(bytes, 0);
    }
    if bytes.starts_with(OLD_MAGIC) {
        return parse_old(bytes);
    }
    // A file cut inside the magic is truncated rather than foreign.
    if NEW_MAGIC.starts_with(bytes) || OLD_MAGIC.starts_with(bytes) {
        let end = if NEW_MAGIC.starts_with(bytes) {
            NEW_MAGIC.len()
        } else {
            OLD_MAGIC.len()
        } as u64;
        return Err(Error::Truncated {
            what: "magic",
            end,
            len,
        });
    }
    Err(Error::BadMagic { offset: 0 })
}

/// Old-format header: either skip to the embedded new format or read the
/// old entries.
fn parse_old(bytes: &[u8]) -> Result<Cache, Error> {
    let r = Reader {
        bytes,
        endian: Endian::NATIVE,
    };
    let len = r.len();
    r.need("old-format header", OLD_HEADER_SIZE)?;
    let count = r.u32_at(12);
    let end = OLD_HEADER_SIZE + u64::from(count) * OLD_ENTRY_SIZE;
    if end > len {
        return Err(Error::TooManyEntries {
            count,
            entry_size: OLD_ENTRY_SIZE,
            end,
            len,
        });
    }
    // glibc aligns the new header to `__alignof__ (struct cache_file_new)`:
    // 8 on most targets, 4 on i386. ldconfig pads the old table to an even
    // count so both agree, but try both for files written otherwise.
    let aligned8 = (end + 7) & !7;
    for candidate in [aligned8, end] {
        let magic_end = candidate + NEW_MAGIC.len() as u64;
        if magic_end <= len && &bytes[candidate as usize..magic_end as usize] == NEW_MAGIC {
            return parse_new(bytes, candidate);
        }
    }

    // Old format only: strings are relative to the end of the entry table.
    let mut budget = Budget::for_len(len);
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = OLD_HEADER_SIZE + i as u64 * OLD_ENTRY_SIZE;
        let flags = r.u32_at(at) as i32;
        let key = read_str(&r, end, r.u32_at(at + 4), StringRef::Key(i), &mut budget)?;
        let value = read_str(&r, end, r.u32_at(at + 8), StringRef::Value(i), &mut budget)?;
        entries.push(Entry {
            flags,
            key,
            value,
            osversion: 0,
            hwcap: 0,
        });
    }
    Ok(Cache {
        entries,
        generator: None,
        hwcaps_subdirs: Vec::new(),
    })
}

/// New-format header at `base` (0, or inside an old-format file).
fn parse_new(bytes: &[u8], base: u64) -> Result<Cache, Error> {
    let mut r = Reader {
        bytes,
        endian: Endian::NATIVE,
    };
    let len = r.len();
    r.need("new-format header", base + NEW_HEADER_SIZE)?;
    r.endian = match bytes[(base + 28) as usize] & 3 {
        0 => Endian::NATIVE,
        1 => return Err(Error::InvalidEndianness { offset: base }),
        2 => Endian::Little,
        _ => Endian::Big,
    };
    let count = r.u32_at(base + 20);
    let len_strings = r.u32_at(base + 24);
    let extension_offset = r.u32_at(base + 32);

    let entries_start = base + NEW_HEADER_SIZE;
    let entries_end = entries_start + u64::from(count) * NEW_ENTRY_SIZE;
    if entries_end > len {
        return Err(Error::TooManyEntries {
            count,
            entry_size: NEW_ENTRY_SIZE,
            end: entries_end,
            len,
        });
    }
    r.need("string table", entries_end + u64::from(len_strings))?;

    let mut budget = Budget::for_len(len);
    let (generator, hwcaps_subdirs) = parse_extensions(&r, base, extension_offset, &mut budget)?;

    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = entries_start + i as u64 * NEW_ENTRY_SIZE;
        let flags = r.u32_at(at) as i32;
        let key = read_str(&r, base, r.u32_at(at + 4), StringRef::Key(i), &mut budget)?;
        let value = read_str(&r, base, r.u32_at(at + 8), StringRef::Value(i), &mut budget)?;
        entries.push(Entry {
            flags,
            key,
            value,
            osversion: r.u32_at(at + 12),
            hwcap: r.u64_at(at + 16),
        });
    }
    // glibc-hwcaps indices past the name list are kept as they are: the
    // loader gives such entries priority 0 (never used) and the writer keeps
    // them out of range.
    Ok(Cache {
        entries,
        generator,
        hwcaps_subdirs,
    })
}

/// The extension directory (glibc ≥ 2.33). Its offsets are file offsets.
fn parse_extensions(
    r: &Reader<'_>,
    base: u64,
    extension_offset: u32,
    budget: &mut Budget,
) -> Result<(Option<String>, Vec<String>), Error> {
    if extension_offset == 0 {
        return Ok((None, Vec::new()));
    }
    if extension_offset % 4 != 0 {
        return Err(Error::ExtensionMisaligned {
            offset: extension_offset,
        });
    }
    let dir = u64::from(extension_offset);
    r.need("extension directory header", dir + EXTENSION_HEADER_SIZE)?;
    let magic = r.u32_at(dir);
    if magic != EXTENSION_MAGIC {
        return Err(Error::BadExtensionMagic {
            offset: dir,
            found: magic,
        });
    }
    let count = r.u32_at(dir + 4);
    r.need(
        "extension directory",
        dir + EXTENSION_HEADER_SIZE + u64::from(count) * EXTENSION_SECTION_SIZE,
    )?;

    // Like glibc, a later section with the same tag replaces an earlier one.
    let mut generator = None;
    let mut hwcaps = None;
    for index in 0..count {
        let at = dir + EXTENSION_HEADER_SIZE + u64::from(index) * EXTENSION_SECTION_SIZE;
        let tag = r.u32_at(at);
        let offset = r.u32_at(at + 8);
        let size = r.u32_at(at + 12);
        let end = u64::from(offset) + u64::from(size);
        if end > r.len() {
            return Err(Error::ExtensionSectionOutOfBounds {
                index,
                tag,
                offset,
                end,
                len: r.len(),
            });
        }
        match tag {
            TAG_GENERATOR => generator = Some((offset, size)),
            TAG_GLIBC_HWCAPS => hwcaps = Some((offset, size)),
            _ => {}
        }
    }

    // The generator is informational only; a stray byte must not make the
    // whole cache unreadable, so decode it lossily.
    let generator = generator.map(|(offset, size)| {
        let start = offset as usize;
        String::from_utf8_lossy(&r.bytes[start..start + size as usize]).into_owned()
    });

    let mut names = Vec::new();
    if let Some((offset, size)) = hwcaps {
        // glibc drops an empty section; a malformed one is corruption.
        if size != 0 {
            if offset % 4 != 0 || size % 4 != 0 {
                return Err(Error::InvalidHwcapsSection { offset, size });
            }
            let n = (size / 4) as usize;
            names.reserve(n);
            for i in 0..n {
                let str_offset = r.u32_at(u64::from(offset) + 4 * i as u64);
                names.push(read_str(
                    r,
                    base,
                    str_offset,
                    StringRef::HwcapsSubdir(i),
                    budget,
                )?);
            }
        }
    }
    Ok((generator, names))
}
