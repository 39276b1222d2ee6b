use std::fs;

use crate::util::*;

#[test]
fn cdi_list_reads_spec_dirs_with_priority() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let etc = t.join("etc-cdi");
    let run = t.join("run-cdi");
    fs::create_dir_all(&etc).unwrap();
    fs::create_dir_all(&run).unwrap();
    ok(&with(
        &[
            "cdi",
            "generate",
            "--output",
            etc.join("nvidia.yaml").to_str().unwrap(),
        ],
        &h.roots(),
    ));
    fs::write(run.join("broken.json"), "{ not json").unwrap();
    let r = ok(&[
        "cdi",
        "list",
        "--spec-dir",
        etc.to_str().unwrap(),
        "--spec-dir",
        run.to_str().unwrap(),
    ]);
    let names: Vec<&str> = r.stdout.lines().collect();
    let mut want = vec![
        "nvidia.com/gpu=0".to_string(),
        "nvidia.com/gpu=1".to_string(),
        "nvidia.com/gpu=all".to_string(),
    ];
    want.extend(h.uuids().iter().map(|u| format!("nvidia.com/gpu={u}")));
    want.sort();
    assert_eq!(names, want);
    assert!(
        r.stderr.contains("broken.json"),
        "a broken spec is reported: {}",
        r.stderr
    );
    let r = ok(&[
        "cdi",
        "list",
        "--spec-dir",
        t.join("missing").to_str().unwrap(),
    ]);
    assert_eq!(r.stdout, "");
}

#[test]
fn cdi_validate_names_file_device_and_field() {
    let t = TestDir::new();
    let bad = t.join("bad.yaml");
    fs::write(
        &bad,
        "cdiVersion: 0.3.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: dev/nvidia0\n",
    )
    .unwrap();
    let r = fails(
        &["cdi", "validate", bad.to_str().unwrap()],
        &["bad.yaml", "device \"0\"", "deviceNodes[0].path", "0.5.0"],
    );
    assert!(r.stderr.contains("absolute"), "{}", r.stderr);
    let unknown = t.join("unknown.json");
    fs::write(&unknown, r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"a","containerEdits":{"env":["A=1"]}}],"extra":1}"#).unwrap();
    fails(
        &["cdi", "validate", unknown.to_str().unwrap()],
        &["unknown.json", "extra"],
    );
    let badver = t.join("v.yaml");
    fs::write(&badver, "cdiVersion: 9.9.9\nkind: nvidia.com/gpu\ndevices:\n- name: a\n  containerEdits:\n    env: [A=1]\n").unwrap();
    fails(
        &["cdi", "validate", badver.to_str().unwrap()],
        &["v.yaml", "9.9.9"],
    );
}

#[test]
fn info_human_and_json() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 3, "550.54.15", "rhel");
    let r = ok(&with(&["info"], &h.roots()));
    assert!(
        r.stdout
            .contains("NVIDIA driver 550.54.15 (supports up to CUDA 12.4)"),
        "{}",
        r.stdout
    );
    for u in h.uuids() {
        assert!(r.stdout.contains(&u), "{}", r.stdout);
    }
    assert!(
        r.stdout
            .contains("/usr/lib64/libcuda.so.550.54.15 (libcuda.so.1)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("missing: "),
        "libraries the mock does not ship are listed as missing"
    );
    let r = ok(&with(&["info", "--json"], &h.roots()));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["driver_version"], "550.54.15");
    assert_eq!(v["cuda_version"]["major"], 12);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 3);
    assert_eq!(v["gpus"][2]["node"]["path"], "/dev/nvidia2");
    let libcuda = v["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "libcuda.so")
        .unwrap();
    assert_eq!(libcuda["soname"], "libcuda.so.1");
    assert_eq!(libcuda["capability"], "compute");
    assert!(v["library_source"]
        .as_str()
        .unwrap()
        .ends_with("etc/ld.so.cache"));
}

