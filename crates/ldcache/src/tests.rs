//! Unit tests: round trips, ordering, hostile inputs and a mutation fuzz loop.

use super::*;
use crate::flags::*;

fn e(key: &str, value: &str) -> Entry {
    Entry::new(key, value, NATIVE_FLAGS)
}

fn sample() -> Cache {
    let mut c = Cache {
        entries: vec![
            e("libfoo.so.1", "/opt/a/libfoo.so.1"),
            e("libfoo2.so.1", "/opt/a/libfoo2.so.1"),
            e("libfoo10.so.1", "/opt/a/libfoo10.so.1"),
            e("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
            Entry::new("libcuda.so.1", "/usr/lib32/libcuda.so.1", FLAG_ELF_LIBC6),
            e("libA.so.1", "/opt/b/libA.so.1"),
            e("lib_x.so.1", "/opt/b/lib_x.so.1"),
            Entry {
                hwcap: HWCAP_EXTENSION | (2 << 32),
                ..e("libm.so.6", "/lib/glibc-hwcaps/x86-64-v3/libm.so.6")
            },
            Entry {
                hwcap: HWCAP_EXTENSION | 1,
                ..e("libm.so.6", "/lib/glibc-hwcaps/x86-64-v4/libm.so.6")
            },
            e("libm.so.6", "/lib/libm.so.6"),
        ],
        generator: Some("gpuctk test".into()),
        hwcaps_subdirs: vec!["x86-64-v3".into(), "x86-64-v4".into()],
    };
    c.sort();
    c
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn le_bytes(c: &Cache) -> Vec<u8> {
    c.try_to_bytes(Endian::Little).unwrap()
}

#[test]
fn round_trip() {
    let c = sample();
    for endian in [Endian::Little, Endian::Big] {
        let bytes = c.try_to_bytes(endian).unwrap();
        assert_eq!(parse(&bytes).unwrap(), c, "{endian:?}");
    }
    let bytes = c.to_bytes();
    assert_eq!(parse(&bytes).unwrap(), c);
    // An empty cache and one without extension round-trip too.
    for c in [
        Cache::new(),
        Cache {
            entries: vec![e("a.so", "/a.so")],
            ..Cache::new()
        },
    ] {
        let bytes = c.to_bytes();
        assert_eq!(u32_at(&bytes, 32), 0, "no extension directory");
        assert_eq!(parse(&bytes).unwrap(), c);
    }
}

#[test]
fn writer_sorts_whatever_the_input_order() {
    let sorted = sample();
    let reference = le_bytes(&sorted);
    let mut c = sorted.clone();
    c.entries.reverse();
    assert_eq!(le_bytes(&c), reference);
    let n = c.entries.len();
    for k in 1..n {
        c.entries.rotate_left(k);
        c.entries.swap(0, n / 2);
        assert_eq!(le_bytes(&c), reference);
    }
    let keys: Vec<&str> = sorted.entries.iter().map(|e| e.key.as_str()).collect();
    // Descending _dl_cache_libcmp order; hwcaps entries first within a name,
    // by subdirectory name; then higher flags first.
    assert_eq!(
        keys,
        [
            "libm.so.6",
            "libm.so.6",
            "libm.so.6",
            "libfoo10.so.1",
            "libfoo2.so.1",
            "libfoo.so.1",
            "libcuda.so.1",
            "libcuda.so.1",
            "lib_x.so.1",
            "libA.so.1",
        ]
    );
    assert_eq!(
        sorted.entries[0].value,
        "/lib/glibc-hwcaps/x86-64-v3/libm.so.6"
    );
    assert_eq!(
        sorted.entries[1].value,
        "/lib/glibc-hwcaps/x86-64-v4/libm.so.6"
    );
    assert_eq!(sorted.entries[6].flags, NATIVE_FLAGS.max(FLAG_ELF_LIBC6));
}

#[test]
fn same_name_ties_order_by_hwcap_and_osversion() {
    let mut c = Cache {
        entries: vec![
            e("libz.so.1", "/plain"),
            Entry {
                osversion: 0x020600,
                ..e("libz.so.1", "/newer-kernel")
            },
            Entry {
                hwcap: 0b1,
                ..e("libz.so.1", "/one-bit-low")
            },
            Entry {
                hwcap: 0b100,
                ..e("libz.so.1", "/one-bit-high")
            },
            Entry {
                hwcap: 0b11,
                ..e("libz.so.1", "/two-bits")
            },
        ],
        ..Cache::new()
    };
    c.sort();
    let values: Vec<&str> = c.entries.iter().map(|e| e.value.as_str()).collect();
    assert_eq!(
        values,
        [
            "/two-bits",
            "/one-bit-high",
            "/one-bit-low",
            "/newer-kernel",
            "/plain"
        ]
    );
}

#[test]
fn unsorted_hwcaps_names_are_renumbered() {
    let c = Cache {
        entries: vec![
            Entry {
                hwcap: HWCAP_EXTENSION,
                ..e("libm.so.6", "/v4/libm.so.6")
            },
            Entry {
                hwcap: HWCAP_EXTENSION | 1,
                ..e("libm.so.6", "/v3/libm.so.6")
            },
            Entry {
                hwcap: HWCAP_EXTENSION | 7,
                ..e("libm.so.6", "/bogus/libm.so.6")
            },
        ],
        generator: None,
        hwcaps_subdirs: vec!["x86-64-v4".into(), "x86-64-v3".into(), "x86-64-v3".into()],
    };
    let back = parse(&c.to_bytes()).unwrap();
    assert_eq!(back.hwcaps_subdirs, ["x86-64-v3", "x86-64-v4"]);
    let subdir = |e: &Entry| {
        hwcap_extension_index(e.hwcap).and_then(|i| back.hwcaps_subdirs.get(i as usize).cloned())
    };
    for en in &back.entries {
        match en.value.as_str() {
            "/v4/libm.so.6" => assert_eq!(subdir(en).as_deref(), Some("x86-64-v4")),
            "/v3/libm.so.6" => assert_eq!(subdir(en).as_deref(), Some("x86-64-v3")),
            _ => assert_eq!(
                subdir(en),
                None,
                "out-of-range index must stay out of range"
            ),
        }
    }
}

#[test]
fn layout_matches_ldconfig_conventions() {
    let c = sample();
    let b = le_bytes(&c);
    assert_eq!(&b[..20], b"glibc-ld.so.cache1.1");
    assert_eq!(u32_at(&b, 20) as usize, c.entries.len());
    assert_eq!(b[28], 2, "little-endian flag");
    let strings_end = 48 + 24 * c.entries.len() + u32_at(&b, 24) as usize;
    let ext = u32_at(&b, 32) as usize;
    assert_eq!(ext, (strings_end + 3) & !3);
    assert_eq!(u32_at(&b, ext), 0xeaa4_2174);
    assert_eq!(u32_at(&b, ext + 4), 2);
    // Generator text is the last thing in the file, without NUL.
    assert!(b.ends_with(b"gpuctk test"));
    // Every key is a suffix of some value here, so it shares its bytes.
    let table = &b[48 + 24 * c.entries.len()..strings_end];
    assert!(!table.windows(12).any(|w| w == b"\0libfoo.so.1"));
}

#[test]
fn lookup_add_and_arch_filter() {
    let mut c = sample();
    let hit = c.lookup("libcuda.so.1", NATIVE_FLAGS).unwrap();
    assert_eq!(hit.flags, NATIVE_FLAGS);
    if NATIVE_FLAGS != FLAG_ELF_LIBC6 {
        assert_eq!(hit.value, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
        assert_eq!(
            c.lookup("libcuda.so.1", FLAG_ELF_LIBC6).unwrap().value,
            "/usr/lib32/libcuda.so.1"
        );
    }
    assert!(c.lookup("libcuda.so", NATIVE_FLAGS).is_none());
    // The plain libm wins over the hwcaps ones.
    assert_eq!(
        c.lookup("libm.so.6", NATIVE_FLAGS).unwrap().value,
        "/lib/libm.so.6"
    );
    let n = c
        .entries_for_arch(FLAG_AARCH64_LIB64 | FLAG_ELF_LIBC6)
        .count()
        + c.entries_for_arch(FLAG_X8664_LIB64 | FLAG_ELF_LIBC6)
            .count();
    assert_eq!(n + 1, c.entries.len(), "all but the 32-bit libcuda");

    let before = c.entries.len();
    c.entries.push(e("libfoo.so.1", "/stale/libfoo.so.1"));
    c.add(e("libfoo.so.1", "/opt/new/libfoo.so.1"));
    assert_eq!(
        c.entries.len(),
        before,
        "both old libfoo entries replaced by one"
    );
    assert_eq!(
        c.lookup("libfoo.so.1", NATIVE_FLAGS).unwrap().value,
        "/opt/new/libfoo.so.1"
    );
    c.add(Entry::new(
        "libfoo.so.1",
        "/opt/new32/libfoo.so.1",
        FLAG_ELF_LIBC6 | FLAG_ARM_LIBHF,
    ));
    assert_eq!(c.entries.len(), before + 1, "another ABI is kept alongside");
    c.add(e("libnew.so.1", "/opt/new/libnew.so.1"));
    assert_eq!(c.entries.len(), before + 2);
}

#[test]
fn arch_helpers() {
    assert_eq!(Arch::from_flags(0x0303), Arch::X8664);
    assert_eq!(Arch::from_flags(0x0a03), Arch::Aarch64);
    assert_eq!(Arch::X8664.required_flag(), 0x0300);
    assert_eq!(Arch::X8664.is_64bit(), Some(true));
    assert_eq!(Arch::X32.is_64bit(), Some(false));
    assert_eq!(Arch::RiscvDouble.is_64bit(), None);
    assert_eq!(Arch::from_flags(0x7703), Arch::Unknown(0x7700));
    assert_eq!(Arch::from_flags(0x7703).to_string(), "unknown (0x7700)");
    for v in (0..=0x12).map(|x| x << 8) {
        assert_eq!(Arch::from_flags(v).required_flag(), v);
        assert!(!matches!(Arch::from_flags(v), Arch::Unknown(_)));
    }
    #[cfg(target_arch = "x86_64")]
    assert_eq!(NATIVE_FLAGS, 0x0303);
    #[cfg(target_arch = "aarch64")]
    assert_eq!(NATIVE_FLAGS, 0x0a03);
    assert_eq!(Arch::native(), Arch::from_flags(NATIVE_FLAGS));
}

/// Hand-built compat file: old header + old entries + pad + new format,
/// with the new part's offsets shifted as ldconfig shifts them.
fn compat_bytes(c: &Cache, old_count: u32) -> Vec<u8> {
    let new = le_bytes(c);
    let old_end = 16 + 12 * old_count as usize;
    let base = (old_end + 7) & !7;
    let mut b = b"ld.so-1.7.0\0".to_vec();
    b.extend_from_slice(&old_count.to_le_bytes());
    for i in 0..old_count {
        b.extend_from_slice(&3i32.to_le_bytes());
        b.extend_from_slice(&(1000 + i).to_le_bytes());
        b.extend_from_slice(&(2000 + i).to_le_bytes());
    }
    b.resize(base, 0);
    let mut new = new;
    // Extension offsets are file offsets: shift them.
    let ext = u32_at(&new, 32) as usize;
    if ext != 0 {
        put_u32(&mut new, 32, (ext + base) as u32);
        let n = u32_at(&new, ext + 4) as usize;
        for s in 0..n {
            let at = ext + 8 + 16 * s + 8;
            let v = u32_at(&new, at);
            put_u32(&mut new, at, v + base as u32);
        }
    }
    b.extend_from_slice(&new);
    b
}

#[test]
fn compat_layout_skips_old_entries() {
    let c = sample();
    for old in [0, 1, 2, 7] {
        let bytes = compat_bytes(&c, old);
        assert_eq!(parse(&bytes).unwrap(), c, "old_count {old}");
    }
}

#[test]
fn old_format_only_is_read() {
    // Strings are relative to the end of the old entry table.
    let strings = b"libx.so.1\0/lib/libx.so.1\0";
    let mut b = b"ld.so-1.7.0\0".to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&3i32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&10u32.to_le_bytes());
    b.extend_from_slice(strings);
    let c = parse(&b).unwrap();
    assert_eq!(
        c.entries,
        vec![Entry::new("libx.so.1", "/lib/libx.so.1", 3)]
    );
    assert_eq!(c.generator, None);
    // Huge old count.
    put_u32(&mut b, 12, u32::MAX);
    assert!(matches!(
        parse(&b),
        Err(Error::TooManyEntries {
            count: u32::MAX,
            entry_size: 12,
            ..
        })
    ));
}

#[test]
fn hostile_inputs_give_the_right_error() {
    let good = le_bytes(&sample());
    let n = sample().entries.len();
    let len = good.len() as u64;

    assert_eq!(parse(&[]), Err(Error::Empty));
    assert_eq!(
        parse(b"\x7fELF\x02\x01\x01"),
        Err(Error::BadMagic { offset: 0 })
    );
    assert_eq!(
        parse(b"glibc-ld.so.cache1.0xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
        Err(Error::BadMagic { offset: 0 })
    );
    assert!(matches!(
        parse(b"glibc-ld"),
        Err(Error::Truncated { what: "magic", .. })
    ));
    assert!(matches!(
        parse(&good[..40]),
        Err(Error::Truncated {
            what: "new-format header",
            end: 48,
            len: 40
        })
    ));
    assert!(matches!(
        parse(&good[..100]),
        Err(Error::TooManyEntries {
            entry_size: 24,
            len: 100,
            ..
        })
    ));
    let strings_start = 48 + 24 * n;
    assert!(matches!(
        parse(&good[..strings_start + 3]),
        Err(Error::Truncated {
            what: "string table",
            ..
        })
    ));

    let mut b = good.clone();
    put_u32(&mut b, 20, u32::MAX);
    let err = parse(&b).unwrap_err();
    assert!(matches!(
        err,
        Error::TooManyEntries {
            count: u32::MAX,
            ..
        }
    ));
    assert!(
        err.to_string()
            .starts_with("truncated: header says 4294967295 entries"),
        "{err}"
    );

    let mut b = good.clone();
    put_u32(&mut b, 48 + 4, 0x7fff_0000);
    let err = parse(&b).unwrap_err();
    assert_eq!(
        err,
        Error::StringOffsetOutOfBounds {
            string: StringRef::Key(0),
            offset: 0x7fff_0000,
            at: 0x7fff_0000,
            len
        }
    );
    assert!(err.to_string().contains("key of entry 0"), "{err}");

    let mut b = good.clone();
    put_u32(&mut b, 48 + 24 * 2 + 8, len as u32);
    assert!(matches!(
        parse(&b),
        Err(Error::StringOffsetOutOfBounds {
            string: StringRef::Value(2),
            ..
        })
    ));

    // A string without NUL: point a key at the generator text at the end.
    let mut b = good.clone();
    put_u32(&mut b, 48 + 4, (len - 3) as u32);
    assert_eq!(
        parse(&b),
        Err(Error::UnterminatedString {
            string: StringRef::Key(0),
            at: len - 3,
            len
        })
    );

    // Not UTF-8.
    let mut b = good.clone();
    let key0 = u32_at(&b, 48 + 4) as usize;
    b[key0] = 0xff;
    assert!(matches!(parse(&b), Err(Error::InvalidUtf8 { .. })));

    // Extension offset past the end, misaligned, bad magic, bad section.
    let ext = u32_at(&good, 32) as usize;
    let mut b = good.clone();
    put_u32(&mut b, 32, (len as u32 + 64) & !3);
    assert!(matches!(
        parse(&b),
        Err(Error::Truncated {
            what: "extension directory header",
            ..
        })
    ));
    let mut b = good.clone();
    put_u32(&mut b, 32, ext as u32 + 1);
    assert!(matches!(parse(&b), Err(Error::ExtensionMisaligned { .. })));
    let mut b = good.clone();
    put_u32(&mut b, ext, 0x1234_5678);
    assert_eq!(
        parse(&b),
        Err(Error::BadExtensionMagic {
            offset: ext as u64,
            found: 0x1234_5678
        })
    );
    let mut b = good.clone();
    put_u32(&mut b, ext + 4, u32::MAX);
    assert!(matches!(
        parse(&b),
        Err(Error::Truncated {
            what: "extension directory",
            ..
        })
    ));
    let mut b = good.clone();
    put_u32(&mut b, ext + 8 + 12, u32::MAX);
    assert!(matches!(
        parse(&b),
        Err(Error::ExtensionSectionOutOfBounds {
            index: 0,
            tag: 0,
            ..
        })
    ));
    let mut b = good.clone();
    put_u32(&mut b, ext + 8 + 16 + 12, 6);
    assert!(matches!(
        parse(&b),
        Err(Error::InvalidHwcapsSection { size: 6, .. })
    ));

    // The "invalid" endianness marker.
    let mut b = good.clone();
    b[28] = 1;
    assert_eq!(parse(&b), Err(Error::InvalidEndianness { offset: 0 }));
}

#[test]
fn string_bomb_is_refused_before_allocating() {
    // 40 000 entries all pointing at one 60 KiB string: 2.4 GB if decoded.
    let count = 40_000u32;
    let long = vec![b'a'; 60_000];
    let mut b = b"glibc-ld.so.cache1.1".to_vec();
    b.extend_from_slice(&count.to_le_bytes());
    b.extend_from_slice(&(long.len() as u32 + 1).to_le_bytes());
    b.extend_from_slice(&[2, 0, 0, 0]);
    b.extend_from_slice(&[0; 16]);
    let str_off = 48 + 24 * count;
    for _ in 0..count {
        b.extend_from_slice(&3i32.to_le_bytes());
        b.extend_from_slice(&str_off.to_le_bytes());
        b.extend_from_slice(&str_off.to_le_bytes());
        b.extend_from_slice(&[0; 12]);
    }
    b.extend_from_slice(&long);
    b.push(0);
    assert!(matches!(parse(&b), Err(Error::StringBudgetExceeded { .. })));
}

/// Tiny deterministic PRNG (no external crates).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

fn exercise(bytes: &[u8]) {
    if let Ok(c) = parse(bytes) {
        // Whatever parses must also write, look up and re-parse without panic.
        let out = c.to_bytes();
        let again = parse(&out).expect("our own output must parse");
        assert_eq!(again.entries.len(), c.entries.len());
        for en in &c.entries {
            let _ = c.lookup(&en.key, en.flags);
        }
    }
}

#[test]
fn fuzz_mutations_never_panic() {
    let mut inputs = vec![
        le_bytes(&sample()),
        sample().try_to_bytes(Endian::Big).unwrap(),
    ];
    inputs.push(compat_bytes(&sample(), 3));
    for good in &inputs {
        for cut in 0..=good.len() {
            exercise(&good[..cut]);
        }
        for pos in 0..good.len() {
            for v in [
                0x00,
                0xff,
                0x80,
                0x01,
                good[pos] ^ 0x10,
                good[pos].wrapping_add(1),
            ] {
                let mut b = good.clone();
                b[pos] = v;
                exercise(&b);
            }
        }
        let mut rng = Lcg(0x5eed);
        for _ in 0..3000 {
            let mut b = good.clone();
            for _ in 0..(1 + rng.next() % 8) {
                let pos = (rng.next() as usize) % b.len();
                b[pos] = rng.next() as u8;
            }
            if rng.next() % 4 == 0 {
                let cut = (rng.next() as usize) % b.len();
                b.truncate(cut);
            }
            exercise(&b);
        }
    }
}
