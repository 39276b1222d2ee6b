//! A minimal ELF reader: just enough to tell a real shared object from a corrupt one and to read
//! its `DT_SONAME` and `DT_NEEDED` entries.
//!
//! It reads only the headers, the program headers and the dynamic section through positioned
//! reads, so a 60 MB `libcuda.so` costs a handful of small reads, not a full read.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Why a file is not a usable ELF object.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be read.
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    /// The first bytes are not `\x7fELF`.
    #[error("not an ELF file (bad magic)")]
    BadMagic,
    /// A header field is out of range.
    #[error("corrupt ELF: {0}")]
    Corrupt(&'static str),
    /// A structure extends past the end of the file.
    #[error("truncated ELF: {0} extends past the end of the file")]
    Truncated(&'static str),
}

/// What we learn from an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// 64-bit (ELFCLASS64) or 32-bit.
    pub is_64: bool,
    /// `e_machine` (62 = x86_64, 183 = aarch64, 3 = i386).
    pub machine: u16,
    /// `e_type` is ET_DYN (shared object or PIE).
    pub is_dyn: bool,
    /// `DT_SONAME`, if the object has one.
    pub soname: Option<String>,
    /// `DT_NEEDED` entries in order.
    pub needed: Vec<String>,
}

trait ReadAt {
    fn len(&self) -> io::Result<u64>;
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, off)
    }
}