#[test]
fn missing_device_node_is_a_warning_and_the_gpu_is_left_out() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    fs::remove_file(format!("{}/dev/nvidia1", h.dev_root())).unwrap();
    let r = ok(&with(&["cdi", "generate"], &h.roots()));
    assert!(
        r.stderr.contains("GPU 1") && r.stderr.contains("no device node"),
        "{}",
        r.stderr
    );
    let spec = yaml(&r.stdout);
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "GPU 0 twice plus all: {names:?}");
}

#[test]
fn demo_runs_the_chain_on_a_mock_host() {
    let r = ok(&["demo", "--mock", "--gpus", "2"]);
    assert!(r.stdout.contains("built a mock GPU host"), "{}", r.stdout);
    assert!(
        r.stdout.contains("/dev/nvidia0 (195:0)") && r.stdout.contains("/dev/nvidia1 (195:1)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("update-ldcache"), "{}", r.stdout);
    assert!(
        r.stdout.contains("the chain holds: 2 GPU(s)"),
        "{}",
        r.stdout
    );
}

#[test]
fn nvidia_ctk_personality() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let link = t.join("nvidia-ctk");
    std::os::unix::fs::symlink(GPUCTK, &link).unwrap();
    let out = std::process::Command::new(&link)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: nvidia-ctk"), "{help}");
    let mut cmd = std::process::Command::new(&link);
    cmd.args(["cdi", "generate", "--format", "json"])
        .args(h.roots());
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["devices"][0]["name"], "0");
    let r = ok(&["--version"]);
    assert!(r.stdout.starts_with("gpuctk "), "{}", r.stdout);
}

#[test]
fn mock_rootfs_has_probe_and_busybox() {
    let t = TestDir::new();
    let dir = t.join("rootfs");
    ok(&["mock-host", "rootfs", dir.to_str().unwrap()]);
    for f in [
        "bin/busybox",
        "bin/sh",
        "usr/bin/gpuctk-probe",
        "etc/debian_version",
        "etc/ld.so.cache",
    ] {
        assert!(fs::symlink_metadata(dir.join(f)).is_ok(), "{f} missing");
    }
}

/// `config default` writes a config that loads without a warning; `config --set ... --in-place`
/// changes only what it is told and keeps the rest (comments included); a wrong key or value
/// fails in one line and writes nothing.
#[test]
fn config_default_and_set() {
    let t = TestDir::new();
    let f = t.join("etc/config.toml");
    ok(&["config", "default", "--output", f.to_str().unwrap()]);
    let before = std::fs::read_to_string(&f).unwrap();
    assert!(
        before.contains("runtimes = [\"runc\", \"crun\"]"),
        "{before}"
    );
    let cfg = f.to_str().unwrap();
    ok(&[
        "config",
        "--config-file",
        cfg,
        "--set",
        "nvidia-container-cli.no-cgroups",
        "--set",
        "nvidia-container-runtime.runtimes=crun:runc",
        "--in-place",
    ]);
    let after = std::fs::read_to_string(&f).unwrap();
    assert!(after.contains("no-cgroups = true"), "{after}");
    assert!(after.contains("runtimes = [\"crun\", \"runc\"]"), "{after}");
    assert!(after.contains("# nvidia-container-cli (the NVIDIA Container Toolkit's keys)"));
    // The shim reads what was written, with no warning.
    let r = gpuctk(&["runtime", "exec", "--", "--version"])
        .env("GPUCTK_CONFIG", &f)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for bad in [
        "nvidia-container-runtime.runtime=crun",
        "nvidia-container-runtime.mode=fast",
        "disable-require=maybe",
    ] {
        let r = fails(&["config", "--config-file", cfg, "--set", bad, "-i"], &[]);
        assert_eq!(r.stderr.lines().count(), 1, "{bad}: {}", r.stderr);
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            after,
            "{bad}: written"
        );
    }
    let r = fails(
        &[
            "config",
            "-c",
            cfg,
            "--set",
            "nvidia-container-runtime.runtime=crun",
        ],
        &["did you mean nvidia-container-runtime.runtimes"],
    );
    assert!(r.stderr.contains("nothing was written"), "{}", r.stderr);
}

