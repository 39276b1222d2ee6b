//! The unit tests of the three readers this crate replaced (host discovery's, the container
//! hooks' and the mock host's), on the one reader.

use super::*;

fn this_systems_libc() -> &'static str {
    [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("libc.so.6")
}

#[test]
fn reads_our_own_executable() {
    // The test binary links libc; its DT_NEEDED and its loader must be readable, from the
    // file and from bytes alike.
    let exe = std::env::current_exe().unwrap();
    let f = std::fs::File::open(&exe).unwrap();
    let info = object(&f).unwrap();
    if cfg!(target_feature = "crt-static") {
        // Built static (the arm64 run under qemu-user): no loader, nothing needed.
        assert!(info.needed.is_empty() && info.interp.is_none(), "{info:?}");
    } else {
        assert!(
            info.needed.iter().any(|n| n.starts_with("libc.so")),
            "{info:?}"
        );
        assert!(
            info.interp.as_deref().is_some_and(|i| i.contains("ld-")),
            "{info:?}"
        );
    }
    let bytes = std::fs::read(&exe).unwrap();
    assert_eq!(object(&bytes[..]).unwrap(), info);
    assert_eq!(library_info(&f).unwrap().header, info.header);
}

#[test]
fn reads_this_systems_libc() {
    // Any glibc system has it; the test binary itself links to it.
    let f = std::fs::File::open(this_systems_libc()).unwrap();
    let info = library_info(&f).unwrap();
    assert_eq!(info.soname.as_deref(), Some("libc.so.6"));
    assert!(info.is_shared_library());
    assert!(info.header.is_64());
    let all = object(&f).unwrap();
    assert_eq!(all.soname, info.soname);
    assert!(
        all.needed.iter().any(|n| n.starts_with("ld-linux")),
        "{all:?}"
    );
}

#[test]
fn rejects_non_elf_and_truncation() {
    assert!(matches!(header(&b"hello"[..]), Err(Error::NotElf)));
    assert!(matches!(header(&b""[..]), Err(Error::NotElf)));
    assert!(matches!(
        object(&b"hello world, not an elf"[..]),
        Err(Error::NotElf)
    ));
    assert!(matches!(object(&b"\x7fEL"[..]), Err(Error::Truncated(_))));
    let mut short = b"\x7fELF\x02\x01\x01".to_vec();
    short.resize(20, 0);
    assert!(matches!(header(&short[..]), Err(Error::Truncated(_))));
    // A shared library (this system's libc): every cut loses its dynamic section.
    let exe = std::fs::read(this_systems_libc()).unwrap();
    for cut in [17, 40, 63, 64, 100, 500] {
        assert!(object(&exe[..cut]).is_err(), "cut at {cut}");
        assert!(library_info(&exe[..cut]).is_err(), "cut at {cut}");
    }
    // A library cut after its header names what is missing (host discovery's message says
    // "truncated" to the user, who should reinstall the driver).
    let e = library_info(&exe[..100]).unwrap_err();
    assert!(e.to_string().starts_with("truncated ELF"), "{e}");
}

