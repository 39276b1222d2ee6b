//! cgroup v2 device policy: `BPF_PROG_TYPE_CGROUP_DEVICE` programs, by raw
//! `bpf(2)` calls.
//!
//! [`allow_v2`] extends the policy a runtime attached to a container's
//! cgroup, as libnvidia-container does: for every program attached there
//! (`BPF_PROG_QUERY`), its instructions are fetched
//! (`BPF_OBJ_GET_INFO_BY_FD`, `xlated_prog_insns`), our allow checks are
//! put in front of them and the result is loaded and attached *in place of*
//! the old one: with `BPF_F_ALLOW_MULTI | BPF_F_REPLACE` when the cgroup
//! holds several programs, or with the cgroup's own flags, which replaces
//! the single program, otherwise. Either way the swap is atomic: there is
//! no moment with no policy (detach first) or with both (attach first).
//! Since cgroup device programs are ANDed, extending each one is what makes
//! the node reachable; everything the old program decided is decided the
//! same way, because its instructions run unchanged for every other device.
//!
//! A program that calls helpers, references maps or was rewritten by
//! constant blinding cannot be reloaded from its translated form; that is
//! an error naming the cgroup, never a silent downgrade of the policy.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::cgroup::{DeviceRule, DeviceType, ACCESS_ALL};
use super::LegacyError;
use crate::sys;

/// `BPF_PROG_TYPE_CGROUP_DEVICE`.
pub const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
/// `BPF_CGROUP_DEVICE` attach type.
pub const BPF_CGROUP_DEVICE: u32 = 6;
/// `BPF_F_ALLOW_OVERRIDE`.
pub const BPF_F_ALLOW_OVERRIDE: u32 = 1;
/// `BPF_F_ALLOW_MULTI`.
pub const BPF_F_ALLOW_MULTI: u32 = 2;
/// `BPF_F_REPLACE`.
pub const BPF_F_REPLACE: u32 = 4;

// Device types and access bits in `struct bpf_cgroup_dev_ctx`.
const BPF_DEVCG_DEV_BLOCK: i32 = 1;
const BPF_DEVCG_DEV_CHAR: i32 = 2;

// Instruction classes and operations.
const BPF_LDX_MEM_W: u8 = 0x61;
const BPF_ALU64_MOV_K: u8 = 0xb7;
const BPF_ALU_MOV_X: u8 = 0xbc;
const BPF_ALU_RSH_K: u8 = 0x74;
const BPF_ALU_AND_K: u8 = 0x54;
const BPF_JMP_JNE_K: u8 = 0x55;
const BPF_JMP_JSET_K: u8 = 0x45;
const BPF_JMP_EXIT: u8 = 0x95;
const BPF_JMP_CALL: u8 = 0x85;
const BPF_LD_IMM64: u8 = 0x18;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// `dst_reg` (low nibble) and `src_reg` (high nibble).
    pub regs: u8,
    /// Jump offset or memory offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0x0f),
            off,
            imm,
        }
    }

    /// The destination register.
    pub fn dst(&self) -> u8 {
        self.regs & 0x0f
    }

    /// The source register.
    pub fn src(&self) -> u8 {
        self.regs >> 4
    }
}

/// Loads the context into registers: r2 = type, r3 = access, r4 = major,
/// r5 = minor. r1 (the context) is left alone, so the instructions that
/// follow see the state a program starts in.
fn header() -> Vec<Insn> {
    vec![
        Insn::new(BPF_LDX_MEM_W, 2, 1, 0, 0),
        Insn::new(BPF_ALU_MOV_X, 3, 2, 0, 0),
        Insn::new(BPF_ALU_RSH_K, 3, 0, 0, 16),
        Insn::new(BPF_ALU_AND_K, 2, 0, 0, 0xffff),
        Insn::new(BPF_LDX_MEM_W, 4, 1, 4, 0),
        Insn::new(BPF_LDX_MEM_W, 5, 1, 8, 0),
    ]
}

