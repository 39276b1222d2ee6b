use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::Value;

use crate::util::*;

fn major(rdev: u64) -> u64 {
    ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff)
}
fn minor(rdev: u64) -> u64 {
    (rdev & 0xff) | ((rdev >> 12) & !0xff)
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// A spec node must be exactly the node on the host.
fn assert_node_matches_host(n: &Value) {
    let host = n["hostPath"].as_str().or(n["path"].as_str()).unwrap();
    let md = std::fs::metadata(host).unwrap_or_else(|e| panic!("{host}: {e}"));
    assert_eq!(n["major"].as_u64().unwrap(), major(md.rdev()), "{n}");
    assert_eq!(n["minor"].as_u64().unwrap(), minor(md.rdev()), "{n}");
    assert_eq!(
        n["fileMode"].as_u64().unwrap(),
        u64::from(md.mode() & 0o777),
        "{n}"
    );
    assert_eq!(n["permissions"], "rwm");
    assert_eq!(n["type"], "c");
    // The node keeps its group in the container (the card node's video), root's unwritten.
    match md.gid() {
        0 => assert!(n.get("gid").is_none(), "{n}"),
        g => assert_eq!(n["gid"].as_u64(), Some(u64::from(g)), "{n}"),
    }
}

fn hook_args(spec: &Value, name: &str) -> Vec<String> {
    spec["containerEdits"]["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| strs(&h["args"]))
        .find(|a| a.get(1).map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no {name} hook"))
}

/// Everything a generated spec must say about the host it was made from.
fn check_spec(h: &Host, spec: &Value, gpus: usize, version: &str) {
    assert_cdi_schema(spec);
    assert_eq!(spec["kind"], "nvidia.com/gpu");
    assert_eq!(
        spec["cdiVersion"], "0.5.0",
        "hostPath and digit names need 0.5.0, nothing more"
    );
    assert!(
        spec.get("annotations").is_none(),
        "no annotations by default: Podman 4.3 rejects them"
    );
    let lib_dir = h.manifest["lib_dir"].as_str().unwrap();
    let driver_root = h.driver_root();

    let devices = spec["devices"].as_array().unwrap();
    assert_eq!(
        devices.len(),
        2 * gpus + 1,
        "index + uuid per GPU, plus all"
    );
    let uuids = h.uuids();
    assert_eq!(uuids.len(), gpus);
    for (i, uuid) in uuids.iter().enumerate() {
        for name in [i.to_string(), uuid.clone()] {
            let d = devices
                .iter()
                .find(|d| d["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no device {name}"));
            // The GPU's node, then its DRM card and render nodes (from its sysfs folder).
            let nodes = d["containerEdits"]["deviceNodes"].as_array().unwrap();
            let paths: Vec<&str> = nodes.iter().map(|n| n["path"].as_str().unwrap()).collect();
            assert_eq!(
                paths,
                [
                    format!("/dev/nvidia{i}"),
                    format!("/dev/dri/card{i}"),
                    format!("/dev/dri/renderD{}", 128 + i)
                ]
            );
            assert_eq!(
                nodes[0]["hostPath"],
                format!("{}/dev/nvidia{i}", h.dev_root()).as_str()
            );
            for n in nodes {
                assert_node_matches_host(n);
            }
            // udev's by-path links, made as the host has them, for this GPU's nodes only.
            let bus = h.manifest["gpus"][i]["bus_id"].as_str().unwrap();
            let hooks = d["containerEdits"]["hooks"].as_array().unwrap();
            assert_eq!(hooks.len(), 1, "{d}");
            assert_eq!(
                strs(&hooks[0]["args"])[1..],
                [
                    "create-symlinks".to_string(),
                    "--link".into(),
                    format!("../card{i}::/dev/dri/by-path/pci-{bus}-card"),
                    "--link".into(),
                    format!("../renderD{}::/dev/dri/by-path/pci-{bus}-render", 128 + i),
                ]
            );
            assert_eq!(hooks[0]["hookName"], "createContainer");
            // No additionalGids by default: they need cdiVersion 0.7.0.
            assert!(d["containerEdits"].get("additionalGids").is_none(), "{d}");
        }
    }
    let all = devices.last().unwrap();
    assert_eq!(all["name"], "all");
    assert_eq!(
        all["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .len(),
        3 * gpus
    );

    let common = &spec["containerEdits"];
    let nodes: Vec<&str> = common["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        [
            "/dev/nvidia-modeset",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidiactl"
        ]
    );
    for n in common["deviceNodes"].as_array().unwrap() {
        assert_node_matches_host(n);
    }
    let env = strs(&common["env"]);
    assert!(
        env.contains(&format!("NVIDIA_CTK_LIBCUDA_DIR={lib_dir}")),
        "{env:?}"
    );
    assert!(env.contains(&"NVIDIA_VISIBLE_DEVICES=void".to_string()));

    let mounts = common["mounts"].as_array().unwrap();
    let mut container_paths = Vec::new();
    for m in mounts {
        let hp = m["hostPath"].as_str().unwrap();
        let cp = m["containerPath"].as_str().unwrap();
        assert!(Path::new(hp).exists(), "{hp} missing");
        assert!(hp.starts_with(&driver_root), "{hp} outside the driver root");
        if cp.starts_with("/usr/lib") || cp.starts_with("/lib") {
            assert_eq!(
                &hp[driver_root.len()..],
                cp,
                "container path = host path minus the driver root"
            );
        }
        let opts = strs(&m["options"]);
        if cp.ends_with("/socket") {
            assert!(
                !opts.contains(&"ro".to_string()) && opts.contains(&"noexec".to_string()),
                "{opts:?}"
            );
        } else {
            assert_eq!(opts, ["ro", "nosuid", "nodev", "rbind", "rprivate"]);
        }
        container_paths.push(cp.to_string());
    }
    for want in [
        format!("{lib_dir}/libcuda.so.{version}"),
        format!("{lib_dir}/libnvidia-ml.so.{version}"),
        format!("{lib_dir}/libnvidia-ptxjitcompiler.so.{version}"),
        format!("{lib_dir}/libnvidia-nvvm.so.{version}"),
        format!("{lib_dir}/libcudadebugger.so.{version}"),
        format!("{lib_dir}/libnvidia-allocator.so.{version}"),
        format!("{lib_dir}/libnvidia-cfg.so.{version}"),
        format!("{lib_dir}/libnvidia-opencl.so.{version}"),
        "/usr/bin/nvidia-smi".to_string(),
        "/usr/bin/nvidia-debugdump".to_string(),
        "/usr/bin/nvidia-persistenced".to_string(),
        "/usr/bin/nvidia-cuda-mps-control".to_string(),
        "/usr/bin/nvidia-cuda-mps-server".to_string(),
        format!("/lib/firmware/nvidia/{version}/gsp_ga10x.bin"),
        "/run/nvidia-persistenced/socket".to_string(),
    ] {
        assert!(
            container_paths.contains(&want),
            "no mount for {want}: {container_paths:?}"
        );
    }

    let links = hook_args(spec, "create-symlinks");
    assert_eq!(links[0], "nvidia-cdi-hook");
    for want in [
        format!("libcuda.so.{version}::{lib_dir}/libcuda.so.1"),
        format!("libcuda.so.1::{lib_dir}/libcuda.so"),
        format!("libnvidia-ml.so.{version}::{lib_dir}/libnvidia-ml.so.1"),
        format!("libnvidia-ml.so.1::{lib_dir}/libnvidia-ml.so"),
        format!("libnvidia-nvvm.so.{version}::{lib_dir}/libnvidia-nvvm.so.4"),
        // GBM's backend, as NVIDIA's generator links it.
        format!("../libnvidia-allocator.so.1::{lib_dir}/gbm/nvidia-drm_gbm.so"),
    ] {
        assert!(links.contains(&want), "no link {want}: {links:?}");
    }
    assert_eq!(
        hook_args(spec, "enable-cuda-compat")[2],
        format!("--host-driver-version={version}")
    );
    assert_eq!(
        hook_args(spec, "update-ldcache")[2..],
        ["--folder".to_string(), lib_dir.to_string()]
    );
    // NVIDIA 1.20's common hooks, in its order; the procfs the hook reads is the mock host's.
    let names: Vec<String> = common["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["args"][1].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "create-symlinks",
            "enable-cuda-compat",
            "update-ldcache",
            "disable-device-node-modification",
            "update-application-profile"
        ],
        "{common}"
    );
    assert_eq!(
        hook_args(spec, "disable-device-node-modification")[2..],
        [format!("--proc-root={}", h.proc_root())]
    );
    assert_eq!(hook_args(spec, "update-application-profile").len(), 2);
    for hook in common["hooks"].as_array().unwrap() {
        assert_eq!(hook["hookName"], "createContainer");
        assert_eq!(hook["path"], "/usr/bin/nvidia-cdi-hook");
        assert_eq!(strs(&hook["env"]), ["NVIDIA_CTK_DEBUG=false"]);
    }
}

fn generate_and_check(layout: &str, gpus: u32, version: &str) {
    let t = TestDir::new();
    let h = mock_host(&t, "host", gpus, version, layout);
    let out = t.join("nvidia.yaml");
    let roots = h.roots();
    let out_s = out.to_str().unwrap();
    ok(&with(
        &[
            "cdi",
            "generate",
            "--output",
            out_s,
            "--nvidia-cdi-hook-path",
            "/usr/bin/nvidia-cdi-hook",
        ],
        &roots,
    ));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("---\n"), "YAML by default");
    check_spec(&h, &yaml(&text), gpus as usize, version);
    let v = ok(&["cdi", "validate", out_s]);
    assert!(v.stdout.contains("valid"), "{}", v.stdout);
    let mode = std::fs::metadata(&out).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o644);
}