/// A driver branch newer than gpuctk's CUDA table: the CUDA version comes from the note in the
/// driver's own libcuda (real 575+ libraries carry one; the mock's does too).
#[test]
fn cuda_version_of_a_driver_newer_than_the_table_comes_from_libcuda() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "590.44.01", "debian");
    let r = ok(&with(&["info", "--json"], &h.roots()));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v["cuda_version"]["major"],
        h.manifest["cuda_version"]
            .as_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    );
    assert!(!r.stderr.contains("unknown"), "{}", r.stderr);
}

/// `create-dev-char-symlinks --watch`: the links of the nodes there, then of each NVIDIA node
/// made while it runs (in `nvidia-caps/` too), none for other nodes; SIGTERM ends it with 0 and
/// nothing but the links left.
#[test]
fn system_dev_char_watch_links_new_nodes_until_sigterm() {
    use std::time::{Duration, Instant};
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let root = h.dev_root();
    let dev = std::path::Path::new(&root).join("dev");
    let chars = t.join("char");
    // The MIG capability folder appears while it watches (the mock host has one: gone first).
    let _ = std::fs::remove_dir_all(dev.join("nvidia-caps"));
    let child = gpuctk(&[
        "system",
        "create-dev-char-symlinks",
        "--driver-root",
        &root,
        "--dev-char-path",
        chars.to_str().unwrap(),
        "--watch",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let wait_link = |name: &str, target: &std::path::Path| {
        let start = Instant::now();
        while std::fs::read_link(chars.join(name)).ok().as_deref() != Some(target) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no link {name} -> {}",
                target.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mknod = |p: &std::path::Path, major: u32, minor: u32| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid path; mknod keeps nothing.
        let rc = unsafe {
            libc::mknod(
                c.as_ptr(),
                libc::S_IFCHR | 0o666,
                libc::makedev(major, minor),
            )
        };
        assert_eq!(
            rc,
            0,
            "mknod {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
    };
    // The nodes already there, then the watch is on.
    wait_link("195:0", &dev.join("nvidia0"));
    mknod(&dev.join("nvidia7"), 195, 7);
    wait_link("195:7", &dev.join("nvidia7"));
    // Not an NVIDIA node: no link.
    mknod(&dev.join("other"), 1, 3);
    std::fs::create_dir(dev.join("nvidia-caps")).unwrap();
    mknod(&dev.join("nvidia-caps/nvidia-cap1"), 511, 1);
    wait_link("511:1", &dev.join("nvidia-caps/nvidia-cap1"));
    // SAFETY: kill(2) on the child we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopped by signal 15"), "{stderr}");
    let names = names_in(&chars);
    assert!(!names.contains("1:3"), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.split(':').all(|p| p.parse::<u32>().is_ok())),
        "only links, no temp files: {names:?}"
    );
}

/// `nvidia-ctk system create-dev-char-symlinks` and `create-device-nodes` on a mock host: the
/// links point at the nodes, a second run changes nothing, a wrong link is replaced; nodes are
/// made with the majors procfs gives, a right one is left alone, a wrong one is refused.
#[test]
fn system_dev_char_links_and_device_nodes() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let dev_root = h.dev_root();
    let chars = t.join("char");
    let args = [
        "system",
        "create-dev-char-symlinks",
        "--driver-root",
        &dev_root,
        "--dev-char-path",
        chars.to_str().unwrap(),
    ];
    let r = ok(&args);
    assert!(r.stdout.contains("linked"), "{}", r.stdout);
    let link = |n: &str| std::fs::read_link(chars.join(n)).unwrap();
    assert_eq!(
        link("195:0"),
        std::path::Path::new(&dev_root).join("dev/nvidia0")
    );
    assert_eq!(
        link("195:1"),
        std::path::Path::new(&dev_root).join("dev/nvidia1")
    );
    assert_eq!(
        link("195:255"),
        std::path::Path::new(&dev_root).join("dev/nvidiactl")
    );
    let r = ok(&args);
    assert!(!r.stdout.contains("linked"), "idempotent: {}", r.stdout);
    std::fs::remove_file(chars.join("195:0")).unwrap();
    std::os::unix::fs::symlink("/wrong", chars.join("195:0")).unwrap();
    ok(&args);
    assert_eq!(
        link("195:0"),
        std::path::Path::new(&dev_root).join("dev/nvidia0")
    );

    // --create-all links what the driver implies, present or not; --dry-run writes nothing.
    let none = t.join("char-dry");
    let r = ok(&[
        "system",
        "create-dev-char-symlinks",
        "--driver-root",
        t.join("empty-root").to_str().unwrap(),
        "--proc-root",
        &h.proc_root(),
        "--dev-char-path",
        none.to_str().unwrap(),
        "--create-all",
        "--dry-run",
    ]);
    assert_eq!(r.stdout.matches("would link").count(), 6, "{}", r.stdout);
    assert!(!none.exists());

    // Nodes on an empty root, from the mock host's procfs.
    let root = t.join("fresh");
    std::fs::create_dir_all(&root).unwrap();
    let nodes = [
        "system",
        "create-device-nodes",
        "--driver-root",
        root.to_str().unwrap(),
        "--proc-root",
        &h.proc_root(),
    ];
    ok(&nodes);
    let rdev = |n: &str| {
        let md = std::fs::metadata(root.join("dev").join(n)).unwrap();
        assert!(md.file_type().is_char_device(), "{n}");
        assert_eq!(md.mode() & 0o777, 0o666, "{n}");
        (libc::major(md.rdev()), libc::minor(md.rdev()))
    };
    assert_eq!(rdev("nvidia0"), (195, 0));
    assert_eq!(rdev("nvidia1"), (195, 1));
    assert_eq!(rdev("nvidiactl"), (195, 255));
    assert_eq!(rdev("nvidia-uvm").1, 0);
    assert_eq!(
        rdev("nvidia-uvm").0,
        h.manifest["uvm_major"].as_u64().unwrap() as u32
    );
    ok(&nodes);
    // A node of the wrong numbers is not replaced.
    std::fs::remove_file(root.join("dev/nvidia1")).unwrap();
    std::fs::write(root.join("dev/nvidia1"), "not a node").unwrap();
    fails(&nodes, &["nvidia1", "not the character device 195:1"]);
}

/// `--json` for `cdi list`, `cdi validate` and `runtime configure`: stable fields a script can
/// read, the same facts as the text.
#[test]
fn json_output_of_list_validate_and_configure() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let dir = t.join("cdi");
    let spec = dir.join("nvidia.yaml");
    ok(&with(
        &["cdi", "generate", "--output", spec.to_str().unwrap()],
        &h.roots(),
    ));
    std::fs::write(dir.join("broken.yaml"), "cdiVersion: [").unwrap();
    let r = ok(&["cdi", "list", "--spec-dir", dir.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(v["devices"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("nvidia.com/gpu=1")));
    assert!(v["errors"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with("broken.yaml"));

    let bad = dir.join("broken.yaml");
    let out = gpuctk(&[
        "cdi",
        "validate",
        "--json",
        spec.to_str().unwrap(),
        bad.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"][0]["valid"], true);
    assert_eq!(v["files"][0]["devices"], 5);
    assert_eq!(v["files"][1]["valid"], false);
    assert!(!v["files"][1]["issues"][0]["message"]
        .as_str()
        .unwrap()
        .is_empty());

    let daemon = t.join("daemon.json");
    let r = ok(&[
        "runtime",
        "configure",
        "--config",
        daemon.to_str().unwrap(),
        "--nvidia-runtime-path",
        "/usr/bin/nvidia-container-runtime",
        "--dry-run",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["changes"][0]["action"], "write");
    assert!(v["changes"][0]["diff"].as_str().unwrap().contains("+{"));
    assert!(!daemon.exists(), "--dry-run writes nothing");
}
