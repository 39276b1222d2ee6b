//! The names scripts written for NVIDIA's `nvidia-ctk` use: `cdi generate`'s environment
//! variables (what admins put in `nvidia-cdi-refresh.env`), `-v`/`--version` and its output,
//! the global `--config`/`NVIDIA_CTK_CONFIG`, `--devices`, `--device-id none`,
//! `runtime configure --executable-path` and `--cdi.enable`; and NVIDIA's stock config.toml,
//! which must not make the runtime warn on every container.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::runtime::Bed;
use crate::util::*;

/// `nvidia-ctk config default` of NVIDIA's v1.20, byte for byte, on Debian and Ubuntu (where
/// `/sbin/ldconfig.real` exists; elsewhere `ldconfig = "@/sbin/ldconfig"`): what a host that
/// kept the stock file has in /etc/nvidia-container-runtime/config.toml.
pub const NVIDIA_STOCK_CONFIG: &str = r#"#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"#;

/// The stock file's keys that gpuctk does not apply, all at NVIDIA's defaults.
pub const STOCK_UNAPPLIED: [&str; 6] = [
    "nvidia-container-cli.environment",
    "nvidia-container-cli.ldconfig",
    "nvidia-container-cli.load-kmods",
    "nvidia-container-runtime-hook.path",
    "nvidia-container-runtime-hook.skip-mode-detection",
    "nvidia-ctk.path",
];

/// Our binary under the name `nvidia-ctk`, in `t`.
fn nvidia_ctk(t: &TestDir) -> PathBuf {
    let p = t.join("nvidia-ctk");
    if !p.exists() {
        symlink(GPUCTK, &p).unwrap();
    }
    p
}

/// `exe ARGS` with `env` and none of the caller's NVIDIA_*/GPUCTK_* variables.
fn run_env(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut c = Command::new(exe);
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c.output().unwrap().into()
}

