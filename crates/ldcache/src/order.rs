//! The order of cache entries, exactly as glibc defines it.
//!
//! The dynamic loader binary-searches the entry table (`search_cache` in
//! `elf/dl-cache.c`) with `_dl_cache_libcmp(name, key)`, moving to *higher*
//! indices when the name sorts *lower*: the table must therefore be sorted in
//! **descending** `_dl_cache_libcmp` order of the keys. ldconfig produces that
//! order with `compare` in `elf/cache.c`, which also fixes the order of
//! entries sharing a soname (the loader takes the first acceptable one).
//! Getting any of this wrong yields a cache in which ld.so silently misses
//! libraries, so this module replicates both functions bit for bit,
//! including their C quirks (signed `char`, wrapping `int` arithmetic).

use std::cmp::Ordering;
use std::ffi::c_char;

use crate::flags::hwcap_extension_index;
use crate::Entry;

/// The bytes C code sees for a Rust string: up to the first NUL.
pub(crate) fn c_bytes(s: &str) -> &[u8] {
    let b = s.as_bytes();
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// A byte as a C `char` would hold it, promoted to `int`. Plain `char` is
/// signed on x86 and unsigned on aarch64; ldconfig and ld.so of one target
/// agree, and so do we by following `c_char` of the build target.
fn c_int(b: u8) -> i32 {
    b as c_char as i32
}

/// glibc's `_dl_cache_libcmp`, returning the same `int` (sign matters only).
///
/// Runs of decimal digits compare numerically ("libfoo2" < "libfoo10"), a
/// digit sorts after any non-digit, other bytes compare as C `char`s. As in C
/// the digit accumulators are 32-bit and wrap on overflow.
pub fn dl_cache_libcmp(p1: &[u8], p2: &[u8]) -> i32 {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let (mut i, mut j) = (0usize, 0usize);
    loop {
        let c1 = at(p1, i);
        if c1 == 0 {
            break;
        }
        let c2 = at(p2, j);
        if c1.is_ascii_digit() {
            if !c2.is_ascii_digit() {
                return 1;
            }
            let mut v1 = i32::from(c1 - b'0');
            let mut v2 = i32::from(c2 - b'0');
            i += 1;
            j += 1;
            while at(p1, i).is_ascii_digit() {
                v1 = v1
                    .wrapping_mul(10)
                    .wrapping_add(i32::from(at(p1, i) - b'0'));
                i += 1;
            }
            while at(p2, j).is_ascii_digit() {
                v2 = v2
                    .wrapping_mul(10)
                    .wrapping_add(i32::from(at(p2, j) - b'0'));
                j += 1;
            }
            if v1 != v2 {
                return v1.wrapping_sub(v2);
            }
        } else if c2.is_ascii_digit() {
            return -1;
        } else if c1 != c2 {
            return c_int(c1) - c_int(c2);
        } else {
            i += 1;
            j += 1;
        }
    }
    -c_int(at(p2, j))
}

/// `_dl_cache_libcmp` as an [`Ordering`] (for sonames given as `&str`).
pub fn libcmp(a: &str, b: &str) -> Ordering {
    dl_cache_libcmp(c_bytes(a), c_bytes(b)).cmp(&0)
}

/// ldconfig's `compare(e1, e2)`: `Less` means `e1` is written first.
///
/// `hwcap1`/`hwcap2` are the hwcap values as they will be written (the
/// writer may renumber glibc-hwcaps indices) and `names` the glibc-hwcaps
/// subdirectory names those indices refer to.
pub(crate) fn compare(
    e1: &Entry,
    hwcap1: u64,
    e2: &Entry,
    hwcap2: u64,
    names: &[&[u8]],
) -> Ordering {
    // "We need to swap entries here to get the correct sort order": larger
    // names first.
    let res = dl_cache_libcmp(c_bytes(&e2.key), c_bytes(&e1.key));
    if res != 0 {
        return res.cmp(&0);
    }
    // Higher flags first.
    if e1.flags != e2.flags {
        return e2.flags.cmp(&e1.flags);
    }
    // glibc-hwcaps entries come before all others (search_cache stops at
    // the first non-extension entry once it has a candidate), sorted by
    // subdirectory name with strcmp.
    let x1 = hwcap_extension_index(hwcap1);
    let x2 = hwcap_extension_index(hwcap2);
    match (x1, x2) {
        (Some(_), None) => return Ordering::Less,
        (None, Some(_)) => return Ordering::Greater,
        (Some(a), Some(b)) => {
            let n1 = names.get(a as usize);
            let n2 = names.get(b as usize);
            let by_name = n1.cmp(&n2);
            if by_name != Ordering::Equal {
                return by_name;
            }
        }
        (None, None) => {}
    }
    // In ldconfig's memory a glibc-hwcaps entry has hwcap 0 (the index and
    // ISA level are only composed when writing), so those tie here.
    let (h1, h2) = if x1.is_some() {
        (0, 0)
    } else {
        (hwcap1, hwcap2)
    };
    // Most specific hwcap first (more bits set), then larger hwcap, then
    // larger osversion.
    h2.count_ones()
        .cmp(&h1.count_ones())
        .then(h2.cmp(&h1))
        .then(e2.osversion.cmp(&e1.osversion))
}

/// Stable merge sort that tolerates an inconsistent comparator.
///
/// ldconfig inserts entries one by one into a sorted list, which keeps equal
/// entries in insertion order; a stable sort reproduces that. The std sorts
/// may panic when the comparator is not a total order, which
/// `_dl_cache_libcmp` is not for digit runs that overflow `int`; this one
/// just produces some order.
pub(crate) fn stable_sort<T: Copy>(v: &mut [T], mut less_eq: impl FnMut(&T, &T) -> bool) {
    let n = v.len();
    if n < 2 {
        return;
    }
    let mut buf: Vec<T> = v.to_vec();
    let mut width = 1;
    while width < n {
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut i, mut j, mut k) = (start, mid, start);
            while i < mid && j < end {
                // Take from the left run on ties: that is what keeps it stable.
                if less_eq(&v[i], &v[j]) {
                    buf[k] = v[i];
                    i += 1;
                } else {
                    buf[k] = v[j];
                    j += 1;
                }
                k += 1;
            }
            buf[k..k + (mid - i)].copy_from_slice(&v[i..mid]);
            k += mid - i;
            buf[k..k + (end - j)].copy_from_slice(&v[j..end]);
            start = end;
        }
        v.copy_from_slice(&buf);
        width *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(a: &str, b: &str) -> Ordering {
        libcmp(a, b)
    }

    #[test]
    fn digit_runs_compare_numerically() {
        assert_eq!(cmp("libfoo2.so.1", "libfoo10.so.1"), Ordering::Less);
        assert_eq!(cmp("libfoo10.so.1", "libfoo2.so.1"), Ordering::Greater);
        assert_eq!(cmp("libfoo.so.2", "libfoo.so.10"), Ordering::Less);
        assert_eq!(cmp("libfoo.so.010", "libfoo.so.10"), Ordering::Equal);
        assert_eq!(cmp("libc.so.6", "libc.so.6"), Ordering::Equal);
    }

    #[test]
    fn digits_sort_after_non_digits() {
        // '.' (0x2e) is below '0' in ASCII, yet a digit always wins.
        assert_eq!(cmp("libfoo2.so", "libfoo.so"), Ordering::Greater);
        assert_eq!(cmp("libfooz.so", "libfoo1.so"), Ordering::Less);
        // Prefix sorts first.
        assert_eq!(cmp("libfoo", "libfoo.so"), Ordering::Less);
        assert_eq!(cmp("libfoo.so", "libfoo"), Ordering::Greater);
        // Plain bytes: 'A' < '_' < 'a'.
        assert_eq!(cmp("libA.so.1", "lib_x.so.1"), Ordering::Less);
        assert_eq!(cmp("lib_x.so.1", "liba.so.1"), Ordering::Less);
    }

    #[test]
    fn stops_at_nul_like_c() {
        assert_eq!(cmp("libx\0zzz", "libx"), Ordering::Equal);
    }

    #[test]
    fn overflowing_digit_runs_wrap_like_c() {
        // 4294967296 wraps to 0 in a 32-bit int, 1 stays 1: C says "less".
        assert_eq!(cmp("a4294967296", "a1"), Ordering::Less);
        assert_eq!(cmp("a4294967297", "a1"), Ordering::Equal);
    }

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    fn high_bytes_are_signed_chars_on_x86() {
        // 0xc3 as signed char is negative, so "é..." sorts below "a".
        assert_eq!(cmp("\u{e9}", "a"), Ordering::Less);
        // And a proper prefix sorts *after* a longer string whose next char
        // is negative: 0 - (negative) > 0.
        assert_eq!(cmp("a", "a\u{e9}"), Ordering::Greater);
    }

    #[test]
    fn stable_sort_sorts_and_keeps_ties() {
        let mut v: Vec<(u32, u32)> = (0..100).map(|i| ((i * 37) % 10, i)).collect();
        stable_sort(&mut v, |a, b| a.0 <= b.0);
        for w in v.windows(2) {
            assert!(w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1));
        }
    }

    #[test]
    fn stable_sort_survives_inconsistent_comparator() {
        let mut v: Vec<u32> = (0..257).collect();
        let mut x = 1u32;
        stable_sort(&mut v, |_, _| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            x & 0x10000 != 0
        });
        let mut seen = v.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..257).collect::<Vec<_>>());
    }
}