impl ReadAt for &[u8] {
    fn len(&self) -> io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let start = usize::try_from(off).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        let src = self.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Read the ELF file at `path`.
pub fn read_file(path: &std::path::Path) -> Result<ElfInfo, ElfError> {
    let f = File::open(path)?;
    parse_from(&f)
}

/// Parse an ELF image held in memory.
pub fn parse(bytes: &[u8]) -> Result<ElfInfo, ElfError> {
    parse_from(&bytes)
}

struct Fields {
    le: bool,
    is_64: bool,
}

impl Fields {
    fn u16(&self, b: &[u8], o: usize) -> u16 {
        let a = [b[o], b[o + 1]];
        if self.le {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }
    fn u32(&self, b: &[u8], o: usize) -> u32 {
        let a = [b[o], b[o + 1], b[o + 2], b[o + 3]];
        if self.le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }
    fn u64(&self, b: &[u8], o: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        if self.le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }
    /// A word: 8 bytes in ELF64, 4 in ELF32.
    fn word(&self, b: &[u8], o: usize) -> u64 {
        if self.is_64 {
            self.u64(b, o)
        } else {
            u64::from(self.u32(b, o))
        }
    }
}

struct Load {
    vaddr: u64,
    offset: u64,
    filesz: u64,
}

fn read<R: ReadAt>(r: &R, off: u64, len: usize, what: &'static str) -> Result<Vec<u8>, ElfError> {
    let mut buf = vec![0u8; len];
    match r.read_exact_at(&mut buf, off) {
        Ok(()) => Ok(buf),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(ElfError::Truncated(what)),
        Err(e) => Err(ElfError::Io(e)),
    }
}

fn parse_from<R: ReadAt>(r: &R) -> Result<ElfInfo, ElfError> {
    let file_len = r.len()?;
    if file_len < 16 {
        return Err(if file_len >= 4 && read(r, 0, 4, "header")? != b"\x7fELF" {
            ElfError::BadMagic
        } else {
            ElfError::Truncated("the ELF header")
        });
    }
    let ident = read(r, 0, 16, "the ELF header")?;
    if &ident[..4] != b"\x7fELF" {
        return Err(ElfError::BadMagic);
    }
    let is_64 = match ident[4] {
        1 => false,
        2 => true,
        _ => return Err(ElfError::Corrupt("unknown ELF class")),
    };
    let le = match ident[5] {
        1 => true,
        2 => false,
        _ => return Err(ElfError::Corrupt("unknown byte order")),
    };
    let f = Fields { le, is_64 };
    let ehsize = if is_64 { 64 } else { 52 };
    let eh = read(r, 0, ehsize, "the ELF header")?;
    let e_type = f.u16(&eh, 16);
    let machine = f.u16(&eh, 18);
    let (phoff, phentsize, phnum) = if is_64 {
        (f.u64(&eh, 32), f.u16(&eh, 54), f.u16(&eh, 56))
    } else {
        (u64::from(f.u32(&eh, 28)), f.u16(&eh, 42), f.u16(&eh, 44))
    };
    let want_phent = if is_64 { 56 } else { 32 };
    if phnum > 0 && usize::from(phentsize) != want_phent {
        return Err(ElfError::Corrupt("program header entry size"));
    }
    let ph_len = usize::from(phnum) * want_phent;
    if phoff
        .checked_add(ph_len as u64)
        .is_none_or(|end| end > file_len)
    {
        return Err(ElfError::Truncated("the program header table"));
    }
    let ph = read(r, phoff, ph_len, "the program header table")?;
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..usize::from(phnum) {
        let o = i * want_phent;
        let p_type = f.u32(&ph, o);
        let (offset, vaddr, filesz) = if is_64 {
            (f.u64(&ph, o + 8), f.u64(&ph, o + 16), f.u64(&ph, o + 32))
        } else {
            (
                u64::from(f.u32(&ph, o + 4)),
                u64::from(f.u32(&ph, o + 8)),
                u64::from(f.u32(&ph, o + 16)),
            )
        };
        match p_type {
            1 => loads.push(Load {
                vaddr,
                offset,
                filesz,
            }),
            2 => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let mut info = ElfInfo {
        is_64,
        machine,
        is_dyn: e_type == 3,
        soname: None,
        needed: Vec::new(),
    };
    let Some((dyn_off, dyn_size)) = dynamic else {
        return Ok(info);
    };
    let entsize = if is_64 { 16 } else { 8 };
    // 64 Ki entries is far beyond any real object and bounds the allocation.
    let count = (dyn_size / entsize).min(65536);
    if dyn_off
        .checked_add(count * entsize)
        .is_none_or(|end| end > file_len)
    {
        return Err(ElfError::Truncated("the dynamic section"));
    }
    let dynb = read(
        r,
        dyn_off,
        (count * entsize) as usize,
        "the dynamic section",
    )?;
    let (mut strtab, mut strsz, mut soname_off, mut needed_offs) = (None, None, None, Vec::new());
    let half = entsize as usize / 2;
    for i in 0..count as usize {
        let o = i * entsize as usize;
        let tag = f.word(&dynb, o);
        let val = f.word(&dynb, o + half);
        match tag {
            0 => break,
            1 => needed_offs.push(val),
            5 => strtab = Some(val),
            10 => strsz = Some(val),
            14 => soname_off = Some(val),
            _ => {}
        }
    }
    if soname_off.is_none() && needed_offs.is_empty() {
        return Ok(info);
    }
    let strtab = strtab.ok_or(ElfError::Corrupt("dynamic section has no DT_STRTAB"))?;
    let strsz = strsz.ok_or(ElfError::Corrupt("dynamic section has no DT_STRSZ"))?;
    let segment = loads
        .iter()
        .find(|l| strtab >= l.vaddr && strtab - l.vaddr < l.filesz)
        .ok_or(ElfError::Corrupt(
            "DT_STRTAB is outside every loaded segment",
        ))?;
    // Every value here comes from the file: a segment offset near u64::MAX must be an error,
    // not an overflow (a panic in debug builds).
    let str_off = segment
        .offset
        .checked_add(strtab - segment.vaddr)
        .ok_or(ElfError::Corrupt(
            "DT_STRTAB maps past the largest file offset",
        ))?;
    let strsz = strsz.min(1 << 20);
    if str_off.checked_add(strsz).is_none_or(|end| end > file_len) {
        return Err(ElfError::Truncated("the dynamic string table"));
    }
    let strs = read(r, str_off, strsz as usize, "the dynamic string table")?;
    let get = |off: u64| -> Result<String, ElfError> {
        let start = usize::try_from(off).map_err(|_| ElfError::Corrupt("string offset"))?;
        let tail = strs
            .get(start..)
            .ok_or(ElfError::Corrupt("string offset past the string table"))?;
        let end = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or(ElfError::Corrupt("unterminated string"))?;
        String::from_utf8(tail[..end].to_vec())
            .map_err(|_| ElfError::Corrupt("string is not UTF-8"))
    };
    if let Some(o) = soname_off {
        info.soname = Some(get(o)?);
    }
    for o in needed_offs {
        info.needed.push(get(o)?);
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_libc() {
        // The test binary links libc; its DT_NEEDED must be readable.
        let exe = std::env::current_exe().unwrap();
        let info = read_file(&exe).unwrap();
        assert!(
            info.needed.iter().any(|n| n.starts_with("libc.so")),
            "{info:?}"
        );
    }

    #[test]
    fn rejects_non_elf_and_truncations() {
        assert!(matches!(
            parse(b"hello world, not an elf"),
            Err(ElfError::BadMagic)
        ));
        assert!(matches!(parse(b"\x7fEL"), Err(ElfError::Truncated(_))));
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for cut in [17, 40, 63, 64, 100, 500] {
            assert!(parse(&exe[..cut]).is_err(), "cut at {cut}");
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
            ph(1, off, vaddr, size);
        }
        ph(2, dyn_off, 0, 16 * dynamic.len() as u64);
        for &(tag, val) in dynamic {
            b.extend_from_slice(&tag.to_le_bytes());
            b.extend_from_slice(&val.to_le_bytes());
        }
        b.extend_from_slice(strings);
        b
    }

    #[test]
    fn crafted_object_reads() {
        let dyn_end = 64 + 56 * 2 + 16 * 4;
        let b = crafted(
            &[(0, 0, 4096)],
            &[(5, dyn_end), (10, 11), (14, 1), (0, 0)],
            b"\0libx.so.1\0",
        );
        let info = parse(&b).unwrap();
        assert_eq!(info.soname.as_deref(), Some("libx.so.1"));
    }

    /// Offsets near u64::MAX overflowed `offset + (strtab - vaddr)`: a panic in debug builds.
    #[test]
    fn segment_offsets_near_the_top_are_errors_not_overflows() {
        for offset in [u64::MAX, u64::MAX - 8, u64::MAX - 0xfff, 1 << 63] {
            let b = crafted(
                &[(offset, 0x1000, 0x10000)],
                &[(5, 0x1100), (10, 16), (14, 1), (0, 0)],
                b"\0libx.so.1\0",
            );
            assert!(
                matches!(
                    parse(&b),
                    Err(ElfError::Corrupt(_) | ElfError::Truncated(_))
                ),
                "offset {offset:#x}: {:?}",
                parse(&b)
            );
        }
        // A string table size near the top is bounded, not added blindly.
        let b = crafted(
            &[(0, 0, 4096)],
            &[(5, 8), (10, u64::MAX), (14, u64::MAX - 1), (0, 0)],
            b"\0",
        );
        assert!(parse(&b).is_err());
    }

    #[test]
    fn mutations_never_panic() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let head = &exe[..exe.len().min(8192)];
        for i in 0..head.len().min(1024) {
            let mut m = head.to_vec();
            m[i] ^= 0xff;
            let _ = parse(&m);
        }
    }
}
