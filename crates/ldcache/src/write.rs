//! Turning a [`Cache`] into the bytes glibc ≥ 2.33 ldconfig would write.
//!
//! Layout (new format only, no old libc5 table, like `ldconfig -c new`, the
//! default since glibc 2.32):
//!
//! ```text
//! header (48) | entries (24 each, in glibc order) | string table
//! | pad to 4 | extension directory | glibc-hwcaps u32 array | generator bytes
//! ```
//!
//! The string table is built the way `elf/stringtable.c` builds it
//! (deduplicated, sorted by reversed string, suffixes shared with the
//! preceding string), so a cache ldconfig wrote comes back byte for byte.

use foldhash::{HashMap, HashMapExt};

use crate::flags::hwcap_extension_index;
use crate::order::{c_bytes, compare, stable_sort};
use crate::parse::{
    Error, EXTENSION_HEADER_SIZE, EXTENSION_MAGIC, EXTENSION_SECTION_SIZE, NEW_ENTRY_SIZE,
    NEW_HEADER_SIZE, NEW_MAGIC, TAG_GENERATOR, TAG_GLIBC_HWCAPS,
};
use crate::{Cache, Endian};

/// Output buffer with endian-aware appends.
struct Out {
    buf: Vec<u8>,
    endian: Endian,
}

impl Out {
    fn u32(&mut self, v: u32) {
        match self.endian {
            Endian::Little => self.buf.extend_from_slice(&v.to_le_bytes()),
            Endian::Big => self.buf.extend_from_slice(&v.to_be_bytes()),
        }
    }

    fn u64(&mut self, v: u64) {
        match self.endian {
            Endian::Little => self.buf.extend_from_slice(&v.to_le_bytes()),
            Endian::Big => self.buf.extend_from_slice(&v.to_be_bytes()),
        }
    }
}

fn to_u32(v: usize, what: &'static str) -> Result<u32, Error> {
    u32::try_from(v).map_err(|_| Error::TooLarge { what })
}

/// A finished string table: bytes plus the offset of every string in it.
pub(crate) struct StringTable<'a> {
    pub(crate) bytes: Vec<u8>,
    pub(crate) offsets: HashMap<&'a [u8], usize>,
}

/// `stringtable_finalize`: sort the distinct strings by their reversed bytes,
/// descending (so a string directly follows every longer string ending in
/// it), then share a string's bytes with its predecessor when it is a suffix
/// of it.
pub(crate) fn string_table<'a>(strings: impl IntoIterator<Item = &'a [u8]>) -> StringTable<'a> {
    let mut offsets: HashMap<&'a [u8], usize> = HashMap::new();
    for s in strings {
        offsets.entry(s).or_insert(0);
    }
    let mut sorted: Vec<&'a [u8]> = offsets.keys().copied().collect();
    // A total order, so the std sort is fine here.
    sorted.sort_by(|l, r| r.iter().rev().cmp(l.iter().rev()));

    let mut placed: Vec<usize> = Vec::with_capacity(sorted.len());
    let mut size = 0;
    for (j, cur) in sorted.iter().enumerate() {
        let off = if j == 0 {
            0
        } else {
            let prev = sorted[j - 1];
            let prev_off = placed[j - 1];
            if prev.ends_with(cur) {
                prev_off + prev.len() - cur.len()
            } else {
                prev_off + prev.len() + 1
            }
        };
        placed.push(off);
        size = size.max(off + cur.len() + 1);
    }
    let mut bytes = vec![0u8; size];
    for (s, &off) in sorted.iter().zip(&placed) {
        bytes[off..off + s.len()].copy_from_slice(s);
        offsets.insert(s, off);
    }
    StringTable { bytes, offsets }
}

/// The glibc-hwcaps names as written (sorted, unique, as the loader's merge
/// with its priority list requires) and the remapped hwcap of each entry.
fn normalize_hwcaps(cache: &Cache) -> (Vec<&[u8]>, Vec<u64>) {
    let names: Vec<&[u8]> = cache.hwcaps_subdirs.iter().map(|s| c_bytes(s)).collect();
    if names.windows(2).all(|w| w[0] < w[1]) {
        let hw = cache.entries.iter().map(|e| e.hwcap).collect();
        return (names, hw);
    }
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    let remap: Vec<u32> = names
        .iter()
        .map(|n| sorted.binary_search(n).unwrap_or(0) as u32)
        .collect();
    let out_of_range = sorted.len() as u32;
    let hw = cache
        .entries
        .iter()
        .map(|e| match hwcap_extension_index(e.hwcap) {
            Some(i) => {
                let new = remap.get(i as usize).copied().unwrap_or(out_of_range);
                (e.hwcap & !0xffff_ffff) | u64::from(new)
            }
            None => e.hwcap,
        })
        .collect();
    (sorted, hw)
}

