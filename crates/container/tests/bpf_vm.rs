//! The meaning of the cgroup device programs legacy injection builds, checked without root: each
//! program runs in a userspace eBPF VM (`rbpf`, as youki does) on every device context of a small
//! grid, and its verdict is compared with what the rules say (the first matching rule decides, as
//! runc and the kernel's cgroup v1 device list do).

use gpuctk_container::legacy::bpf::{self, Insn};
use gpuctk_container::legacy::cgroup::{
    DeviceRule, DeviceType, ACCESS_ALL, ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE,
};

/// `BPF_DEVCG_DEV_BLOCK` and `BPF_DEVCG_DEV_CHAR` of `struct bpf_cgroup_dev_ctx`.
const BLOCK: u32 = 1;
const CHAR: u32 = 2;

fn bytes(prog: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prog.len() * 8);
    for i in prog {
        out.push(i.code);
        out.push(i.regs);
        out.extend_from_slice(&i.off.to_le_bytes());
        out.extend_from_slice(&i.imm.to_le_bytes());
    }
    out
}

/// The program's verdict for one device: `struct bpf_cgroup_dev_ctx` is `access_type` (type in
/// the low 16 bits, access in the high 16), `major`, `minor`, each a native-endian u32.
fn run(prog: &[u8], kind: u32, major: u32, minor: u32, access: u8) -> bool {
    let mut ctx = Vec::with_capacity(12);
    ctx.extend_from_slice(&((u32::from(access) << 16) | kind).to_ne_bytes());
    ctx.extend_from_slice(&major.to_ne_bytes());
    ctx.extend_from_slice(&minor.to_ne_bytes());
    let vm = rbpf::EbpfVmRaw::new(Some(prog)).expect("the program passes rbpf's verifier");
    match vm.execute_program(&mut ctx).expect("the program runs") {
        0 => false,
        1 => true,
        n => panic!("a device program returned {n}"),
    }
}

fn matches(r: &DeviceRule, kind: u32, major: u32, minor: u32, access: u8) -> bool {
    let kind_ok = match r.kind {
        DeviceType::All => true,
        DeviceType::Char => kind == CHAR,
        DeviceType::Block => kind == BLOCK,
    };
    kind_ok
        && r.major.is_none_or(|m| m == major)
        && r.minor.is_none_or(|m| m == minor)
        && access & !r.access == 0
}

/// Every context of the grid: both types, majors and minors around the rules', each access set.
fn grid() -> Vec<(u32, u32, u32, u8)> {
    let mut out = Vec::new();
    for kind in [BLOCK, CHAR] {
        for major in [0, 1, 5, 195, 196, 509, 0x7fff_ffff] {
            for minor in [0, 1, 3, 5, 7, 254, 255, 0x7fff_ffff] {
                for access in 1..=ACCESS_ALL {
                    out.push((kind, major, minor, access));
                }
            }
        }
    }
    out
}

fn deny_all() -> DeviceRule {
    DeviceRule {
        allow: false,
        kind: DeviceType::All,
        major: None,
        minor: None,
        access: ACCESS_ALL,
    }
}

/// runc's defaults, shortened: `/dev/null`, `/dev/zero`, any `m` on char devices, then deny.
fn runc_like() -> Vec<DeviceRule> {
    vec![
        DeviceRule::allow_char(1, 3, ACCESS_ALL),
        DeviceRule::allow_char(1, 5, ACCESS_ALL),
        DeviceRule {
            allow: true,
            kind: DeviceType::Char,
            major: None,
            minor: None,
            access: ACCESS_MKNOD,
        },
        deny_all(),
    ]
}

/// What the GPU nodes of a legacy injection ask for: `nvidia0` and `nvidiactl` read-write,
/// the caps device read-only.
fn gpu_allow_list() -> Vec<DeviceRule> {
    vec![
        DeviceRule::allow_char(195, 0, ACCESS_READ | ACCESS_WRITE),
        DeviceRule::allow_char(195, 255, ACCESS_READ | ACCESS_WRITE),
        DeviceRule::allow_char(509, 1, ACCESS_READ),
    ]
}

#[test]
fn a_device_program_decides_as_its_rules_say() {
    let cases: Vec<(Vec<DeviceRule>, bool)> = vec![
        (runc_like(), false),
        (gpu_allow_list(), false),
        (gpu_allow_list(), true),
        // A block rule, a deny before an allow of the same device, a rule on the major only.
        (
            vec![
                DeviceRule {
                    allow: false,
                    kind: DeviceType::Char,
                    major: Some(195),
                    minor: Some(1),
                    access: ACCESS_WRITE,
                },
                DeviceRule {
                    allow: true,
                    kind: DeviceType::Char,
                    major: Some(195),
                    minor: None,
                    access: ACCESS_ALL,
                },
                DeviceRule {
                    allow: true,
                    kind: DeviceType::Block,
                    major: Some(5),
                    minor: Some(7),
                    access: ACCESS_READ,
                },
            ],
            false,
        ),
        // Rules after a match-all are dropped, and so is the default.
        (
            vec![deny_all(), DeviceRule::allow_char(195, 0, ACCESS_ALL)],
            true,
        ),
    ];
    for (rules, default_allow) in cases {
        let prog = bytes(&bpf::device_program(&rules, default_allow).unwrap());
        for (kind, major, minor, access) in grid() {
            let want = rules
                .iter()
                .find(|r| matches(r, kind, major, minor, access))
                .map_or(default_allow, |r| r.allow);
            assert_eq!(
                run(&prog, kind, major, minor, access),
                want,
                "rules {rules:?} (default {default_allow}): type {kind} {major}:{minor} access {access}"
            );
        }
    }
}

#[test]
fn an_extended_program_adds_the_allow_list_and_keeps_the_old_verdicts() {
    let old = bpf::device_program(&runc_like(), false).unwrap();
    let old_bytes = bytes(&old);
    // A deny in the list is not ours to add: only its allow rules go in front.
    let mut list = gpu_allow_list();
    list.push(DeviceRule {
        allow: false,
        ..DeviceRule::allow_char(1, 3, ACCESS_ALL)
    });
    let new = bytes(&bpf::extend_program(&old, &list).unwrap());
    let mut allowed = 0;
    for (kind, major, minor, access) in grid() {
        let ours = list
            .iter()
            .any(|r| r.allow && matches(r, kind, major, minor, access));
        let before = run(&old_bytes, kind, major, minor, access);
        let after = run(&new, kind, major, minor, access);
        assert_eq!(
            after,
            ours || before,
            "type {kind} {major}:{minor} access {access}: old program said {before}"
        );
        allowed += usize::from(after && !before);
    }
    // The grid does reach the new allows: nvidia0, nvidiactl (r, w, rw) and the caps node (r),
    // less the `m`-free requests the old program already allowed.
    assert_eq!(allowed, 7);
}
