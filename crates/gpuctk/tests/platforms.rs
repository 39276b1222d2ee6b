//! Jetson (CSV mode) on a mock Jetson host (`mock-host create --layout tegra`): the spec of
//! `cdi generate --mode csv` (and `auto`, which picks it there), and `mode = "csv"` in the shim
//! under real runc and crun, judged by what the container sees.

use std::fs;
use std::path::Path;
use std::process::Command;

use gpuctk_mockhost::{LibraryLoad, ProbeReport};
use serde_json::{json, Value};

use crate::util::*;

const TEGRA_LIB: &str = "/usr/lib/aarch64-linux-gnu/tegra";

struct Jetson {
    t: TestDir,
    root: String,
    csv_dir: String,
}

fn jetson() -> Jetson {
    let t = TestDir::new();
    let dir = t.join("host");
    ok(&[
        "mock-host",
        "create",
        dir.to_str().unwrap(),
        "--layout",
        "tegra",
    ]);
    let root = dir.to_str().unwrap().to_string();
    let csv_dir = format!("{root}/etc/nvidia-container-runtime/host-files-for-container.d");
    Jetson { t, root, csv_dir }
}

impl Jetson {
    fn roots(&self) -> Vec<String> {
        vec![
            "--driver-root".into(),
            self.root.clone(),
            "--dev-root".into(),
            self.root.clone(),
            "--proc-root".into(),
            format!("{}/proc", self.root),
        ]
    }
    fn csv_files(&self) -> String {
        ["devices.csv", "drivers.csv", "l4t.csv"]
            .iter()
            .map(|f| format!("{}/{f}", self.csv_dir))
            .collect::<Vec<_>>()
            .join(",")
    }
    fn generate(&self, extra: &[&str]) -> Value {
        let files = self.csv_files();
        let mut args = vec![
            "cdi",
            "generate",
            "--csv.file",
            &files,
            "--nvidia-cdi-hook-path",
            GPUCTK,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let roots = self.roots();
        let r = ok(&with(&args, &roots));
        serde_json::from_str(&r.stdout).unwrap()
    }
}

fn links_of(spec: &Value) -> Vec<String> {
    let hooks = spec["containerEdits"]["hooks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    hooks
        .iter()
        .filter(|h| h["args"][1] == "create-symlinks")
        .flat_map(|h| {
            h["args"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|a| a.as_str())
                .filter(|a| a.contains("::"))
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn csv_spec_of_a_jetson() {
    let j = jetson();
    for mode in [&["--mode", "csv"][..], &["--mode", "auto"][..], &[][..]] {
        let spec = j.generate(mode);
        assert_cdi_schema(&spec);
        let names: Vec<&str> = spec["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["0", "all"], "{mode:?}");
        let nodes: Vec<&str> = spec["devices"][0]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            nodes,
            [
                "/dev/nvmap",
                "/dev/nvhost-ctrl",
                "/dev/nvhost-ctrl-gpu",
                "/dev/nvhost-gpu",
                "/dev/nvhost-as-gpu"
            ]
        );
        let mounts: Vec<&str> = spec["containerEdits"]["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["containerPath"].as_str().unwrap())
            .collect();
        // The absent l4t.csv library is left out, as NVIDIA's locator leaves it.
        assert_eq!(
            mounts,
            [
                "/usr/lib/aarch64-linux-gnu/tegra-egl",
                "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1",
                "/etc/nv_tegra_release"
            ]
        );
        assert_eq!(
            links_of(&spec),
            [
                format!("libcuda.so.1.1::{TEGRA_LIB}/libcuda.so"),
                "tegra/libcuda.so::/usr/lib/aarch64-linux-gnu/libcuda.so".to_string()
            ]
        );
        let ld = spec["containerEdits"]["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["args"][1] == "update-ldcache")
            .unwrap();
        assert_eq!(
            ld["args"],
            json!(["nvidia-cdi-hook", "update-ldcache", "--folder", TEGRA_LIB])
        );
    }
    // Ignore patterns drop `sym` entries; only `libcuda.so` next to libcuda is added back.
    let spec = j.generate(&["--mode", "csv", "--csv.ignore-pattern", "**/libcuda.so"]);
    assert_eq!(
        links_of(&spec),
        [format!("libcuda.so.1::{TEGRA_LIB}/libcuda.so")]
    );
    let spec = j.generate(&["--mode", "csv", "--no-all-device", "--disable-hook", "all"]);
    assert_eq!(spec["devices"].as_array().unwrap().len(), 1);
    assert!(spec["containerEdits"].get("hooks").is_none());
}

#[test]
fn csv_mode_refuses_what_it_cannot_serve() {
    let j = jetson();
    let roots = j.roots();
    let bad = j.t.join("bad.csv");
    fs::write(&bad, "dev, /dev/nvmap\nlibrary, /usr/lib/x.so\n").unwrap();
    let b = bad.to_str().unwrap();
    fails(
        &with(
            &["cdi", "generate", "--mode", "csv", "--csv.file", b],
            &roots,
        ),
        &[&format!("{b}:2: unknown type \"library\"")],
    );
    let empty = j.t.join("none.csv");
    fs::write(&empty, "dev, /dev/nvidia-absent\n").unwrap();
    fails(
        &with(
            &[
                "cdi",
                "generate",
                "--mode",
                "csv",
                "--csv.file",
                empty.to_str().unwrap(),
            ],
            &roots,
        ),
        &["none of the CSV files' `dev` entries exists"],
    );
    let files = j.csv_files();
    fails(
        &with(
            &[
                "cdi",
                "generate",
                "--mode",
                "csv",
                "--csv.file",
                &files,
                "--device-id",
                "1",
            ],
            &roots,
        ),
        &["--device-id 1: CSV mode (Jetson) has one device"],
    );
    fails(
        &with(
            &["cdi", "generate", "--mode", "nvml", "--csv.file", &files],
            &roots,
        ),
        &["--csv.*: only for --mode csv"],
    );
}

/// A bundle for `runtime` whose container lists its /dev and runs the probe, with a shim
/// configured with `mode_line` (empty: NVIDIA's default, auto) on the Jetson; with
/// `hook_only`, run by `runtime` itself with our legacy prestart hook in its spec (as an
/// engine's own hook set-up, docker's `--gpus`, has it), no shim.
fn csv_container(
    runtime: &str,
    mode_line: &str,
    hook_only: bool,
    env: &[&str],
    id: &str,
) -> (Jetson, i32, String, String) {
    let j = jetson();
    let bundle = j.t.join("bundle");
    fs::create_dir_all(&bundle).unwrap();
    gpuctk_mockhost::create_rootfs(
        &bundle.join("rootfs"),
        &gpuctk_mockhost::RootfsConfig::default(),
    )
    .unwrap();
    assert!(Command::new(runtime)
        .arg("spec")
        .arg("--bundle")
        .arg(&bundle)
        .status()
        .unwrap()
        .success());
    let cfg_path = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(["/bin/sh", "-c", "ls /dev; readlink /usr/lib/aarch64-linux-gnu/libcuda.so; echo ---probe---; /usr/bin/gpuctk-probe"]);
    spec["root"]["readonly"] = json!(false);
    let e = spec["process"]["env"].as_array_mut().unwrap();
    for x in env {
        e.push(json!(x));
    }
    let config = j.t.join("config.toml");
    if hook_only {
        spec["hooks"] = json!({"prestart": [{
            "path": GPUCTK,
            "args": ["nvidia-container-runtime-hook", "-config", config.to_str().unwrap(), "prestart"],
        }]});
    }
    fs::write(&cfg_path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    fs::write(
        &config,
        format!(
            "[nvidia-container-cli]\nroot = \"{root}\"\n\n[nvidia-container-runtime]\n{mode_line}runtimes = [\"{runtime}\"]\n\n[nvidia-container-runtime.modes.csv]\nmount-spec-path = \"{csv}\"\n\n[gpuctk]\ndev-root = \"{root}\"\nproc-root = \"{root}/proc\"\nhook-path = \"{GPUCTK}\"\n",
            root = j.root,
            csv = j.csv_dir
        ),
    )
    .unwrap();
    let bin = j.t.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let shim = bin.join("nvidia-container-runtime");
    std::os::unix::fs::symlink(GPUCTK, &shim).unwrap();
    let id = format!("{}-{id}", j.t.path().file_name().unwrap().to_string_lossy());
    let out = Command::new(if hook_only { Path::new(runtime) } else { &shim })
        .env("GPUCTK_CONFIG", &config)
        .arg("--root")
        .arg(j.t.join("state"))
        .args(["run", "--bundle", bundle.to_str().unwrap(), &id])
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (j, code, stdout, stderr)
}

/// What a container given the Jetson's device shows: its `dev` nodes, the L4T link recreated,
/// and libcuda loading through the updated cache from the Tegra folder.
fn assert_jetson_gpu(code: i32, stdout: &str, stderr: &str) {
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let (ls, probe) = stdout.split_once("---probe---\n").unwrap();
    for n in [
        "nvmap",
        "nvhost-ctrl",
        "nvhost-ctrl-gpu",
        "nvhost-gpu",
        "nvhost-as-gpu",
    ] {
        assert!(ls.lines().any(|l| l == n), "/dev/{n} missing: {ls}");
    }
    assert!(ls.lines().any(|l| l == "tegra/libcuda.so"), "{ls}");
    let report = ProbeReport::parse(probe);
    match report.libcuda {
        Some(LibraryLoad::Loaded { realpath, .. }) => {
            assert_eq!(realpath, format!("{TEGRA_LIB}/libcuda.so.1.1"), "{stdout}")
        }
        other => panic!("libcuda did not load: {other:?}\n{stdout}\n{stderr}"),
    }
}

const CSV_MODE: &str = "mode = \"csv\"\n";

fn csv_mode_in_a_container(runtime: &str) {
    let (_j, code, stdout, stderr) = csv_container(
        runtime,
        CSV_MODE,
        false,
        &["NVIDIA_VISIBLE_DEVICES=all"],
        "all",
    );
    assert_jetson_gpu(code, &stdout, &stderr);
    // A container that asks for nothing is left alone; one device is all CSV mode has.
    let (_j, code, stdout, _) = csv_container(runtime, CSV_MODE, false, &[], "none");
    assert_eq!(code, 0);
    assert!(!stdout.lines().any(|l| l == "nvmap"), "{stdout}");
    let (_j, code, _, stderr) = csv_container(
        runtime,
        CSV_MODE,
        false,
        &["NVIDIA_VISIBLE_DEVICES=1"],
        "one",
    );
    assert_ne!(code, 0);
    assert!(
        stderr.contains("mode \\\"csv\\\" (Jetson) has one device")
            || stderr.contains("mode \"csv\" (Jetson) has one device"),
        "{stderr}"
    );
}

/// Review finding (session 8): on a Jetson only `mode = "csv"` planned CSV's edits; the shim
/// under `auto` (NVIDIA's default, which resolves to `csv` there) and `jit-cdi`, and the
/// legacy prestart hook (under `legacy`), planned from discovery, which a Jetson's nvgpu
/// driver (no procfs) cannot serve. Every mode now serves the Jetson as CSV mode does.
fn jetson_in_every_mode(runtime: &str) {
    for (i, mode) in ["", "mode = \"jit-cdi\"\n", "mode = \"legacy\"\n"]
        .iter()
        .enumerate()
    {
        let (_j, code, stdout, stderr) = csv_container(
            runtime,
            mode,
            false,
            &["NVIDIA_VISIBLE_DEVICES=all"],
            &format!("all{i}"),
        );
        assert_jetson_gpu(code, &stdout, &stderr);
    }
    // The legacy hook alone (no shim) under `csv`, which it served as `auto`, by discovery.
    let (_j, code, stdout, stderr) = csv_container(
        runtime,
        CSV_MODE,
        true,
        &["NVIDIA_VISIBLE_DEVICES=all"],
        "hook",
    );
    assert_jetson_gpu(code, &stdout, &stderr);
}

#[test]
fn runc_jetson_in_every_mode() {
    jetson_in_every_mode("runc");
}

#[test]
fn runc_csv_mode() {
    csv_mode_in_a_container("runc");
}

#[test]
fn crun_csv_mode() {
    csv_mode_in_a_container("crun");
}

// ------------------------------------------------------------------ WSL2

const WSL_STORE: &str = gpuctk_mockhost::WSL_STORE_DIR;

struct Wsl {
    t: TestDir,
    root: String,
}

fn wsl() -> Wsl {
    let t = TestDir::new();
    let dir = t.join("host");
    ok(&[
        "mock-host",
        "create",
        dir.to_str().unwrap(),
        "--layout",
        "wsl",
    ]);
    let root = dir.to_str().unwrap().to_string();
    Wsl { t, root }
}

impl Wsl {
    fn roots(&self) -> Vec<String> {
        vec![
            "--driver-root".into(),
            self.root.clone(),
            "--dev-root".into(),
            self.root.clone(),
            "--proc-root".into(),
            format!("{}/proc", self.root),
        ]
    }
    fn generate(&self, extra: &[&str]) -> Value {
        let mut args = vec![
            "cdi",
            "generate",
            "--nvidia-cdi-hook-path",
            GPUCTK,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let roots = self.roots();
        let r = ok(&with(&args, &roots));
        serde_json::from_str(&r.stdout).unwrap()
    }
}

fn hook_args(spec: &Value, name: &str) -> Value {
    spec["containerEdits"]["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["args"][1] == name)
        .map(|h| h["args"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn wsl_spec_of_a_wsl_host() {
    let w = wsl();
    for mode in [&["--mode", "wsl"][..], &["--mode", "auto"][..], &[][..]] {
        let spec = w.generate(mode);
        assert_cdi_schema(&spec);
        let devices = spec["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1, "{mode:?}");
        assert_eq!(devices[0]["name"], "all");
        let nodes = devices[0]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0]["path"], "/dev/dxg");
        assert_eq!(nodes[0]["hostPath"], format!("{}/dev/dxg", w.root));
        let mounts: Vec<(&str, &str)> = spec["containerEdits"]["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["hostPath"].as_str().unwrap(),
                    m["containerPath"].as_str().unwrap(),
                )
            })
            .collect();
        // The store is mounted where the host has it; dxcore from /usr/lib/wsl/lib, not WSL's
        // copies of libcuda and NVML there.
        let want: Vec<String> = ["/usr/lib/wsl/lib/libdxcore.so".to_string()]
            .into_iter()
            .chain(
                [
                    "libcuda.so.1.1",
                    "libcuda_loader.so",
                    "libnvidia-ptxjitcompiler.so.1",
                    "libnvidia-ml.so.1",
                    "libnvidia-ml_loader.so",
                    "libnvdxgdmal.so.1",
                    "nvidia-smi",
                    "libnvwgf2umx.so",
                ]
                .iter()
                .map(|f| format!("{WSL_STORE}/{f}")),
            )
            .collect();
        assert_eq!(
            mounts.iter().map(|m| m.1).collect::<Vec<_>>(),
            want,
            "{mode:?}"
        );
        for (host, inner) in &mounts {
            assert_eq!(*host, format!("{}{inner}", w.root));
        }
        assert_eq!(
            hook_args(&spec, "create-symlinks"),
            json!([
                "nvidia-cdi-hook",
                "create-symlinks",
                "--link",
                format!("{WSL_STORE}/nvidia-smi::/usr/bin/nvidia-smi")
            ])
        );
        assert_eq!(
            hook_args(&spec, "update-ldcache"),
            json!([
                "nvidia-cdi-hook",
                "update-ldcache",
                "--folder",
                WSL_STORE,
                "--folder",
                "/usr/lib/wsl/lib"
            ])
        );
    }
    let spec = w.generate(&["--mode", "wsl", "--disable-hook", "update-ldcache"]);
    assert!(hook_args(&spec, "update-ldcache").is_null());
    assert!(!hook_args(&spec, "create-symlinks").is_null());
}

#[test]
fn wsl_mode_refuses_what_it_cannot_serve() {
    let w = wsl();
    let roots = w.roots();
    fails(
        &with(
            &["cdi", "generate", "--mode", "wsl", "--device-id", "0"],
            &roots,
        ),
        &["--device-id 0: WSL mode has one device; use all"],
    );
    fails(
        &with(
            &["cdi", "generate", "--mode", "wsl", "--csv.file", "/x.csv"],
            &roots,
        ),
        &["--csv.*: only for --mode csv"],
    );
    // Without the store (the Windows driver not installed), and without /dev/dxg.
    fs::remove_file(format!("{}{WSL_STORE}/libcuda.so.1.1", w.root)).unwrap();
    fails(
        &with(&["cdi", "generate"], &roots),
        &[
            "--mode wsl: ",
            "no driver store folder holds libcuda.so.1.1",
        ],
    );
    fs::remove_file(format!("{}/dev/dxg", w.root)).unwrap();
    fails(
        &with(&["cdi", "generate", "--mode", "wsl"], &roots),
        &["--mode wsl: ", "dev/dxg: absent or not a character device"],
    );
}

/// A bundle for `runtime` whose container runs `script`, through a shim configured with
/// `mode_line` (empty: NVIDIA's default, auto) on the WSL host.
fn wsl_container(
    w: &Wsl,
    runtime: &str,
    mode_line: &str,
    env: &[&str],
    script: &str,
    id: &str,
) -> (i32, String, String) {
    let bundle = w.t.join(&format!("bundle-{id}"));
    fs::create_dir_all(&bundle).unwrap();
    gpuctk_mockhost::create_rootfs(
        &bundle.join("rootfs"),
        &gpuctk_mockhost::RootfsConfig::default(),
    )
    .unwrap();
    assert!(Command::new(runtime)
        .arg("spec")
        .arg("--bundle")
        .arg(&bundle)
        .status()
        .unwrap()
        .success());
    let cfg_path = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(["/bin/sh", "-c", script]);
    spec["root"]["readonly"] = json!(false);
    let e = spec["process"]["env"].as_array_mut().unwrap();
    for x in env {
        e.push(json!(x));
    }
    fs::write(&cfg_path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let config = w.t.join(&format!("config-{id}.toml"));
    fs::write(
        &config,
        format!(
            "[nvidia-container-cli]\nroot = \"{root}\"\n\n[nvidia-container-runtime]\n{mode_line}runtimes = [\"{runtime}\"]\n\n[gpuctk]\ndev-root = \"{root}\"\nproc-root = \"{root}/proc\"\nhook-path = \"{GPUCTK}\"\n",
            root = w.root,
        ),
    )
    .unwrap();
    let shim = w.t.join("bin/nvidia-container-runtime");
    if !shim.exists() {
        fs::create_dir_all(shim.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(GPUCTK, &shim).unwrap();
    }
    let id = format!("{}-{id}", w.t.path().file_name().unwrap().to_string_lossy());
    let out = Command::new(&shim)
        .env("GPUCTK_CONFIG", &config)
        .arg("--root")
        .arg(w.t.join("state"))
        .args(["run", "--bundle", bundle.to_str().unwrap(), &id])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const WSL_SCRIPT: &str =
    "readlink /usr/bin/nvidia-smi; nvidia-smi -L; echo ---probe---; /usr/bin/gpuctk-probe";

/// What a container given WSL's device shows: `/dev/dxg` opens as the mock's present-and-allowed
/// node, libcuda loads from the driver store through the updated ld.so.cache and finds the
/// GPU, and nvidia-smi runs through the link, with NVML from the store.
fn assert_wsl_gpu(code: i32, stdout: &str, stderr: &str) {
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let (head, probe) = stdout.split_once("---probe---\n").unwrap();
    assert!(
        head.lines().any(|l| l == format!("{WSL_STORE}/nvidia-smi")),
        "{head}"
    );
    assert!(
        head.lines()
            .any(|l| l.starts_with("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-")),
        "{head}"
    );
    let report = ProbeReport::parse(probe);
    assert_eq!(report.device("/dev/dxg"), Some("ENXIO"), "{probe}");
    match &report.libcuda {
        Some(LibraryLoad::Loaded { realpath, .. }) => {
            assert_eq!(realpath, &format!("{WSL_STORE}/libcuda.so.1.1"), "{stdout}")
        }
        other => panic!("libcuda did not load: {other:?}\n{stdout}\n{stderr}"),
    }
    assert_eq!(report.cu_init, Some(0), "{probe}");
    assert_eq!(report.cu_device_count, Some((0, 1)), "{probe}");
}

fn wsl_just_in_time(runtime: &str) {
    let w = wsl();
    // NVIDIA's default mode (auto) and jit-cdi plan WSL's edits on a WSL host; under legacy,
    // our prestart hook makes the same edits.
    for (i, mode) in ["", "mode = \"jit-cdi\"\n", "mode = \"legacy\"\n"]
        .iter()
        .enumerate()
    {
        let (code, stdout, stderr) = wsl_container(
            &w,
            runtime,
            mode,
            &["NVIDIA_VISIBLE_DEVICES=all"],
            WSL_SCRIPT,
            &format!("all{i}"),
        );
        assert_wsl_gpu(code, &stdout, &stderr);
    }
    // `none`: the driver's files, no GPU node.
    let (code, stdout, stderr) = wsl_container(
        &w,
        runtime,
        "",
        &["NVIDIA_VISIBLE_DEVICES=none"],
        "ls /dev; echo ---probe---; /usr/bin/gpuctk-probe",
        "none",
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.lines().any(|l| l == "dxg"), "{stdout}");
    let report = ProbeReport::parse(stdout.split_once("---probe---\n").unwrap().1);
    assert!(
        matches!(report.libcuda, Some(LibraryLoad::Loaded { .. })),
        "{stdout}"
    );
    // CUDA_ERROR_NO_DEVICE: the driver is there, the GPU is not.
    assert_eq!(report.cu_init, Some(100), "{stdout}");
    // A container that asks for nothing is left alone; WSL has one device.
    let (code, stdout, _) = wsl_container(&w, runtime, "", &[], "ls /dev", "unasked");
    assert_eq!(code, 0);
    assert!(!stdout.lines().any(|l| l == "dxg"), "{stdout}");
    let (code, _, stderr) = wsl_container(
        &w,
        runtime,
        "",
        &["NVIDIA_VISIBLE_DEVICES=1"],
        "true",
        "one",
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("a WSL2 host has one device"), "{stderr}");
}

/// Review finding (session 8): under `mode = "cdi"` the shim planned from discovery what is
/// routed just in time (NVIDIA's `runtime.nvidia.com/gpu` kind, `none`), which a WSL2 host
/// (no procfs driver) cannot serve, while the legacy hook planned WSL2's edits there.
fn wsl_cdi_mode_just_in_time(runtime: &str) {
    let w = wsl();
    let cdi = "mode = \"cdi\"\n";
    let (code, stdout, stderr) = wsl_container(
        &w,
        runtime,
        cdi,
        &["NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=all"],
        WSL_SCRIPT,
        "runtime-kind",
    );
    assert_wsl_gpu(code, &stdout, &stderr);
    let (code, stdout, stderr) = wsl_container(
        &w,
        runtime,
        cdi,
        &["NVIDIA_VISIBLE_DEVICES=none"],
        "ls /dev; echo ---probe---; /usr/bin/gpuctk-probe",
        "none",
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.lines().any(|l| l == "dxg"), "{stdout}");
    let report = ProbeReport::parse(stdout.split_once("---probe---\n").unwrap().1);
    assert!(
        matches!(report.libcuda, Some(LibraryLoad::Loaded { .. })),
        "{stdout}"
    );
}

#[test]
fn runc_wsl_cdi_mode_just_in_time() {
    wsl_cdi_mode_just_in_time("runc");
}

#[test]
fn runc_wsl_just_in_time() {
    wsl_just_in_time("runc");
}

#[test]
fn crun_wsl_just_in_time() {
    wsl_just_in_time("crun");
}

// ------------------------------------------------------------------ podman

/// `script` in a podman container given `<vendor>/gpu=all` from `spec_args`' generated spec,
/// in a spec folder of the test's own that the call sees as Podman's /var/run/cdi.
fn podman_with_spec(spec_args: &[String], vendor: &str, script: &str) -> crate::engines::Out {
    use crate::engines::{podman_import, podman_with_spec_dir, Bed};
    let bed = Bed::new(1);
    let cdi = bed.t.join("cdi");
    fs::create_dir_all(&cdi).unwrap();
    let spec = cdi.join("nvidia.yaml");
    let mut args: Vec<String> = vec![
        "cdi".into(),
        "generate".into(),
        "--output".into(),
        spec.to_string_lossy().into_owned(),
        "--vendor".into(),
        vendor.into(),
        "--nvidia-cdi-hook-path".into(),
        GPUCTK.into(),
    ];
    args.extend(spec_args.iter().cloned());
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    podman_import(&bed);
    podman_with_spec_dir(&bed, &cdi, &[&format!("{vendor}/gpu=all")], script)
}

#[test]
fn podman_runs_the_csv_spec() {
    let j = jetson();
    let mut args = j.roots();
    args.extend([
        "--mode".into(),
        "csv".into(),
        "--csv.file".into(),
        j.csv_files(),
    ]);
    let r = podman_with_spec(
        &args,
        "csv.gpuctk.test",
        "ls /dev; readlink /usr/lib/aarch64-linux-gnu/libcuda.so; echo ---probe---; /usr/bin/gpuctk-probe",
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let (ls, probe) = r.stdout.split_once("---probe---\n").unwrap();
    for n in gpuctk_mockhost::TEGRA_NODES {
        assert!(ls.lines().any(|l| l == n), "/dev/{n} missing: {ls}");
    }
    assert!(ls.lines().any(|l| l == "tegra/libcuda.so"), "{ls}");
    match ProbeReport::parse(probe).libcuda {
        Some(LibraryLoad::Loaded { realpath, .. }) => {
            assert_eq!(realpath, format!("{TEGRA_LIB}/libcuda.so.1.1"))
        }
        other => panic!("libcuda did not load: {other:?}\n{}", r.stdout),
    }
}

#[test]
fn podman_runs_the_wsl_spec() {
    let w = wsl();
    let mut args = w.roots();
    args.extend(["--mode".into(), "wsl".into()]);
    let r = podman_with_spec(&args, "wsl.gpuctk.test", WSL_SCRIPT);
    assert_wsl_gpu(r.code, &r.stdout, &r.stderr);
}

// ------------------------------------------------------------------ the version file, once

/// A shim `create` on the host at `root` of a container with `env`, under `mode_line` (empty:
/// auto) and with the test's `cdi` folder as its spec dir; `/bin/true` stands for the runtime
/// (only the shim's edits are looked at). Under `strace -f` writing `trace`, when given. The
/// exit code and stderr.
fn shim_create(
    t: &TestDir,
    root: &str,
    env: &[&str],
    mode_line: &str,
    trace: Option<&Path>,
) -> (i32, String) {
    let bundle = t.join("bundle");
    let _ = fs::remove_dir_all(&bundle);
    fs::create_dir_all(bundle.join("rootfs")).unwrap();
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": env},
        "root": {"path": "rootfs"},
    });
    fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
    let config = t.join("config.toml");
    fs::write(
        &config,
        format!(
            "[nvidia-container-cli]\nroot = \"{root}\"\n\n[nvidia-container-runtime]\n{mode_line}runtimes = [\"/bin/true\"]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{cdi}\"]\n\n[nvidia-container-runtime.modes.csv]\nmount-spec-path = \"{root}/etc/nvidia-container-runtime/host-files-for-container.d\"\n\n[gpuctk]\ndev-root = \"{root}\"\nproc-root = \"{root}/proc\"\nhook-path = \"{GPUCTK}\"\n",
            cdi = t.join("cdi").display(),
        ),
    )
    .unwrap();
    let shim = t.join("bin/nvidia-container-runtime");
    if !shim.exists() {
        fs::create_dir_all(shim.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(GPUCTK, &shim).unwrap();
    }
    let mut c = match trace {
        Some(log) => {
            let mut c = Command::new("strace");
            c.arg("-f").arg("-o").arg(log).arg("--").arg(&shim);
            c
        }
        None => Command::new(&shim),
    };
    c.env("GPUCTK_CONFIG", &config)
        .arg("--root")
        .arg(t.join("state"))
        .args(["create", "--bundle", bundle.to_str().unwrap(), "c"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") {
            c.env_remove(k);
        }
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("{e} (install strace: scripts/setup.sh)"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The opens of the driver's version file in an `strace -f` log.
fn version_opens(trace: &Path) -> Vec<String> {
    fs::read_to_string(trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("open") && l.contains("/driver/nvidia/version\""))
        .map(str::to_string)
        .collect()
}

/// Review finding (session 9): on a host without the NVIDIA driver the create's platform probe
/// read the version file twice (`running_driver`, then `driver_loaded` behind `is_wsl`); and
/// `cdi generate --mode auto` and `nvidia-container-cli info` and `list` read it in their
/// probe and again in discovery.
#[test]
fn the_version_file_is_read_once_per_create_and_per_generate() {
    let w = wsl();
    let trace = w.t.join("create.trace");
    let (code, stderr) = shim_create(
        &w.t,
        &w.root,
        &["NVIDIA_VISIBLE_DEVICES=all"],
        "",
        Some(&trace),
    );
    assert_eq!(code, 0, "{stderr}");
    let spec: Value =
        serde_json::from_slice(&fs::read(w.t.join("bundle/config.json")).unwrap()).unwrap();
    assert!(spec.to_string().contains("/dev/dxg"), "{spec}");
    let opens = version_opens(&trace);
    assert_eq!(opens.len(), 1, "{opens:?}");

    // `cdi generate --mode auto` on a host with the driver: the probe and discovery share
    // one read.
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let trace = t.join("generate.trace");
    let out = t.join("nvidia.yaml");
    let mut c = Command::new("strace");
    c.arg("-f").arg("-o").arg(&trace).arg("--").arg(GPUCTK);
    c.args(["cdi", "generate", "--output", out.to_str().unwrap()])
        .args(h.roots());
    let r: Run = c.output().unwrap().into();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let opens = version_opens(&trace);
    assert_eq!(opens.len(), 1, "{opens:?}");

    // `nvidia-container-cli info` and `list`: the WSL2 probe and discovery share one read.
    let cli = t.join("bin/nvidia-container-cli");
    fs::create_dir_all(cli.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
    let config = t.join("config.toml");
    h.write_cli_config(&config, "");
    for cmd in ["info", "list"] {
        let trace = t.join(&format!("{cmd}.trace"));
        let mut c = Command::new("strace");
        c.arg("-f")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(&cli)
            .arg(cmd);
        c.env("GPUCTK_CONFIG", &config);
        let r: Run = c.output().unwrap().into();
        assert_eq!(r.code, 0, "{}", r.stderr);
        let opens = version_opens(&trace);
        assert_eq!(opens.len(), 1, "{cmd}: {opens:?}");
    }
}

/// Review finding (session 9): a version file that is there but names no version was "no
/// driver" to the create's probe (so a Jetson's markers made it CSV mode, and a static spec's
/// staleness went unchecked) and "a driver" to `cdi generate`'s. It is an error naming the
/// file, on every route: just in time on a Jetson and on a WSL2 host, a static spec, and
/// `cdi generate --mode auto` on either.
#[test]
fn a_malformed_version_file_is_an_error_naming_it_on_every_route() {
    let garbage = |root: &str| {
        let f = format!("{root}/proc/driver/nvidia/version");
        fs::create_dir_all(Path::new(&f).parent().unwrap()).unwrap();
        fs::write(&f, "garbage\n").unwrap();
        f
    };
    let j = jetson();
    let w = wsl();
    // A static spec for the WSL2 host, made while its version file was still absent.
    let cdi = w.t.join("cdi");
    fs::create_dir_all(&cdi).unwrap();
    let mut args = vec!["cdi", "generate", "--mode", "wsl", "--output"];
    let spec = cdi.join("nvidia.yaml");
    args.push(spec.to_str().unwrap());
    let roots = w.roots();
    ok(&with(&args, &roots));
    let (code, stderr) = shim_create(
        &w.t,
        &w.root,
        &["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"],
        "",
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    for (t, root, roots, env) in [
        (&j.t, &j.root, j.roots(), "NVIDIA_VISIBLE_DEVICES=all"),
        (&w.t, &w.root, w.roots(), "NVIDIA_VISIBLE_DEVICES=all"),
        (
            &w.t,
            &w.root,
            w.roots(),
            "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all",
        ),
    ] {
        let f = garbage(root);
        let (code, stderr) = shim_create(t, root, &[env], "", None);
        assert_ne!(code, 0, "{root} {env}: {stderr}");
        assert!(
            stderr.contains(&f) && stderr.contains("NVRM version"),
            "{root} {env}: {stderr}"
        );
        fails(
            &with(&["cdi", "generate", "--format", "json"], &roots),
            &[&f, "NVRM version"],
        );
    }
}
