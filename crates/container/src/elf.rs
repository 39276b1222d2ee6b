//! A small, bounded ELF reader: just what `ldconfig` and the CUDA compat
//! check need (class, machine, type, `DT_SONAME`, note sections by name).
//!
//! It reads through [`ReadAt`] at explicit offsets, so a library opened
//! inside a container root is never read whole: only the ELF header, the
//! program or section headers and the few bytes they point at, each read
//! capped. Any input gives a value or an [`ElfError`], never a panic.

use std::io;
use std::os::unix::fs::FileExt;

use gpuctk_ldcache::flags;

/// Why a file could not be read as ELF.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file does not start with the ELF magic.
    #[error("not an ELF file")]
    NotElf,
    /// A header or table points past the end of the file or is malformed.
    #[error("malformed ELF: {0}")]
    Malformed(&'static str),
    /// Reading failed.
    #[error("reading: {0}")]
    Io(#[from] io::Error),
}

/// Random access to bytes: a file (`pread`) or a slice.
pub trait ReadAt {
    /// Fills `buf` from `offset`; returns how many bytes were available
    /// (less than `buf.len()` only at the end of the data).
    fn read_at_most(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
}

impl ReadAt for [u8] {
    fn read_at_most(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= self.len() {
            return Ok(0);
        }
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

impl ReadAt for std::fs::File {
    fn read_at_most(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            // An offset from the file may sit near u64::MAX: past it there is nothing to read.
            let Some(at) = offset.checked_add(done as u64) else {
                break;
            };
            match self.read_at(&mut buf[done..], at) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

/// ELF file type `ET_DYN` (shared objects and PIE executables).
pub const ET_DYN: u16 = 3;
/// Machine `EM_386`.
pub const EM_386: u16 = 3;
/// Machine `EM_X86_64`.
pub const EM_X86_64: u16 = 62;
/// Machine `EM_AARCH64`.
pub const EM_AARCH64: u16 = 183;
/// Machine `EM_PPC64`.
pub const EM_PPC64: u16 = 21;
/// Machine `EM_S390`.
pub const EM_S390: u16 = 22;
/// Machine `EM_RISCV`.
pub const EM_RISCV: u16 = 243;
/// Section type `SHT_NOTE`.
pub const SHT_NOTE: u32 = 7;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;

/// Limits on what is read, whatever the headers claim.
const MAX_PHNUM: usize = 4096;
const MAX_SHNUM: usize = 65535;
const MAX_DYNAMIC: u64 = 1 << 20;
const MAX_SECTION: u64 = 1 << 20;
const MAX_STRING: usize = 4096;

/// 32- or 64-bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// ELFCLASS32.
    Elf32,
    /// ELFCLASS64.
    Elf64,
}

/// The ELF header fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Class.
    pub class: Class,
    /// Little-endian data encoding.
    pub little_endian: bool,
    /// `e_type`.
    pub e_type: u16,
    /// `e_machine`.
    pub machine: u16,
    /// `e_flags`.
    pub e_flags: u32,
    phoff: u64,
    phentsize: u16,
    phnum: u16,
    shoff: u64,
    shentsize: u16,
    shnum: u16,
    shstrndx: u16,
}

/// What ldconfig needs to know about a shared library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryInfo {
    /// The ELF header.
    pub header: Header,
    /// `DT_SONAME`, if any.
    pub soname: Option<String>,
}

impl LibraryInfo {
    /// A shared object with a soname.
    pub fn is_shared_library(&self) -> bool {
        self.header.e_type == ET_DYN && self.soname.is_some()
    }

    /// The `ld.so.cache` flags for this library (type | ABI), as glibc's
    /// ldconfig assigns them, or `None` for an architecture we do not map.
    pub fn cache_flags(&self) -> Option<i32> {
        let h = &self.header;
        let abi = match (h.machine, h.class) {
            (EM_X86_64, Class::Elf64) => flags::FLAG_X8664_LIB64,
            (EM_X86_64, Class::Elf32) => flags::FLAG_X8664_LIBX32,
            (EM_386, Class::Elf32) => flags::FLAG_NONE,
            (EM_AARCH64, Class::Elf64) => flags::FLAG_AARCH64_LIB64,
            (EM_PPC64, Class::Elf64) => flags::FLAG_POWERPC_LIB64,
            (EM_S390, Class::Elf64) => flags::FLAG_S390_LIB64,
            // lp64d, what every riscv64 distribution uses (e_flags float ABI 4).
            (EM_RISCV, Class::Elf64) if h.e_flags & 0x6 == 0x4 => {
                flags::FLAG_RISCV_FLOAT_ABI_DOUBLE
            }
            _ => return None,
        };
        Some(abi | flags::FLAG_ELF_LIBC6)
    }
}

/// One ELF note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The owner (name) without its NUL.
    pub owner: String,
    /// `n_type`.
    pub note_type: u32,
    /// The descriptor bytes.
    pub desc: Vec<u8>,
}

struct Reader<'a, R: ReadAt + ?Sized> {
    src: &'a R,
    le: bool,
}

impl<R: ReadAt + ?Sized> Reader<'_, R> {
    /// Exactly `len` bytes at `offset`. Read in chunks, so a header that claims a huge table
    /// in a small file costs what the file holds, not an allocation of the claimed size.
    fn bytes(&self, offset: u64, len: usize, what: &'static str) -> Result<Vec<u8>, ElfError> {
        const CHUNK: usize = 64 << 10;
        let mut buf = Vec::with_capacity(len.min(CHUNK));
        while buf.len() < len {
            let at = offset
                .checked_add(buf.len() as u64)
                .ok_or(ElfError::Malformed(what))?;
            let start = buf.len();
            buf.resize(start + (len - start).min(CHUNK), 0);
            let n = self.src.read_at_most(at, &mut buf[start..])?;
            if start + n < buf.len() {
                return Err(ElfError::Malformed(what));
            }
        }
        Ok(buf)
    }

    fn u16(&self, b: &[u8], at: usize) -> u16 {
        let a = [b[at], b[at + 1]];
        if self.le {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }

    fn u32(&self, b: &[u8], at: usize) -> u32 {
        let a = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }

    fn u64(&self, b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        if self.le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }

    /// A word: 4 bytes in ELF32, 8 in ELF64.
    fn word(&self, class: Class, b: &[u8], at: usize) -> u64 {
        match class {
            Class::Elf32 => u64::from(self.u32(b, at)),
            Class::Elf64 => self.u64(b, at),
        }
    }

    /// A NUL-terminated string at `offset`, at most [`MAX_STRING`] bytes.
    fn cstring(&self, offset: u64) -> Result<String, ElfError> {
        let mut buf = vec![0u8; MAX_STRING];
        let n = self.src.read_at_most(offset, &mut buf)?;
        let end = buf[..n]
            .iter()
            .position(|&b| b == 0)
            .ok_or(ElfError::Malformed("unterminated string"))?;
        String::from_utf8(buf[..end].to_vec()).map_err(|_| ElfError::Malformed("string not UTF-8"))
    }
}

/// Reads and checks the ELF header.
pub fn header<R: ReadAt + ?Sized>(src: &R) -> Result<Header, ElfError> {
    let mut ident = [0u8; 64];
    let n = src.read_at_most(0, &mut ident)?;
    if n < 16 || &ident[..4] != b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    let class = match ident[4] {
        1 => Class::Elf32,
        2 => Class::Elf64,
        _ => return Err(ElfError::Malformed("unknown ELF class")),
    };
    let le = match ident[5] {
        1 => true,
        2 => false,
        _ => return Err(ElfError::Malformed("unknown data encoding")),
    };
    let need = match class {
        Class::Elf32 => 52,
        Class::Elf64 => 64,
    };
    if n < need {
        return Err(ElfError::Malformed("ELF header truncated"));
    }
    let r = Reader { src, le };
    let b = &ident[..];
    let h = match class {
        Class::Elf32 => Header {
            class,
            little_endian: le,
            e_type: r.u16(b, 16),
            machine: r.u16(b, 18),
            e_flags: r.u32(b, 36),
            phoff: u64::from(r.u32(b, 28)),
            shoff: u64::from(r.u32(b, 32)),
            phentsize: r.u16(b, 42),
            phnum: r.u16(b, 44),
            shentsize: r.u16(b, 46),
            shnum: r.u16(b, 48),
            shstrndx: r.u16(b, 50),
        },
        Class::Elf64 => Header {
            class,
            little_endian: le,
            e_type: r.u16(b, 16),
            machine: r.u16(b, 18),
            e_flags: r.u32(b, 48),
            phoff: r.u64(b, 32),
            shoff: r.u64(b, 40),
            phentsize: r.u16(b, 54),
            phnum: r.u16(b, 56),
            shentsize: r.u16(b, 58),
            shnum: r.u16(b, 60),
            shstrndx: r.u16(b, 62),
        },
    };
    Ok(h)
}

struct Phdr {
    p_type: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

fn program_headers<R: ReadAt + ?Sized>(src: &R, h: &Header) -> Result<Vec<Phdr>, ElfError> {
    let r = Reader {
        src,
        le: h.little_endian,
    };
    let (min, num) = (
        match h.class {
            Class::Elf32 => 32,
            Class::Elf64 => 56,
        },
        usize::from(h.phnum),
    );
    if num == 0 {
        return Ok(Vec::new());
    }
    if usize::from(h.phentsize) < min || num > MAX_PHNUM {
        return Err(ElfError::Malformed("bad program header table"));
    }
    let ent = usize::from(h.phentsize);
    // At most 65535 * 4096: no overflow, and `bytes` allocates only what the file holds.
    let table = r.bytes(h.phoff, ent * num, "program headers past end of file")?;
    Ok(table
        .chunks_exact(ent)
        .map(|b| match h.class {
            Class::Elf32 => Phdr {
                p_type: r.u32(b, 0),
                offset: u64::from(r.u32(b, 4)),
                vaddr: u64::from(r.u32(b, 8)),
                filesz: u64::from(r.u32(b, 16)),
            },
            Class::Elf64 => Phdr {
                p_type: r.u32(b, 0),
                offset: r.u64(b, 8),
                vaddr: r.u64(b, 16),
                filesz: r.u64(b, 32),
            },
        })
        .collect())
}

/// Header and `DT_SONAME` of a file, as ldconfig reads them: the soname
/// string is found through `DT_STRTAB`, a virtual address mapped to a file
/// offset through the `PT_LOAD` segments.
pub fn library_info<R: ReadAt + ?Sized>(src: &R) -> Result<LibraryInfo, ElfError> {
    let h = header(src)?;
    let phdrs = program_headers(src, &h)?;
    let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return Ok(LibraryInfo {
            header: h,
            soname: None,
        });
    };
    let r = Reader {
        src,
        le: h.little_endian,
    };
    let size = dynamic.filesz.min(MAX_DYNAMIC) as usize;
    let dynbytes = r.bytes(dynamic.offset, size, "dynamic section past end of file")?;
    let ent = match h.class {
        Class::Elf32 => 8,
        Class::Elf64 => 16,
    };
    let (mut strtab, mut soname_off) = (None, None);
    for d in dynbytes.chunks_exact(ent) {
        let tag = r.word(h.class, d, 0);
        let val = r.word(h.class, d, ent / 2);
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(val),
            DT_SONAME => soname_off = Some(val),
            _ => {}
        }
    }
    let soname = match (strtab, soname_off) {
        (Some(vaddr), Some(off)) => {
            let base = phdrs
                .iter()
                .filter(|p| p.p_type == PT_LOAD)
                .find(|p| vaddr >= p.vaddr && vaddr - p.vaddr < p.filesz)
                .ok_or(ElfError::Malformed("DT_STRTAB outside every PT_LOAD"))
                .and_then(|p| {
                    // Both come from the file: an offset near u64::MAX must not overflow.
                    p.offset
                        .checked_add(vaddr - p.vaddr)
                        .ok_or(ElfError::Malformed(
                            "DT_STRTAB maps past the largest offset",
                        ))
                })?;
            let at = base
                .checked_add(off)
                .ok_or(ElfError::Malformed("DT_SONAME offset overflows"))?;
            Some(r.cstring(at)?)
        }
        _ => None,
    };
    Ok(LibraryInfo { header: h, soname })
}