#[test]
fn debian_1_gpu_570() {
    generate_and_check("debian", 1, "570.124.06");
}

#[test]
fn debian_8_gpus_550() {
    generate_and_check("debian", 8, "550.54.15");
}

#[test]
fn debian_64_gpus_580() {
    generate_and_check("debian", 64, "580.65.06");
}

#[test]
fn rhel_2_gpus_535() {
    generate_and_check("rhel", 2, "535.261.03");
}

#[test]
fn rhel_8_gpus_570() {
    generate_and_check("rhel", 8, "570.124.06");
}

#[test]
fn driver_container_8_gpus_570() {
    generate_and_check("driver-container", 8, "570.124.06");
}

/// Regression (issue 21): generating the same spec again (the refresh unit at every boot)
/// leaves the file as it is: same inode, same times, no fsync, nothing for a CDI cache that
/// watches the folder to reload. A spec that differs in a byte, or in its mode, is written.
#[test]
fn the_same_spec_again_is_not_rewritten() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let out = t.join("nvidia.yaml");
    let args = [
        "cdi",
        "generate",
        "--output",
        out.to_str().unwrap(),
        "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook",
    ];
    ok(&with(&args, &h.roots()));
    let id = || {
        let md = std::fs::metadata(&out).unwrap();
        (
            md.ino(),
            md.mtime_nsec(),
            md.ctime_nsec(),
            md.mode() & 0o7777,
        )
    };
    let first = id();
    let text = std::fs::read(&out).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    ok(&with(&args, &h.roots()));
    assert_eq!(id(), first);
    // Another mode: written again, 0644.
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(&with(&args, &h.roots()));
    let (ino, _, _, mode) = id();
    assert_eq!(mode, 0o644);
    assert_ne!(ino, first.0);
    assert_eq!(std::fs::read(&out).unwrap(), text);
    // One byte other (the same size): written again.
    let mut edited = text.clone();
    let at = edited.iter().rposition(|b| *b == b'a').unwrap();
    edited[at] = b'b';
    std::fs::write(&out, &edited).unwrap();
    let before = id().0;
    ok(&with(&args, &h.roots()));
    assert_eq!(std::fs::read(&out).unwrap(), text);
    assert_ne!(id().0, before);
    // A link to a spec with the same bytes is replaced by the file, not followed.
    let elsewhere = t.join("elsewhere.yaml");
    std::fs::write(&elsewhere, &text).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::remove_file(&out).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &out).unwrap();
    ok(&with(&args, &h.roots()));
    assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
}

