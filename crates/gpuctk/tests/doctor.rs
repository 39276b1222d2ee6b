//! `gpuctk doctor` on mock hosts: a healthy one is all ok (exit 0); each way of breaking it
//! gives its finding, with a fix, and a non-zero exit (an unknown config key only warns).
//! Every path doctor reads is in the test's temp dir: the engine configs, the config.toml, the
//! spec dirs and the low-level runtime are passed explicitly, never the real host's.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::*;

const REFRESH_SERVICE: &str = include_str!("../../../packaging/systemd/gpuctk-cdi-refresh.service");
const REFRESH_PATH: &str = include_str!("../../../packaging/systemd/gpuctk-cdi-refresh.path");
const UDEV_RULE: &str = include_str!("../../../packaging/udev/99-gpuctk-nvidia.rules");

/// A healthy mock host with everything doctor checks in place.
struct Fixture {
    t: TestDir,
    host: Host,
}

fn executable(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn mknod(path: &Path, major: u32, minor: u32) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mknod has no other preconditions.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(rc, 0, "mknod {}", path.display());
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_host_args(&[])
    }

    /// [`Fixture::new`] on a mock host made with `extra` flags (`--mig ...`).
    fn with_host_args(extra: &[&str]) -> Fixture {
        let t = TestDir::new();
        let host = mock_host_with(&t, "host", 2, "570.124.06", "debian", extra);
        let f = Fixture { t, host };
        // /dev/char links, as udev or nvidia-ctk would make them.
        let dev = f.dev();
        let uvm = f.uvm_major();
        std::fs::create_dir_all(dev.join("char")).unwrap();
        for (node, major, minor) in [
            ("nvidia0", 195, 0),
            ("nvidia1", 195, 1),
            ("nvidiactl", 195, 255),
            ("nvidia-modeset", 195, 254),
            ("nvidia-uvm", uvm, 0),
            ("nvidia-uvm-tools", uvm, 1),
        ] {
            symlink(
                format!("../{node}"),
                dev.join(format!("char/{major}:{minor}")),
            )
            .unwrap();
        }
        // A low-level runtime and the nvidia runtime docker is registered with.
        executable(&f.t.join("bin/runc"));
        executable(&f.t.join("bin/nvidia-container-runtime"));
        f.write_config("");
        std::fs::create_dir_all(f.t.join("cdi")).unwrap();
        std::fs::create_dir_all(f.t.join("docker")).unwrap();
        f.docker_runtime(&f.t.join("bin/nvidia-container-runtime"));
        // The host's own files, as gpuctk's package installs them: the refresh units, the rule.
        let host = f.host_root();
        for (rel, text) in [
            (
                "usr/lib/systemd/system/gpuctk-cdi-refresh.service",
                REFRESH_SERVICE,
            ),
            (
                "usr/lib/systemd/system/gpuctk-cdi-refresh.path",
                REFRESH_PATH,
            ),
            ("usr/lib/udev/rules.d/99-gpuctk-nvidia.rules", UDEV_RULE),
        ] {
            std::fs::create_dir_all(host.join(rel).parent().unwrap()).unwrap();
            std::fs::write(host.join(rel), text).unwrap();
        }
        f
    }

    /// The root doctor reads the udev rules, the units and /run/systemd under.
    fn host_root(&self) -> PathBuf {
        self.t.join("hostroot")
    }

    fn dev(&self) -> PathBuf {
        Path::new(&self.host.dev_root()).join("dev")
    }

    fn proc(&self) -> PathBuf {
        PathBuf::from(self.host.proc_root())
    }

    fn uvm_major(&self) -> u32 {
        self.host.manifest["uvm_major"].as_u64().unwrap() as u32
    }

    /// gpuctk's own table: the NVML record in the test's dir, never the host's /run.
    fn gpuctk_table(&self) -> String {
        format!(
            "[gpuctk]\nnvml-cache = \"{}\"\n",
            self.t.join("nvml-cache.json").display()
        )
    }

    /// config.toml: the fixture's runc, then `extra`.
    fn write_config(&self, extra: &str) {
        let runc = self.t.join("bin/runc");
        std::fs::write(
            self.t.join("config.toml"),
            format!(
                "[nvidia-container-runtime]\nruntimes = [\"{}\"]\n{extra}{}",
                runc.display(),
                self.gpuctk_table()
            ),
        )
        .unwrap();
    }

    /// daemon.json: the nvidia runtime at `path`, and the fixture's spec dir as docker's CDI dir.
    /// config.toml as a Kubernetes node wants it: GPUs only as the device plugin allocates them.
    fn kubernetes_policy(&self) {
        let runc = self.t.join("bin/runc");
        std::fs::write(
            self.t.join("config.toml"),
            format!(
                "accept-nvidia-visible-devices-envvar-when-unprivileged = false\naccept-nvidia-visible-devices-as-volume-mounts = true\n[nvidia-container-runtime]\nruntimes = [\"{}\"]\n{}",
                runc.display(),
                self.gpuctk_table()
            ),
        )
        .unwrap();
    }

    fn docker_runtime(&self, path: &Path) {
        std::fs::write(
            self.t.join("docker/daemon.json"),
            format!(
                "{{\n  \"cdi-spec-dirs\": [\"{}\"],\n  \"runtimes\": {{\n    \"nvidia\": {{\"path\": \"{}\", \"args\": []}}\n  }}\n}}\n",
                self.t.join("cdi").display(),
                path.display()
            ),
        )
        .unwrap();
    }

    /// A CDI spec of this host in the spec dir.
    fn generate_spec(&self) -> PathBuf {
        let out = self.t.join("cdi/nvidia.yaml");
        let o = out.to_str().unwrap().to_string();
        let roots = self.host.roots();
        ok(&with(
            &[
                "cdi",
                "generate",
                "--output",
                &o,
                "--nvidia-cdi-hook-path",
                GPUCTK,
            ],
            &roots,
        ));
        out
    }

    fn args(&self, extra: &[&str]) -> Vec<String> {
        let p = |s: &str| self.t.join(s).to_str().unwrap().to_string();
        let mut v: Vec<String> = vec!["doctor".into()];
        v.extend(self.host.roots());
        v.extend([
            "--config".into(),
            p("config.toml"),
            "--spec-dir".into(),
            p("cdi"),
            "--docker-config".into(),
            p("docker/daemon.json"),
            "--containerd-config".into(),
            p("containerd/config.toml"),
            "--crio-config".into(),
            p("crio/crio.conf"),
            "--host-root".into(),
            p("hostroot"),
            "--systemctl".into(),
            p("bin/no-systemctl"),
        ]);
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    }

    /// `doctor --json` with `extra`: the run and the report.
    fn json(&self, extra: &[&str]) -> (Run, Value) {
        let mut args = self.args(extra);
        args.push("--json".into());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&a);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("doctor --json: {e}\n{}\n{}", r.stdout, r.stderr));
        (r, v)
    }

    fn text(&self, extra: &[&str]) -> Run {
        let args = self.args(extra);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&a)
    }
}