/// Why a device program cannot be built, or an attached one cannot be extended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// A major or minor does not fit the 32-bit signed immediate of a BPF compare.
    #[error("device number {0} is out of range")]
    DeviceNumber(u32),
    /// The extended program would pass the kernel's instruction limit.
    #[error("the extended program is too long")]
    TooLong,
    /// The kernel gave no translated instructions for the attached program.
    #[error("the kernel returned no instructions for the attached program")]
    NoInstructions,
    /// The translated program uses the JIT's hidden register: it was rewritten by constant
    /// blinding and does not load again as it is.
    #[error(
        "instruction {0} uses a hidden register (constant blinding, \
         net.core.bpf_jit_harden?); the program cannot be extended"
    )]
    HiddenRegister(usize),
    /// The program calls a helper or a function, whose translated form does not reload.
    #[error("instruction {0} calls a helper or function; the program cannot be extended")]
    Call(usize),
    /// The program references a map by a descriptor that is not ours.
    #[error("instruction {0} references a map; the program cannot be extended")]
    MapReference(usize),
}

fn to_imm(n: u32) -> Result<i32, ProgramError> {
    i32::try_from(n).map_err(|_| ProgramError::DeviceNumber(n))
}

/// The checks of one rule: when the device matches, return the rule's
/// verdict; otherwise fall through to what follows.
fn rule_block(rule: &DeviceRule) -> Result<Vec<Insn>, ProgramError> {
    let mut checks: Vec<(u8, u8, i32)> = Vec::new();
    match rule.kind {
        DeviceType::Char => checks.push((BPF_JMP_JNE_K, 2, BPF_DEVCG_DEV_CHAR)),
        DeviceType::Block => checks.push((BPF_JMP_JNE_K, 2, BPF_DEVCG_DEV_BLOCK)),
        DeviceType::All => {}
    }
    if let Some(m) = rule.major {
        checks.push((BPF_JMP_JNE_K, 4, to_imm(m)?));
    }
    if let Some(m) = rule.minor {
        checks.push((BPF_JMP_JNE_K, 5, to_imm(m)?));
    }
    let missing = !rule.access & ACCESS_ALL;
    if missing != 0 {
        // Any requested bit outside the rule's access: not this rule.
        checks.push((BPF_JMP_JSET_K, 3, i32::from(missing)));
    }
    let n = checks.len() + 2;
    let mut out: Vec<Insn> = checks
        .iter()
        .enumerate()
        .map(|(i, &(code, reg, imm))| Insn::new(code, reg, 0, (n - 1 - i) as i16, imm))
        .collect();
    out.push(Insn::new(BPF_ALU64_MOV_K, 0, 0, 0, i32::from(rule.allow)));
    out.push(Insn::new(BPF_JMP_EXIT, 0, 0, 0, 0));
    Ok(out)
}

/// A complete device program: `rules` in order, the first match decides,
/// `default_allow` when none matches (what runc generates from
/// `linux.resources.devices`). Rules after one that matches every device
/// are dropped, as is the default then.
pub fn device_program(
    rules: &[DeviceRule],
    default_allow: bool,
) -> Result<Vec<Insn>, ProgramError> {
    let mut p = header();
    for r in rules {
        let block = rule_block(r)?;
        let unconditional = block.len() == 2;
        p.extend(block);
        if unconditional {
            // Matches every device: what follows would be unreachable,
            // which the verifier refuses.
            return Ok(p);
        }
    }
    p.push(Insn::new(
        BPF_ALU64_MOV_K,
        0,
        0,
        0,
        i32::from(default_allow),
    ));
    p.push(Insn::new(BPF_JMP_EXIT, 0, 0, 0, 0));
    Ok(p)
}

/// `old` with the allow rules of `rules` checked first: a device they allow
/// is allowed, every other device reaches `old` unchanged.
pub fn extend_program(old: &[Insn], rules: &[DeviceRule]) -> Result<Vec<Insn>, ProgramError> {
    check_reloadable(old)?;
    let mut p = header();
    for r in rules.iter().filter(|r| r.allow) {
        p.extend(rule_block(r)?);
    }
    p.extend_from_slice(old);
    if p.len() > 1_000_000 {
        return Err(ProgramError::TooLong);
    }
    Ok(p)
}