/// Serializes `cache`; see [`Cache::try_to_bytes`].
pub(crate) fn write(cache: &Cache, endian: Endian) -> Result<Vec<u8>, Error> {
    let (names, hwcaps) = normalize_hwcaps(cache);

    let mut order: Vec<usize> = (0..cache.entries.len()).collect();
    stable_sort(&mut order, |&a, &b| {
        compare(
            &cache.entries[a],
            hwcaps[a],
            &cache.entries[b],
            hwcaps[b],
            &names,
        ) != std::cmp::Ordering::Greater
    });

    let strings = string_table(
        cache
            .entries
            .iter()
            .flat_map(|e| [c_bytes(&e.key), c_bytes(&e.value)])
            .chain(names.iter().copied()),
    );

    let count = to_u32(cache.entries.len(), "entry count")?;
    let str_base = (NEW_HEADER_SIZE + NEW_ENTRY_SIZE * u64::from(count)) as usize;
    let strings_end = str_base + strings.bytes.len();
    let str_off = |s: &[u8]| -> Result<u32, Error> {
        to_u32(str_base + strings.offsets[s], "string table offset")
    };

    let has_extension = cache.generator.is_some() || !names.is_empty();
    let extension_offset = if has_extension {
        (strings_end + 3) & !3
    } else {
        0
    };

    let mut out = Out {
        buf: Vec::with_capacity(strings_end + 64),
        endian,
    };
    out.buf.extend_from_slice(NEW_MAGIC);
    out.u32(count);
    out.u32(to_u32(strings.bytes.len(), "string table size")?);
    out.buf.push(match endian {
        Endian::Little => 2,
        Endian::Big => 3,
    });
    out.buf.extend_from_slice(&[0; 3]);
    out.u32(to_u32(extension_offset, "extension offset")?);
    out.buf.extend_from_slice(&[0; 12]);

    for &i in &order {
        let e = &cache.entries[i];
        out.u32(e.flags as u32);
        out.u32(str_off(c_bytes(&e.key))?);
        out.u32(str_off(c_bytes(&e.value))?);
        out.u32(e.osversion);
        out.u64(hwcaps[i]);
    }
    out.buf.extend_from_slice(&strings.bytes);

    if has_extension {
        out.buf.resize(extension_offset, 0);
        // Same arrangement as ldconfig's write_extensions: directory with the
        // generator section first, then the hwcaps array, then the
        // generator text (no NUL; its size says where it ends).
        let sections = u64::from(cache.generator.is_some()) + u64::from(!names.is_empty());
        let hwcaps_offset =
            extension_offset + (EXTENSION_HEADER_SIZE + sections * EXTENSION_SECTION_SIZE) as usize;
        let hwcaps_size = 4 * names.len();
        let generator_offset = hwcaps_offset + hwcaps_size;

        out.u32(EXTENSION_MAGIC);
        out.u32(sections as u32);
        if let Some(g) = &cache.generator {
            out.u32(TAG_GENERATOR);
            out.u32(0);
            out.u32(to_u32(generator_offset, "generator offset")?);
            out.u32(to_u32(g.len(), "generator size")?);
        }
        if !names.is_empty() {
            out.u32(TAG_GLIBC_HWCAPS);
            out.u32(0);
            out.u32(to_u32(hwcaps_offset, "glibc-hwcaps offset")?);
            out.u32(to_u32(hwcaps_size, "glibc-hwcaps size")?);
        }
        for n in &names {
            out.u32(str_off(n)?);
        }
        if let Some(g) = &cache.generator {
            out.buf.extend_from_slice(g.as_bytes());
        }
        if out.buf.len() > u32::MAX as usize {
            return Err(Error::TooLarge { what: "file size" });
        }
    }
    Ok(out.buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_table_shares_suffixes_like_glibc() {
        let t = string_table([
            &b"libfoo.so.1"[..],
            b"/opt/a/libfoo.so.1",
            b"libbar.so.1",
            b"/opt/a/libbar.so.1",
            b"libfoo.so.1",
        ]);
        // Descending by reversed bytes: "1.os.rab..." > "1.os.oof...", and a
        // longer string before its suffix, which then shares its bytes.
        assert_eq!(
            t.bytes,
            b"/opt/a/libbar.so.1\0/opt/a/libfoo.so.1\0".to_vec()
        );
        assert_eq!(t.offsets[&b"/opt/a/libbar.so.1"[..]], 0);
        assert_eq!(t.offsets[&b"libbar.so.1"[..]], 7);
        assert_eq!(t.offsets[&b"/opt/a/libfoo.so.1"[..]], 19);
        assert_eq!(t.offsets[&b"libfoo.so.1"[..]], 26);
    }

    #[test]
    fn string_table_empty_and_empty_string() {
        assert!(string_table([]).bytes.is_empty());
        let t = string_table([&b""[..]]);
        assert_eq!(t.bytes, vec![0]);
        let t = string_table([&b""[..], b"ab"]);
        assert_eq!(t.bytes, b"ab\0".to_vec());
        assert_eq!(t.offsets[&b""[..]], 2);
    }
}
