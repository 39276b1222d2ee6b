//! Kernels older than the system calls we prefer (issue 19 §1): a chosen part of the runtime and
//! malicious-image suites run a second time in a child of this test binary started under
//! `as_old_kernel.c`, a seccomp filter that makes every system call newer than Linux 4.18
//! (`openat2`, `fchmodat2`, `open_tree`, `move_mount`, `mount_setattr`, `clone3`,
//! `close_range`, `pidfd_open`, ...) fail with `ENOSYS`. The filter is inherited by everything
//! the tests start (our binaries, runc, crun, the hooks), so every delivery there runs on the
//! fallbacks, and must still work and still contain every attack.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::TestDir;

/// Set in the child run, where the filter is on.
const UNDER_FILTER: &str = "GPUCTK_TEST_OLD_KERNEL";

/// The tests run again under the filter: deliveries through both runtimes; the attack suite
/// through the shim's in-root hooks (CDI) under runc and crun, the legacy prestart hook and
/// `nvidia-container-cli configure`; enroot's and Apptainer's `configure` in a user namespace
/// and as an unprivileged user (nodes bound, not made).
const SECOND_RUN: &[&str] = &[
    "old_kernel::the_filter_is_on",
    "runtime::runc_rhel_selections",
    "runtime::compat_libcuda_is_loaded_only_when_newer",
    "runtime::hooks_in_shim_leave_the_root_as_the_hooks_do",
    "attacks::shim_runc_create_start_delete",
    "attacks::shim_crun_run",
    "attacks::prestart_hook_runc",
    "attacks::nvidia_container_cli_configure",
    "hpc::enroot_as_root_in_a_user_namespace",
    "hpc::enroot_as_an_unprivileged_user",
    "hpc::enroot_mig_flags_accepted",
    "hpc::apptainer_nvccli",
];

/// Compiles the launcher into `dir`.
fn launcher(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/old_kernel/as_old_kernel.c");
    let bin = dir.join("as_old_kernel");
    let out = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("gcc (apt-get install gcc)");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// The launcher's own check: under the filter the new calls give `ENOSYS`, `openat` still works.
#[test]
fn launcher_hides_the_new_calls() {
    let t = TestDir::new();
    let out = Command::new(launcher(t.path()))
        .arg("--check")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run only as part of [`SECOND_RUN`]: this very process is under the filter, so the second run
/// cannot pass on a kernel that quietly serves the new calls.
#[test]
#[ignore = "run by deliveries_and_attacks_on_an_old_kernel, under the filter"]
fn the_filter_is_on() {
    assert_eq!(std::env::var(UNDER_FILTER).as_deref(), Ok("1"));
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    assert!(
        status.lines().any(|l| l == "Seccomp:\t2"),
        "no seccomp filter: {status}"
    );
    let how = [0u64; 3];
    // SAFETY: openat2 with a valid path and open_how; on success the descriptor is closed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    };
    let errno = std::io::Error::last_os_error().raw_os_error();
    if rc >= 0 {
        // SAFETY: the descriptor openat2 returned.
        unsafe { libc::close(rc as i32) };
    }
    assert_eq!((rc, errno), (-1, Some(libc::ENOSYS)));
}

/// [`SECOND_RUN`] in a child of this binary under the filter: every test passes, and all of
/// them ran.
#[test]
fn deliveries_and_attacks_on_an_old_kernel() {
    let t = TestDir::new();
    let out = Command::new(launcher(t.path()))
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "--include-ignored", "--test-threads=2"])
        .args(SECOND_RUN)
        .env(UNDER_FILTER, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!("test result: ok. {} passed; 0 failed", SECOND_RUN.len());
    assert!(
        out.status.success() && stdout.contains(&want),
        "under the old-kernel filter:\n{stdout}\n{stderr}"
    );
}