fn names(spec: &Value) -> Vec<String> {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

/// Each of NVIDIA's `cdi generate` variables (v1.20's `generate.go`) changes what its flag
/// changes, through the `nvidia-ctk` name; the five names gpuctk read before, which no NVIDIA
/// release has, change nothing.
#[test]
fn generate_reads_nvidias_environment_names() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let ctk = nvidia_ctk(&t);
    let uuids = h.uuids();
    let roots = h.roots();
    let gen = |env: &[(&str, &str)]| {
        let mut args = vec!["cdi", "generate", "--verbose"];
        args.extend(roots.iter().map(String::as_str));
        run_env(&ctk, &args, env)
    };
    let base = gen(&[]);
    assert_eq!(base.code, 0, "{}", base.stderr);
    let mut sorted = uuids.clone();
    sorted.sort();
    assert_eq!(
        names(&yaml(&base.stdout)),
        ["0", "1", sorted[0].as_str(), sorted[1].as_str(), "all"]
    );
    type Check = Box<dyn Fn(&Run) -> bool>;
    let spec = |r: &Run| -> Value { yaml(&r.stdout) };
    let cases: Vec<(&str, &str, Check)> = vec![
        (
            "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT",
            "json",
            Box::new(|r| r.code == 0 && r.stdout.trim_start().starts_with('{')),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_MODE",
            "management",
            Box::new(move |r| r.code == 0 && names(&spec(r)) == ["all"]),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES",
            "type-index",
            Box::new(move |r| r.code == 0 && names(&spec(r)) == ["gpu0", "gpu1", "all"]),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS",
            "/nowhere",
            Box::new(|r| {
                r.code == 0 && !r.stdout.contains("/vulkan/") && !r.stdout.contains("OpenCL")
            }),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH",
            "/sbin/ldconfig",
            Box::new(|r| r.code == 0 && r.stderr.contains("--ldconfig-path")),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_VENDOR",
            "example.com",
            Box::new(move |r| r.code == 0 && spec(r)["kind"] == "example.com/gpu"),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_CLASS",
            "other",
            Box::new(move |r| r.code == 0 && spec(r)["kind"] == "nvidia.com/other"),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_CSV_FILES",
            "/etc/x.csv",
            Box::new(|r| r.code != 0 && r.stderr.contains("--csv.*")),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS",
            "x",
            Box::new(|r| r.code != 0 && r.stderr.contains("--csv.*")),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS",
            "all",
            Box::new(|r| r.code == 0 && !r.stdout.contains("hooks:")),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS",
            "chmod",
            Box::new(|r| r.code == 0 && r.stderr.contains("--enable-hook chmod")),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS",
            "enable-coherent-annotations",
            Box::new(|r| {
                r.code == 0
                    && r.stderr
                        .contains("--feature-flag enable-coherent-annotations")
            }),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE",
            "true",
            Box::new(move |r| r.code == 0 && !names(&spec(r)).contains(&"all".to_string())),
        ),
        (
            "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS",
            "1",
            Box::new({
                let u = uuids[1].clone();
                move |r| r.code == 0 && names(&spec(r)) == ["1", u.as_str(), "all"]
            }),
        ),
        (
            "NVIDIA_CTK_CDI_HOOK_PATH",
            "/opt/hook/nvidia-cdi-hook",
            Box::new(|r| r.code == 0 && r.stdout.contains("path: /opt/hook/nvidia-cdi-hook")),
        ),
    ];
    for (var, value, check) in &cases {
        let r = gen(&[(var, value)]);
        assert!(
            check(&r),
            "{var}={value} had no effect (exit {}):\nstderr: {}\nstdout: {}",
            r.code,
            r.stderr,
            &r.stdout[..r.stdout.len().min(2000)]
        );
    }
    // A bad value in the environment (an admin's refresh.env) is one line naming the variable.
    for (var, value) in [
        ("NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE", "maybe"),
        ("NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT", "xml"),
    ] {
        let r = gen(&[(var, value)]);
        assert!(
            r.code != 0 && r.stderr.contains(var) && r.stderr.lines().count() == 1,
            "{var}={value}: {}",
            r.stderr
        );
    }
    // The names gpuctk read before: in no NVIDIA release, so nothing reads them now.
    for (var, value) in [
        ("NVIDIA_CTK_CDI_OUTPUT_FORMAT", "json"),
        ("NVIDIA_CTK_CDI_DEVICE_NAME_STRATEGIES", "type-index"),
        ("NVIDIA_CTK_CDI_CONFIG_SEARCH_PATHS", "/nowhere"),
        ("NVIDIA_CTK_CDI_LIBRARY_SEARCH_PATHS", "relative"),
        ("NVIDIA_CTK_CDI_LDCONFIG_PATH", "/sbin/ldconfig"),
    ] {
        let r = gen(&[(var, value)]);
        assert_eq!(
            (r.code, &r.stdout, r.stderr.contains("ldconfig-path")),
            (0, &base.stdout, false),
            "{var} is not NVIDIA's and must change nothing: {}",
            r.stderr
        );
    }
    // The roots, by NVIDIA's names too: the driver root, and the dev root apart from it.
    let (driver, proc) = (h.driver_root(), h.proc_root());
    let args = ["cdi", "generate", "--proc-root", &proc];
    let r = run_env(&ctk, &args, &[("NVIDIA_CTK_DRIVER_ROOT", &driver)]);
    assert!(
        r.code == 0 && r.stdout.contains("libcuda.so.570.124.06"),
        "{}",
        r.stderr
    );
    let no_dev = t.join("no-dev");
    fs::create_dir_all(&no_dev).unwrap();
    let no_dev = no_dev.to_str().unwrap();
    let r = run_env(
        &ctk,
        &args,
        &[
            ("NVIDIA_CTK_DRIVER_ROOT", &driver),
            ("NVIDIA_CTK_DEV_ROOT", no_dev),
        ],
    );
    assert!(r.code != 0 && r.stderr.contains(no_dev), "{}", r.stderr);
}

/// `NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS`: a driver whose libcuda is found only in a
/// directory the variable names (not in the ld.so.cache, not next to the other libraries).
#[test]
fn generate_library_search_paths_from_the_environment() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let root = PathBuf::from(h.driver_root());
    let lib_dir = h.manifest["lib_dir"].as_str().unwrap().to_string();
    let libs = root.join(lib_dir.trim_start_matches('/'));
    let extra = root.join("opt/extra");
    fs::create_dir_all(&extra).unwrap();
    fs::rename(
        libs.join("libcuda.so.570.124.06"),
        extra.join("libcuda.so.570.124.06"),
    )
    .unwrap();
    for link in ["libcuda.so.1", "libcuda.so"] {
        let _ = fs::remove_file(libs.join(link));
    }
    let ctk = nvidia_ctk(&t);
    let mut args = vec!["cdi", "generate"];
    let roots = h.roots();
    args.extend(roots.iter().map(String::as_str));
    let r = run_env(&ctk, &args, &[]);
    assert!(
        r.code != 0 && r.stderr.contains("no libcuda.so.570.124.06"),
        "{}",
        r.stderr
    );
    let r = run_env(
        &ctk,
        &args,
        &[("NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS", "/opt/extra")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("containerPath: /opt/extra/libcuda.so.570.124.06"),
        "{}",
        r.stdout
    );
}

