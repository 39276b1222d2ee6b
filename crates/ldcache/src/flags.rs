//! The `flags` field of a cache entry: library type and architecture/ABI.
//!
//! glibc packs two things into one `i32`: the low byte says what kind of
//! library it is (`FLAG_ELF_LIBC6` for everything built against glibc), the
//! second byte says which ABI it was built for. The dynamic loader only
//! accepts entries whose flags match its own build (on x86_64 exactly
//! `0x0303`), which is why a cache can safely mix 32- and 64-bit libraries.
//! The values mirror `sysdeps/generic/ldconfig.h`.

/// Mask selecting the library type byte of `flags`.
pub const FLAG_TYPE_MASK: i32 = 0x00ff;
/// libc4 a.out library (historic).
pub const FLAG_LIBC4: i32 = 0x0000;
/// ELF library not linked against a known libc.
pub const FLAG_ELF: i32 = 0x0001;
/// ELF library linked against libc5.
pub const FLAG_ELF_LIBC5: i32 = 0x0002;
/// ELF library linked against glibc (libc.so.6).
pub const FLAG_ELF_LIBC6: i32 = 0x0003;

/// Mask selecting the architecture/ABI byte of `flags`.
pub const FLAG_REQUIRED_MASK: i32 = 0xff00;
/// No ABI requirement (i386 and other default 32-bit ABIs).
pub const FLAG_NONE: i32 = 0x0000;
/// 64-bit SPARC.
pub const FLAG_SPARC_LIB64: i32 = 0x0100;
/// IA-64.
pub const FLAG_IA64_LIB64: i32 = 0x0200;
/// x86-64 (LP64).
pub const FLAG_X8664_LIB64: i32 = 0x0300;
/// 64-bit s390x.
pub const FLAG_S390_LIB64: i32 = 0x0400;
/// 64-bit PowerPC.
pub const FLAG_POWERPC_LIB64: i32 = 0x0500;
/// MIPS64 n32 ABI.
pub const FLAG_MIPS64_LIBN32: i32 = 0x0600;
/// MIPS64 n64 ABI.
pub const FLAG_MIPS64_LIBN64: i32 = 0x0700;
/// x86-64 x32 ABI (ILP32).
pub const FLAG_X8664_LIBX32: i32 = 0x0800;
/// 32-bit ARM, hard-float ABI.
pub const FLAG_ARM_LIBHF: i32 = 0x0900;
/// AArch64 (LP64).
pub const FLAG_AARCH64_LIB64: i32 = 0x0a00;
/// 32-bit ARM, soft-float ABI.
pub const FLAG_ARM_LIBSF: i32 = 0x0b00;
/// MIPS o32 with NaN2008.
pub const FLAG_MIPS_LIB32_NAN2008: i32 = 0x0c00;
/// MIPS64 n32 with NaN2008.
pub const FLAG_MIPS64_LIBN32_NAN2008: i32 = 0x0d00;
/// MIPS64 n64 with NaN2008.
pub const FLAG_MIPS64_LIBN64_NAN2008: i32 = 0x0e00;
/// RISC-V soft-float ABI (RV32 or RV64: the flag does not say which).
pub const FLAG_RISCV_FLOAT_ABI_SOFT: i32 = 0x0f00;
/// RISC-V double-float ABI (RV32 or RV64: the flag does not say which).
pub const FLAG_RISCV_FLOAT_ABI_DOUBLE: i32 = 0x1000;
/// LoongArch soft-float ABI.
pub const FLAG_LARCH_FLOAT_ABI_SOFT: i32 = 0x1100;
/// LoongArch double-float ABI.
pub const FLAG_LARCH_FLOAT_ABI_DOUBLE: i32 = 0x1200;

/// The complete `flags` value that the dynamic loader of this build target
/// accepts (`_DL_CACHE_DEFAULT_ID`): ABI byte | `FLAG_ELF_LIBC6`.
///
/// x86_64 → `0x0303`, aarch64 → `0x0a03`. Targets without a dedicated ABI
/// byte (i386, generic) get `FLAG_ELF_LIBC6` alone.
pub const NATIVE_FLAGS: i32 = native_required() | FLAG_ELF_LIBC6;

