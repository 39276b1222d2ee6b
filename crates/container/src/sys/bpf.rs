//! `bpf(2)` for cgroup device programs: the kernel's `union bpf_attr` and `struct
//! bpf_prog_info` as far as we use them, and one safe function per command. rustix has no
//! `bpf`; every pointer the kernel is given here points into a value the function borrows.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::legacy::bpf::{Insn, BPF_F_REPLACE};

// bpf(2) commands.
const BPF_PROG_LOAD: i32 = 5;
const BPF_PROG_ATTACH: i32 = 8;
const BPF_PROG_DETACH: i32 = 9;
const BPF_PROG_GET_FD_BY_ID: i32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;
const BPF_PROG_QUERY: i32 = 16;

#[repr(C)]
#[derive(Clone, Copy)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct GetIdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

/// `union bpf_attr`, with room to spare: the kernel writes fields beyond
/// those we set (`query.revision`), so the buffer is always larger than its
/// own union and zero where we set nothing.
#[repr(C)]
union Attr {
    load: ProgLoadAttr,
    attach: AttachAttr,
    get_id: GetIdAttr,
    info: InfoAttr,
    query: QueryAttr,
    _space: [u64; 32],
}

impl Attr {
    fn zeroed() -> Attr {
        Attr { _space: [0; 32] }
    }
}

/// The leading part of `struct bpf_prog_info` (the kernel copies at most
/// the length we pass).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ProgInfo {
    pub(crate) prog_type: u32,
    pub(crate) id: u32,
    pub(crate) tag: [u8; 8],
    pub(crate) jited_prog_len: u32,
    pub(crate) xlated_prog_len: u32,
    pub(crate) jited_prog_insns: u64,
    pub(crate) xlated_prog_insns: u64,
    pub(crate) load_time: u64,
    pub(crate) created_by_uid: u32,
    pub(crate) nr_map_ids: u32,
    pub(crate) map_ids: u64,
    pub(crate) name: [u8; 16],
    pub(crate) ifindex: u32,
    pub(crate) gpl_compatible: u32,
    pub(crate) netns_dev: u64,
    pub(crate) netns_ino: u64,
}

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
///
/// Every address in `attr` the command reads or writes must be valid for the length `attr`
/// gives it, for the whole call.
unsafe fn bpf(cmd: i32, attr: &mut Attr) -> io::Result<i64> {
    // SAFETY: `attr` is a valid, writable buffer of the size passed, larger than the kernel's
    // `union bpf_attr`, zero beyond the fields set; the addresses in it are the caller's promise.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut Attr,
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: a descriptor the kernel just returned to us, owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// `BPF_PROG_QUERY`: the programs attached to `cgroup` for `attach_type`, and the flags they were
/// attached with.
pub(crate) fn query(cgroup: BorrowedFd<'_>, attach_type: u32) -> io::Result<(u32, Vec<u32>)> {
    let mut ids = vec![0u32; 64];
    loop {
        let mut attr = Attr::zeroed();
        attr.query = QueryAttr {
            target_fd: cgroup.as_raw_fd() as u32,
            attach_type,
            query_flags: 0,
            attach_flags: 0,
            prog_ids: ids.as_mut_ptr() as u64,
            prog_cnt: ids.len() as u32,
            _pad: 0,
        };
        // SAFETY: `prog_ids` points at `ids`, `prog_cnt` long, alive and unused meanwhile.
        match unsafe { bpf(BPF_PROG_QUERY, &mut attr) } {
            Ok(_) => {
                // SAFETY: the query variant was written above and by the kernel.
                let q = unsafe { attr.query };
                ids.truncate(q.prog_cnt as usize);
                return Ok((q.attach_flags, ids));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                // SAFETY: as above; the kernel stored the real count.
                let need = unsafe { attr.query.prog_cnt } as usize;
                ids = vec![0; need.max(ids.len() * 2)];
            }
            Err(e) => return Err(e),
        }
    }
}

/// `BPF_PROG_GET_FD_BY_ID`.
pub(crate) fn prog_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut attr = Attr::zeroed();
    attr.get_id = GetIdAttr {
        prog_id: id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: no address in this command.
    unsafe { bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) }.map(owned)
}

