use std::fs;
use std::process::Command;

use crate::util::*;

/// The error is a single line that starts with our prefix.
fn one_line(r: &Run) {
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "want one line, got:\n{}", r.stderr);
    assert!(lines[0].starts_with("gpuctk: error: "), "{}", lines[0]);
}

fn generate_fails(h: &Host, extra: &[&str], needles: &[&str]) -> Run {
    let mut args = vec!["cdi", "generate"];
    args.extend_from_slice(extra);
    let roots = h.roots();
    let r = fails(&with(&args, &roots), needles);
    one_line(&r);
    r
}

#[test]
fn garbage_proc_version() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let f = format!("{}/driver/nvidia/version", h.proc_root());
    fs::write(&f, "hello world\n").unwrap();
    generate_fails(&h, &[], &[&f, "NVRM version"]);
    fs::write(&f, b"\xff\xfe\x00garbage").unwrap();
    generate_fails(&h, &[], &[&f, "UTF-8"]);
    fs::write(&f, "").unwrap();
    generate_fails(&h, &[], &[&f]);
}

#[test]
fn truncated_gpu_information() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let bus = h.manifest["gpus"][1]["bus_id"]
        .as_str()
        .unwrap()
        .to_string();
    let f = format!("{}/driver/nvidia/gpus/{bus}/information", h.proc_root());
    let text = fs::read_to_string(&f).unwrap();
    fs::write(&f, &text[..text.find("Bus Location").unwrap()]).unwrap();
    generate_fails(&h, &[], &[&f, "Bus Location"]);
    fs::write(&f, text.replace("GPU UUID: \t GPU-", "GPU UUID: \t XYZ-")).unwrap();
    generate_fails(&h, &[], &[&f, "GPU UUID"]);
}

#[test]
fn missing_driver_root_and_proc_root() {
    let t = TestDir::new();
    let missing = t.join("no-such-driver");
    let r = fails(
        &[
            "cdi",
            "generate",
            "--driver-root",
            missing.to_str().unwrap(),
        ],
        &["no-such-driver", "does not exist"],
    );
    one_line(&r);
    let r = fails(
        &[
            "info",
            "--driver-root",
            t.path().to_str().unwrap(),
            "--proc-root",
            t.join("proc").to_str().unwrap(),
        ],
        &["driver/nvidia/version not found"],
    );
    one_line(&r);
}

#[test]
fn truncated_ld_so_cache() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "rhel");
    let f = format!("{}/etc/ld.so.cache", h.driver_root());
    let bytes = fs::read(&f).unwrap();
    for cut in [0, 10, 30, 60, bytes.len() / 2, bytes.len() - 1] {
        fs::write(&f, &bytes[..cut]).unwrap();
        generate_fails(&h, &[], &[&f, "ldconfig -r"]);
    }
}

#[test]
fn ld_so_cache_offsets_past_the_end() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let f = format!("{}/etc/ld.so.cache", h.driver_root());
    let mut bytes = fs::read(&f).unwrap();
    assert!(
        bytes.starts_with(b"glibc-ld.so.cache1.1"),
        "glibc 2.36 writes the new format only"
    );
    // First entry: flags at 48, key at 52, value at 56 (offsets from the header).
    bytes[52..56].copy_from_slice(&0xffff_ff00u32.to_le_bytes());
    fs::write(&f, &bytes).unwrap();
    generate_fails(&h, &[], &[&f]);
    let mut bytes = fs::read(&f).unwrap();
    bytes[52..56].copy_from_slice(&100u32.to_le_bytes());
    let past = bytes.len() as u32 + 7;
    bytes[56..60].copy_from_slice(&past.to_le_bytes());
    fs::write(&f, &bytes).unwrap();
    generate_fails(&h, &[], &[&f]);
}

/// A damaged driver library is skipped with a warning that names it (NVIDIA's discovery skips
/// it too); without the driver's libcuda, `cdi generate` refuses, naming the driver root.
#[test]
fn corrupt_library_elf() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let dir = format!("{}/usr/lib/x86_64-linux-gnu", h.driver_root());
    let encode = format!("{dir}/libnvidia-encode.so.570.124.06");
    fs::write(&encode, b"this is not an ELF file at all, just text").unwrap();
    let r = ok(&with(&["cdi", "generate"], &h.roots()));
    assert!(
        r.stderr.contains(&encode) && r.stderr.contains("not an ELF file"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stdout.contains("libnvidia-encode"),
        "skipped: {}",
        r.stdout
    );
    assert!(r.stdout.contains("libcuda.so.570.124.06"));

    let lib = format!("{dir}/libcuda.so.570.124.06");
    let bytes = fs::read(&lib).unwrap();
    fs::write(&lib, &bytes[..100]).unwrap();
    let r = fails(
        &with(&["cdi", "generate"], &h.roots()),
        &["no libcuda.so.570.124.06", "--driver-root"],
    );
    assert!(
        r.stderr.contains("truncated") && r.stderr.contains(&lib),
        "{}",
        r.stderr
    );
    // Asked for: written anyway.
    ok(&with(
        &["cdi", "generate", "--allow-missing-libcuda"],
        &h.roots(),
    ));
}