/// The notes of the section named `name` if it exists and is `SHT_NOTE`
/// (`Ok(None)` otherwise). Needs the section headers, which a stripped
/// library still has.
pub fn note_section<R: ReadAt + ?Sized>(
    src: &R,
    name: &str,
) -> Result<Option<Vec<Note>>, ElfError> {
    let h = header(src)?;
    let r = Reader {
        src,
        le: h.little_endian,
    };
    let num = usize::from(h.shnum);
    if h.shoff == 0 || num == 0 {
        return Ok(None);
    }
    let min = match h.class {
        Class::Elf32 => 40,
        Class::Elf64 => 64,
    };
    let ent = usize::from(h.shentsize);
    if ent < min || num > MAX_SHNUM || usize::from(h.shstrndx) >= num {
        return Err(ElfError::Malformed("bad section header table"));
    }
    let table = r.bytes(h.shoff, ent * num, "section headers past end of file")?;
    struct Shdr {
        name: u32,
        sh_type: u32,
        offset: u64,
        size: u64,
        align: u64,
    }
    let shdrs: Vec<Shdr> = table
        .chunks_exact(ent)
        .map(|b| match h.class {
            Class::Elf32 => Shdr {
                name: r.u32(b, 0),
                sh_type: r.u32(b, 4),
                offset: u64::from(r.u32(b, 16)),
                size: u64::from(r.u32(b, 20)),
                align: u64::from(r.u32(b, 32)),
            },
            Class::Elf64 => Shdr {
                name: r.u32(b, 0),
                sh_type: r.u32(b, 4),
                offset: r.u64(b, 24),
                size: r.u64(b, 32),
                align: r.u64(b, 48),
            },
        })
        .collect();
    let strtab = &shdrs[usize::from(h.shstrndx)];
    if strtab.size > MAX_SECTION {
        return Err(ElfError::Malformed("section name table too large"));
    }
    let names = r.bytes(
        strtab.offset,
        strtab.size as usize,
        "section name table past end of file",
    )?;
    let section = shdrs.iter().find(|s| {
        let start = s.name as usize;
        start < names.len() && {
            let rest = &names[start..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            &rest[..end] == name.as_bytes()
        }
    });
    let Some(section) = section else {
        return Ok(None);
    };
    if section.sh_type != SHT_NOTE {
        return Ok(None);
    }
    if section.size > MAX_SECTION {
        return Err(ElfError::Malformed("note section too large"));
    }
    let data = r.bytes(
        section.offset,
        section.size as usize,
        "note section past end of file",
    )?;
    let align = if section.align == 8 { 8 } else { 4 };
    parse_notes(&data, h.little_endian, align).map(Some)
}

/// Parses a sequence of notes (`namesz, descsz, type, name, desc`, name
/// and desc padded to `align`).
pub fn parse_notes(data: &[u8], little_endian: bool, align: usize) -> Result<Vec<Note>, ElfError> {
    let r = Reader {
        src: data,
        le: little_endian,
    };
    let align = align.max(1);
    // Sizes come from the file; on 32-bit targets a u32 size near the top must not overflow.
    let pad = |n: usize| n.div_ceil(align).checked_mul(align);
    let mut notes = Vec::new();
    let mut at = 0usize;
    while data.len() - at >= 12 {
        let namesz = r.u32(data, at) as usize;
        let descsz = r.u32(data, at + 4) as usize;
        let note_type = r.u32(data, at + 8);
        at += 12;
        let name_end = at
            .checked_add(namesz)
            .filter(|&e| e <= data.len())
            .ok_or(ElfError::Malformed("note name past end of section"))?;
        let owner_bytes = &data[at..name_end];
        let owner_len = owner_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(owner_bytes.len());
        let owner = String::from_utf8_lossy(&owner_bytes[..owner_len]).into_owned();
        at = pad(namesz)
            .and_then(|p| at.checked_add(p))
            .ok_or(ElfError::Malformed("note overflows"))?;
        let desc_end = at
            .checked_add(descsz)
            .filter(|&e| e <= data.len())
            .ok_or(ElfError::Malformed("note descriptor past end of section"))?;
        let desc = data[at..desc_end].to_vec();
        notes.push(Note {
            owner,
            note_type,
            desc,
        });
        at = pad(descsz)
            .map_or(usize::MAX, |p| at.saturating_add(p))
            .min(data.len());
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_elf_and_truncation() {
        assert!(matches!(header(&b"hello"[..]), Err(ElfError::NotElf)));
        assert!(matches!(header(&b""[..]), Err(ElfError::NotElf)));
        let mut short = b"\x7fELF\x02\x01\x01".to_vec();
        short.resize(20, 0);
        assert!(matches!(header(&short[..]), Err(ElfError::Malformed(_))));
    }

    #[test]
    fn reads_this_systems_libc() {
        // Any glibc system has it; the test binary itself links to it.
        let path = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
        ]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("libc.so.6");
        let f = std::fs::File::open(path).unwrap();
        let info = library_info(&f).unwrap();
        assert_eq!(info.soname.as_deref(), Some("libc.so.6"));
        assert!(info.is_shared_library());
        assert_eq!(info.cache_flags(), Some(flags::NATIVE_FLAGS));
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
        assert!(note_section(&b[..], ".x").is_err());
        for cut in 0..64 {
            let _ = library_info(&b[..cut]);
            let _ = note_section(&b[..cut], ".x");
        }
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
                matches!(library_info(&b[..]), Err(ElfError::Malformed(_))),
                "offset {offset:#x}"
            );
            // Through a file too: pread at offsets past i64::MAX.
            let mut f = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut f, &b).unwrap();
            assert!(library_info(&f).is_err(), "offset {offset:#x}");
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
            Err(ElfError::Malformed(_))
        ));
        b[32..40].copy_from_slice(&(u64::MAX - 100).to_le_bytes());
        b[54..56].copy_from_slice(&u16::MAX.to_le_bytes());
        b[56..58].copy_from_slice(&4096u16.to_le_bytes());
        assert!(matches!(library_info(&b[..]), Err(ElfError::Malformed(_))));
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
}