/// `nvidia-ctk -v` and `--version` print the version in NVIDIA's shape (scripts take the last
/// word of the first line); `-v` is no longer `--verbose`.
#[test]
fn nvidia_ctk_version_in_nvidias_shape() {
    let t = TestDir::new();
    let ctk = nvidia_ctk(&t);
    let want = format!(
        "NVIDIA Container Toolkit CLI version {}",
        env!("CARGO_PKG_VERSION")
    );
    for flag in ["-v", "--version"] {
        let r = run_env(&ctk, &[flag], &[]);
        assert_eq!(r.code, 0, "{flag}: {}", r.stderr);
        let mut lines = r.stdout.lines();
        assert_eq!(lines.next(), Some(want.as_str()), "{flag}: {}", r.stdout);
        // Then, when the build knows it, NVIDIA's `commit: <sha>`, and nothing else.
        for l in lines {
            assert!(l.starts_with("commit: "), "{flag}: {}", r.stdout);
        }
    }
    // The gpuctk name keeps its own line, which the package's version is checked against.
    let r = ok(&["-v"]);
    assert_eq!(
        r.stdout.trim(),
        format!("gpuctk {}", env!("CARGO_PKG_VERSION"))
    );
    // More logging is `--verbose` (and NVIDIA's `-d`).
    ok(&[
        "--verbose",
        "cdi",
        "list",
        "--spec-dir",
        t.path().to_str().unwrap(),
    ]);
}

