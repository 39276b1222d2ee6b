//! arm64 (issue 19 §5), from this x86_64 machine: the static binary cross-built with Debian's
//! toolchain and packaged as .deb and RPM (once per test run), run under qemu-user; and the unit
//! tests of the pure crates, cross-built and run under qemu-user.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::package::{deb, must, package_sh, repo, unpacked_deb};
use crate::util::*;

/// The arm64 .deb and RPM, built once per test run by one `scripts/package.sh --arch arm64`.
fn arm64_packages() -> &'static (PathBuf, PathBuf) {
    static PACKAGES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let r = must(package_sh(&tmp.join("arm64")).args(["--arch", "arm64", "--deb", "--rpm"]));
        let printed: Vec<PathBuf> = r.stdout.lines().map(|l| PathBuf::from(l.trim())).collect();
        let find = |ext: &str| {
            printed
                .iter()
                .find(|p| p.extension().is_some_and(|e| e == ext) && p.is_file())
                .unwrap_or_else(|| panic!("package.sh printed no .{ext}: {}", r.stdout))
                .clone()
        };
        (find("deb"), find("rpm"))
    })
}

/// Paths in a .deb (files and links, not directories).
fn deb_paths(deb: &Path) -> BTreeSet<String> {
    must(Command::new("dpkg-deb").arg("-c").arg(deb))
        .stdout
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split(" ./").nth(1))
        .map(|p| format!("/{}", p.split(" -> ").next().unwrap()))
        .collect()
}

#[test]
fn arm64_deb_and_rpm_hold_the_static_aarch64_binary() {
    let (deb64, rpm64) = arm64_packages();
    let version = ok(&["--version"]).stdout;
    let v = version.trim().strip_prefix("gpuctk ").unwrap();
    assert_eq!(
        deb64.file_name().unwrap().to_str().unwrap(),
        format!("gpuctk_{v}_arm64.deb")
    );
    assert_eq!(
        rpm64.file_name().unwrap().to_str().unwrap(),
        format!("gpuctk-{v}-1.aarch64.rpm")
    );
    let field = |f: &str| must(Command::new("dpkg-deb").args(["-f"]).arg(deb64).arg(f)).stdout;
    assert_eq!(field("Architecture").trim(), "arm64");
    assert_eq!(field("Depends").trim(), "");
    let arch = must(
        Command::new("rpm")
            .args(["-qp", "--qf", "%{ARCH}"])
            .arg(rpm64),
    )
    .stdout;
    assert_eq!(arch, "aarch64");
    let k = must(Command::new("rpm").arg("-K").arg(rpm64)).stdout;
    assert!(k.trim().ends_with("digests OK"), "{k}");
    // The same files as this machine's package.
    assert_eq!(deb_paths(deb64), deb_paths(deb()));

    let t = TestDir::new();
    let x = t.join("x");
    must(Command::new("dpkg-deb").arg("-x").arg(deb64).arg(&x));
    let bin = x.join("usr/bin/gpuctk");
    let h = must(Command::new("readelf").args(["-hlWd"]).arg(&bin)).stdout;
    assert!(
        h.contains("Machine:                           AArch64"),
        "{h}"
    );
    assert!(
        !h.contains("program interpreter") && !h.contains("(NEEDED)"),
        "{h}"
    );
    // Its NVML helper: aarch64, dynamically linked (it dlopens NVML).
    let helper = x.join("usr/libexec/gpuctk/gpuctk-nvml");
    let h = must(Command::new("readelf").args(["-hlW"]).arg(&helper)).stdout;
    assert!(
        h.contains("Machine:                           AArch64")
            && h.contains("/lib/ld-linux-aarch64.so.1"),
        "{h}"
    );
    // The RPM's binary is the .deb's.
    let dump = must(Command::new("rpm").args(["-qp", "--dump"]).arg(rpm64)).stdout;
    let digest = dump
        .lines()
        .find_map(|l| l.strip_prefix("/usr/bin/gpuctk "))
        .and_then(|l| l.split(' ').nth(2))
        .unwrap()
        .to_string();
    assert_eq!(digest, sha256_file(&bin));
    // It runs under qemu-user, static: no aarch64 libc given (no -L).
    let r = must(Command::new("qemu-aarch64").arg(&bin).arg("--version"));
    assert_eq!(r.stdout, version);
    let r = must(
        Command::new("qemu-aarch64")
            .arg(x.join("usr/bin/nvidia-ctk"))
            .args(["config", "default"]),
    );
    assert_eq!(r.stdout, ok(&["config", "default"]).stdout);
    // The man pages were made by running it: as many as this machine's package has.
    let man = |root: &Path| {
        fs::read_dir(root.join("usr/share/man/man1"))
            .unwrap()
            .count()
    };
    assert_eq!(man(&x), man(unpacked_deb()));
}