const fn native_required() -> i32 {
    if cfg!(all(target_arch = "x86_64", target_pointer_width = "64")) {
        FLAG_X8664_LIB64
    } else if cfg!(all(target_arch = "x86_64", target_pointer_width = "32")) {
        FLAG_X8664_LIBX32
    } else if cfg!(target_arch = "aarch64") {
        FLAG_AARCH64_LIB64
    } else if cfg!(target_arch = "powerpc64") {
        FLAG_POWERPC_LIB64
    } else if cfg!(target_arch = "s390x") {
        FLAG_S390_LIB64
    } else if cfg!(target_arch = "sparc64") {
        FLAG_SPARC_LIB64
    } else if cfg!(target_arch = "riscv64") {
        // Every riscv64 Linux distribution uses the lp64d (double-float) ABI.
        FLAG_RISCV_FLOAT_ABI_DOUBLE
    } else if cfg!(target_arch = "loongarch64") {
        FLAG_LARCH_FLOAT_ABI_DOUBLE
    } else if cfg!(all(target_arch = "arm", target_abi = "eabihf")) {
        FLAG_ARM_LIBHF
    } else {
        FLAG_NONE
    }
}

/// Bit 62 of `hwcap`: the entry lives in a `glibc-hwcaps/<name>` subdirectory
/// and the low 32 bits index [`crate::Cache::hwcaps_subdirs`] (glibc ≥ 2.33).
pub const HWCAP_EXTENSION: u64 = 1 << 62;
/// Mask of the ISA level stored in bits 32..42 of an extension `hwcap`.
pub const HWCAP_ISA_LEVEL_MASK: u64 = (1 << 10) - 1;

/// If `hwcap` marks a glibc-hwcaps entry, the index of its subdirectory name.
///
/// Same test as glibc's `dl_cache_hwcap_extension`: only bit 62 may be set in
/// the upper half, ignoring the ISA level bits; anything else is some other
/// (legacy) hwcap value.
pub fn hwcap_extension_index(hwcap: u64) -> Option<u32> {
    if ((hwcap >> 32) & !HWCAP_ISA_LEVEL_MASK) == (HWCAP_EXTENSION >> 32) {
        Some(hwcap as u32)
    } else {
        None
    }
}

/// The architecture/ABI byte of an entry's flags, as a named value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// `0x0000`: no ABI requirement (i386, 32-bit PowerPC, generic).
    None,
    /// `0x0100`: 64-bit SPARC.
    Sparc64,
    /// `0x0200`: IA-64.
    Ia64,
    /// `0x0300`: x86-64.
    X8664,
    /// `0x0400`: s390x.
    S390x,
    /// `0x0500`: 64-bit PowerPC.
    PowerPc64,
    /// `0x0600`: MIPS64 n32.
    Mips64N32,
    /// `0x0700`: MIPS64 n64.
    Mips64N64,
    /// `0x0800`: x86-64 x32.
    X32,
    /// `0x0900`: ARM hard-float.
    ArmHf,
    /// `0x0a00`: AArch64.
    Aarch64,
    /// `0x0b00`: ARM soft-float.
    ArmSf,
    /// `0x0c00`: MIPS o32 NaN2008.
    MipsNan2008,
    /// `0x0d00`: MIPS64 n32 NaN2008.
    Mips64N32Nan2008,
    /// `0x0e00`: MIPS64 n64 NaN2008.
    Mips64N64Nan2008,
    /// `0x0f00`: RISC-V soft-float.
    RiscvSoft,
    /// `0x1000`: RISC-V double-float.
    RiscvDouble,
    /// `0x1100`: LoongArch soft-float.
    LarchSoft,
    /// `0x1200`: LoongArch double-float.
    LarchDouble,
    /// An ABI byte glibc does not define (yet); holds `flags & 0xff00`.
    Unknown(i32),
}

impl Arch {
    /// The arch of a complete `flags` value (only `flags & 0xff00` matters).
    pub fn from_flags(flags: i32) -> Arch {
        match flags & FLAG_REQUIRED_MASK {
            FLAG_NONE => Arch::None,
            FLAG_SPARC_LIB64 => Arch::Sparc64,
            FLAG_IA64_LIB64 => Arch::Ia64,
            FLAG_X8664_LIB64 => Arch::X8664,
            FLAG_S390_LIB64 => Arch::S390x,
            FLAG_POWERPC_LIB64 => Arch::PowerPc64,
            FLAG_MIPS64_LIBN32 => Arch::Mips64N32,
            FLAG_MIPS64_LIBN64 => Arch::Mips64N64,
            FLAG_X8664_LIBX32 => Arch::X32,
            FLAG_ARM_LIBHF => Arch::ArmHf,
            FLAG_AARCH64_LIB64 => Arch::Aarch64,
            FLAG_ARM_LIBSF => Arch::ArmSf,
            FLAG_MIPS_LIB32_NAN2008 => Arch::MipsNan2008,
            FLAG_MIPS64_LIBN32_NAN2008 => Arch::Mips64N32Nan2008,
            FLAG_MIPS64_LIBN64_NAN2008 => Arch::Mips64N64Nan2008,
            FLAG_RISCV_FLOAT_ABI_SOFT => Arch::RiscvSoft,
            FLAG_RISCV_FLOAT_ABI_DOUBLE => Arch::RiscvDouble,
            FLAG_LARCH_FLOAT_ABI_SOFT => Arch::LarchSoft,
            FLAG_LARCH_FLOAT_ABI_DOUBLE => Arch::LarchDouble,
            other => Arch::Unknown(other),
        }
    }