/// Whether translated instructions can be loaded again as they are.
fn check_reloadable(insns: &[Insn]) -> Result<(), ProgramError> {
    if insns.is_empty() {
        return Err(ProgramError::NoInstructions);
    }
    for (i, insn) in insns.iter().enumerate() {
        if insn.dst() > 10 || insn.src() > 10 {
            return Err(ProgramError::HiddenRegister(i));
        }
        if insn.code == BPF_JMP_CALL {
            return Err(ProgramError::Call(i));
        }
        if insn.code == BPF_LD_IMM64 && insn.src() != 0 {
            return Err(ProgramError::MapReference(i));
        }
    }
    Ok(())
}

/// Loads `insns` as a cgroup device program; on failure the verifier's
/// log is in the error.
pub fn load_device_program(insns: &[Insn], gpl: bool) -> io::Result<OwnedFd> {
    let license = if gpl { c"GPL" } else { c"Apache" };
    let mut name = [0u8; 16];
    name[..10].copy_from_slice(b"gpuctk_dev");
    let load = |log: &mut [u8]| {
        sys::bpf::prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, insns, license, name, log)
    };
    match load(&mut []) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            // Kernels before 5.11 charge programs to RLIMIT_MEMLOCK.
            let _ = sys::raise_memlock();
            load(&mut []).map_err(|e2| {
                io::Error::new(
                    e2.kind(),
                    format!("{e2} (RLIMIT_MEMLOCK raised; CAP_SYS_ADMIN or CAP_BPF needed)"),
                )
            })
        }
        Err(e) => {
            let mut log = vec![0u8; 1 << 16];
            let _ = load(&mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let last: Vec<&str> = text.lines().rev().take(3).collect();
            Err(io::Error::new(
                e.kind(),
                format!(
                    "{e}; verifier: {}",
                    last.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ),
            ))
        }
    }
}

fn open_cgroup(dir: &Path) -> Result<OwnedFd, LegacyError> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| LegacyError::Cgroup {
        path: dir.to_path_buf(),
        reason: "path contains a NUL byte".to_string(),
    })?;
    sys::open(&c, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|source| LegacyError::CgroupIo {
        path: dir.to_path_buf(),
        op: "open",
        source,
    })
}

fn bpf_err(dir: &Path, op: &'static str) -> impl FnOnce(io::Error) -> LegacyError {
    let cgroup = dir.to_path_buf();
    move |source| LegacyError::Bpf { cgroup, op, source }
}

/// Attaches a new device program made of `insns` to the cgroup v2
/// directory `dir` with `flags` (what a runtime does; used by tests and
/// tools).
pub fn attach_device_program(dir: &Path, insns: &[Insn], flags: u32) -> Result<(), LegacyError> {
    let cg = open_cgroup(dir)?;
    let prog = load_device_program(insns, false).map_err(bpf_err(dir, "BPF_PROG_LOAD"))?;
    sys::bpf::prog_attach(cg.as_fd(), prog.as_fd(), BPF_CGROUP_DEVICE, flags, None)
        .map_err(bpf_err(dir, "BPF_PROG_ATTACH"))
}

/// The ids of the device programs attached directly to `dir`, with the
/// attach flags.
pub fn attached_programs(dir: &Path) -> Result<(u32, Vec<u32>), LegacyError> {
    let cg = open_cgroup(dir)?;
    sys::bpf::query(cg.as_fd(), BPF_CGROUP_DEVICE).map_err(bpf_err(dir, "BPF_PROG_QUERY"))
}

/// What [`allow_v2`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V2Outcome {
    /// The cgroup directory.
    pub cgroup: PathBuf,
    /// `(old id, new id)` of each program replaced.
    pub replaced: Vec<(u32, u32)>,
}