/// `cargo test --target aarch64-unknown-linux-gnu` with Debian's toolchain, static, and
/// qemu-user as the runner, in the cross target dir (scripts/static.sh's). Its own dependency
/// build (the dev profile: tests unwind, the release build aborts, so the release build's
/// dependencies could not be reused anyway), once per run.
fn cross_test(args: &[&str]) -> String {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().expect("target dir").join("cross");
    let r = must(
        Command::new("/usr/bin/cargo")
            .args(["test", "--locked", "--target", "aarch64-unknown-linux-gnu"])
            .args(args)
            .current_dir(repo())
            .env("CARGO_TARGET_DIR", target)
            .env("RUSTC", "/usr/bin/rustc")
            // Static test binaries: a dynamically linked aarch64 program hangs in its first
            // thread spawn under this qemu-user (7.2) with Debian's aarch64 glibc; static ones run.
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .env_remove("CARGO")
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
                "aarch64-linux-gnu-gcc",
            )
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
                "qemu-aarch64",
            ),
    );
    r.stdout
}

/// Passed tests in cargo's output.
fn passed(out: &str) -> usize {
    out.lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        .sum()
}

#[test]
fn arm64_unit_tests_of_the_pure_crates_pass_under_qemu() {
    let out = cross_test(&[
        "-p",
        "gpuctk-ldcache",
        "-p",
        "gpuctk-elf",
        "-p",
        "gpuctk-cdi",
        "-p",
        "gpuctk-core",
        "--lib",
        // These three bound their run time by the wall clock; emulated (many times slower, on a
        // busy 2-core machine) they fail for the clock alone. They run natively in every run.
        "--",
        "--skip",
        "caps_and_linearity",
        "--skip",
        "long_device_lists_are_linear_and_capped",
        "--skip",
        "section_name_lookup_is_linear",
    ]);
    // ldcache's arch_helpers checks NATIVE_FLAGS = 0x0a03 when built for aarch64.
    assert!(out.contains("test tests::arch_helpers ... ok"), "{out}");
    assert!(passed(&out) > 100, "{out}");
    // The syscall numbers and ELF/cache flags of the container crate, as built for aarch64.
    let out = cross_test(&[
        "-p",
        "gpuctk-container",
        "--lib",
        "--",
        "arch_numbers::",
        "elf::tests::",
    ]);
    assert!(
        out.contains("test arch_numbers::syscall_numbers_of_this_build_are_the_kernels ... ok"),
        "{out}"
    );
    assert!(
        out.contains("elf::tests::x86_64_and_aarch64_libraries_get_their_machine_and_flags ... ok"),
        "{out}"
    );
}

/// An arm64 mock host made on this machine: the aarch64 multiarch directory, aarch64 driver
/// libraries (cross-compiled into the mock host), an ld.so.cache written by Debian's aarch64
/// ldconfig under qemu (flags `libc6,AArch64`), the module naming aarch64; and the packaged
/// arm64 binary, under qemu, generating its spec from it.
#[test]
fn arm64_mock_host_layout_and_cdi_generate_under_qemu() {
    let t = TestDir::new();
    let dir = t.join("host");
    let ldconfig = repo().join("target/arm64/sbin/ldconfig");
    assert!(
        ldconfig.is_file(),
        "{}: scripts/setup.sh unpacks it",
        ldconfig.display()
    );
    ok(&[
        "mock-host",
        "create",
        dir.to_str().unwrap(),
        "--arch",
        "arm64",
        "--ldconfig",
        ldconfig.to_str().unwrap(),
        "--ldconfig-via",
        "qemu-aarch64",
    ]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("mock-host.json")).unwrap()).unwrap();
    assert_eq!(manifest["arch"], "arm64");
    assert_eq!(manifest["lib_dir"], "/usr/lib/aarch64-linux-gnu");
    assert!(dir
        .join("etc/ld.so.conf.d/aarch64-linux-gnu.conf")
        .is_file());
    let lib = dir.join("usr/lib/aarch64-linux-gnu/libcuda.so.570.124.06");
    let h = must(Command::new("readelf").arg("-h").arg(&lib)).stdout;
    assert!(h.contains("AArch64"), "{h}");
    let version = fs::read_to_string(dir.join("proc/driver/nvidia/version")).unwrap();
    assert!(version.contains(" for aarch64 "), "{version}");
    let p = must(
        Command::new("ldconfig")
            .arg("-p")
            .arg("-C")
            .arg(dir.join("etc/ld.so.cache")),
    )
    .stdout;
    let entries: Vec<&str> = p.lines().filter(|l| l.starts_with('\t')).collect();
    assert!(entries.len() >= 13, "{p}");
    for e in &entries {
        assert!(
            e.contains(" (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/"),
            "{e}"
        );
    }

    let x = t.join("x");
    must(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&arm64_packages().0)
            .arg(&x),
    );
    let d = dir.to_str().unwrap();
    let out = t.join("nvidia.yaml");
    must(
        Command::new("qemu-aarch64")
            .arg(x.join("usr/bin/nvidia-ctk"))
            .args(["cdi", "generate", "--driver-root", d, "--dev-root", d])
            .args(["--proc-root", &format!("{d}/proc"), "--output"])
            .arg(&out),
    );
    let spec = yaml(&fs::read_to_string(&out).unwrap());
    assert_cdi_schema(&spec);
    let text = spec.to_string();
    assert!(
        text.contains("/usr/lib/aarch64-linux-gnu/libcuda.so.570.124.06"),
        "{text}"
    );
    assert!(!text.contains("x86_64-linux-gnu"), "{text}");
    let uuids = manifest["gpus"].as_array().unwrap();
    for g in uuids {
        assert!(text.contains(g["uuid"].as_str().unwrap()), "{text}");
    }
}
