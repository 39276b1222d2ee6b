//! Minimal reader for 64-bit little-endian ELF files: the program
//! interpreter, DT_SONAME and DT_NEEDED. Enough to check that busybox is
//! static and to find which host libraries the fake binaries need.
//! Pure and bounds-checked: malformed input gives an error, never a panic.

/// What [`parse`] extracts from an ELF file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElfInfo {
    /// `e_type`: 2 executable, 3 shared object / PIE.
    pub kind: u16,
    /// `e_machine`: 62 x86-64, 183 AArch64.
    pub machine: u16,
    /// PT_INTERP contents, for dynamically linked executables.
    pub interp: Option<String>,
    /// DT_SONAME.
    pub soname: Option<String>,
    /// DT_NEEDED entries in order.
    pub needed: Vec<String>,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;

fn slice(b: &[u8], off: u64, len: u64) -> Result<&[u8], String> {
    let start = usize::try_from(off).map_err(|_| "offset overflow".to_string())?;
    let len = usize::try_from(len).map_err(|_| "length overflow".to_string())?;
    let end = start
        .checked_add(len)
        .ok_or_else(|| "range overflow".to_string())?;
    b.get(start..end)
        .ok_or_else(|| format!("range {start}..{end} outside file of {} bytes", b.len()))
}

fn u16_at(b: &[u8], off: u64) -> Result<u16, String> {
    let s = slice(b, off, 2)?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: u64) -> Result<u32, String> {
    let s = slice(b, off, 4)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], off: u64) -> Result<u64, String> {
    let s = slice(b, off, 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

fn c_string(b: &[u8], off: u64) -> Result<String, String> {
    let start = usize::try_from(off).map_err(|_| "offset overflow".to_string())?;
    let rest = b
        .get(start..)
        .ok_or_else(|| format!("string at {start} outside file"))?;
    let end = rest
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| format!("unterminated string at {start}"))?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

struct Phdr {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

/// Parse `bytes` as an ELF64 little-endian file.
pub fn parse(bytes: &[u8]) -> Result<ElfInfo, String> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err("only 64-bit little-endian ELF is supported".into());
    }
    let mut info = ElfInfo {
        kind: u16_at(bytes, 0x10)?,
        machine: u16_at(bytes, 0x12)?,
        ..ElfInfo::default()
    };
    let phoff = u64_at(bytes, 0x20)?;
    let phentsize = u64::from(u16_at(bytes, 0x36)?);
    let phnum = u64::from(u16_at(bytes, 0x38)?);
    if phnum > 0 && phentsize < 56 {
        return Err(format!("program header entry size {phentsize} too small"));
    }
    let mut phdrs = Vec::new();
    for i in 0..phnum {
        let base = phoff
            .checked_add(i * phentsize)
            .ok_or_else(|| "program header overflow".to_string())?;
        phdrs.push(Phdr {
            kind: u32_at(bytes, base)?,
            offset: u64_at(bytes, base + 8)?,
            vaddr: u64_at(bytes, base + 16)?,
            filesz: u64_at(bytes, base + 32)?,
        });
    }
    for p in phdrs.iter().filter(|p| p.kind == PT_INTERP) {
        let raw = slice(bytes, p.offset, p.filesz)?;
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        info.interp = Some(String::from_utf8_lossy(&raw[..end]).into_owned());
    }
    let Some(dynamic) = phdrs.iter().find(|p| p.kind == PT_DYNAMIC) else {
        return Ok(info);
    };
    let mut entries = Vec::new();
    let mut strtab = None;
    for i in 0..dynamic.filesz / 16 {
        let tag = u64_at(bytes, dynamic.offset + i * 16)?;
        let val = u64_at(bytes, dynamic.offset + i * 16 + 8)?;
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(val),
            DT_NEEDED | DT_SONAME => entries.push((tag, val)),
            _ => {}
        }
    }
    if entries.is_empty() {
        return Ok(info);
    }
    let strtab = strtab.ok_or_else(|| "dynamic section without DT_STRTAB".to_string())?;
    // DT_STRTAB is a virtual address; map it back through the PT_LOAD that covers it.
    let strtab_off = phdrs
        .iter()
        .filter(|p| p.kind == PT_LOAD)
        .find(|p| strtab >= p.vaddr && strtab - p.vaddr < p.filesz)
        .map(|p| strtab - p.vaddr + p.offset)
        .ok_or_else(|| format!("DT_STRTAB {strtab:#x} not in any PT_LOAD"))?;
    for (tag, val) in entries {
        let off = strtab_off
            .checked_add(val)
            .ok_or_else(|| "string offset overflow".to_string())?;
        let s = c_string(bytes, off)?;
        if tag == DT_SONAME {
            info.soname = Some(s);
        } else {
            info.needed.push(s);
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage_without_panicking() {
        assert!(parse(b"").is_err());
        assert!(parse(b"not an elf at all, definitely not").is_err());
        let mut hdr = vec![0u8; 64];
        hdr[..4].copy_from_slice(b"\x7fELF");
        hdr[4] = 2;
        hdr[5] = 1;
        // Program headers pointing far outside the file.
        hdr[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        hdr[0x36] = 56;
        hdr[0x38] = 3;
        assert!(parse(&hdr).is_err());
    }

    #[test]
    fn parses_embedded_artifacts() {
        let cuda = parse(crate::artifacts::LIBCUDA).unwrap();
        assert_eq!(cuda.soname.as_deref(), Some("libcuda.so.1"));
        assert!(cuda.interp.is_none());
        let smi = parse(crate::artifacts::NVIDIA_SMI).unwrap();
        assert!(smi.needed.iter().any(|n| n == "libnvidia-ml.so.1"));
        assert!(smi.interp.is_some());
    }
}