/// `BPF_OBJ_GET_INFO_BY_FD` into `info`, whose addresses (if any) the caller vouches for.
///
/// # Safety
///
/// `info.xlated_prog_insns`, when set, must address `info.xlated_prog_len` writable bytes.
unsafe fn get_info(fd: BorrowedFd<'_>, info: &mut ProgInfo) -> io::Result<()> {
    let mut attr = Attr::zeroed();
    attr.info = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<ProgInfo>() as u32,
        info: info as *mut ProgInfo as u64,
    };
    // SAFETY: `info` is borrowed for the call; its own addresses are the caller's promise.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.map(|_| ())
}

/// `BPF_OBJ_GET_INFO_BY_FD`: what the kernel says of program `fd` (no instructions).
pub(crate) fn prog_info(fd: BorrowedFd<'_>) -> io::Result<ProgInfo> {
    let mut info = ProgInfo::default();
    // SAFETY: no address set in `info`.
    unsafe { get_info(fd, &mut info) }?;
    Ok(info)
}

/// The translated instructions of program `fd` and whether it is GPL-compatible.
pub(crate) fn prog_insns(fd: BorrowedFd<'_>) -> io::Result<(Vec<Insn>, bool)> {
    let info = prog_info(fd)?;
    let len = info.xlated_prog_len as usize;
    let n = len / std::mem::size_of::<Insn>();
    if n == 0 {
        return Ok((Vec::new(), info.gpl_compatible & 1 != 0));
    }
    let mut insns = vec![Insn::default(); n];
    let mut info2 = ProgInfo {
        xlated_prog_len: (n * std::mem::size_of::<Insn>()) as u32,
        xlated_prog_insns: insns.as_mut_ptr() as u64,
        ..ProgInfo::default()
    };
    // SAFETY: `xlated_prog_insns` addresses `insns`, exactly `xlated_prog_len` bytes, alive and
    // unused meanwhile.
    unsafe { get_info(fd, &mut info2) }?;
    let got = info2.xlated_prog_len as usize / std::mem::size_of::<Insn>();
    insns.truncate(got.min(n));
    Ok((insns, info.gpl_compatible & 1 != 0))
}

/// `BPF_PROG_LOAD` of `insns` as a program of `prog_type`; the verifier writes its log into `log`
/// when it is not empty.
pub(crate) fn prog_load(
    prog_type: u32,
    insns: &[Insn],
    license: &CStr,
    name: [u8; 16],
    log: &mut [u8],
) -> io::Result<OwnedFd> {
    let mut attr = Attr::zeroed();
    attr.load = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: u32::from(!log.is_empty()),
        log_size: log.len() as u32,
        log_buf: if log.is_empty() {
            0
        } else {
            log.as_mut_ptr() as u64
        },
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        prog_ifindex: 0,
        expected_attach_type: 0,
    };
    // SAFETY: `insns` (`insn_cnt` instructions), the NUL-terminated `license` and `log`
    // (`log_size` writable bytes) are borrowed for the call.
    unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.map(owned)
}

/// `BPF_PROG_ATTACH` of `prog` to `cgroup`, with `BPF_F_REPLACE` of `replace` when given.
pub(crate) fn prog_attach(
    cgroup: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
    flags: u32,
    replace: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let mut attr = Attr::zeroed();
    attr.attach = AttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type,
        attach_flags: flags | if replace.is_some() { BPF_F_REPLACE } else { 0 },
        replace_bpf_fd: replace.map_or(0, |r| r.as_raw_fd()) as u32,
    };
    // SAFETY: no address in this command.
    unsafe { bpf(BPF_PROG_ATTACH, &mut attr) }.map(|_| ())
}

/// `BPF_PROG_DETACH` of `prog` from `cgroup`.
pub(crate) fn prog_detach(
    cgroup: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
) -> io::Result<()> {
    let mut attr = Attr::zeroed();
    attr.attach = AttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type,
        attach_flags: 0,
        replace_bpf_fd: 0,
    };
    // SAFETY: no address in this command.
    unsafe { bpf(BPF_PROG_DETACH, &mut attr) }.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_the_kernels() {
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::size_of::<QueryAttr>(), 32);
        assert_eq!(std::mem::size_of::<ProgInfo>(), 104);
    }
}