#[test]
fn json_by_extension_and_by_flag() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let out = t.join("nvidia.json");
    ok(&with(
        &[
            "cdi",
            "generate",
            "--output",
            out.to_str().unwrap(),
            "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook",
        ],
        &h.roots(),
    ));
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    check_spec(&h, &v, 2, "570.124.06");
    let r = ok(&with(&["cdi", "generate", "--format", "json"], &h.roots()));
    let v2: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["devices"], v2["devices"]);
    // The default hook path is NVIDIA's: nvidia-cdi-hook in PATH, else in /usr/bin (see
    // rootless::cdi_generate_default_hook_path_and_warnings).
    let hooks = v2["containerEdits"]["hooks"].as_array().unwrap();
    assert!(
        hooks[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("/nvidia-cdi-hook"),
        "{}",
        hooks[0]["path"]
    );
}

#[test]
fn driver_version_annotation_on_request() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "550.54.15", "debian");
    let r = ok(&with(
        &["cdi", "generate", "--driver-version-annotation"],
        &h.roots(),
    ));
    let spec = yaml(&r.stdout);
    assert_cdi_schema(&spec);
    assert_eq!(spec["annotations"]["gpuctk/driver-version"], "550.54.15");
    assert_eq!(spec["cdiVersion"], "0.6.0", "annotations need 0.6.0");
}

