//! The architecture-specific numbers this crate passes to the kernel: every raw syscall, for
//! x86_64 and aarch64. The first test checks the numbers this build uses (run natively and, for
//! aarch64, under qemu-user by the `arm64` integration tests); the second checks the table
//! against the kernel's own headers for both architectures (Debian's linux-libc-dev and
//! linux-libc-dev-arm64-cross, which scripts/setup.sh installs).

use std::collections::BTreeMap;

/// (name, x86_64, aarch64). fchmodat2 (Linux 6.6) is newer than Debian 12's headers.
const TABLE: &[(&str, i64, i64)] = &[
    ("capget", 125, 90),
    ("bpf", 321, 280),
    ("open_tree", 428, 428),
    ("move_mount", 429, 429),
    ("openat2", 437, 437),
    ("mount_setattr", 442, 442),
    ("fchmodat2", 452, 452),
];

/// What this build calls each syscall with.
fn used() -> Vec<(&'static str, i64)> {
    vec![
        ("capget", libc::SYS_capget),
        ("bpf", libc::SYS_bpf),
        ("open_tree", libc::SYS_open_tree),
        ("move_mount", libc::SYS_move_mount),
        ("openat2", libc::SYS_openat2),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("fchmodat2", crate::sys::nr::FCHMODAT2),
    ]
}

#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn syscall_numbers_of_this_build_are_the_kernels() {
    let column = |row: &(&str, i64, i64)| {
        if cfg!(target_arch = "aarch64") {
            row.2
        } else {
            row.1
        }
    };
    let used = used();
    assert_eq!(used.len(), TABLE.len());
    for (row, (name, number)) in TABLE.iter().zip(used) {
        assert_eq!(row.0, name);
        assert_eq!(number, column(row), "{name}");
    }
}

/// `#define __NR_name number` lines of a kernel header.
fn header_numbers(path: &str) -> BTreeMap<String, i64> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e} (scripts/setup.sh installs the kernel headers)"));
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                (Some("#define"), Some(n), Some(v)) => {
                    Some((n.strip_prefix("__NR_")?.to_string(), v.parse::<i64>().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
#[cfg(target_arch = "x86_64")]
fn syscall_table_matches_both_architectures_headers() {
    let x86 = header_numbers("/usr/include/x86_64-linux-gnu/asm/unistd_64.h");
    let arm = header_numbers("/usr/aarch64-linux-gnu/include/asm-generic/unistd.h");
    for (name, x, a) in TABLE {
        if *name == "fchmodat2" && !x86.contains_key(*name) {
            continue;
        }
        assert_eq!(x86.get(*name), Some(x), "x86_64 {name}");
        assert_eq!(arm.get(*name), Some(a), "aarch64 {name}");
    }
}
