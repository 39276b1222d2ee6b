//! Jetson (CSV mode) on a mock Jetson host (`mock-host create --layout tegra`): the spec of
//! `cdi generate --mode csv` (and `auto`, which picks it there), and `mode = "csv"` in the shim
//! under real runc and crun, judged by what the container sees.

use std::fs;
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
/// configured for `mode = "csv"` on the Jetson.
fn csv_container(runtime: &str, env: &[&str], id: &str) -> (Jetson, i32, String, String) {
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
    fs::write(&cfg_path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let config = j.t.join("config.toml");
    fs::write(
        &config,
        format!(
            "[nvidia-container-cli]\nroot = \"{root}\"\n\n[nvidia-container-runtime]\nmode = \"csv\"\nruntimes = [\"{runtime}\"]\n\n[nvidia-container-runtime.modes.csv]\nmount-spec-path = \"{csv}\"\n\n[gpuctk]\ndev-root = \"{root}\"\nproc-root = \"{root}/proc\"\nhook-path = \"{GPUCTK}\"\n",
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
    let out = Command::new(&shim)
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

fn csv_mode_in_a_container(runtime: &str) {
    let (_j, code, stdout, stderr) = csv_container(runtime, &["NVIDIA_VISIBLE_DEVICES=all"], "all");
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
    // The L4T link was recreated, and libcuda loads through the updated cache from the Tegra
    // folder.
    assert!(ls.lines().any(|l| l == "tegra/libcuda.so"), "{ls}");
    let report = ProbeReport::parse(probe);
    match report.libcuda {
        Some(LibraryLoad::Loaded { realpath, .. }) => {
            assert_eq!(realpath, format!("{TEGRA_LIB}/libcuda.so.1.1"), "{stdout}")
        }
        other => panic!("libcuda did not load: {other:?}\n{stdout}\n{stderr}"),
    }
    // A container that asks for nothing is left alone; one device is all CSV mode has.
    let (_j, code, stdout, _) = csv_container(runtime, &[], "none");
    assert_eq!(code, 0);
    assert!(!stdout.lines().any(|l| l == "nvmap"), "{stdout}");
    let (_j, code, _, stderr) = csv_container(runtime, &["NVIDIA_VISIBLE_DEVICES=1"], "one");
    assert_ne!(code, 0);
    assert!(
        stderr.contains("mode \\\"csv\\\" (Jetson) has one device")
            || stderr.contains("mode \"csv\" (Jetson) has one device"),
        "{stderr}"
    );
}

#[test]
fn runc_csv_mode() {
    csv_mode_in_a_container("runc");
}

#[test]
fn crun_csv_mode() {
    csv_mode_in_a_container("crun");
}