#[test]
fn naming_and_selection() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 4, "570.124.06", "debian");
    let uuids = h.uuids();
    let r = ok(&with(
        &[
            "cdi",
            "generate",
            "--device-name-strategy",
            "type-index",
            "--device-id",
            "1",
            "--device-id",
            &uuids[3],
            "--no-all-device",
        ],
        &h.roots(),
    ));
    let spec = yaml(&r.stdout);
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gpu1", "gpu3"]);
    let r = ok(&with(
        &[
            "cdi",
            "generate",
            "--device-name-strategy",
            "uuid,index",
            "--device-id",
            "2",
        ],
        &h.roots(),
    ));
    let spec = yaml(&r.stdout);
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["2", uuids[2].as_str(), "all"]);
}

#[test]
fn dev_root_defaults_to_driver_root_and_hostpath_is_dropped_at_slash() {
    // With the dev root at the host dir the node paths carry hostPath; only "/" drops it, which
    // we cannot use here, so check the default-to-driver-root rule instead.
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let r = ok(&[
        "cdi",
        "generate",
        "--driver-root",
        &h.driver_root(),
        "--proc-root",
        &h.proc_root(),
    ]);
    let spec = yaml(&r.stdout);
    assert_eq!(
        spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"],
        format!("{}/dev/nvidia0", h.driver_root()).as_str()
    );
}