/// The check `group/name` of a report (the first, for names that repeat).
fn check<'a>(v: &'a Value, group: &str, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["group"] == group && c["name"] == name)
        .unwrap_or_else(|| panic!("no check {group}/{name} in {v:#}"))
}

fn not_ok(v: &Value) -> Vec<&Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "ok")
        .collect()
}

/// `group/name` has `status`, a fix, and `found` holds each of `needles`; the exit code says
/// whether anything failed.
fn expect(run: &Run, v: &Value, group: &str, name: &str, status: &str, needles: &[&str]) {
    let c = check(v, group, name);
    assert_eq!(c["status"], status, "{group}/{name}: {c:#}");
    assert_eq!(c["id"], format!("{group}/{name}"), "{c:#}");
    assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "{c:#}");
    for n in needles {
        let all = format!("{} {}", c["found"], c["fix"]);
        assert!(all.contains(n), "{group}/{name} lacks {n:?}: {c:#}");
    }
    if status == "fail" {
        assert_ne!(run.code, 0, "a fail must exit non-zero: {}", run.stdout);
        assert_eq!(v["status"], "fail");
    }
}

#[test]
fn healthy_host_is_all_ok() {
    let f = Fixture::new();
    f.generate_spec();
    let (r, v) = f.json(&[]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(v["status"], "ok");
    assert!(
        not_ok(&v).is_empty(),
        "{:#}",
        Value::from(not_ok(&v).into_iter().cloned().collect::<Vec<_>>())
    );
    for (g, n) in [
        ("driver", "kernel-module"),
        ("driver", "libraries"),
        ("driver", "library-set"),
        ("driver", "vendor-files"),
        ("driver", "gsp-firmware"),
        ("devices", "nvidia0"),
        ("devices", "nvidia1"),
        ("devices", "nvidiactl"),
        ("devices", "nvidia-uvm"),
        ("devices", "char-links"),
        ("devices", "persistenced"),
        ("toolkit", "config"),
        ("toolkit", "low-level-runtime"),
        ("toolkit", "cdi-spec"),
        ("toolkit", "cdi-names"),
        ("toolkit", "cdi-spec-dirs"),
        ("toolkit", "unprivileged-envvar"),
        ("engines", "docker"),
        ("engines", "containerd"),
        ("engines", "crio"),
        ("boot", "cdi-refresh"),
        ("boot", "udev-char-links"),
    ] {
        let c = check(&v, g, n);
        assert!(c["fix"].is_null(), "{c:#}");
        assert!(!c["found"].as_str().unwrap().is_empty());
    }
    assert!(check(&v, "driver", "kernel-module")["found"]
        .as_str()
        .unwrap()
        .contains("570.124.06"));
    assert!(check(&v, "engines", "containerd")["found"]
        .as_str()
        .unwrap()
        .contains("skipped"));
    assert!(v["verdict"].is_null());

    // The text form: one line per check, then the summary; and nvidia-ctk is the same binary.
    let link = f.t.join("nvidia-ctk");
    symlink(GPUCTK, &link).unwrap();
    let args = f.args(&[]);
    let out = std::process::Command::new(&link)
        .args(&args)
        .env_remove("NVIDIA_CTK_DRIVER_ROOT")
        .env_remove("NVIDIA_CTK_DEV_ROOT")
        .env_remove("GPUCTK_PROC_ROOT")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        v["checks"].as_array().unwrap().len() + 1,
        "{text}"
    );
    assert!(
        lines
            .iter()
            .take(lines.len() - 1)
            .all(|l| l.starts_with("ok ")),
        "{text}"
    );
    assert!(lines.last().unwrap().starts_with("ok: "), "{text}");
}

#[test]
fn module_not_loaded() {
    let f = Fixture::new();
    std::fs::remove_file(f.proc().join("driver/nvidia/version")).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "kernel-module",
        "fail",
        &["not loaded", "modprobe nvidia"],
    );
}

#[test]
fn no_driver_at_all_is_one_device_finding_not_one_per_node() {
    let f = Fixture::new();
    std::fs::remove_dir_all(f.proc().join("driver/nvidia")).unwrap();
    let (r, v) = f.json(&[]);
    expect(&r, &v, "driver", "kernel-module", "fail", &["not loaded"]);
    let devices: Vec<_> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["group"] == "devices")
        .collect();
    assert_eq!(devices.len(), 1, "{devices:#?}");
    assert_eq!(devices[0]["status"], "fail");
    assert!(devices[0]["found"]
        .as_str()
        .unwrap()
        .contains("module is not loaded"));
}

#[test]
fn libraries_of_another_version() {
    let f = Fixture::new();
    // The module was upgraded, the user-space libraries were not.
    let file = f.proc().join("driver/nvidia/version");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("570.124.06"));
    std::fs::write(&file, text.replace("570.124.06", "575.57.08")).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "libraries",
        "fail",
        &[
            "libcuda.so is 570.124.06",
            "not 575.57.08",
            "Driver/library version mismatch",
        ],
    );
    // No firmware for the running version: a warning, with its fix.
    expect(&r, &v, "driver", "gsp-firmware", "warn", &["575.57.08"]);
}

#[test]
fn missing_gpu_node() {
    let f = Fixture::new();
    std::fs::remove_file(f.dev().join("nvidia1")).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "devices",
        "nvidia1",
        "fail",
        &["dev/nvidia1", "mknod", "c 195 1"],
    );
    assert_eq!(check(&v, "devices", "nvidia0")["status"], "ok");
}

#[test]
fn gpu_node_with_the_wrong_minor() {
    let f = Fixture::new();
    mknod(&f.dev().join("nvidia1"), 195, 7);
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "devices",
        "nvidia1",
        "fail",
        &["195:7", "195:1", "rm "],
    );
}

