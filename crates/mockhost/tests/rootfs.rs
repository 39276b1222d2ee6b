//! create_rootfs on its own: contents and error reporting.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use gpuctk_mockhost::{create_rootfs, RootfsConfig};

fn cfg() -> RootfsConfig {
    RootfsConfig {
        busybox: "/bin/busybox".into(),
        ldconfig: ldconfig().into(),
    }
}

#[test]
fn contents() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("r");
    create_rootfs(&r, &cfg()).unwrap();

    assert!(is_elf(&r.join("usr/bin/busybox")));
    for applet in [
        "sh", "ls", "cat", "echo", "env", "true", "false", "mkdir", "stat", "readlink",
    ] {
        assert_eq!(
            fs::read_link(r.join("usr/bin").join(applet)).unwrap(),
            Path::new("busybox"),
            "{applet}"
        );
    }
    assert_eq!(fs::read_link(r.join("bin")).unwrap(), Path::new("usr/bin"));
    assert_eq!(
        fs::read_link(r.join("lib64")).unwrap(),
        Path::new("usr/lib64")
    );
    // The loader at the path the binaries ask for, as a link into the multiarch dir.
    assert!(is_elf(
        &r.join("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    ));
    assert!(fs::symlink_metadata(r.join("usr/lib64/ld-linux-x86-64.so.2")).is_ok());
    assert!(is_elf(&r.join("usr/lib/x86_64-linux-gnu/libc.so.6")));
    assert_eq!(mode(&r.join("usr/bin/gpuctk-probe")), 0o755);
    assert_eq!(
        readelf_needed(&r.join("usr/bin/gpuctk-probe")),
        vec!["libc.so.6"]
    );
    assert_eq!(mode(&r.join("tmp")), 0o1777);
    for d in ["dev", "proc", "sys", "tmp"] {
        assert_eq!(fs::read_dir(r.join(d)).unwrap().count(), 0, "{d} not empty");
    }
    assert!(r.join("usr/lib64").is_dir());
    assert!(fs::read_to_string(r.join("etc/debian_version"))
        .unwrap()
        .starts_with("12"));
    assert!(fs::read_to_string(r.join("etc/passwd"))
        .unwrap()
        .starts_with("root:x:0:0:"));
    assert!(fs::read_to_string(r.join("etc/group"))
        .unwrap()
        .starts_with("root:x:0:"));
    assert_eq!(
        fs::read_to_string(r.join("etc/ld.so.conf")).unwrap(),
        "include /etc/ld.so.conf.d/*.conf\n"
    );
    let conf = fs::read_to_string(r.join("etc/ld.so.conf.d/x86_64-linux-gnu.conf")).unwrap();
    assert!(conf.lines().any(|l| l == "/usr/lib/x86_64-linux-gnu"));
    let listing = run(
        ldconfig(),
        &["-p", "-C", r.join("etc/ld.so.cache").to_str().unwrap()],
    );
    assert!(
        stdout(&listing).contains("libc.so.6 (libc6,x86-64) => /"),
        "{listing:?}"
    );
}

#[test]
fn missing_busybox() {
    let tmp = tempfile::tempdir().unwrap();
    let c = RootfsConfig {
        busybox: "/nonexistent/busybox".into(),
        ..cfg()
    };
    let err = create_rootfs(&tmp.path().join("r"), &c)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "busybox not found at /nonexistent/busybox: apt-get install busybox-static"
    );
    assert!(absent(&tmp.path().join("r")));
}

#[test]
fn dynamic_busybox_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    // Any dynamically linked executable stands in for a non-static busybox.
    let c = RootfsConfig {
        busybox: "/usr/bin/readelf".into(),
        ..cfg()
    };
    let err = create_rootfs(&tmp.path().join("r"), &c)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dynamically linked (PT_INTERP /lib64/ld-linux-x86-64.so.2)"),
        "{err}"
    );
    assert!(err.contains("busybox-static"), "{err}");
}

#[test]
fn non_empty_target_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("keep"), b"x").unwrap();
    let err = create_rootfs(tmp.path(), &cfg()).unwrap_err().to_string();
    assert!(err.contains("is not empty"), "{err}");
}