    /// The arch of this build target (see [`NATIVE_FLAGS`]).
    pub fn native() -> Arch {
        Arch::from_flags(NATIVE_FLAGS)
    }

    /// The ABI byte as it appears in `flags` (e.g. `0x0300`).
    pub fn required_flag(self) -> i32 {
        match self {
            Arch::None => FLAG_NONE,
            Arch::Sparc64 => FLAG_SPARC_LIB64,
            Arch::Ia64 => FLAG_IA64_LIB64,
            Arch::X8664 => FLAG_X8664_LIB64,
            Arch::S390x => FLAG_S390_LIB64,
            Arch::PowerPc64 => FLAG_POWERPC_LIB64,
            Arch::Mips64N32 => FLAG_MIPS64_LIBN32,
            Arch::Mips64N64 => FLAG_MIPS64_LIBN64,
            Arch::X32 => FLAG_X8664_LIBX32,
            Arch::ArmHf => FLAG_ARM_LIBHF,
            Arch::Aarch64 => FLAG_AARCH64_LIB64,
            Arch::ArmSf => FLAG_ARM_LIBSF,
            Arch::MipsNan2008 => FLAG_MIPS_LIB32_NAN2008,
            Arch::Mips64N32Nan2008 => FLAG_MIPS64_LIBN32_NAN2008,
            Arch::Mips64N64Nan2008 => FLAG_MIPS64_LIBN64_NAN2008,
            Arch::RiscvSoft => FLAG_RISCV_FLOAT_ABI_SOFT,
            Arch::RiscvDouble => FLAG_RISCV_FLOAT_ABI_DOUBLE,
            Arch::LarchSoft => FLAG_LARCH_FLOAT_ABI_SOFT,
            Arch::LarchDouble => FLAG_LARCH_FLOAT_ABI_DOUBLE,
            Arch::Unknown(v) => v & FLAG_REQUIRED_MASK,
        }
    }

    /// Whether libraries of this ABI use 64-bit pointers.
    ///
    /// `None` where the flag does not tell: RISC-V flags only carry the
    /// float ABI and are shared by RV32 and RV64, `Arch::None` covers several
    /// 32-bit targets but also any 64-bit target glibc gives no ABI byte,
    /// and unknown values are unknown.
    pub fn is_64bit(self) -> Option<bool> {
        match self {
            Arch::Sparc64
            | Arch::Ia64
            | Arch::X8664
            | Arch::S390x
            | Arch::PowerPc64
            | Arch::Mips64N64
            | Arch::Aarch64
            | Arch::Mips64N64Nan2008
            | Arch::LarchSoft
            | Arch::LarchDouble => Some(true),
            Arch::Mips64N32
            | Arch::X32
            | Arch::ArmHf
            | Arch::ArmSf
            | Arch::MipsNan2008
            | Arch::Mips64N32Nan2008 => Some(false),
            Arch::None | Arch::RiscvSoft | Arch::RiscvDouble | Arch::Unknown(_) => None,
        }
    }

    /// A short human-readable name, e.g. `"x86-64"`, `"aarch64"`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::None => "none",
            Arch::Sparc64 => "sparc64",
            Arch::Ia64 => "ia64",
            Arch::X8664 => "x86-64",
            Arch::S390x => "s390x",
            Arch::PowerPc64 => "ppc64",
            Arch::Mips64N32 => "mips64-n32",
            Arch::Mips64N64 => "mips64-n64",
            Arch::X32 => "x32",
            Arch::ArmHf => "arm-hard-float",
            Arch::Aarch64 => "aarch64",
            Arch::ArmSf => "arm-soft-float",
            Arch::MipsNan2008 => "mips-nan2008",
            Arch::Mips64N32Nan2008 => "mips64-n32-nan2008",
            Arch::Mips64N64Nan2008 => "mips64-n64-nan2008",
            Arch::RiscvSoft => "riscv-soft-float",
            Arch::RiscvDouble => "riscv-double-float",
            Arch::LarchSoft => "loongarch-soft-float",
            Arch::LarchDouble => "loongarch-double-float",
            Arch::Unknown(_) => "unknown",
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arch::Unknown(v) => write!(f, "unknown ({v:#06x})"),
            other => f.write_str(other.name()),
        }
    }
}
