//! Discovery errors that used to be swallowed: `cdi generate` must fail, naming the folder.
//!
//! Root reads every folder whatever its mode, so these run `gpuctk` as `nobody` through
//! `setpriv` (util-linux), on a mock host made world-readable except for the folder under test.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::util::*;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// `gpuctk ARGS` as uid and gid 65534 with no supplementary groups. The binary is copied into
/// the test dir first: the build folder may sit under a home that `nobody` cannot enter.
fn as_nobody(t: &TestDir, args: &[&str]) -> Run {
    let bin = t.join("gpuctk");
    if !bin.exists() {
        std::fs::copy(GPUCTK, &bin).unwrap();
        chmod(&bin, 0o755);
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(args)
        .env("HOME", t.path())
        .current_dir(t.path());
    for (k, _) in std::env::vars() {
        if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") || k.starts_with("XDG_") {
            c.env_remove(k);
        }
    }
    c.output()
        .expect("run setpriv (util-linux) to drop to nobody")
        .into()
}

/// An unreadable firmware folder (EACCES) was skipped: `cdi generate` exited 0 with a spec
/// that lacked the GSP firmware mounts, and containers then failed at GPU init. Now it fails
/// with one line that names the folder and the fix.
#[test]
fn unreadable_firmware_folder_fails_generate() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this suite runs as root");
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    chmod(t.path(), 0o755);
    let firmware = Path::new(&h.driver_root()).join("lib/firmware/nvidia/570.124.06");
    assert!(
        std::fs::read_dir(&firmware).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("gsp")),
        "the mock host has firmware"
    );
    let roots = h.roots();
    let args = with(&["cdi", "generate"], &roots);

    // Control: as nobody, with the folder readable, generation works and mounts the firmware.
    let r = as_nobody(&t, &args);
    assert_eq!(r.code, 0, "as nobody, readable host:\n{}", r.stderr);
    assert!(r.stdout.contains("gsp_"), "firmware mounted:\n{}", r.stdout);

    chmod(&firmware, 0o700);
    let r = as_nobody(&t, &args);
    chmod(&firmware, 0o755);
    assert_ne!(r.code, 0, "must fail; stdout:\n{}", r.stdout);
    let err = r.stderr.trim();
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(err.contains(&*firmware.to_string_lossy()), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(err.contains("chmod 755"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(r.stdout.is_empty(), "no partial spec:\n{}", r.stdout);
}

/// A GPU's sysfs `drm` folder that could not be listed (EACCES, EIO) read as "no display
/// driver": `cdi generate` exited 0 with a spec that lacked the GPU's `/dev/dri` nodes, and
/// said nothing. Now it fails with one line that names the folder.
#[test]
fn unreadable_drm_folder_fails_generate() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this suite runs as root");
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    chmod(t.path(), 0o755);
    let devices = Path::new(&h.dev_root()).join("sys/bus/pci/devices");
    let bus = std::fs::read_dir(&devices)
        .unwrap()
        .next()
        .expect("the mock host lists its GPU in sysfs")
        .unwrap()
        .path();
    let drm = bus.join("drm");
    assert!(drm.is_dir(), "the mock host has {}", drm.display());
    let roots = h.roots();
    let args = with(&["cdi", "generate"], &roots);

    // Control: as nobody, with the folder readable, the spec has the GPU's DRM nodes.
    let r = as_nobody(&t, &args);
    assert_eq!(r.code, 0, "as nobody, readable host:\n{}", r.stderr);
    assert!(
        r.stdout.contains("/dev/dri/card"),
        "DRM nodes:\n{}",
        r.stdout
    );

    chmod(&drm, 0o700);
    let r = as_nobody(&t, &args);
    chmod(&drm, 0o755);
    assert_ne!(r.code, 0, "must fail; stdout:\n{}", r.stdout);
    let err = r.stderr.trim();
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(err.contains(&*drm.to_string_lossy()), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(r.stdout.is_empty(), "no partial spec:\n{}", r.stdout);
}