#[test]
fn garbage_headers_do_not_panic() {
    // A 64-bit header claiming huge tables at absurd offsets.
    let mut b = [0u8; 64];
    b[..6].copy_from_slice(b"\x7fELF\x02\x01");
    b[16] = 3;
    b[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
    b[40..48].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    b[54] = 56;
    b[56] = 0xff;
    b[58] = 64;
    b[60] = 0xff;
    b[62] = 1;
    assert!(library_info(&b[..]).is_err());
    assert!(object(&b[..]).is_err());
    assert!(note_section(&b[..], ".x").is_err());
    for cut in 0..64 {
        let _ = library_info(&b[..cut]);
        let _ = object(&b[..cut]);
        let _ = note_section(&b[..cut], ".x");
    }
    // Program headers pointing far outside the file (the mock host's reader's test).
    let mut hdr = [0u8; 64];
    hdr[..4].copy_from_slice(b"\x7fELF");
    hdr[4] = 2;
    hdr[5] = 1;
    hdr[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
    hdr[0x36] = 56;
    hdr[0x38] = 3;
    assert!(object(&hdr[..]).is_err());
}

/// A little-endian ELF64 shared object: the given `PT_LOAD`s (offset, vaddr, filesz), a
/// `PT_DYNAMIC` holding `dynamic` (tag, value) and then `strings`.
fn crafted(loads: &[(u64, u64, u64)], dynamic: &[(u64, u64)], strings: &[u8]) -> Vec<u8> {
    let phnum = loads.len() + 1;
    let dyn_off = 64 + 56 * phnum as u64;
    let mut b = vec![0u8; 64];
    b[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    b[16] = 3; // ET_DYN
    b[18] = 62; // EM_X86_64
    b[32..40].copy_from_slice(&64u64.to_le_bytes());
    b[54] = 56;
    b[56] = phnum as u8;
    let mut ph = |t: u32, off: u64, vaddr: u64, size: u64| {
        let mut p = [0u8; 56];
        p[..4].copy_from_slice(&t.to_le_bytes());
        p[8..16].copy_from_slice(&off.to_le_bytes());
        p[16..24].copy_from_slice(&vaddr.to_le_bytes());
        p[32..40].copy_from_slice(&size.to_le_bytes());
        b.extend_from_slice(&p);
    };
    for &(off, vaddr, size) in loads {
        ph(PT_LOAD, off, vaddr, size);
    }
    ph(PT_DYNAMIC, dyn_off, 0, 16 * dynamic.len() as u64);
    for &(tag, val) in dynamic {
        b.extend_from_slice(&tag.to_le_bytes());
        b.extend_from_slice(&val.to_le_bytes());
    }
    b.extend_from_slice(strings);
    b
}

#[test]
fn crafted_object_reads() {
    let dyn_end = 64 + 56 * 2 + 16 * 3;
    let b = crafted(
        &[(0, 0, 4096)],
        &[(DT_STRTAB, dyn_end), (DT_SONAME, 1), (DT_NULL, 0)],
        b"\0libx.so.1\0",
    );
    let info = library_info(&b[..]).unwrap();
    assert_eq!(info.soname.as_deref(), Some("libx.so.1"));
    assert!(info.is_shared_library());
    assert_eq!(info.header.machine, EM_X86_64);

    // With DT_STRSZ and DT_NEEDED: names are read within the string table.
    let dyn_end = 64 + 56 * 2 + 16 * 5;
    let b = crafted(
        &[(0, 0, 4096)],
        &[
            (DT_STRTAB, dyn_end),
            (DT_STRSZ, 21),
            (DT_SONAME, 1),
            (DT_NEEDED, 11),
            (DT_NULL, 0),
        ],
        b"\0libx.so.1\0libc.so.6\0",
    );
    let o = object(&b[..]).unwrap();
    assert_eq!(o.soname.as_deref(), Some("libx.so.1"));
    assert_eq!(o.needed, ["libc.so.6"]);
    assert_eq!(o.interp, None);
    // A name offset at or past DT_STRSZ is an error, not a read beyond the table.
    let b = crafted(
        &[(0, 0, 4096)],
        &[
            (DT_STRTAB, dyn_end),
            (DT_STRSZ, 11),
            (DT_SONAME, 1),
            (DT_NEEDED, 11),
            (DT_NULL, 0),
        ],
        b"\0libx.so.1\0libc.so.6\0",
    );
    assert!(matches!(object(&b[..]), Err(Error::Malformed(_))));
    assert!(library_info(&b[..]).is_ok(), "the soname alone is fine");
}

#[test]
fn too_many_needed_entries_are_an_error() {
    let n = MAX_NEEDED + 1;
    let dyn_end = 64 + 56 * 2 + 16 * (n as u64 + 2);
    let mut dynamic = vec![(DT_STRTAB, dyn_end)];
    dynamic.extend(std::iter::repeat_n((DT_NEEDED, 1), n));
    dynamic.push((DT_NULL, 0));
    let b = crafted(&[(0, 0, 1 << 20)], &dynamic, b"\0libc.so.6\0");
    assert!(matches!(object(&b[..]), Err(Error::Malformed(_))));
    // ldconfig's reader does not read DT_NEEDED at all.
    assert!(library_info(&b[..]).is_ok());
}

/// Offsets near u64::MAX overflowed `vaddr - p_vaddr + p_offset`: a panic in debug builds.
#[test]
fn segment_offsets_near_the_top_are_errors_not_overflows() {
    for offset in [u64::MAX, u64::MAX - 8, u64::MAX - 0xfff, 1 << 63] {
        let b = crafted(
            &[(offset, 0x1000, 0x10000)],
            &[(DT_STRTAB, 0x1100), (DT_SONAME, 1), (DT_NULL, 0)],
            b"\0libx.so.1\0",
        );
        assert!(
            matches!(library_info(&b[..]), Err(Error::Malformed(_))),
            "offset {offset:#x}"
        );
        assert!(object(&b[..]).is_err(), "offset {offset:#x}");
        // Through a file too: pread at offsets past i64::MAX.
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &b).unwrap();
        assert!(library_info(&f).is_err(), "offset {offset:#x}");
        assert!(object(&f).is_err(), "offset {offset:#x}");
    }
    // A soname offset that overflows the string table base.
    let b = crafted(
        &[(0x100, 0, 0x1000)],
        &[
            (DT_STRTAB, 0x10),
            (DT_SONAME, u64::MAX - 0x20),
            (DT_NULL, 0),
        ],
        b"\0",
    );
    assert!(library_info(&b[..]).is_err());
    // A string table size near the top is bounded, not added blindly.
    let b = crafted(
        &[(0, 0, 4096)],
        &[
            (DT_STRTAB, 8),
            (DT_STRSZ, u64::MAX),
            (DT_SONAME, u64::MAX - 1),
            (DT_NULL, 0),
        ],
        b"\0",
    );
    assert!(library_info(&b[..]).is_err());
    assert!(object(&b[..]).is_err());
}

/// A header claiming 65535 section headers of 65535 bytes in a 64-byte file: an error,
/// without allocating the 4 GiB it claims.
#[test]
fn huge_claimed_tables_cost_what_the_file_holds() {
    let mut b = [0u8; 64];
    b[..6].copy_from_slice(b"\x7fELF\x02\x01");
    b[40..48].copy_from_slice(&64u64.to_le_bytes());
    b[58..60].copy_from_slice(&u16::MAX.to_le_bytes());
    b[60..62].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(matches!(
        note_section(&b[..], ".x"),
        Err(Error::Truncated(_))
    ));
    b[32..40].copy_from_slice(&(u64::MAX - 100).to_le_bytes());
    b[54..56].copy_from_slice(&u16::MAX.to_le_bytes());
    b[56..58].copy_from_slice(&4096u16.to_le_bytes());
    assert!(matches!(library_info(&b[..]), Err(Error::Truncated(_))));
}

/// 65535 section headers whose names all point into a 1 MiB name table without a NUL: the
/// lookup compares a few bytes per section instead of scanning the table each time.
#[test]
fn section_name_lookup_is_linear() {
    let shnum = 65535usize;
    let names = 1usize << 20;
    let shoff = 64u64;
    let names_off = shoff + 64 * shnum as u64;
    let mut b = vec![0u8; 64];
    b[..6].copy_from_slice(b"\x7fELF\x02\x01");
    b[40..48].copy_from_slice(&shoff.to_le_bytes());
    b[58..60].copy_from_slice(&64u16.to_le_bytes());
    b[60..62].copy_from_slice(&(shnum as u16).to_le_bytes());
    b[62..64].copy_from_slice(&0u16.to_le_bytes());
    for i in 0..shnum {
        let mut s = [0u8; 64];
        if i == 0 {
            s[24..32].copy_from_slice(&names_off.to_le_bytes());
            s[32..40].copy_from_slice(&(names as u64).to_le_bytes());
        }
        b.extend_from_slice(&s);
    }
    b.resize(b.len() + names, b'a');
    let start = std::time::Instant::now();
    assert!(matches!(note_section(&b[..], ".note.x"), Ok(None)));
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
}

#[test]
fn note_sizes_near_the_top_are_errors() {
    let mut d = Vec::new();
    d.extend_from_slice(&u32::MAX.to_le_bytes());
    d.extend_from_slice(&u32::MAX.to_le_bytes());
    d.extend_from_slice(&1u32.to_le_bytes());
    d.extend_from_slice(b"NVIDIA\0\0");
    for align in [0, 1, 4, 8] {
        assert!(parse_notes(&d, true, align).is_err());
    }
}

#[test]
fn parses_notes_with_padding() {
    let mut d = Vec::new();
    let name = b"NVIDIA Corporation\0";
    let desc = br#"{"CUDA Version":"12.9"}"#;
    d.extend_from_slice(&(name.len() as u32).to_le_bytes());
    d.extend_from_slice(&(desc.len() as u32).to_le_bytes());
    d.extend_from_slice(&1u32.to_le_bytes());
    d.extend_from_slice(name);
    d.resize(d.len().div_ceil(4) * 4, 0);
    d.extend_from_slice(desc);
    d.resize(d.len().div_ceil(4) * 4, 0);
    let notes = parse_notes(&d, true, 4).unwrap();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].owner, "NVIDIA Corporation");
    assert_eq!(notes[0].note_type, 1);
    assert_eq!(notes[0].desc, desc.to_vec());
    // Truncated descriptor is an error, not a panic.
    assert!(parse_notes(&d[..d.len() - 8], true, 4).is_err());
}

