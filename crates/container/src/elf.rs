//! ldconfig's view of an ELF object: which `ld.so.cache` flags a library gets. The reader
//! itself is `gpuctk-elf`, shared with host discovery and the mock host, and re-exported here
//! under the names the hooks use.

use gpuctk_ldcache::flags;

pub use gpuctk_elf::{
    header, note_section, parse_notes, Class, Error as ElfError, Header, Note, ReadAt, EM_386,
    EM_AARCH64, EM_PPC64, EM_RISCV, EM_S390, EM_X86_64, ET_DYN, SHT_NOTE,
};

/// What ldconfig needs to know about a shared library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryInfo {
    /// The ELF header.
    pub header: Header,
    /// `DT_SONAME`, if any.
    pub soname: Option<String>,
}

/// Header and `DT_SONAME` of a file, read by [`gpuctk_elf::library_info`].
pub fn library_info<R: ReadAt + ?Sized>(src: &R) -> Result<LibraryInfo, ElfError> {
    let gpuctk_elf::LibraryInfo { header, soname } = gpuctk_elf::library_info(src)?;
    Ok(LibraryInfo { header, soname })
}

impl LibraryInfo {
    /// A shared object with a soname.
    pub fn is_shared_library(&self) -> bool {
        self.header.e_type == ET_DYN && self.soname.is_some()
    }

    /// The `ld.so.cache` flags for this library (type | ABI), as glibc's ldconfig assigns
    /// them, or `None` for an architecture we do not map.
    pub fn cache_flags(&self) -> Option<i32> {
        let h = &self.header;
        cache_flags_for(h.machine, h.class, h.e_flags)
    }
}

/// The `ld.so.cache` flags of a shared library with ELF header fields `e_machine`, class and
/// `e_flags` ([`LibraryInfo::cache_flags`]; host discovery keeps these three for each driver
/// library, so the shim need not read the file again).
pub fn cache_flags_for(machine: u16, class: Class, e_flags: u32) -> Option<i32> {
    let abi = match (machine, class) {
        (EM_X86_64, Class::Elf64) => flags::FLAG_X8664_LIB64,
        (EM_X86_64, Class::Elf32) => flags::FLAG_X8664_LIBX32,
        (EM_386, Class::Elf32) => flags::FLAG_NONE,
        (EM_AARCH64, Class::Elf64) => flags::FLAG_AARCH64_LIB64,
        (EM_PPC64, Class::Elf64) => flags::FLAG_POWERPC_LIB64,
        (EM_S390, Class::Elf64) => flags::FLAG_S390_LIB64,
        // lp64d, what every riscv64 distribution uses (e_flags float ABI 4).
        (EM_RISCV, Class::Elf64) if e_flags & 0x6 == 0x4 => flags::FLAG_RISCV_FLOAT_ABI_DOUBLE,
        _ => return None,
    };
    Some(abi | flags::FLAG_ELF_LIBC6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_systems_libc_gets_the_native_flags() {
        // This build's architecture's libc (under qemu-user the x86_64 one is visible too).
        let candidates: &[&str] = if cfg!(target_arch = "aarch64") {
            &[
                "/lib/aarch64-linux-gnu/libc.so.6",
                "/usr/aarch64-linux-gnu/lib/libc.so.6",
                "/lib64/libc.so.6",
            ]
        } else {
            &["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        };
        let path = candidates
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("libc.so.6");
        let f = std::fs::File::open(path).unwrap();
        let info = library_info(&f).unwrap();
        assert!(info.is_shared_library());
        assert_eq!(info.cache_flags(), Some(flags::NATIVE_FLAGS));
    }

    /// Real libraries of both architectures (this machine's and Debian's cross libc6 for the
    /// other, which scripts/setup.sh installs), whichever this build is: the ELF machine and
    /// class read from each, and the ld.so.cache flags glibc's ldconfig gives it (aarch64's
    /// `libc6,AArch64` is 0x0a03: ldcache's tests check that against Debian's aarch64 ldconfig).
    #[test]
    fn x86_64_and_aarch64_libraries_get_their_machine_and_flags() {
        for (paths, machine, number, flags) in [
            (
                &[
                    "/lib/x86_64-linux-gnu/libc.so.6",
                    "/usr/x86_64-linux-gnu/lib/libc.so.6",
                ],
                EM_X86_64,
                62,
                0x0303,
            ),
            (
                &[
                    "/usr/aarch64-linux-gnu/lib/libc.so.6",
                    "/lib/aarch64-linux-gnu/libc.so.6",
                ],
                EM_AARCH64,
                183,
                0x0a03,
            ),
        ] {
            assert_eq!(machine, number);
            let path = paths
                .iter()
                .find(|p| std::path::Path::new(p).exists())
                .unwrap_or_else(|| panic!("none of {paths:?} (scripts/setup.sh installs them)"));
            let f = std::fs::File::open(path).unwrap();
            let info = library_info(&f).unwrap();
            assert!(info.is_shared_library(), "{path}");
            assert_eq!(info.header.machine, machine, "{path}");
            assert_eq!(info.header.class, Class::Elf64, "{path}");
            assert_eq!(info.cache_flags(), Some(flags), "{path}");
        }
        assert_eq!(flags::FLAG_AARCH64_LIB64 | flags::FLAG_ELF_LIBC6, 0x0a03);
        assert_eq!(flags::FLAG_X8664_LIB64 | flags::FLAG_ELF_LIBC6, 0x0303);
    }
}