#[test]
fn missing_dev_char_links() {
    let f = Fixture::new();
    std::fs::remove_dir_all(f.dev().join("char")).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "devices",
        "char-links",
        "fail",
        &[
            "char/195:0",
            "daemon-reload",
            "ln -s ../nvidia0",
            "udev rule",
        ],
    );
    // Every other device check is fine.
    let bad: Vec<&Value> = not_ok(&v);
    assert_eq!(bad.len(), 1, "{v:#}");
}

#[test]
fn uvm_node_with_a_stale_major() {
    let f = Fixture::new();
    let stale = f.uvm_major() + 1;
    mknod(&f.dev().join("nvidia-uvm"), stale, 0);
    let (r, v) = f.json(&[]);
    let want = format!("is {stale}:0");
    let have = format!("{}:0", f.uvm_major());
    expect(
        &r,
        &v,
        "devices",
        "nvidia-uvm",
        "fail",
        &[&want, &have, "stale", "mknod"],
    );
}

#[test]
fn unknown_config_key_only_warns() {
    let f = Fixture::new();
    f.write_config("log-levle = \"debug\"\n");
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "config",
        "warn",
        &["nvidia-container-runtime.log-levle", "line 3"],
    );
    assert_eq!(r.code, 0, "a warning alone exits 0: {}", r.stdout);
    assert_eq!(v["status"], "warn");
    // The text form carries the fix on the check's line.
    let t = f.text(&[]);
    let line = t
        .stdout
        .lines()
        .find(|l| l.starts_with("warn toolkit/config:"))
        .unwrap_or_else(|| panic!("{}", t.stdout));
    assert!(line.contains("; fix: "), "{line}");
}

/// NVIDIA's stock config.toml: its six keys gpuctk does not apply hold NVIDIA's defaults, so
/// doctor says so once, in an ok line (the runtime never does); one of them set away from its
/// default is a warning.
#[test]
fn stock_nvidia_config_is_ok_and_names_the_defaults_once() {
    use crate::nvidia_cli::{NVIDIA_STOCK_CONFIG, STOCK_UNAPPLIED};
    let f = Fixture::new();
    let runc = f.t.join("bin/runc");
    let stock = NVIDIA_STOCK_CONFIG.replace(
        "runtimes = [\"runc\", \"crun\"]",
        &format!("runtimes = [\"{}\"]", runc.display()),
    );
    std::fs::write(f.t.join("config.toml"), &stock).unwrap();
    let (_, v) = f.json(&[]);
    let c = check(&v, "toolkit", "config");
    assert_eq!(c["status"], "ok", "{c:#}");
    let found = c["found"].as_str().unwrap();
    assert!(found.contains("at NVIDIA's defaults"), "{found}");
    for k in STOCK_UNAPPLIED {
        assert!(found.contains(k), "{k}: {found}");
    }
    std::fs::write(
        f.t.join("config.toml"),
        stock.replace("load-kmods = true", "load-kmods = false"),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "config",
        "warn",
        &[
            "nvidia-container-cli.load-kmods (line 12)",
            "nvidia-ctk.path",
        ],
    );
}

#[test]
fn stale_cdi_spec() {
    let f = Fixture::new();
    let spec = f.generate_spec();
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(text.contains("--host-driver-version=570.124.06"), "{text}");
    std::fs::write(
        &spec,
        text.replace(
            "--host-driver-version=570.124.06",
            "--host-driver-version=560.35.03",
        ),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-spec",
        "fail",
        &[
            "generated for driver 560.35.03",
            "570.124.06 is running",
            "cdi generate",
        ],
    );
}

#[test]
fn cdi_spec_naming_a_missing_host_file() {
    let f = Fixture::new();
    let spec = f.generate_spec();
    let parsed = yaml(&std::fs::read_to_string(&spec).unwrap());
    let gone = parsed["containerEdits"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["hostPath"].as_str())
        .find(|p| p.contains("/usr/bin/"))
        .expect("a binary mount")
        .to_string();
    std::fs::remove_file(&gone).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-spec",
        "fail",
        &[&gone, "no longer exists"],
    );
}

#[test]
fn docker_registration_of_a_missing_binary() {
    let f = Fixture::new();
    let missing = f.t.join("nowhere/nvidia-container-runtime");
    f.docker_runtime(&missing);
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "docker",
        "fail",
        &[
            missing.to_str().unwrap(),
            "does not exist",
            "runtime configure --runtime docker",
        ],
    );
    // A bare name must resolve in PATH.
    std::fs::write(
        f.t.join("docker/daemon.json"),
        r#"{"runtimes": {"nvidia": {"path": "gpuctk-test-no-such-runtime"}}}"#,
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "docker",
        "fail",
        &["not an executable in PATH"],
    );
}

/// A bundle whose rootfs is an empty directory with a loader cache (the real ldconfig's) and
/// whose env is `env`.
fn bundle(f: &Fixture, env: &[&str]) -> PathBuf {
    let b = f.t.join("bundle");
    std::fs::create_dir_all(b.join("rootfs/usr/local")).unwrap();
    std::fs::create_dir_all(b.join("rootfs/etc")).unwrap();
    let out = std::process::Command::new("ldconfig")
        .arg("-r")
        .arg(b.join("rootfs"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "process": {"args": ["sh"], "env": env},
    });
    std::fs::write(b.join("config.json"), config.to_string()).unwrap();
    b
}

/// The image's files, to see that judging it wrote nothing.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(d: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(&p, base, out);
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