#[test]
fn reads_a_note_section_of_this_systems_libc() {
    // glibc carries `.note.ABI-tag` (owner "GNU"); a name that is a prefix of another
    // section's name must not match it.
    let f = std::fs::File::open(this_systems_libc()).unwrap();
    if let Some(notes) = note_section(&f, ".note.ABI-tag").unwrap() {
        assert!(notes.iter().all(|n| n.owner == "GNU"), "{notes:?}");
    }
    assert!(note_section(&f, ".note.ABI").unwrap().is_none());
    assert!(note_section(&f, ".no-such-section").unwrap().is_none());
}

#[test]
fn mutations_never_panic() {
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let head = &exe[..exe.len().min(8192)];
    for i in 0..head.len().min(1024) {
        let mut m = head.to_vec();
        m[i] ^= 0xff;
        let _ = object(&m[..]);
        let _ = library_info(&m[..]);
    }
}

/// A reader of bytes that counts its reads.
struct Counted<'a> {
    bytes: &'a [u8],
    reads: std::cell::Cell<usize>,
}

impl ReadAt for Counted<'_> {
    fn read_at_most(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.reads.set(self.reads.get() + 1);
        self.bytes.read_at_most(offset, buf)
    }
}

/// Regression (issue 21): the ELF header and the program headers come from one read of the
/// object's first page, so a library's soname costs three reads, not four (one per library
/// an image's folder holds, on every container's create); a library within that page costs
/// one. Reads across the page's end and past a short object's end give what the bytes hold.
#[test]
fn the_headers_come_from_one_read() {
    let libc = std::fs::read(this_systems_libc()).unwrap();
    let c = Counted {
        bytes: &libc,
        reads: Default::default(),
    };
    assert_eq!(library_info(&c).unwrap(), library_info(&libc[..]).unwrap());
    assert_eq!(c.reads.get(), 3);
    let head = Headed::new(&libc[..]).unwrap();
    for (offset, len) in [(0, 10), (4090, 12), (4096, 5), (100_000, 64)] {
        let mut got = vec![0u8; len];
        assert_eq!(head.read_at_most(offset, &mut got).unwrap(), len);
        assert_eq!(got, libc[offset as usize..offset as usize + len]);
    }
    let small = &libc[..1000];
    let head = Headed::new(small).unwrap();
    let mut got = vec![0u8; 64];
    assert_eq!(head.read_at_most(990, &mut got).unwrap(), 10);
    assert_eq!(head.read_at_most(5000, &mut got).unwrap(), 0);
}
