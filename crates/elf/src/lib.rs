//! gpuctk-elf: the one ELF reader of gpuctk, for driver libraries on the host, for files in a
//! hostile container image and for what the mock host writes.
//!
//! It reads through [`ReadAt`] at explicit offsets, so a 60 MB `libcuda.so` or a library opened
//! inside a container root is never read whole: only the ELF header, the program or section
//! headers and the few bytes they point at. Every read is capped whatever the headers claim,
//! every offset is checked before it is added, and the work is bounded by the size of the input:
//! any input gives a value or an [`Error`], never a panic and never a huge allocation.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::io;
use std::os::unix::fs::FileExt;

#[cfg(test)]
mod tests;

/// Why a file could not be read as ELF.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file does not start with the ELF magic (a linker script, a text file, an empty file).
    #[error("not an ELF file")]
    NotElf,
    /// A header or table extends past the end of the file.
    #[error("truncated ELF: {0} extends past the end of the file")]
    Truncated(&'static str),
    /// A header field or table is out of range or inconsistent.
    #[error("malformed ELF: {0}")]
    Malformed(&'static str),
    /// Reading failed.
    #[error("reading: {0}")]
    Io(#[from] io::Error),
}

/// Random access to bytes: a file (`pread`) or a slice.
pub trait ReadAt {
    /// Fills `buf` from `offset`; returns how many bytes were available (less than `buf.len()`
    /// only at the end of the data; 0 for an offset past the end, however large).
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

/// ELF file type `ET_EXEC` (executables that are not PIE).
pub const ET_EXEC: u16 = 2;
/// ELF file type `ET_DYN` (shared objects and PIE executables).
pub const ET_DYN: u16 = 3;
/// Machine `EM_386`.
pub const EM_386: u16 = 3;
/// Machine `EM_PPC64`.
pub const EM_PPC64: u16 = 21;
/// Machine `EM_S390`.
pub const EM_S390: u16 = 22;
/// Machine `EM_X86_64`.
pub const EM_X86_64: u16 = 62;
/// Machine `EM_AARCH64`.
pub const EM_AARCH64: u16 = 183;
/// Machine `EM_RISCV`.
pub const EM_RISCV: u16 = 243;
/// Section type `SHT_NOTE`.
pub const SHT_NOTE: u32 = 7;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;

/// Limits on what is read, whatever the headers claim.
const MAX_PHNUM: usize = 4096;
const MAX_SHNUM: usize = 65535;
/// 64 Ki entries of ELF64: far beyond any real object.
const MAX_DYNAMIC: u64 = 1 << 20;
const MAX_SECTION: u64 = 1 << 20;
/// A soname, a DT_NEEDED name or a PT_INTERP path (PATH_MAX).
const MAX_STRING: usize = 4096;
/// Real objects need a few dozen libraries; this bounds the string reads to 4 MiB.
const MAX_NEEDED: usize = 1024;

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
    /// `e_type` ([`ET_DYN`] for shared objects and PIE, [`ET_EXEC`]).
    pub e_type: u16,
    /// `e_machine` ([`EM_X86_64`], [`EM_AARCH64`], ...).
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

impl Header {
    /// ELFCLASS64.
    pub fn is_64(&self) -> bool {
        self.class == Class::Elf64
    }
}

/// An object's header and `DT_SONAME`: what ldconfig and host discovery need, at the cost of
/// one string read.
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
}

/// Everything [`object`] reads: header, `PT_INTERP`, `DT_SONAME` and `DT_NEEDED`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The ELF header.
    pub header: Header,
    /// `PT_INTERP` up to its NUL: the loader of a dynamically linked executable.
    pub interp: Option<String>,
    /// `DT_SONAME`, if any.
    pub soname: Option<String>,
    /// `DT_NEEDED` entries in order.
    pub needed: Vec<String>,
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
    fn bytes(&self, offset: u64, len: usize, what: &'static str) -> Result<Vec<u8>, Error> {
        const CHUNK: usize = 64 << 10;
        let mut buf = Vec::with_capacity(len.min(CHUNK));
        while buf.len() < len {
            let at = offset
                .checked_add(buf.len() as u64)
                .ok_or(Error::Truncated(what))?;
            let start = buf.len();
            buf.resize(start + (len - start).min(CHUNK), 0);
            let n = self.src.read_at_most(at, &mut buf[start..])?;
            if start + n < buf.len() {
                return Err(Error::Truncated(what));
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

    /// A NUL-terminated string of at most `max` bytes at `offset`.
    fn cstring(&self, offset: u64, max: usize) -> Result<String, Error> {
        let mut buf = vec![0u8; max.min(MAX_STRING)];
        let n = self.src.read_at_most(offset, &mut buf)?;
        let end = buf[..n]
            .iter()
            .position(|&b| b == 0)
            .ok_or(Error::Malformed("unterminated string"))?;
        buf.truncate(end);
        String::from_utf8(buf).map_err(|_| Error::Malformed("string is not UTF-8"))
    }
}

/// Reads and checks the ELF header.
pub fn header<R: ReadAt + ?Sized>(src: &R) -> Result<Header, Error> {
    const MAGIC: &[u8] = b"\x7fELF";
    let mut ident = [0u8; 64];
    let n = src.read_at_most(0, &mut ident)?;
    if n < MAGIC.len() {
        return Err(if n > 0 && MAGIC.starts_with(&ident[..n]) {
            Error::Truncated("the ELF header")
        } else {
            Error::NotElf
        });
    }
    if &ident[..4] != MAGIC {
        return Err(Error::NotElf);
    }
    if n < 16 {
        return Err(Error::Truncated("the ELF header"));
    }
    let class = match ident[4] {
        1 => Class::Elf32,
        2 => Class::Elf64,
        _ => return Err(Error::Malformed("unknown ELF class")),
    };
    let le = match ident[5] {
        1 => true,
        2 => false,
        _ => return Err(Error::Malformed("unknown data encoding")),
    };
    let need = match class {
        Class::Elf32 => 52,
        Class::Elf64 => 64,
    };
    if n < need {
        return Err(Error::Truncated("the ELF header"));
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

fn program_headers<R: ReadAt + ?Sized>(src: &R, h: &Header) -> Result<Vec<Phdr>, Error> {
    let r = Reader {
        src,
        le: h.little_endian,
    };
    let min = match h.class {
        Class::Elf32 => 32,
        Class::Elf64 => 56,
    };
    let num = usize::from(h.phnum);
    if num == 0 {
        return Ok(Vec::new());
    }
    if usize::from(h.phentsize) < min || num > MAX_PHNUM {
        return Err(Error::Malformed("bad program header table"));
    }
    let ent = usize::from(h.phentsize);
    // At most 65535 * 4096: no overflow, and `bytes` allocates only what the file holds.
    let table = r.bytes(h.phoff, ent * num, "the program header table")?;
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

/// The dynamic section's string references, before any string is read.
struct Dynamic {
    /// File offset of the string table and `DT_STRSZ`.
    strtab: Option<(u64, Option<u64>)>,
    soname: Option<u64>,
    needed: Vec<u64>,
}

fn dynamic<R: ReadAt + ?Sized>(
    src: &R,
    h: &Header,
    phdrs: &[Phdr],
    want_needed: bool,
) -> Result<Option<Dynamic>, Error> {
    let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return Ok(None);
    };
    let r = Reader {
        src,
        le: h.little_endian,
    };
    let size = dynamic.filesz.min(MAX_DYNAMIC) as usize;
    let dynbytes = r.bytes(dynamic.offset, size, "the dynamic section")?;
    let ent = match h.class {
        Class::Elf32 => 8,
        Class::Elf64 => 16,
    };
    let (mut strtab, mut strsz, mut soname, mut needed) = (None, None, None, Vec::new());
    for d in dynbytes.chunks_exact(ent) {
        let tag = r.word(h.class, d, 0);
        let val = r.word(h.class, d, ent / 2);
        match tag {
            DT_NULL => break,
            DT_NEEDED if want_needed => {
                if needed.len() == MAX_NEEDED {
                    return Err(Error::Malformed("more than 1024 DT_NEEDED entries"));
                }
                needed.push(val);
            }
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            DT_SONAME => soname = Some(val),
            _ => {}
        }
    }
    if soname.is_none() && needed.is_empty() {
        return Ok(Some(Dynamic {
            strtab: None,
            soname,
            needed,
        }));
    }
    let vaddr = strtab.ok_or(Error::Malformed("dynamic section has no DT_STRTAB"))?;
    // DT_STRTAB is a virtual address: mapped to a file offset through the PT_LOAD holding it.
    let offset = phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .find(|p| vaddr >= p.vaddr && vaddr - p.vaddr < p.filesz)
        .ok_or(Error::Malformed("DT_STRTAB is outside every PT_LOAD"))
        .and_then(|p| {
            // Both come from the file: an offset near u64::MAX must not overflow.
            p.offset
                .checked_add(vaddr - p.vaddr)
                .ok_or(Error::Malformed("DT_STRTAB maps past the largest offset"))
        })?;
    Ok(Some(Dynamic {
        strtab: Some((offset, strsz)),
        soname,
        needed,
    }))
}

impl Dynamic {
    /// The string at `off` in the dynamic string table: within `DT_STRSZ` when the object has
    /// one, at most [`MAX_STRING`] bytes.
    fn string<R: ReadAt + ?Sized>(&self, r: &Reader<'_, R>, off: u64) -> Result<String, Error> {
        let (base, size) = self
            .strtab
            .ok_or(Error::Malformed("dynamic section has no DT_STRTAB"))?;
        let max = match size {
            Some(size) if off >= size => {
                return Err(Error::Malformed("string offset past DT_STRSZ"))
            }
            Some(size) => usize::try_from(size - off).unwrap_or(MAX_STRING),
            None => MAX_STRING,
        };
        let at = base
            .checked_add(off)
            .ok_or(Error::Malformed("string offset overflows"))?;
        r.cstring(at, max)
    }
}

/// Bytes [`Headed`] reads at once from the start of an object: its ELF header and program
/// headers are there (right after the 64-byte header in every linker's output), and all of a
/// small library.
const HEAD: usize = 4096;

/// An object whose first [`HEAD`] bytes were read in one go: reads within them cost no call,
/// so the ELF header and the program headers are one `pread`, not two.
struct Headed<'a, R: ?Sized> {
    src: &'a R,
    head: Vec<u8>,
}

impl<'a, R: ReadAt + ?Sized> Headed<'a, R> {
    fn new(src: &'a R) -> io::Result<Headed<'a, R>> {
        let mut head = vec![0u8; HEAD];
        let n = src.read_at_most(0, &mut head)?;
        head.truncate(n);
        Ok(Headed { src, head })
    }
}

impl<R: ReadAt + ?Sized> ReadAt for Headed<'_, R> {
    fn read_at_most(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let held = self.head.len();
        // Shorter than asked for: that was the whole object.
        let whole = held < HEAD;
        match usize::try_from(offset) {
            Ok(start) if start < held => {
                let n = buf.len().min(held - start);
                buf[..n].copy_from_slice(&self.head[start..start + n]);
                if n == buf.len() || whole {
                    return Ok(n);
                }
                Ok(n + self.src.read_at_most(held as u64, &mut buf[n..])?)
            }
            _ if whole => Ok(0),
            _ => self.src.read_at_most(offset, buf),
        }
    }
}

/// Header and `DT_SONAME`, as ldconfig reads them: the soname string is found through
/// `DT_STRTAB`, a virtual address mapped to a file offset through the `PT_LOAD` segments.
pub fn library_info<R: ReadAt + ?Sized>(src: &R) -> Result<LibraryInfo, Error> {
    let src = &Headed::new(src)?;
    let header = header(src)?;
    let phdrs = program_headers(src, &header)?;
    let soname = match dynamic(src, &header, &phdrs, false)? {
        Some(d) => match d.soname {
            Some(off) => Some(d.string(
                &Reader {
                    src,
                    le: header.little_endian,
                },
                off,
            )?),
            None => None,
        },
        None => None,
    };
    Ok(LibraryInfo { header, soname })
}

/// Header, `PT_INTERP`, `DT_SONAME` and every `DT_NEEDED` (at most 1024).
pub fn object<R: ReadAt + ?Sized>(src: &R) -> Result<Object, Error> {
    let src = &Headed::new(src)?;
    let header = header(src)?;
    let phdrs = program_headers(src, &header)?;
    let r = Reader {
        src,
        le: header.little_endian,
    };
    let interp = match phdrs.iter().find(|p| p.p_type == PT_INTERP) {
        Some(p) => {
            let len = usize::try_from(p.filesz.min(MAX_STRING as u64)).unwrap_or(MAX_STRING);
            let raw = r.bytes(p.offset, len, "PT_INTERP")?;
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            Some(
                String::from_utf8(raw[..end].to_vec())
                    .map_err(|_| Error::Malformed("PT_INTERP is not UTF-8"))?,
            )
        }
        None => None,
    };
    let mut object = Object {
        header,
        interp,
        soname: None,
        needed: Vec::new(),
    };
    if let Some(d) = dynamic(src, &header, &phdrs, true)? {
        if let Some(off) = d.soname {
            object.soname = Some(d.string(&r, off)?);
        }
        for &off in &d.needed {
            object.needed.push(d.string(&r, off)?);
        }
    }
    Ok(object)
}

/// The notes of the section named `name` if it exists and is `SHT_NOTE` (`Ok(None)`
/// otherwise). Needs the section headers, which a stripped library still has.
pub fn note_section<R: ReadAt + ?Sized>(src: &R, name: &str) -> Result<Option<Vec<Note>>, Error> {
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
        return Err(Error::Malformed("bad section header table"));
    }
    let table = r.bytes(h.shoff, ent * num, "the section header table")?;
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
        return Err(Error::Malformed("section name table too large"));
    }
    let names = r.bytes(
        strtab.offset,
        strtab.size as usize,
        "the section name table",
    )?;
    // Compares at most `name.len() + 1` bytes per section, never scans to a NUL: 65535 sections
    // over a 1 MiB table without NULs would otherwise cost 64 G comparisons.
    let wanted = name.as_bytes();
    let section = shdrs.iter().find(|s| {
        names.get(s.name as usize..).is_some_and(|rest| {
            rest.starts_with(wanted) && rest.get(wanted.len()).is_none_or(|&b| b == 0)
        })
    });
    let Some(section) = section else {
        return Ok(None);
    };
    if section.sh_type != SHT_NOTE {
        return Ok(None);
    }
    if section.size > MAX_SECTION {
        return Err(Error::Malformed("note section too large"));
    }
    let data = r.bytes(section.offset, section.size as usize, "the note section")?;
    let align = if section.align == 8 { 8 } else { 4 };
    parse_notes(&data, h.little_endian, align).map(Some)
}

/// Parses a sequence of notes (`namesz, descsz, type, name, desc`, name and desc padded to
/// `align`).
pub fn parse_notes(data: &[u8], little_endian: bool, align: usize) -> Result<Vec<Note>, Error> {
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
            .ok_or(Error::Malformed("note name past end of section"))?;
        let owner_bytes = &data[at..name_end];
        let owner_len = owner_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(owner_bytes.len());
        let owner = String::from_utf8_lossy(&owner_bytes[..owner_len]).into_owned();
        at = pad(namesz)
            .and_then(|p| at.checked_add(p))
            .ok_or(Error::Malformed("note overflows"))?;
        let desc_end = at
            .checked_add(descsz)
            .filter(|&e| e <= data.len())
            .ok_or(Error::Malformed("note descriptor past end of section"))?;
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