#[test]
fn image_newer_than_the_host_cuda_fails() {
    let f = Fixture::new();
    // Host 570: CUDA 12.8.
    let b = bundle(&f, &["PATH=/usr/bin", "CUDA_VERSION=12.9.1"]);
    let (r, v) = f.json(&["--bundle", b.to_str().unwrap()]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert_eq!(v["status"], "fail");
    assert_eq!(v["verdict"]["status"], "fail", "{v:#}");
    assert_eq!(v["verdict"]["cuda_starts"], false);
    let reason = v["verdict"]["reason"].as_str().unwrap();
    assert!(reason.contains("cuda>=12.9"), "{reason}");
    assert!(v["verdict"]["fix"]
        .as_str()
        .unwrap()
        .contains("NVIDIA_DISABLE_REQUIRE"));
    assert_eq!(
        check(&v, "image", "cuda-runtime")["found"],
        "CUDA 12.9 (CUDA_VERSION)"
    );
    assert!(check(&v, "image", "host-cuda")["found"]
        .as_str()
        .unwrap()
        .contains("CUDA 12.8"));
    assert!(check(&v, "image", "compat")["found"]
        .as_str()
        .unwrap()
        .contains("not used"));
    // Only the verdict failed.
    assert!(not_ok(&v).is_empty(), "{v:#}");

    // The same with --image-env (no rootfs).
    let env = f.t.join("image.env");
    std::fs::write(&env, "# an image\nCUDA_VERSION=12.9.1\n").unwrap();
    let (r, v) = f.json(&["--image-env", env.to_str().unwrap()]);
    assert_ne!(r.code, 0);
    assert_eq!(v["verdict"]["status"], "fail");
    let t = f.text(&["--image-env", env.to_str().unwrap()]);
    assert!(
        t.stdout
            .lines()
            .any(|l| l.starts_with("fail verdict: CUDA will not start")),
        "{}",
        t.stdout
    );
}

#[test]
fn image_with_disable_require_is_ok() {
    let f = Fixture::new();
    let b = bundle(&f, &["CUDA_VERSION=12.9.1", "NVIDIA_DISABLE_REQUIRE=1"]);
    let (r, v) = f.json(&["--bundle", b.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(v["verdict"]["status"], "ok", "{v:#}");
    assert_eq!(v["verdict"]["cuda_starts"], true);
    let reason = v["verdict"]["reason"].as_str().unwrap();
    assert!(reason.contains("NVIDIA_DISABLE_REQUIRE"), "{reason}");
    assert!(reason.contains("minor version compatibility"), "{reason}");
}

#[test]
fn image_with_a_newer_compat_libcuda_is_ok() {
    let f = Fixture::new();
    let b = bundle(&f, &["CUDA_VERSION=12.9.1"]);
    let rootfs = b.join("rootfs");
    // A CUDA 12.9 image: its runtime and the forward-compat libcuda of driver 575.
    let cuda = rootfs.join("usr/local/cuda-12.9");
    std::fs::create_dir_all(cuda.join("compat")).unwrap();
    std::fs::create_dir_all(cuda.join("lib64")).unwrap();
    // Not ELF: judged, as NVIDIA's hook does, by the driver majors in the file names (575 is
    // newer than the host's 570), and branch 575 brings CUDA 12.9.
    std::fs::write(
        cuda.join("compat/libcuda.so.575.57.08"),
        b"a compat libcuda",
    )
    .unwrap();
    std::fs::write(cuda.join("lib64/libcudart.so.12.9.79"), b"not really").unwrap();
    symlink("cuda-12.9", rootfs.join("usr/local/cuda")).unwrap();
    let before = tree(&rootfs);

    let (r, v) = f.json(&["--bundle", b.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(v["verdict"]["status"], "ok", "{v:#}");
    let reason = v["verdict"]["reason"].as_str().unwrap();
    assert!(reason.contains("compat"), "{reason}");
    assert!(reason.contains("575.57.08"), "{reason}");
    let compat = check(&v, "image", "compat")["found"].as_str().unwrap();
    assert!(compat.contains("is used"), "{compat}");
    assert!(check(&v, "image", "cuda-runtime")["found"]
        .as_str()
        .unwrap()
        .contains("libcudart.so.12.9.79"));
    // Judged, not enabled: nothing was written into the image.
    assert_eq!(tree(&rootfs), before);

    // --rootfs with --image-env gives the same verdict.
    let env = f.t.join("image.env");
    std::fs::write(&env, "CUDA_VERSION=12.9.1\n").unwrap();
    let (r, v) = f.json(&[
        "--rootfs",
        rootfs.to_str().unwrap(),
        "--image-env",
        env.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(v["verdict"]["status"], "ok");

    // A compat library whose forward-compat note says it brings CUDA 12.8 (the mock host's
    // libcuda, renamed): used, since it is newer than the driver, but not enough for 12.9.
    let libcuda =
        Path::new(&f.host.driver_root()).join("usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06");
    std::fs::copy(&libcuda, cuda.join("compat/libcuda.so.575.57.08")).unwrap();
    let (r, v) = f.json(&["--bundle", b.to_str().unwrap()]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    let compat = check(&v, "image", "compat")["found"].as_str().unwrap();
    assert!(
        compat.contains("is used") && compat.contains("CUDA 12.8"),
        "{compat}"
    );
    assert_eq!(v["verdict"]["status"], "fail", "{v:#}");
    let reason = v["verdict"]["reason"].as_str().unwrap();
    assert!(reason.contains("cuda>=12.9"), "{reason}");
}

#[test]
fn engine_registrations_written_by_runtime_configure() {
    let f = Fixture::new();
    let runtime = f.t.join("bin/nvidia-container-runtime");
    let rt = runtime.to_str().unwrap();
    std::fs::create_dir_all(f.t.join("containerd")).unwrap();
    std::fs::create_dir_all(f.t.join("crio")).unwrap();
    for (engine, config) in [
        ("docker", "docker/daemon.json"),
        ("containerd", "containerd/config.toml"),
        ("crio", "crio/crio.conf"),
    ] {
        let c = f.t.join(config);
        ok(&[
            "runtime",
            "configure",
            "--runtime",
            engine,
            "--config",
            c.to_str().unwrap(),
            "--nvidia-runtime-path",
            rt,
        ]);
    }
    let (r, v) = f.json(&[]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    for engine in ["docker", "containerd", "crio"] {
        let c = check(&v, "engines", engine);
        assert_eq!(c["status"], "ok", "{c:#}");
        assert!(c["found"].as_str().unwrap().contains(rt), "{c:#}");
    }
    assert!(check(&v, "engines", "crio")["found"]
        .as_str()
        .unwrap()
        .contains("crio.conf.d"));

    // The binary goes away: every engine's registration is broken.
    std::fs::remove_file(&runtime).unwrap();
    let (r, v) = f.json(&[]);
    for engine in ["docker", "containerd", "crio"] {
        expect(
            &r,
            &v,
            "engines",
            engine,
            "fail",
            &[rt, "runtime configure"],
        );
    }

    // containerd with its runtime in an imported drop-in, config version 3.
    executable(&runtime);
    let dropins = f.t.join("containerd/conf.d");
    std::fs::create_dir_all(&dropins).unwrap();
    std::fs::write(
        f.t.join("containerd/config.toml"),
        "version = 3\nimports = [\"conf.d/*.toml\"]\n",
    )
    .unwrap();
    std::fs::write(
        dropins.join("99-nvidia.toml"),
        format!(
            "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\nBinaryName = \"{rt}\"\n"
        ),
    )
    .unwrap();
    let (_, v) = f.json(&[]);
    let c = check(&v, "engines", "containerd");
    assert_eq!(c["status"], "ok", "{c:#}");
    assert!(
        c["found"].as_str().unwrap().contains("99-nvidia.toml"),
        "{c:#}"
    );
}

/// containerd's config, with its conf.d dir next to it.
fn containerd_config(f: &Fixture, text: &str) -> PathBuf {
    let dir = f.t.join("containerd");
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
    dir
}

fn containerd_nvidia(rt: &str) -> String {
    format!(
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"{rt}\"\n"
    )
}

#[test]
fn containerd_drop_in_that_is_not_imported() {
    let f = Fixture::new();
    f.kubernetes_policy();
    let rt = f.t.join("bin/nvidia-container-runtime");
    let dir = containerd_config(&f, "version = 2\n");
    std::fs::write(
        dir.join("conf.d/99-nvidia.toml"),
        containerd_nvidia(rt.to_str().unwrap()),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "containerd-imports",
        "warn",
        &["conf.d/99-nvidia.toml not imported", "imports = ["],
    );
    // So the runtime it registers is not there either.
    expect(
        &r,
        &v,
        "engines",
        "containerd",
        "warn",
        &["no nvidia runtime"],
    );

    // Imported through the pattern configure writes: found, nothing to say.
    std::fs::write(
        dir.join("config.toml"),
        "version = 2\nimports = [\"conf.d/*.toml\"]\n",
    )
    .unwrap();
    let (_, v) = f.json(&[]);
    assert!(not_ok(&v).is_empty(), "{v:#}");
    assert!(check(&v, "engines", "containerd")["found"]
        .as_str()
        .unwrap()
        .contains("99-nvidia.toml"));
    // A `[...]` class, which only the engines crate's resolver knows: still imported.
    std::fs::write(
        dir.join("config.toml"),
        "version = 2\nimports = [\"./conf.d/[0-9]*.toml\"]\n",
    )
    .unwrap();
    let (_, v) = f.json(&[]);
    assert!(not_ok(&v).is_empty(), "{v:#}");
}

/// A drop-in folder that cannot be listed is said, not taken for an absent one (regression: an
/// I/O error read as "no drop-ins", so CRI-O looked unconfigured and containerd's drop-ins
/// unchecked without a word).
#[test]
fn engine_drop_in_folder_that_cannot_be_listed() {
    let f = Fixture::new();
    f.kubernetes_policy();
    let rt = f.t.join("bin/nvidia-container-runtime");
    // CRI-O: its config and a drop-in "folder" that is a file (ENOTDIR).
    std::fs::create_dir_all(f.t.join("crio")).unwrap();
    std::fs::write(
        f.t.join("crio/crio.conf"),
        format!(
            "[crio.runtime.runtimes.nvidia]\nruntime_path = \"{}\"\n",
            rt.display()
        ),
    )
    .unwrap();
    std::fs::write(f.t.join("crio/crio.conf.d"), "not a folder\n").unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "crio",
        "warn",
        &["crio.conf.d: cannot list CRI-O's drop-in folder", "make "],
    );
    // containerd: the same for conf.d.
    let dir = containerd_config(&f, "version = 2\n");
    std::fs::remove_dir(dir.join("conf.d")).unwrap();
    std::fs::write(dir.join("conf.d"), "not a folder\n").unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "containerd-imports",
        "warn",
        &["conf.d: cannot list containerd's drop-in folder"],
    );
}

#[test]
fn containerd_default_runtime_name_of_a_missing_runtime() {
    let f = Fixture::new();
    f.kubernetes_policy();
    let rt = f.t.join("bin/nvidia-container-runtime");
    let text = containerd_nvidia(rt.to_str().unwrap()).replace(
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n",
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"nvidia-cdi\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n",
    );
    containerd_config(&f, &text);
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "default-runtime",
        "fail",
        &[
            "default_runtime_name = nvidia-cdi",
            "no pod starts",
            "nvidia",
        ],
    );
    // Naming the registered one is fine.
    containerd_config(&f, &text.replace("\"nvidia-cdi\"", "\"nvidia\""));
    let (_, v) = f.json(&[]);
    assert_eq!(check(&v, "engines", "default-runtime")["status"], "ok");
    assert!(not_ok(&v).is_empty(), "{v:#}");
}

#[test]
fn docker_default_runtime_of_a_missing_runtime() {
    let f = Fixture::new();
    let rt = f.t.join("bin/nvidia-container-runtime");
    std::fs::write(
        f.t.join("docker/daemon.json"),
        format!(
            "{{\"default-runtime\": \"nvidia-legacy\", \"runtimes\": {{\"nvidia\": {{\"path\": \"{}\"}}}}}}",
            rt.display()
        ),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "default-runtime",
        "fail",
        &["default-runtime = nvidia-legacy", "dockerd does not start"],
    );
}

#[test]
fn runtime_registered_in_docker_but_not_in_containerd() {
    let f = Fixture::new();
    // containerd with its CRI plugin on (a Kubernetes node), without our runtime.
    containerd_config(
        &f,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n",
    );
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "containerd",
        "warn",
        &[
            "no nvidia runtime registered, but docker has one",
            "runtime configure --runtime containerd",
        ],
    );
    // docker's own containerd, with CRI off: it needs no runtime of its own.
    containerd_config(
        &f,
        "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n",
    );
    let (_, v) = f.json(&[]);
    let c = check(&v, "engines", "containerd");
    assert_eq!(c["status"], "ok", "{c:#}");
    assert!(c["found"].as_str().unwrap().contains("skipped"), "{c:#}");

    // The reverse: containerd has it, docker does not.
    containerd_config(
        &f,
        &containerd_nvidia(f.t.join("bin/nvidia-container-runtime").to_str().unwrap()),
    );
    std::fs::write(f.t.join("docker/daemon.json"), "{}\n").unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "docker",
        "warn",
        &["but containerd has one", "--runtime docker"],
    );
}

/// `cdi generate` into the spec dir with `extra` flags.
fn generate_spec_with(f: &Fixture, extra: &[&str]) -> PathBuf {
    let out = f.t.join("cdi/nvidia.yaml");
    let o = out.to_str().unwrap().to_string();
    let mut args = vec!["cdi", "generate", "--output", &o];
    args.extend_from_slice(extra);
    let roots = f.host.roots();
    ok(&with(&args, &roots));
    out
}

#[test]
fn cdi_spec_without_uuid_names_or_all() {
    let f = Fixture::new();
    generate_spec_with(
        &f,
        &[
            "--nvidia-cdi-hook-path",
            GPUCTK,
            "--device-name-strategy",
            "index",
        ],
    );
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-names",
        "warn",
        &[
            "no UUID names",
            "device plugin",
            "--device-name-strategy index,uuid",
        ],
    );
    assert!(!check(&v, "toolkit", "cdi-names")["found"]
        .as_str()
        .unwrap()
        .contains("no `all`"));
    generate_spec_with(&f, &["--nvidia-cdi-hook-path", GPUCTK, "--no-all-device"]);
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-names",
        "warn",
        &["no `all` device", "nvidia.com/gpu=all"],
    );
}

#[test]
fn cdi_spec_whose_hook_is_not_installed() {
    let f = Fixture::new();
    let hook = f.t.join("nowhere/nvidia-cdi-hook");
    generate_spec_with(&f, &["--nvidia-cdi-hook-path", hook.to_str().unwrap()]);
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-spec",
        "fail",
        &[
            hook.to_str().unwrap(),
            "not executable",
            "--nvidia-cdi-hook-path",
        ],
    );
}

#[test]
fn two_cdi_specs_of_one_kind() {
    let f = Fixture::new();
    let spec = f.generate_spec();
    let other = f.t.join("cdi-run");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(&spec, other.join("nvidia.yaml")).unwrap();
    let (r, v) = f.json(&["--spec-dir", other.to_str().unwrap()]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-kinds",
        "warn",
        &[
            "2 specs of kind nvidia.com/gpu",
            "cdi-run/nvidia.yaml",
            "keep one",
        ],
    );
}

#[test]
fn cdi_spec_in_a_dir_an_engine_does_not_read() {
    let f = Fixture::new();
    f.generate_spec();
    let rt = f.t.join("bin/nvidia-container-runtime");
    // docker without cdi-spec-dirs reads /etc/cdi and /var/run/cdi only.
    std::fs::write(
        f.t.join("docker/daemon.json"),
        format!(
            "{{\"runtimes\": {{\"nvidia\": {{\"path\": \"{}\"}}}}}}",
            rt.display()
        ),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    let dir = f.t.join("cdi");
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-spec-dirs",
        "warn",
        &[
            "docker reads /etc/cdi, /var/run/cdi (docker's default)",
            dir.to_str().unwrap(),
            "cdi-spec-dirs (daemon.json)",
        ],
    );
    // containerd's cdi_spec_dirs is read the same way.
    f.docker_runtime(&rt);
    containerd_config(
        &f,
        &format!(
            "{}[plugins.\"io.containerd.grpc.v1.cri\"]\ncdi_spec_dirs = [\"/etc/cdi\"]\n",
            containerd_nvidia(rt.to_str().unwrap())
        ),
    );
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-spec-dirs",
        "warn",
        &["containerd reads /etc/cdi", "cdi_spec_dirs"],
    );
    assert!(!check(&v, "toolkit", "cdi-spec-dirs")["found"]
        .as_str()
        .unwrap()
        .contains("docker"));
}