/// Extends every device program attached to the cgroup v2 directory `dir`
/// with allow checks for `rules` (see the module documentation). No
/// program attached means no device restriction: nothing is done.
pub fn allow_v2(dir: &Path, rules: &[DeviceRule]) -> Result<V2Outcome, LegacyError> {
    let cg = open_cgroup(dir)?;
    let cgfd = cg.as_fd();
    let (flags, ids) =
        sys::bpf::query(cgfd, BPF_CGROUP_DEVICE).map_err(bpf_err(dir, "BPF_PROG_QUERY"))?;
    let mut out = V2Outcome {
        cgroup: dir.to_path_buf(),
        replaced: Vec::new(),
    };
    for id in ids {
        let old = sys::bpf::prog_fd_by_id(id).map_err(bpf_err(dir, "BPF_PROG_GET_FD_BY_ID"))?;
        let (insns, gpl) =
            sys::bpf::prog_insns(old.as_fd()).map_err(bpf_err(dir, "BPF_OBJ_GET_INFO_BY_FD"))?;
        let new_insns = extend_program(&insns, rules).map_err(|source| LegacyError::Program {
            path: dir.to_path_buf(),
            id,
            source,
        })?;
        let new = load_device_program(&new_insns, gpl).map_err(bpf_err(dir, "BPF_PROG_LOAD"))?;
        if flags & BPF_F_ALLOW_MULTI != 0 {
            match sys::bpf::prog_attach(
                cgfd,
                new.as_fd(),
                BPF_CGROUP_DEVICE,
                flags,
                Some(old.as_fd()),
            ) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // No BPF_F_REPLACE (Linux < 5.6): attach, then detach.
                    sys::bpf::prog_attach(cgfd, new.as_fd(), BPF_CGROUP_DEVICE, flags, None)
                        .map_err(bpf_err(dir, "BPF_PROG_ATTACH"))?;
                    sys::bpf::prog_detach(cgfd, old.as_fd(), BPF_CGROUP_DEVICE)
                        .map_err(bpf_err(dir, "BPF_PROG_DETACH"))?;
                }
                Err(e) => return Err(bpf_err(dir, "BPF_PROG_ATTACH")(e)),
            }
        } else {
            sys::bpf::prog_attach(cgfd, new.as_fd(), BPF_CGROUP_DEVICE, flags, None)
                .map_err(bpf_err(dir, "BPF_PROG_ATTACH"))?;
        }
        let new_id = sys::bpf::prog_info(new.as_fd()).map_or(0, |info| info.id);
        out.replaced.push((id, new_id));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insn_layout_is_the_kernels() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        let i = Insn::new(BPF_LDX_MEM_W, 4, 1, 4, 0);
        assert_eq!((i.dst(), i.src()), (4, 1));
        assert_eq!(i.regs, 0x14);
    }

    #[test]
    fn rule_blocks_jump_past_themselves() {
        let b = rule_block(&DeviceRule::allow_char(195, 3, 6)).unwrap();
        // type, major, minor, access (m missing), mov, exit
        assert_eq!(b.len(), 6);
        for (i, insn) in b[..4].iter().enumerate() {
            assert_eq!(
                i as i16 + 1 + insn.off,
                6,
                "insn {i} lands at the block end"
            );
        }
        assert_eq!(b[3].code, BPF_JMP_JSET_K);
        assert_eq!(b[3].imm, 1);
        assert_eq!(b[4].imm, 1);
        let any = DeviceRule {
            allow: false,
            kind: DeviceType::All,
            major: None,
            minor: None,
            access: ACCESS_ALL,
        };
        assert_eq!(rule_block(&any).unwrap().len(), 2);
    }

    #[test]
    fn extension_keeps_the_old_program_and_refuses_helpers() {
        let old = device_program(&[], false).unwrap();
        let new = extend_program(&old, &[DeviceRule::allow_char(195, 0, 6)]).unwrap();
        assert_eq!(&new[new.len() - old.len()..], &old[..]);
        let call = [Insn::new(BPF_JMP_CALL, 0, 0, 0, 1)];
        assert_eq!(extend_program(&call, &[]), Err(ProgramError::Call(0)));
        let blinded = [Insn::new(BPF_ALU64_MOV_K, 11, 0, 0, 1)];
        let e = extend_program(&blinded, &[]).unwrap_err();
        assert_eq!(e, ProgramError::HiddenRegister(0));
        assert!(e.to_string().contains("bpf_jit_harden"), "{e}");
        assert_eq!(extend_program(&[], &[]), Err(ProgramError::NoInstructions));
        let huge = DeviceRule::allow_char(u32::MAX, 0, 6);
        assert_eq!(
            device_program(&[huge], false),
            Err(ProgramError::DeviceNumber(u32::MAX))
        );
    }
}