#[test]
fn missing_output_dir() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    // A fresh host has no /var/run/cdi: it is created (NVIDIA does too)...
    let out = t.join("no/such/dir/nvidia.yaml");
    ok(&with(
        &["cdi", "generate", "--output", out.to_str().unwrap()],
        &h.roots(),
    ));
    assert!(out.is_file());
    // ...but only once there is a spec to write.
    let out = t.join("other/dir/nvidia.yaml");
    let wrong = t.join("empty-root");
    fs::create_dir_all(wrong.join("etc")).unwrap();
    let mut args = vec!["cdi", "generate", "--output", out.to_str().unwrap()];
    args.extend_from_slice(&["--driver-root", wrong.to_str().unwrap()]);
    let roots = [
        "--dev-root".to_string(),
        h.dev_root(),
        "--proc-root".to_string(),
        h.proc_root(),
    ];
    let r = fails(&with(&args, &roots), &["no libcuda"]);
    one_line(&r);
    assert!(!t.join("other").exists(), "nothing created");
    let is_dir = t.join("host");
    generate_fails(
        &h,
        &["--output", is_dir.to_str().unwrap()],
        &["--output", "is a directory"],
    );
}

struct Mount(std::path::PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn unwritable_output_dir_keeps_the_old_spec() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let dir = t.join("cdi");
    fs::create_dir(&dir).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&dir)
        .status()
        .expect("mount(8)");
    assert!(st.success(), "mounting a tmpfs needs root");
    let _m = Mount(dir.clone());
    let spec = dir.join("nvidia.yaml");
    fs::write(&spec, "old spec\n").unwrap();
    let st = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success());
    generate_fails(
        &h,
        &["--output", spec.to_str().unwrap()],
        &["--output", "not writable"],
    );
    assert_eq!(fs::read_to_string(&spec).unwrap(), "old spec\n");
}

#[test]
fn failed_generation_never_touches_an_existing_spec() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let spec = t.join("nvidia.yaml");
    let out = spec.to_str().unwrap();
    ok(&with(&["cdi", "generate", "--output", out], &h.roots()));
    let good = fs::read(&spec).unwrap();
    fs::write(
        format!("{}/driver/nvidia/version", h.proc_root()),
        "garbage",
    )
    .unwrap();
    generate_fails(&h, &["--output", out], &["NVRM"]);
    assert_eq!(fs::read(&spec).unwrap(), good);
    let leftovers: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "only host/ and the spec: {leftovers:?}");
}

#[test]
fn unknown_flag_values() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    generate_fails(&h, &["--format", "xml"], &["--format", "xml", "yaml, json"]);
    generate_fails(
        &h,
        &["--device-name-strategy", "name"],
        &["--device-name-strategy", "index, uuid, type-index"],
    );
    generate_fails(&h, &["--device-id", "9"], &["--device-id 9", "GPUs 0-1"]);
    generate_fails(
        &h,
        &["--device-id", "GPU-00000000-0000-0000-0000-000000000000"],
        &["no such GPU"],
    );
    generate_fails(&h, &["--vendor=-bad-"], &["--vendor"]);
    generate_fails(&h, &["--class", "a/b"], &["--class"]);
    let r = fails(
        &[
            "mock-host",
            "create",
            t.join("x").to_str().unwrap(),
            "--layout",
            "suse",
        ],
        &["--layout", "debian, rhel, driver-container"],
    );
    one_line(&r);
    let r = fails(
        &[
            "mock-host",
            "create",
            t.join("y").to_str().unwrap(),
            "--driver-version",
            "banana",
        ],
        &["--driver-version", "banana"],
    );
    one_line(&r);
    let r = fails(
        &[
            "mock-host",
            "create",
            t.join("z").to_str().unwrap(),
            "--gpus",
            "0",
        ],
        &["--gpus 0", "1 to 64"],
    );
    one_line(&r);
    let r = fails(&["cdi", "frobnicate"], &["frobnicate"]);
    one_line(&r);
}

/// With the GPUs' device nodes missing, `cdi generate` said "no GPU selected"; it names the
/// nodes that are missing and where it looked.
#[test]
fn missing_gpu_nodes_are_named() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    for n in ["nvidia0", "nvidia1"] {
        fs::remove_file(format!("{}/dev/{n}", h.dev_root())).unwrap();
    }
    // Discovery warns per GPU; the error, the last line, names them all and where it looked.
    let r = fails(&with(&["cdi", "generate"], &h.roots()), &[]);
    let last = r.stderr.lines().last().unwrap_or("");
    for needle in [
        "device nodes are missing",
        "/dev/nvidia0",
        "/dev/nvidia1",
        &h.dev_root(),
    ] {
        assert!(last.contains(needle), "{needle}: {}", r.stderr);
    }
}

/// Review finding: a `/proc/self/uid_map` that could not be read meant "not root", so root of
/// the host took a config.toml from its home's `.config`, which is never root's. Now it is an
/// error naming the file. `/proc` is hidden under a tmpfs in a private mount namespace.
#[test]
fn an_unreadable_uid_map_is_an_error_naming_it_not_a_user_config() {
    let t = TestDir::new();
    let cfg = t.join(".config/nvidia-container-runtime/config.toml");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    fs::write(
        &cfg,
        "[nvidia-container-runtime]\nruntimes = [\"in-home\"]\n",
    )
    .unwrap();
    let r: Run = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs none /proc && exec "$@""#)
        .args(["sh", GPUCTK, "config"])
        .env_clear()
        .env("HOME", t.path())
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("unshare (util-linux)")
        .into();
    assert_ne!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("in-home"), "{}", r.stdout);
    one_line(&r);
    assert!(
        r.stderr
            .contains("/proc/self/uid_map: cannot read it (No such file or directory")
            && r.stderr.contains("GPUCTK_CONFIG"),
        "{}",
        r.stderr
    );
}