#[test]
fn gpus_for_any_pod_that_asks_on_a_kubernetes_node() {
    let f = Fixture::new();
    let rt = f.t.join("bin/nvidia-container-runtime");
    // A CRI engine runs pods here, and config.toml leaves the policy at NVIDIA's default.
    containerd_config(&f, &containerd_nvidia(rt.to_str().unwrap()));
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "unprivileged-envvar",
        "warn",
        &[
            "accept-nvidia-visible-devices-envvar-when-unprivileged is true",
            "containerd runs pods",
            "volume-mounts",
        ],
    );
    // The same with CRI-O.
    std::fs::remove_dir_all(f.t.join("containerd")).unwrap();
    std::fs::create_dir_all(f.t.join("crio")).unwrap();
    std::fs::write(
        f.t.join("crio/crio.conf"),
        format!(
            "[crio.runtime.runtimes.nvidia]\nruntime_path = \"{}\"\n",
            rt.display()
        ),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "unprivileged-envvar",
        "warn",
        &["crio runs pods"],
    );
    // Set as the fix says: nothing to say.
    f.kubernetes_policy();
    let (_, v) = f.json(&[]);
    assert_eq!(check(&v, "toolkit", "unprivileged-envvar")["status"], "ok");
    assert!(not_ok(&v).is_empty(), "{v:#}");
}