/// NVIDIA's global `--config FILE` and `NVIDIA_CTK_CONFIG`: the config.toml `cdi generate`
/// takes `[nvidia-container-cli] root` from.
#[test]
fn global_config_flag_and_variable() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let ctk = nvidia_ctk(&t);
    let cfg = t.join("elsewhere.toml");
    fs::write(
        &cfg,
        format!("[nvidia-container-cli]\nroot = \"{}\"\n", h.driver_root()),
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let (dev, proc) = (h.dev_root(), h.proc_root());
    let tail = ["--dev-root", &dev, "--proc-root", &proc];
    let gen = |pre: &[&str], post: &[&str], env: &[(&str, &str)]| {
        let mut args: Vec<&str> = pre.to_vec();
        args.extend(["cdi", "generate"]);
        args.extend(tail);
        args.extend(post);
        run_env(&ctk, &args, env)
    };
    for (pre, post, env) in [
        (&["--config", c][..], &[][..], &[][..]),
        (&[], &["--config", c], &[]),
        (&[], &[], &[("NVIDIA_CTK_CONFIG", c)]),
    ] {
        let r = gen(pre, post, env);
        assert_eq!(r.code, 0, "{pre:?} {post:?} {env:?}: {}", r.stderr);
        assert!(
            r.stdout.contains("libcuda.so.570.124.06"),
            "{pre:?} {post:?} {env:?}: {}",
            r.stdout
        );
    }
    // A named file must exist: one line naming the variable and the file.
    let missing = t.join("missing.toml");
    let r = gen(
        &[],
        &[],
        &[("NVIDIA_CTK_CONFIG", missing.to_str().unwrap())],
    );
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("NVIDIA_CTK_CONFIG") && r.stderr.contains("missing.toml"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

/// `--devices` is NVIDIA's alias of `--device-id`; `--device-id none` writes NVIDIA's `none`
/// device (no GPU, the driver only) and no `all` device.
#[test]
fn generate_devices_alias_and_device_id_none() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 2, "570.124.06", "debian");
    let ctk = nvidia_ctk(&t);
    let roots = h.roots();
    let gen = |extra: &[&str]| {
        let mut args = vec!["cdi", "generate"];
        args.extend(extra);
        args.extend(roots.iter().map(String::as_str));
        run_env(&ctk, &args, &[])
    };
    let r = gen(&["--devices", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(names(&yaml(&r.stdout)), ["1", h.uuids()[1].as_str(), "all"]);
    let r = gen(&["--device-id", "none"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let spec = yaml(&r.stdout);
    assert_cdi_schema(&spec);
    assert_eq!(names(&spec), ["none"]);
    let none = &spec["devices"][0]["containerEdits"];
    assert_eq!(none["env"], serde_json::json!(["NVCT_EMPTY_DEVICE="]));
    assert!(none.get("deviceNodes").is_none(), "{none:#}");
    // The driver is in the common edits.
    assert!(
        r.stdout.contains("libcuda.so.570.124.06") && r.stdout.contains("/dev/nvidiactl"),
        "{}",
        r.stdout
    );
}

/// `runtime configure --cdi.enable` (NVIDIA's alias of `--cdi.enabled`) turns on docker's
/// `features.cdi` and containerd's `enable_cdi`; `--executable-path` is the engine binary
/// `--config-source command` runs, and is ignored (with a warning) for docker.
#[test]
fn runtime_configure_cdi_enable_and_executable_path() {
    let t = TestDir::new();
    let ctk = nvidia_ctk(&t);
    let daemon = t.join("daemon.json");
    fs::write(&daemon, "{}\n").unwrap();
    let r = run_env(
        &ctk,
        &[
            "runtime",
            "configure",
            "--runtime=docker",
            "--config",
            daemon.to_str().unwrap(),
            "--cdi.enable",
            "--executable-path",
            "/usr/bin/dockerd",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--executable-path /usr/bin/dockerd: ignored for docker"),
        "{}",
        r.stderr
    );
    let v: Value = serde_json::from_slice(&fs::read(&daemon).unwrap()).unwrap();
    assert_eq!(v["features"]["cdi"], true, "{v:#}");

    // containerd, its config as a containerd binary of our choosing prints it.
    let exe = t.join("bin/my-containerd");
    fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let dumped = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    sandbox_image = \"from-my-containerd\"\n";
    fs::write(
        &exe,
        format!("#!/bin/sh\n[ \"$1 $2\" = \"config dump\" ] || exit 3\ncat <<'EOF'\n{dumped}EOF\n"),
    )
    .unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = t.join("containerd/config.toml");
    fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    let r = run_env(
        &ctk,
        &[
            "runtime",
            "configure",
            "--runtime=containerd",
            "--config",
            cfg.to_str().unwrap(),
            "--config-source",
            "command",
            "--executable-path",
            exe.to_str().unwrap(),
            "--nvidia-runtime-path",
            "/usr/bin/nvidia-container-runtime",
            "--cdi.enable",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let written = fs::read_to_string(&cfg).unwrap();
    assert!(
        written.contains("from-my-containerd")
            && written.contains("enable_cdi = true")
            && written.contains("\"/usr/bin/nvidia-container-runtime\""),
        "{written}"
    );
    // With the config read from the file, the flag has nothing to do: said, not silent.
    let r = run_env(
        &ctk,
        &[
            "runtime",
            "configure",
            "--runtime=containerd",
            "--config",
            cfg.to_str().unwrap(),
            "--executable-path",
            exe.to_str().unwrap(),
            "--nvidia-runtime-path",
            "/usr/bin/nvidia-container-runtime",
            "--dry-run",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("only used with --config-source command"),
        "{}",
        r.stderr
    );
}

/// A host that kept NVIDIA's stock config.toml: a container create through the shim prints no
/// WARN line (six keys gpuctk does not apply hold NVIDIA's defaults, which is no news);
/// `config` names them once. A key gpuctk does not apply that is set away from NVIDIA's default
/// still warns, since NVIDIA's toolkit would behave differently.
#[test]
fn stock_nvidia_config_is_quiet_on_container_create() {
    let bed = Bed::new("runc", "debian", 1);
    let cfg = bed.config.clone();
    fs::write(&cfg, NVIDIA_STOCK_CONFIG).unwrap();
    // Point the stock file at the mock host as an admin would, with `nvidia-ctk config --set`.
    let ctk = nvidia_ctk(&bed.t);
    let set = |kv: String| ["--set".to_string(), kv];
    let mut args: Vec<String> = vec![
        "config".into(),
        "--config-file".into(),
        cfg.to_str().unwrap().into(),
        "--in-place".into(),
    ];
    args.extend(set(format!(
        "nvidia-container-cli.root={}",
        bed.host.driver_root()
    )));
    args.extend(set(format!("gpuctk.dev-root={}", bed.host.dev_root())));
    args.extend(set(format!("gpuctk.proc-root={}", bed.host.proc_root())));
    args.extend(set(format!("gpuctk.hook-path={GPUCTK}")));
    // Never the host's spec dirs.
    args.extend(set(format!(
        "nvidia-container-runtime.modes.cdi.spec-dirs={}",
        bed.cdi_dir().display()
    )));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run_env(&ctk, &a, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // `config` says it once, in one line naming the six.
    assert!(!r.stderr.contains("WARN"), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    for k in STOCK_UNAPPLIED {
        assert!(r.stderr.contains(k), "{k}: {}", r.stderr);
    }
    let text = fs::read_to_string(&cfg).unwrap();
    assert!(
        text.starts_with("#accept-nvidia-visible-devices-as-volume-mounts = false\n")
            && text.contains("ldconfig = \"@/sbin/ldconfig.real\"\nload-kmods = true\n"),
        "the stock keys stay as NVIDIA wrote them:\n{text}"
    );

    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let r = bed.run("stock");
    r.ok();
    assert_eq!(r.gpus(), [0], "{}", r.stdout);
    let warns: Vec<&str> = r.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert!(warns.is_empty(), "WARN lines on create:\n{}", r.stderr);

    // A key gpuctk does not apply, away from NVIDIA's default: one warning, naming it.
    let text = text.replace("load-kmods = true", "load-kmods = false");
    fs::write(&cfg, text).unwrap();
    let r = bed.run("kmods");
    r.ok();
    let warns: Vec<&str> = r.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warns.len(), 1, "{}", r.stderr);
    assert!(
        warns[0].contains("nvidia-container-cli.load-kmods"),
        "{}",
        r.stderr
    );
}