/// GPU Operator nodes set the driver root once, in config.toml (`[nvidia-container-cli] root =
/// "/run/nvidia/driver"`): `cdi generate` without `--driver-root` takes it from there, as
/// NVIDIA's does; the flag still wins.
#[test]
fn driver_root_from_config_toml() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let cfg = t.join("config.toml");
    std::fs::write(
        &cfg,
        format!("[nvidia-container-cli]\nroot = \"{}\"\n", h.driver_root()),
    )
    .unwrap();
    let args = [
        "cdi",
        "generate",
        "--dev-root",
        &h.dev_root(),
        "--proc-root",
        &h.proc_root(),
    ];
    let out = gpuctk(&args).env("GPUCTK_CONFIG", &cfg).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("libcuda.so.570.124.06"), "{text}");
    // The flag wins over the file.
    let mut with_flag = args.to_vec();
    let empty = t.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    with_flag.extend_from_slice(&["--driver-root", empty.to_str().unwrap()]);
    let out = gpuctk(&with_flag)
        .env("GPUCTK_CONFIG", &cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// NVIDIA's `cdi generate` flags: `--disable-hook` leaves hooks out (by name or `all`),
/// `--mode nvml` is ours, the modes gpuctk does not have are refused by name, the flags
/// without meaning here are accepted with a warning, and `--config-search-path` replaces the
/// directories the loaders' vendor files are looked up in.
#[test]
fn nvidia_generate_flags() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let gen = |extra: &[&str]| {
        let mut args = vec!["cdi", "generate"];
        args.extend_from_slice(extra);
        run(&with(&args, &h.roots()))
    };
    let r = gen(&["--disable-hook", "enable-cuda-compat"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("enable-cuda-compat") && r.stdout.contains("create-symlinks"));
    let r = gen(&["--disable-hook", "disable-device-node-modification"]);
    assert!(
        !r.stdout.contains("disable-device-node-modification")
            && r.stdout.contains("update-application-profile"),
        "{}",
        r.stdout
    );
    let r = gen(&["--disable-hooks", "all"]);
    assert!(r.code == 0 && !r.stdout.contains("hooks:"), "{}", r.stdout);
    let r = gen(&[
        "--mode",
        "nvml",
        "--feature-flag",
        "x",
        "--config-search-path",
        "/x",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("--feature-flag x"), "{}", r.stderr);
    // The config search path is applied: /x holds no vendor file, and the defaults are not read.
    assert!(
        !r.stdout.contains("/vulkan/") && !r.stdout.contains("OpenCL"),
        "{}",
        r.stdout
    );
    let r = gen(&[]);
    assert!(
        r.stdout
            .contains("containerPath: /etc/vulkan/icd.d/nvidia_icd.json")
            && r.stdout
                .contains("containerPath: /etc/OpenCL/vendors/nvidia.icd")
            && r.stdout
                .contains("containerPath: /usr/share/glvnd/egl_vendor.d/10_nvidia.json"),
        "{}",
        r.stdout
    );
    let r = gen(&["--config-search-path", "x"]);
    assert!(
        r.code != 0
            && r.stderr
                .contains("--config-search-path \"x\": not an absolute path"),
        "{}",
        r.stderr
    );
    for (args, needle) in [
        (
            &["--mode", "imex"][..],
            "--mode imex: no IMEX channel under",
        ),
        (&["--mode", "wsl"][..], "--mode wsl: "),
        (
            &["--mode", "csv", "--csv.file", "/nonexistent/l4t.csv"],
            "--mode csv: no entries in the CSV files /nonexistent/l4t.csv",
        ),
        (&["--csv.file", "/x"], "--csv.*"),
    ] {
        let r = gen(args);
        assert_ne!(r.code, 0);
        assert!(r.stderr.contains(needle), "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}

/// `cdi transform root`: a spec generated on a host whose driver sits under a directory is
/// moved to another root, host paths only (container paths and hooks stay), on whole path
/// components; from a file or stdin, YAML or JSON.
#[test]
fn transform_root_moves_host_paths() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let spec = t.join("nvidia.yaml");
    ok(&with(
        &["cdi", "generate", "--output", spec.to_str().unwrap()],
        &h.roots(),
    ));
    let root = h.driver_root();
    let r = ok(&[
        "cdi",
        "transform",
        "root",
        "--from",
        &root,
        "--to",
        "/run/nvidia/driver",
        "--input",
        spec.to_str().unwrap(),
    ]);
    let v = yaml(&r.stdout);
    let mounts = v["containerEdits"]["mounts"].as_array().unwrap();
    let cuda = mounts
        .iter()
        .find(|m| {
            m["containerPath"]
                .as_str()
                .unwrap()
                .ends_with("libcuda.so.570.124.06")
        })
        .unwrap();
    assert_eq!(
        cuda["hostPath"],
        "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06"
    );
    assert_eq!(
        cuda["containerPath"],
        "/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06"
    );
    // The hook's `--proc-root` (the mock host's procfs) is not a driver path: it stays.
    assert!(
        !r.stdout
            .lines()
            .any(|l| l.contains(&format!("{root}/")) && !l.contains("--proc-root=")),
        "{}",
        r.stdout
    );
    // Container side, from stdin, to JSON by the output's extension.
    let out = t.join("moved.json");
    let mut c = gpuctk(&[
        "cdi",
        "transform",
        "root",
        "--from",
        "/usr/lib/x86_64-linux-gnu",
        "--to",
        "/usr/lib64",
        "--relative-to",
        "container",
        "--output",
        out.to_str().unwrap(),
    ]);
    c.stdin(std::fs::File::open(&spec).unwrap());
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let text = v.to_string();
    assert!(
        text.contains("\"containerPath\":\"/usr/lib64/libcuda.so.570.124.06\""),
        "{text}"
    );
    assert!(text.contains("--folder\",\"/usr/lib64\""), "{text}");
}

/// The EGL platform libraries carry their own version (`libnvidia-egl-wayland.so.1.1.13`), not
/// the driver's: found through the real `ld.so.cache` (gcc builds one with its soname, ldconfig
/// lists it) and mounted with its soname link, while a stray `libnvidia-egl-gbm.so.old` is not.
#[test]
fn egl_platform_libraries_with_their_own_version() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let root = std::path::PathBuf::from(h.driver_root());
    let container_lib_dir = h.manifest["lib_dir"].as_str().unwrap().to_string();
    let lib_dir = root.join(container_lib_dir.trim_start_matches('/'));
    let src = t.join("egl.c");
    std::fs::write(&src, "int nvidia_egl_platform(void) { return 1; }\n").unwrap();
    for (file, soname) in [
        (
            "libnvidia-egl-wayland.so.1.1.13",
            "libnvidia-egl-wayland.so.1",
        ),
        ("libnvidia-egl-gbm.so.old", "libnvidia-egl-gbm.so.1"),
    ] {
        let o = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(lib_dir.join(file))
            .arg(format!("-Wl,-soname,{soname}"))
            .arg(&src)
            .output()
            .expect("gcc");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = std::process::Command::new("ldconfig")
        .arg("-r")
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let r = ok(&with(&["cdi", "generate", "--format", "json"], &h.roots()));
    let spec: Value = serde_json::from_str(&r.stdout).unwrap();
    let targets: Vec<&str> = spec["containerEdits"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["containerPath"].as_str())
        .collect();
    let wayland = format!("{container_lib_dir}/libnvidia-egl-wayland.so.1.1.13");
    assert!(targets.contains(&wayland.as_str()), "{targets:?}");
    assert!(
        !targets.iter().any(|t| t.contains("egl-gbm")),
        "{targets:?}"
    );
    let hooks = spec["containerEdits"]["hooks"].as_array().unwrap();
    let links = hooks
        .iter()
        .find(|h| h["args"][1] == "create-symlinks")
        .unwrap()
        .to_string();
    assert!(
        links.contains("libnvidia-egl-wayland.so.1.1.13::")
            && links.contains("libnvidia-egl-wayland.so.1\""),
        "{links}"
    );
    // Through the shim it is a graphics library: `compute` does not bring it.
    let r = ok(&with(&["info", "--json"], &h.roots()));
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let lib = v["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "libnvidia-egl-wayland.so")
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert_eq!(lib["capability"], "graphics");
    assert_eq!(lib["soname"], "libnvidia-egl-wayland.so.1");
}

/// `--mode management` (NVIDIA's spec for monitoring agents, which its installer writes as
/// `management.nvidia.com/gpu`): one `all` device with every NVIDIA node the host has, the GPUs',
/// the control nodes and the MIG monitor capability, with the `chmod` of `/dev/nvidia-caps`;
/// not the MIG config capability, which only a privileged container gets; the driver files in
/// the common edits, which carry no node. No node at all is a clear error.
#[test]
fn management_mode() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 4, "570.124.06", "debian");
    let gen = |extra: &[&str]| {
        let mut args = vec![
            "cdi",
            "generate",
            "--mode",
            "management",
            "--format",
            "json",
            "--nvidia-cdi-hook-path",
            "/usr/bin/nvidia-cdi-hook",
        ];
        args.extend_from_slice(extra);
        run(&with(&args, &h.roots()))
    };
    let r = gen(&["--vendor", "management.nvidia.com"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let spec: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_cdi_schema(&spec);
    assert_eq!(spec["kind"], "management.nvidia.com/gpu");
    let devices = spec["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["name"], "all");
    let nodes: Vec<&str> = devices[0]["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    for want in [
        "/dev/nvidia0",
        "/dev/nvidia3",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
        &format!(
            "/dev/nvidia-caps/nvidia-cap{}",
            gpuctk_mockhost::MIG_MONITOR_MINOR
        ),
    ] {
        assert!(nodes.contains(&want), "{want} missing: {nodes:?}");
    }
    let config = format!(
        "/dev/nvidia-caps/nvidia-cap{}",
        gpuctk_mockhost::MIG_CONFIG_MINOR
    );
    assert!(!nodes.contains(&config.as_str()), "{nodes:?}");
    let hooks = devices[0]["containerEdits"]["hooks"].to_string();
    assert!(
        hooks.contains(r#""chmod","--mode","755","--path","/dev/nvidia-caps""#),
        "{hooks}"
    );
    let common = &spec["containerEdits"];
    assert!(common.get("deviceNodes").is_none(), "{common}");
    assert!(
        common["mounts"]
            .to_string()
            .contains("libcuda.so.570.124.06"),
        "{common}"
    );
    // Management containers may make device nodes, as NVIDIA's management mode lets them.
    let hooks = common["hooks"].to_string();
    assert!(
        !hooks.contains("disable-device-node-modification") && hooks.contains("update-ldcache"),
        "{hooks}"
    );
    let file = t.join("management.json");
    std::fs::write(&file, &r.stdout).unwrap();
    let v = ok(&["cdi", "validate", file.to_str().unwrap()]);
    assert!(v.stdout.contains("valid"), "{}", v.stdout);

    // A host whose nodes are gone.
    let dev = std::path::Path::new(&h.dev_root()).join("dev");
    std::fs::remove_dir_all(&dev).unwrap();
    std::fs::create_dir(&dev).unwrap();
    let r = gen(&[]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("no NVIDIA device node under") && r.stderr.contains("--dev-root"),
        "{}",
        r.stderr
    );
    // Discovery's warnings name each missing node; the error is one line.
    assert_eq!(r.stderr.matches("error:").count(), 1, "{}", r.stderr);
}

/// `--additional-gids` puts the group of each node not open to all, the card node's video (44),
/// in its device's `additionalGids` and the `all` device's, at cdiVersion 0.7.0; NVIDIA's
/// `--feature-flag no-additional-gids-for-device-nodes` wins over it.
#[test]
fn additional_gids_on_request() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let gen = |extra: &[&str]| {
        let mut args = vec!["cdi", "generate", "--format", "json"];
        args.extend_from_slice(extra);
        let r = ok(&with(&args, &h.roots()));
        let spec: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_cdi_schema(&spec);
        spec
    };
    let spec = gen(&["--additional-gids"]);
    assert_eq!(spec["cdiVersion"], "0.7.0");
    for d in spec["devices"].as_array().unwrap() {
        assert_eq!(
            d["containerEdits"]["additionalGids"],
            serde_json::json!([44]),
            "{d}"
        );
    }
    assert!(spec["containerEdits"].get("additionalGids").is_none());
    let card = &spec["devices"][0]["containerEdits"]["deviceNodes"][1];
    assert_eq!(card["path"], "/dev/dri/card0");
    assert_eq!(card["gid"], 44);
    let off = gen(&[
        "--additional-gids",
        "--feature-flag",
        "no-additional-gids-for-device-nodes",
    ]);
    assert_eq!(off["cdiVersion"], "0.5.0");
    assert!(!off.to_string().contains("additionalGids"), "{off}");
}

/// `--mode gds|mofed|gdrcopy|nvswitch|imex`: NVIDIA's kinds (`nvidia.com/gds`, ...,
/// `nvidia.com/imex-channel`), one `all` device with exactly the host's nodes of the mode (GDS
/// also mounts `/run/udev` and `/etc/cufile.json`), an IMEX device per channel; no common
/// edits. A host without the nodes is a one-line error naming what to load.
#[test]
fn gated_and_imex_modes() {
    let t = TestDir::new();
    let flags = [
        "--gds",
        "--mofed",
        "--gdrcopy",
        "--nvswitches",
        "2",
        "--imex-channels",
        "3",
    ];
    let h = mock_host_with(&t, "host", 1, "570.124.06", "debian", &flags);
    let gen = |h: &Host, mode: &str| {
        run(&with(
            &["cdi", "generate", "--format", "json", "--mode", mode],
            &h.roots(),
        ))
    };
    for (mode, kind, want) in [
        (
            "gds",
            "nvidia.com/gds",
            (0..16)
                .map(|i| format!("/dev/nvidia-fs{i}"))
                .collect::<Vec<_>>(),
        ),
        (
            "mofed",
            "nvidia.com/mofed",
            vec![
                "/dev/infiniband/rdma_cm".into(),
                "/dev/infiniband/uverbs0".into(),
                "/dev/infiniband/uverbs1".into(),
            ],
        ),
        ("gdrcopy", "nvidia.com/gdrcopy", vec!["/dev/gdrdrv".into()]),
        (
            "nvswitch",
            "nvidia.com/nvswitch",
            vec![
                "/dev/nvidia-nvswitch0".into(),
                "/dev/nvidia-nvswitch1".into(),
                "/dev/nvidia-nvswitchctl".into(),
            ],
        ),
    ] {
        let r = gen(&h, mode);
        assert_eq!(r.code, 0, "{mode}: {}", r.stderr);
        let spec: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_cdi_schema(&spec);
        assert_eq!(spec["kind"], kind);
        assert!(
            spec.get("containerEdits")
                .is_none_or(|c| c.as_object().unwrap().is_empty()),
            "{spec}"
        );
        let devices = spec["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0]["name"], "all");
        let edits = &devices[0]["containerEdits"];
        let nodes = edits["deviceNodes"].as_array().unwrap();
        let mut paths: Vec<String> = nodes
            .iter()
            .map(|n| n["path"].as_str().unwrap().to_string())
            .collect();
        paths.sort();
        let mut want = want;
        want.sort();
        assert_eq!(paths, want, "{mode}");
        for n in nodes {
            assert_eq!(
                n["hostPath"],
                format!("{}{}", h.dev_root(), n["path"].as_str().unwrap())
            );
            assert_node_matches_host(n);
        }
        let mounts: Vec<&str> = edits["mounts"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| m["containerPath"].as_str().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        if mode == "gds" {
            assert_eq!(mounts, ["/run/udev", "/etc/cufile.json"], "{spec}");
        } else {
            assert!(mounts.is_empty(), "{spec}");
        }
    }
    // The majors are the modules' in /proc/devices.
    let devices = std::fs::read_to_string(format!(
        "{}/devices",
        h.manifest["proc_root"].as_str().unwrap()
    ))
    .unwrap();
    for name in ["nvidia-fs", "gdrdrv", "nvidia-nvswitch", "infiniband_verbs"] {
        assert!(
            devices.lines().any(|l| l.ends_with(&format!(" {name}"))),
            "{name}: {devices}"
        );
    }
    let r = gen(&h, "imex");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let spec: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_cdi_schema(&spec);
    assert_eq!(spec["kind"], "nvidia.com/imex-channel");
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["0", "1", "2", "all"]);
    assert_eq!(
        spec["devices"][2]["containerEdits"]["deviceNodes"][0]["path"],
        "/dev/nvidia-caps-imex-channels/channel2"
    );
    assert_eq!(
        spec["devices"][3]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // A host without them: one line naming the module and the folder.
    let bare = mock_host(&t, "bare", 1, "570.124.06", "debian");
    for (mode, what) in [
        ("gds", "nvidia-fs"),
        ("mofed", "ib_uverbs"),
        ("gdrcopy", "gdrdrv"),
        ("nvswitch", "nvidia-nvswitch"),
        ("imex", "nvidia-caps-imex-channels"),
    ] {
        let r = gen(&bare, mode);
        assert_eq!(r.code, 1, "{mode}: {}", r.stdout);
        assert!(
            r.stderr.contains(what) && r.stderr.contains(&bare.dev_root()),
            "{mode}: {}",
            r.stderr
        );
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert!(r.stdout.is_empty());
    }
}