fn lib_dir(f: &Fixture) -> PathBuf {
    Path::new(&f.host.driver_root()).join("usr/lib/x86_64-linux-gnu")
}

/// NVIDIA's issue 1908: part of the driver in a directory ld.so.cache does not list.
#[test]
fn driver_library_outside_the_set_containers_get() {
    let f = Fixture::new();
    let lib = lib_dir(&f);
    let glcore = "libnvidia-glcore.so.570.124.06";
    std::fs::rename(lib.join(glcore), lib.parent().unwrap().join(glcore)).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "library-set",
        "warn",
        &[
            "incomplete",
            &format!("/usr/lib/{glcore}"),
            "ld.so.conf.d",
            "ldconfig",
        ],
    );
}

#[test]
fn driver_libraries_of_two_versions() {
    let f = Fixture::new();
    let lib = lib_dir(&f);
    std::fs::copy(
        lib.join("libnvidia-glcore.so.570.124.06"),
        lib.join("libnvidia-glcore.so.560.35.03"),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "library-versions",
        "warn",
        &[
            "two driver versions",
            "libnvidia-glcore.so.560.35.03",
            "keep only 570.124.06",
        ],
    );
    assert_eq!(check(&v, "driver", "library-set")["status"], "ok");
}

#[test]
fn vendor_files_absent_or_naming_a_missing_library() {
    let f = Fixture::new();
    let root = Path::new(&f.host.driver_root()).to_path_buf();
    let egl = root.join("usr/share/glvnd/egl_vendor.d/10_nvidia.json");
    let original = std::fs::read_to_string(&egl).unwrap();
    std::fs::remove_file(&egl).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "vendor-files",
        "warn",
        &["no EGL vendor file", "10_nvidia.json"],
    );
    // Back, but naming a library the driver does not have.
    std::fs::write(
        &egl,
        "{\"file_format_version\" : \"1.0.0\", \"ICD\" : {\"library_path\" : \"libEGL_nvidia.so.1\"}}\n",
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "vendor-files",
        "warn",
        &["names libEGL_nvidia.so.1", "not in the set"],
    );
    // An EGL external platform file (NVIDIA's 15_nvidia_gbm.json) whose library is not there.
    std::fs::write(&egl, &original).unwrap();
    let gbm = root.join("usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json");
    std::fs::create_dir_all(gbm.parent().unwrap()).unwrap();
    std::fs::write(
        &gbm,
        "{\n    \"file_format_version\" : \"1.0.0\",\n    \"ICD\" : {\n        \"library_path\" : \"libnvidia-egl-gbm.so.1\"\n    }\n}\n",
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "vendor-files",
        "warn",
        &[
            "15_nvidia_gbm.json names libnvidia-egl-gbm.so.1",
            "not in the set",
        ],
    );
    let found = check(&v, "driver", "vendor-files")["found"]
        .as_str()
        .unwrap();
    assert!(!found.contains("10_nvidia.json names"), "{found}");
}

#[test]
fn cdi_refresh_unit_absent_or_not_asked() {
    let f = Fixture::new();
    f.generate_spec();
    // Without systemd under the host root: present, not checked.
    let (_, v) = f.json(&[]);
    let c = check(&v, "boot", "cdi-refresh");
    assert_eq!(c["status"], "ok", "{c:#}");
    assert!(
        c["found"].as_str().unwrap().contains("not checked"),
        "{c:#}"
    );
    // systemd runs, and its systemctl cannot be run: said, not guessed.
    std::fs::create_dir_all(f.host_root().join("run/systemd/system")).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "boot",
        "cdi-refresh",
        "warn",
        &["systemd could not be asked", "no-systemctl", "--systemctl"],
    );
    // No unit at all.
    std::fs::remove_dir_all(f.host_root().join("usr/lib/systemd")).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "boot",
        "cdi-refresh",
        "warn",
        &["no CDI refresh unit", "gpuctk package"],
    );
}

#[test]
fn udev_rule_for_dev_char_links_absent_or_masked() {
    let f = Fixture::new();
    let rules = f
        .host_root()
        .join("usr/lib/udev/rules.d/99-gpuctk-nvidia.rules");
    // Masked by an admin: /etc's /dev/null link of the same name wins.
    let etc = f.host_root().join("etc/udev/rules.d");
    std::fs::create_dir_all(&etc).unwrap();
    symlink("/dev/null", etc.join("99-gpuctk-nvidia.rules")).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "boot",
        "udev-char-links",
        "warn",
        &[
            "no udev rule",
            "create-dev-char-symlinks",
            "99-gpuctk-nvidia.rules",
        ],
    );
    std::fs::remove_file(etc.join("99-gpuctk-nvidia.rules")).unwrap();
    std::fs::remove_file(&rules).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "boot",
        "udev-char-links",
        "warn",
        &["daemon-reload"],
    );
}

#[test]
fn image_with_driver_files_of_its_own_is_info() {
    let f = Fixture::new();
    let b = bundle(&f, &["CUDA_VERSION=12.8.0"]);
    let rootfs = b.join("rootfs");
    // A driver's libcuda and nvidia-smi baked into the image (the mock host's, copied).
    let lib = lib_dir(&f);
    std::fs::create_dir_all(rootfs.join("usr/lib/x86_64-linux-gnu")).unwrap();
    std::fs::copy(
        lib.join("libcuda.so.570.124.06"),
        rootfs.join("usr/lib/x86_64-linux-gnu/libcuda.so.1"),
    )
    .unwrap();
    std::fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
    std::fs::copy(
        Path::new(&f.host.driver_root()).join("usr/bin/nvidia-smi"),
        rootfs.join("usr/bin/nvidia-smi"),
    )
    .unwrap();
    let (r, v) = f.json(&["--bundle", b.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let c = check(&v, "image", "own-driver-files");
    assert_eq!(c["status"], "ok", "{c:#}");
    let found = c["found"].as_str().unwrap();
    for n in [
        "info:",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/bin/nvidia-smi",
        "mounted over",
    ] {
        assert!(found.contains(n), "{n}: {found}");
    }
    assert!(not_ok(&v).is_empty(), "{v:#}");
}

#[test]
fn musl_image() {
    let f = Fixture::new();
    let b = bundle(&f, &["CUDA_VERSION=12.8.0"]);
    let rootfs = b.join("rootfs");
    std::fs::create_dir_all(rootfs.join("lib")).unwrap();
    std::fs::write(rootfs.join("etc/alpine-release"), "3.20.0\n").unwrap();
    // Alpine's loader, which is its libc too.
    std::fs::write(rootfs.join("lib/ld-musl-x86_64.so.1"), b"").unwrap();
    let (r, v) = f.json(&["--rootfs", rootfs.to_str().unwrap()]);
    expect(
        &r,
        &v,
        "image",
        "libc",
        "warn",
        &["musl image", "ld-musl-x86_64.so.1", "glibc-based image"],
    );
    // With glibc's loader too (a glibc compat layer): not musl-only, nothing to say.
    std::fs::create_dir_all(rootfs.join("lib64")).unwrap();
    std::fs::write(rootfs.join("lib64/ld-linux-x86-64.so.2"), b"").unwrap();
    let (_, v) = f.json(&["--rootfs", rootfs.to_str().unwrap()]);
    assert!(not_ok(&v).is_empty(), "{v:#}");
}

#[test]
fn image_without_a_loader_cache() {
    let f = Fixture::new();
    let b = bundle(&f, &["CUDA_VERSION=12.8.0"]);
    std::fs::remove_file(b.join("rootfs/etc/ld.so.cache")).unwrap();
    let (r, v) = f.json(&["--bundle", b.to_str().unwrap()]);
    expect(
        &r,
        &v,
        "image",
        "ld-cache",
        "warn",
        &["no /etc/ld.so.cache", "RUN ldconfig"],
    );
}

#[test]
fn cdi_spec_older_than_the_mig_layout() {
    let f = Fixture::with_host_args(&["--mig", "0=1g.10gb,1g.10gb"]);
    let spec = f.generate_spec();
    let (_, v) = f.json(&[]);
    let c = check(&v, "toolkit", "cdi-mig");
    assert_eq!(c["status"], "ok", "{c:#}");
    // GPU 0 repartitioned since: the spec's second instance is not the one procfs shows.
    let text = std::fs::read_to_string(&spec).unwrap();
    let renamed = text.replace("- name: 0:1\n", "- name: 0:3\n");
    assert_ne!(renamed, text, "{text}");
    std::fs::write(&spec, renamed).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "toolkit",
        "cdi-mig",
        "warn",
        &[
            "older than the MIG layout",
            "0:0, 0:3",
            "0:0, 0:1",
            "cdi generate",
        ],
    );
}

/// A healthy host with everything doctor looks at in use: a spec, every engine registered by
/// `runtime configure` (containerd with its CRI plugin, so a Kubernetes node with the policy set
/// for one), the package's refresh units and udev rule, and a CUDA image: silent, in both forms.
#[test]
fn healthy_host_is_silent() {
    let f = Fixture::new();
    f.kubernetes_policy();
    f.generate_spec();
    let rt = f.t.join("bin/nvidia-container-runtime");
    std::fs::create_dir_all(f.t.join("containerd")).unwrap();
    std::fs::create_dir_all(f.t.join("crio")).unwrap();
    for (engine, config) in [
        ("docker", "docker/daemon.json"),
        ("containerd", "containerd/config.toml"),
        ("crio", "crio/crio.conf"),
    ] {
        let c = f.t.join(config);
        ok(&[
            "runtime",
            "configure",
            "--runtime",
            engine,
            "--config",
            c.to_str().unwrap(),
            "--nvidia-runtime-path",
            rt.to_str().unwrap(),
        ]);
    }
    // containerd and CRI-O read the spec dir too.
    let dir = f.t.join("cdi");
    let ctrd = f.t.join("containerd/config.toml");
    let text = std::fs::read_to_string(&ctrd).unwrap();
    std::fs::write(
        &ctrd,
        format!(
            "{text}\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncdi_spec_dirs = [\"{}\"]\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(f.t.join("crio/crio.conf.d")).unwrap();
    std::fs::write(
        f.t.join("crio/crio.conf.d/10-cdi.conf"),
        format!("[crio.runtime]\ncdi_spec_dirs = [\"{}\"]\n", dir.display()),
    )
    .unwrap();
    let b = bundle(&f, &["PATH=/usr/bin", "CUDA_VERSION=12.8.0"]);
    let (r, v) = f.json(&["--bundle", b.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(v["status"], "ok", "{v:#}");
    assert!(not_ok(&v).is_empty(), "{v:#}");
    for id in [
        "toolkit/cdi-spec-dirs",
        "toolkit/unprivileged-envvar",
        "engines/containerd",
        "engines/crio",
        "boot/cdi-refresh",
        "boot/udev-char-links",
    ] {
        let (g, n) = id.split_once('/').unwrap();
        assert_eq!(check(&v, g, n)["id"], id);
    }
    let found = check(&v, "toolkit", "cdi-spec-dirs")["found"]
        .as_str()
        .unwrap();
    assert!(found.contains("docker, containerd, crio"), "{found}");
    let t = f.text(&["--bundle", b.to_str().unwrap()]);
    assert!(
        !t.stdout
            .lines()
            .any(|l| l.starts_with("warn") || l.starts_with("fail")),
        "{}",
        t.stdout
    );
}

/// A version file that cannot be read is said as it is, not taken for "no module".
#[test]
fn unreadable_version_file_is_not_a_missing_module() {
    let f = Fixture::new();
    let file = f.proc().join("driver/nvidia/version");
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "kernel-module",
        "fail",
        &["not a regular file", "--proc-root"],
    );
    let found = check(&v, "driver", "kernel-module")["found"]
        .as_str()
        .unwrap();
    assert!(!found.contains("not loaded"), "{found}");
}

fn gcc(args: &[&str]) {
    let o = std::process::Command::new("gcc")
        .args(args)
        .output()
        .expect("gcc");
    assert!(o.status.success(), "gcc {args:?}: {o:?}");
}

/// The EGL front end linked against its core, as the driver's is, with the core not installed
/// (the driver's GL package left out): said, and silent once the core is there.
#[test]
fn driver_library_needing_a_core_that_is_not_on_the_host() {
    let f = Fixture::new();
    let lib = lib_dir(&f);
    let work = f.t.join("cc");
    std::fs::create_dir_all(&work).unwrap();
    let core = "libnvidia-eglcore.so.570.124.06";
    std::fs::write(work.join("core.c"), "int gm_core(void) { return 0; }\n").unwrap();
    std::fs::write(
        work.join("egl.c"),
        "extern int gm_core(void);\nint gm_egl(void) { return gm_core(); }\n",
    )
    .unwrap();
    let w = |s: &str| work.join(s).to_str().unwrap().to_string();
    let soname = format!("-Wl,-soname,{core}");
    gcc(&["-shared", "-fPIC", &soname, "-o", &w(core), &w("core.c")]);
    let egl = lib.join("libEGL_nvidia.so.570.124.06");
    gcc(&[
        "-shared",
        "-fPIC",
        "-Wl,-soname,libEGL_nvidia.so.0",
        "-Wl,--no-as-needed",
        "-o",
        egl.to_str().unwrap(),
        &w("egl.c"),
        &w(core),
    ]);
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "driver",
        "library-set",
        "warn",
        &[
            "incomplete",
            "libnvidia-eglcore.so.570.124.06 (needed by libEGL_nvidia.so.570.124.06) not on the host",
            "libnvidia-gl-570",
        ],
    );
    std::fs::copy(work.join(core), lib.join(core)).unwrap();
    let (_, v) = f.json(&[]);
    assert_eq!(check(&v, "driver", "library-set")["status"], "ok", "{v:#}");
}

#[test]
fn crio_runtime_path_that_does_not_exist() {
    let f = Fixture::new();
    f.kubernetes_policy();
    let missing = f.t.join("nowhere/nvidia-container-runtime");
    std::fs::create_dir_all(f.t.join("crio/crio.conf.d")).unwrap();
    std::fs::write(
        f.t.join("crio/crio.conf.d/99-nvidia.toml"),
        format!(
            "[crio.runtime.runtimes.nvidia]\nruntime_path = \"{}\"\nruntime_type = \"oci\"\n",
            missing.display()
        ),
    )
    .unwrap();
    let (r, v) = f.json(&[]);
    expect(
        &r,
        &v,
        "engines",
        "crio",
        "fail",
        &[
            "99-nvidia.toml: crio.runtime.runtimes.nvidia.runtime_path",
            missing.to_str().unwrap(),
            "does not exist",
            "--runtime crio",
        ],
    );
}
