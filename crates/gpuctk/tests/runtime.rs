//! The runtime shim and the hooks under real runc and real crun: a mock GPU host, the mock
//! rootfs, a bundle from `runc spec`, our `nvidia-container-runtime`, and what the container
//! itself sees (device nodes open with ENXIO, libcuda loads, nvidia-smi lists the GPUs).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::process::Command;

use gpuctk_mockhost::{LibraryLoad, ProbeReport};
use serde_json::{json, Value};

use crate::util::*;

/// A host, a rootfs, a bundle and a shim configured for them.
pub struct Bed {
    pub t: TestDir,
    pub host: Host,
    pub bundle: PathBuf,
    pub runtime: String,
    pub state_root: PathBuf,
    pub shim: PathBuf,
    pub config: PathBuf,
}

pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub probe: ProbeReport,
    pub smi: String,
}

impl Bed {
    pub fn new(runtime: &str, layout: &str, gpus: u32) -> Bed {
        Bed::new_with(runtime, layout, gpus, &[])
    }

    /// [`Bed::new`] on a mock host made with more `mock-host create` flags (`--gds`, ...).
    pub fn new_with(runtime: &str, layout: &str, gpus: u32, host_flags: &[&str]) -> Bed {
        let t = TestDir::new();
        let host = mock_host_with(&t, "host", gpus, "570.124.06", layout, host_flags);
        Bed::with_host(runtime, t, host)
    }

    /// A bed around `host`, a mock host made in `t`.
    pub fn with_host(runtime: &str, t: TestDir, host: Host) -> Bed {
        let bundle = t.join("bundle");
        fs::create_dir_all(&bundle).unwrap();
        ok(&[
            "mock-host",
            "rootfs",
            bundle.join("rootfs").to_str().unwrap(),
        ]);
        let st = Command::new(runtime)
            .arg("spec")
            .arg("--bundle")
            .arg(&bundle)
            .status()
            .unwrap_or_else(|e| panic!("{runtime} spec: {e} (install {runtime})"));
        assert!(st.success());
        let mut spec: Value =
            serde_json::from_slice(&fs::read(bundle.join("config.json")).unwrap()).unwrap();
        spec["process"]["terminal"] = json!(false);
        spec["process"]["args"] = json!([
            "/bin/sh",
            "-c",
            "/usr/bin/gpuctk-probe; echo ---smi---; nvidia-smi -L 2>&1 || echo nvidia-smi exit $?"
        ]);
        spec["root"]["readonly"] = json!(false);
        fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&spec).unwrap(),
        )
        .unwrap();
        fs::copy(bundle.join("config.json"), t.join("pristine.json")).unwrap();
        let bin = t.join("bin");
        fs::create_dir_all(&bin).unwrap();
        let shim = bin.join("nvidia-container-runtime");
        symlink(GPUCTK, &shim).unwrap();
        let cdi = t.join("cdi");
        fs::create_dir_all(&cdi).unwrap();
        let config = t.join("config.toml");
        let bed = Bed {
            state_root: t.join("state"),
            t,
            host,
            bundle,
            runtime: runtime.to_string(),
            shim,
            config,
        };
        bed.write_config("");
        bed
    }

    /// `[gpuctk] hooks-in-shim = false`: leave the createContainer hooks to the runtime.
    pub fn hooks_as_processes(&self) {
        let cfg = fs::read_to_string(&self.config)
            .unwrap()
            .replace("[gpuctk]\n", "[gpuctk]\nhooks-in-shim = false\n");
        fs::write(&self.config, cfg).unwrap();
    }

    pub fn cdi_dir(&self) -> PathBuf {
        self.t.join("cdi")
    }

    /// Our config.toml pointing at the mock host, plus `extra` top-level keys. The discovery
    /// snapshot is kept in the test's dir, so every create after the first runs on it.
    pub fn write_config(&self, extra: &str) {
        fs::write(
            &self.config,
            format!(
                "{extra}\n[nvidia-container-cli]\nroot = \"{}\"\n\n[nvidia-container-runtime]\nruntimes = [\"{}\"]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{}\"]\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\nhook-path = \"{GPUCTK}\"\nsnapshot-dir = \"{}\"\n",
                self.host.driver_root(),
                self.runtime,
                self.cdi_dir().display(),
                self.host.dev_root(),
                self.host.proc_root(),
                self.t.join("snapshots").display()
            ),
        )
        .unwrap();
    }

    /// Start again from `runc spec`'s config (a run rewrites it), with `env` added.
    pub fn set_env(&self, env: &[&str]) {
        fs::copy(
            self.t.join("pristine.json"),
            self.bundle.join("config.json"),
        )
        .unwrap();
        self.edit(|s| {
            let e = s["process"]["env"].as_array_mut().unwrap();
            e.retain(|v| {
                !v.as_str().unwrap().starts_with("NVIDIA_")
                    && !v.as_str().unwrap().starts_with("CUDA_VERSION")
            });
            for x in env {
                e.push(json!(x));
            }
        });
    }

    pub fn edit(&self, f: impl FnOnce(&mut Value)) {
        let p = self.bundle.join("config.json");
        let mut spec: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        f(&mut spec);
        fs::write(&p, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    }

    pub fn spec(&self) -> Value {
        serde_json::from_slice(&fs::read(self.bundle.join("config.json")).unwrap()).unwrap()
    }

    pub fn shim_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.shim);
        c.env("GPUCTK_CONFIG", &self.config)
            .arg("--root")
            .arg(&self.state_root)
            .args(args);
        for (k, _) in std::env::vars() {
            if k.starts_with("NVIDIA_") {
                c.env_remove(k);
            }
        }
        c
    }

    /// `nvidia-container-runtime run` the bundle and collect what the container printed.
    pub fn run(&self, id: &str) -> Ran {
        self.run_image(id, &|_| {})
    }

    /// [`Bed::run`] on a fresh image that `image` adds to first.
    pub fn run_image(&self, id: &str, image: &dyn Fn(&std::path::Path)) -> Ran {
        self.run_in(id, image, &|c| c)
    }

    /// [`Bed::run_image`] with the shim's command turned by `wrap` into the one run (the shim
    /// under `unshare`, ...).
    pub fn run_in(
        &self,
        id: &str,
        image: &dyn Fn(&std::path::Path),
        wrap: &dyn Fn(Command) -> Command,
    ) -> Ran {
        // A fresh image for every container, as an engine's overlay gives: the runtime leaves
        // mount points and our hooks leave links behind in the rootfs.
        let rootfs = self.bundle.join("rootfs");
        fs::remove_dir_all(&rootfs).unwrap();
        gpuctk_mockhost::create_rootfs(&rootfs, &gpuctk_mockhost::RootfsConfig::default()).unwrap();
        image(&rootfs);
        // runc and crun name the container's cgroup after its id: ids must be unique across
        // tests running at the same time, or one container's cleanup kills another's.
        let id = format!(
            "{}-{id}",
            self.t.path().file_name().unwrap().to_string_lossy()
        );
        wrap(self.shim_cmd(&["run", "--bundle", self.bundle.to_str().unwrap(), &id]))
            .output()
            .unwrap()
            .into()
    }

    /// Containers the low-level runtime still knows.
    pub fn listed(&self) -> String {
        let out = Command::new(&self.runtime)
            .arg("--root")
            .arg(&self.state_root)
            .arg("list")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A container's run: the probe's report, then `---smi---` and what nvidia-smi printed.
impl From<std::process::Output> for Ran {
    fn from(out: std::process::Output) -> Ran {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let (probe, smi) = stdout.split_once("---smi---\n").unwrap_or((&stdout, ""));
        Ran {
            code: out.status.code().unwrap_or(-1),
            probe: ProbeReport::parse(probe),
            smi: smi.to_string(),
            stdout: stdout.clone(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Ran {
    pub fn ok(&self) -> &Ran {
        assert_eq!(
            self.code, 0,
            "container failed:\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
    /// The /dev/nvidiaN the container has, each of which must open with ENXIO.
    pub fn gpus(&self) -> Vec<u32> {
        let mut v = Vec::new();
        for (path, result) in &self.probe.devices {
            if let Some(n) = path
                .strip_prefix("/dev/nvidia")
                .and_then(|n| n.parse::<u32>().ok())
            {
                assert_eq!(
                    result, "ENXIO",
                    "{path} is present but not allowed: {}",
                    self.stdout
                );
                v.push(n);
            }
        }
        v.sort();
        v
    }
    pub fn has_node(&self, path: &str) -> bool {
        self.probe.device(path).is_some()
    }
    pub fn libcuda(&self) -> Option<(String, String)> {
        match &self.probe.libcuda {
            Some(LibraryLoad::Loaded { path, realpath }) => Some((path.clone(), realpath.clone())),
            _ => None,
        }
    }
    pub fn smi_uuids(&self) -> Vec<String> {
        self.smi
            .lines()
            .filter_map(|l| l.split("(UUID: ").nth(1))
            .map(|u| u.trim_end_matches(')').to_string())
            .collect()
    }
}

fn check_selected(bed: &Bed, r: &Ran, want: &[u32]) {
    r.ok();
    assert_eq!(r.gpus(), want, "GPU nodes: {}", r.stdout);
    assert!(r.has_node("/dev/nvidiactl"), "{}", r.stdout);
    let uuids = bed.host.uuids();
    let want_uuids: Vec<String> = want.iter().map(|i| uuids[*i as usize].clone()).collect();
    assert_eq!(r.smi_uuids(), want_uuids, "nvidia-smi -L: {}", r.smi);
    let (path, real) = r
        .libcuda()
        .unwrap_or_else(|| panic!("libcuda did not load: {}", r.stdout));
    let lib_dir = bed.host.manifest["lib_dir"].as_str().unwrap();
    assert!(
        path.starts_with(lib_dir),
        "libcuda from {path}, want {lib_dir}"
    );
    assert_eq!(real, format!("{lib_dir}/libcuda.so.570.124.06"));
    assert_eq!(r.probe.cu_driver_version, Some((0, 12080)), "{}", r.stdout);
    assert_eq!(
        r.probe.cu_device_count,
        Some((0, want.len() as i32)),
        "{}",
        r.stdout
    );
}

fn selections(runtime: &str, layout: &str) {
    let bed = Bed::new(runtime, layout, 8);
    let uuids = bed.host.uuids();
    let cases: Vec<(String, Vec<u32>)> = vec![
        ("all".into(), (0..8).collect()),
        ("0".into(), vec![0]),
        ("1,3".into(), vec![1, 3]),
        (uuids[2].clone(), vec![2]),
        (uuids[5][..12].to_string(), vec![5]),
    ];
    for (i, (value, want)) in cases.iter().enumerate() {
        bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")]);
        let r = bed.run(&format!("sel{i}"));
        check_selected(&bed, &r, want);
    }
    assert_eq!(
        bed.listed().lines().count(),
        1,
        "only the header: {}",
        bed.listed()
    );
}

#[test]
fn runc_debian_selections() {
    selections("runc", "debian");
}

#[test]
fn runc_rhel_selections() {
    // A RHEL host puts libcuda in /usr/lib64, which the Debian image's glibc never searches:
    // it loads only because update-ldcache wrote the container's ld.so.cache.
    selections("runc", "rhel");
}

#[test]
fn crun_debian_selections() {
    selections("crun", "debian");
}

#[test]
fn crun_rhel_selections() {
    selections("crun", "rhel");
}

fn cdi_name_from_static_spec(runtime: &str) {
    let bed = Bed::new(runtime, "rhel", 8);
    let spec = bed.cdi_dir().join("nvidia.yaml");
    bed.host.write_spec(&spec);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"]);
    check_selected(&bed, &bed.run("cdi1"), &[1]);
    // The same through the Kubernetes annotation, with the env saying nothing.
    bed.set_env(&[]);
    bed.edit(|s| {
        s["annotations"] = json!({"cdi.k8s.io/gpu": "nvidia.com/gpu=6,nvidia.com/gpu=7"});
    });
    check_selected(&bed, &bed.run("cdi2"), &[6, 7]);
}

#[test]
fn runc_cdi_name() {
    cdi_name_from_static_spec("runc");
}

#[test]
fn crun_cdi_name() {
    cdi_name_from_static_spec("crun");
}

fn nothing_and_none(runtime: &str) {
    let bed = Bed::new(runtime, "debian", 8);
    for (i, env) in [
        vec![],
        vec!["NVIDIA_VISIBLE_DEVICES=void"],
        vec!["NVIDIA_VISIBLE_DEVICES="],
    ]
    .into_iter()
    .enumerate()
    {
        bed.set_env(&env);
        let before = fs::read(bed.bundle.join("config.json")).unwrap();
        let r = bed.run(&format!("void{i}"));
        r.ok();
        assert_eq!(
            fs::read(bed.bundle.join("config.json")).unwrap(),
            before,
            "spec not rewritten for a container that asks for nothing"
        );
        assert!(r.probe.devices.is_empty(), "no /dev/nvidia*: {}", r.stdout);
        assert!(r.libcuda().is_none());
        assert!(r.smi.contains("not found"), "no nvidia-smi: {}", r.smi);
    }
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=none"]);
    let r = bed.run("none");
    r.ok();
    assert_eq!(r.gpus(), Vec::<u32>::new());
    assert!(r.has_node("/dev/nvidiactl"));
    assert!(
        r.libcuda().is_some(),
        "none still gets the driver: {}",
        r.stdout
    );
    assert_eq!(
        r.probe.cu_init,
        Some(100),
        "CUDA_ERROR_NO_DEVICE without GPUs: {}",
        r.stdout
    );
    assert!(r.smi.contains("No devices were found"), "{}", r.smi);
}

#[test]
fn runc_void_unset_none() {
    nothing_and_none("runc");
}

#[test]
fn crun_void_unset_none() {
    nothing_and_none("crun");
}

fn capabilities_and_legacy(runtime: &str) {
    let bed = Bed::new(runtime, "debian", 4);
    bed.set_env(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=utility",
    ]);
    let r = bed.run("util");
    r.ok();
    assert!(
        r.libcuda().is_none(),
        "utility only: no libcuda: {}",
        r.stdout
    );
    assert_eq!(
        r.smi_uuids(),
        bed.host.uuids(),
        "utility brings nvidia-smi and NVML"
    );
    bed.set_env(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute",
    ]);
    let r = bed.run("compute");
    r.ok();
    assert!(r.libcuda().is_some(), "{}", r.stdout);
    assert!(
        r.smi.contains("not found"),
        "compute only: no nvidia-smi: {}",
        r.stdout
    );
    // A CUDA image from before NVIDIA_REQUIRE_CUDA, saying nothing else, gets all GPUs.
    bed.set_env(&["CUDA_VERSION=11.8.0"]);
    check_selected(&bed, &bed.run("legacy"), &[0, 1, 2, 3]);
}

#[test]
fn runc_capabilities_and_legacy_image() {
    capabilities_and_legacy("runc");
}

#[test]
fn crun_capabilities_and_legacy_image() {
    capabilities_and_legacy("crun");
}

fn errors(runtime: &str) {
    let bed = Bed::new(runtime, "debian", 8);
    let uuids = bed.host.uuids();
    for (i, (value, needles)) in [
        (
            "9",
            vec!["NVIDIA_VISIBLE_DEVICES: no GPU with index 9 (this host has GPUs 0-7)"],
        ),
        (
            "GPU-ffffffff-0000-0000-0000-000000000000",
            vec!["no GPU with UUID GPU-ffffffff", uuids[0].as_str()],
        ),
        (
            "0,banana",
            vec!["NVIDIA_VISIBLE_DEVICES: bad device \"banana\""],
        ),
        ("nvidia.com/gpu=42", vec!["nvidia.com/gpu=42"]),
    ]
    .into_iter()
    .enumerate()
    {
        bed.set_env(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")]);
        let before = fs::read(bed.bundle.join("config.json")).unwrap();
        let r = bed.run(&format!("err{i}"));
        assert_ne!(r.code, 0, "{value} must fail: {}", r.stdout);
        for n in needles {
            assert!(
                r.stderr.contains(n),
                "{value}: stderr lacks {n:?}: {}",
                r.stderr
            );
        }
        assert_eq!(
            fs::read(bed.bundle.join("config.json")).unwrap(),
            before,
            "config.json unchanged"
        );
        let _: Value = serde_json::from_slice(&before).unwrap();
        assert_eq!(
            bed.listed().lines().count(),
            1,
            "no container left: {}",
            bed.listed()
        );
    }
    // A config.json that is not UTF-8 (a Latin-1 byte in an env value) is named, with where.
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all", "WHO=caf\u{e9}"]);
    let path = bed.bundle.join("config.json");
    let text = fs::read(&path).unwrap();
    let at = text
        .windows(5)
        .position(|w| w == "caf\u{e9}".as_bytes())
        .unwrap();
    let mut latin1 = text[..at + 3].to_vec();
    latin1.push(0xe9);
    latin1.extend_from_slice(&text[at + 5..]);
    fs::write(&path, &latin1).unwrap();
    let r = bed.run("latin1");
    assert_ne!(r.code, 0, "must fail: {}", r.stdout);
    let line = latin1[..at].iter().filter(|&&b| b == b'\n').count() + 1;
    let needle = format!("config.json: invalid JSON at line {line} column ");
    assert!(
        r.stderr.contains(&needle) && r.stderr.contains("not UTF-8"),
        "stderr lacks {needle:?} and not UTF-8: {}",
        r.stderr
    );
    assert_eq!(fs::read(&path).unwrap(), latin1, "config.json unchanged");
}

#[test]
fn runc_bad_requests() {
    errors("runc");
}

#[test]
fn crun_bad_requests() {
    errors("crun");
}

fn unprivileged_policy(runtime: &str) {
    let bed = Bed::new(runtime, "debian", 2);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    // runc spec's default container is unprivileged (no CAP_SYS_ADMIN); the default policy
    // accepts the env var anyway.
    check_selected(&bed, &bed.run("p1"), &[0, 1]);
    bed.write_config("accept-nvidia-visible-devices-envvar-when-unprivileged = false");
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let r = bed.run("p2");
    r.ok();
    assert!(
        r.probe.devices.is_empty(),
        "ignored when unprivileged: {}",
        r.stdout
    );
    assert!(
        r.stderr.contains("unprivileged"),
        "the shim says why: {}",
        r.stderr
    );
    // A privileged container is still served.
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    bed.edit(|s| {
        for set in ["bounding", "effective", "permitted"] {
            s["process"]["capabilities"][set]
                .as_array_mut()
                .unwrap()
                .push(json!("CAP_SYS_ADMIN"));
        }
    });
    check_selected(&bed, &bed.run("p3"), &[0, 1]);
}

#[test]
fn runc_unprivileged_policy() {
    unprivileged_policy("runc");
}

#[test]
fn crun_unprivileged_policy() {
    unprivileged_policy("crun");
}

#[test]
fn unknown_fields_and_existing_hooks_survive() {
    let bed = Bed::new("runc", "debian", 2);
    let marker = bed.t.join("prestart-ran");
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0"]);
    bed.edit(|s| {
        s["annotations"] = json!({"org.example/keep": "yes"});
        s["x-unknown-field"] = json!({"nested": [1, 2, 3]});
        s["hooks"] = json!({"prestart": [{"path": "/bin/sh", "args": ["sh", "-c", format!("touch {}", marker.display())]}]});
    });
    let keys_before: Vec<String> = bed.spec().as_object().unwrap().keys().cloned().collect();
    bed.run("keep").ok();
    let after = bed.spec();
    let keys_after: Vec<String> = after.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        &keys_after[..keys_before.len()],
        &keys_before[..],
        "key order kept"
    );
    assert_eq!(after["x-unknown-field"], json!({"nested": [1, 2, 3]}));
    assert_eq!(after["annotations"]["org.example/keep"], "yes");
    assert_eq!(
        after["hooks"]["prestart"][0]["path"], "/bin/sh",
        "existing hook first and kept"
    );
    assert!(marker.exists(), "the existing prestart hook ran");
    // The shim did the hooks' work itself: none is left for runc to spawn.
    assert!(after["hooks"].get("createContainer").is_none(), "{after}");
    let env: Vec<&str> = after["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        env.iter()
            .filter(|e| e.starts_with("NVIDIA_VISIBLE_DEVICES="))
            .count(),
        1,
        "replaced in place: {env:?}"
    );
    assert!(env.contains(&"NVIDIA_VISIBLE_DEVICES=void"));
    let devices = after["linux"]["resources"]["devices"].as_array().unwrap();
    assert_eq!(devices[0]["allow"], false, "runc's deny-all stays first");
    assert!(devices
        .iter()
        .any(|d| d["major"] == 195 && d["minor"] == 0 && d["allow"] == true));
}

/// A stand-in runtime that records its argv, for pass-through checks.
pub fn recording_runtime(bed: &Bed) -> PathBuf {
    let rec = bed.t.join("fake-runc");
    fs::write(
        &rec,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n",
            bed.t.join("argv").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&rec, fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = fs::read_to_string(&bed.config).unwrap().replace(
        "runtimes = [\"runc\"]",
        &format!("runtimes = [\"{}\"]", rec.display()),
    );
    fs::write(&bed.config, cfg).unwrap();
    rec
}

#[test]
fn commands_and_global_flags_pass_through() {
    let bed = Bed::new("runc", "debian", 1);
    recording_runtime(&bed);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let before = fs::read(bed.bundle.join("config.json")).unwrap();
    for args in [
        vec![
            "--log",
            "/tmp/x.log",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "state",
            "c1",
        ],
        vec!["kill", "c1", "KILL"],
        vec!["delete", "--force", "c1"],
        vec!["ps", "--format", "json", "c1"],
        vec!["--debug", "start", "c1"],
        vec!["--version"],
    ] {
        let out = Command::new(&bed.shim)
            .env("GPUCTK_CONFIG", &bed.config)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let argv = fs::read_to_string(bed.t.join("argv")).unwrap();
        assert_eq!(
            argv.lines().collect::<Vec<_>>(),
            args,
            "argv passed through untouched"
        );
        assert_eq!(
            fs::read(bed.bundle.join("config.json")).unwrap(),
            before,
            "{args:?} never touches the spec"
        );
    }
    let out = Command::new(&bed.shim)
        .env("GPUCTK_CONFIG", &bed.config)
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("gpuctk nvidia-container-runtime version")
    );
    // create is modified, and its argv still passed through.
    let args = [
        "--root",
        "/r",
        "create",
        "--bundle",
        bed.bundle.to_str().unwrap(),
        "--pid-file",
        "/p",
        "c2",
    ];
    let out = Command::new(&bed.shim)
        .env("GPUCTK_CONFIG", &bed.config)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fs::read_to_string(bed.t.join("argv"))
            .unwrap()
            .lines()
            .collect::<Vec<_>>(),
        args
    );
    assert!(bed.spec()["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["path"] == "/dev/nvidia0"));
}

#[test]
fn config_syntax_error_stops_the_container() {
    let bed = Bed::new("runc", "debian", 1);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    fs::write(
        &bed.config,
        "[nvidia-container-runtime]\nmode = \"auto\nruntimes = [\"runc\"]\n",
    )
    .unwrap();
    let before = fs::read(bed.bundle.join("config.json")).unwrap();
    let log = bed.t.join("runc-log.json");
    let out = bed
        .shim_cmd(&[
            "--log",
            log.to_str().unwrap(),
            "--log-format",
            "json",
            "run",
            "--bundle",
            bed.bundle.to_str().unwrap(),
            "bad",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:2:", bed.config.display())),
        "names file and line: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(fs::read(bed.bundle.join("config.json")).unwrap(), before);
    assert_eq!(bed.listed().lines().count(), 1);
    // The engine reads runc's log file for the reason; ours is there, as runc's own JSON.
    let line: Value =
        serde_json::from_str(fs::read_to_string(&log).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(line["level"], "error");
    assert!(line["msg"].as_str().unwrap().contains("config.toml:2"));
    // Unknown keys are only a warning.
    bed.write_config("no-such-key = true");
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let r = bed.run("ok");
    r.ok();
    assert!(r.stderr.contains("unknown key no-such-key"), "{}", r.stderr);
}

#[test]
fn stale_static_spec_falls_back_in_auto_and_fails_in_cdi_mode() {
    let bed = Bed::new("runc", "debian", 2);
    let spec = bed.cdi_dir().join("nvidia.yaml");
    ok(&with(
        &["cdi", "generate", "--output", spec.to_str().unwrap()],
        &bed.host.roots(),
    ));
    let text = fs::read_to_string(&spec).unwrap().replace(
        "--host-driver-version=570.124.06",
        "--host-driver-version=550.54.15",
    );
    fs::write(&spec, text).unwrap();
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"]);
    let r = bed.run("stale1");
    check_selected(&bed, &r, &[1]);
    assert!(
        r.stderr.contains("generated for driver 550.54.15"),
        "{}",
        r.stderr
    );
    let cfg = fs::read_to_string(&bed.config).unwrap().replace(
        "[nvidia-container-runtime]\n",
        "[nvidia-container-runtime]\nmode = \"cdi\"\n",
    );
    fs::write(&bed.config, cfg).unwrap();
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"]);
    let r = bed.run("stale2");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("run `gpuctk cdi generate`"),
        "{}",
        r.stderr
    );
}

#[test]
fn hooks_run_with_a_fixed_environment() {
    // The image's LD_PRELOAD must never reach our hook on the host (CVE-2025-23266 class).
    let bed = Bed::new("runc", "debian", 1);
    bed.hooks_as_processes();
    let evil = bed.t.join("evil-ran");
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=/tmp/evil.so"]);
    bed.run("env").ok();
    for h in bed.spec()["hooks"]["createContainer"].as_array().unwrap() {
        assert_eq!(h["env"], json!(["NVIDIA_CTK_DEBUG=false"]));
    }
    assert!(!evil.exists());
}

/// Regression (issue 8): under crun a failing hook's message was lost (crun gives hooks
/// `/dev/null` for stderr and reports only "exit code 1"). The shim now points crun's
/// `run.oci.hooks.stderr` at crun's own stderr, so the hook's one line reaches the engine; under
/// runc the message was already in runc's error.
#[test]
fn failing_hook_message_reaches_the_engine_under_crun_and_runc() {
    for (runtime, in_shim) in [("crun", false), ("runc", false), ("crun", true)] {
        let bed = Bed::new(runtime, "debian", 1);
        if !in_shim {
            bed.hooks_as_processes();
        }
        bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0"]);
        let rootfs = bed.bundle.join("rootfs");
        fs::remove_dir_all(&rootfs).unwrap();
        gpuctk_mockhost::create_rootfs(&rootfs, &gpuctk_mockhost::RootfsConfig::default()).unwrap();
        // A damaged loader cache in the image: update-ldcache refuses it with one line.
        fs::write(rootfs.join("etc/ld.so.cache"), b"garbage, not a cache").unwrap();
        let id = format!(
            "{}-hookerr",
            bed.t.path().file_name().unwrap().to_string_lossy()
        );
        let out = bed
            .shim_cmd(&["run", "--bundle", bed.bundle.to_str().unwrap(), &id])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{runtime}: {stderr}");
        assert!(
            stderr.contains("the image's loader cache is damaged"),
            "{runtime}: {stderr}"
        );
        if runtime == "crun" && !in_shim {
            assert_eq!(
                bed.spec()["annotations"]["run.oci.hooks.stderr"],
                json!("/dev/stderr")
            );
        }
        assert!(!bed.listed().contains(&id), "{}", bed.listed());
    }
}

/// `mode = "legacy"` (many fleets pinned it) failed every GPU container with a message blaming
/// a hook personality that exists. Now, as NVIDIA's runtime does, the shim adds our prestart
/// hook and leaves the rest of the spec alone; the hook injects into the live container.
#[test]
fn legacy_mode_adds_the_prestart_hook() {
    for runtime in ["runc", "crun"] {
        let bed = Bed::new(runtime, "debian", 4);
        let cfg = fs::read_to_string(&bed.config).unwrap().replace(
            "[nvidia-container-runtime]\n",
            "[nvidia-container-runtime]\nmode = \"legacy\"\n",
        );
        fs::write(&bed.config, cfg).unwrap();
        bed.set_env(&["NVIDIA_VISIBLE_DEVICES=1,3"]);
        let r = bed.run("legacymode");
        r.ok();
        check_selected(&bed, &r, &[1, 3]);
        let spec = bed.spec();
        let pre = spec["hooks"]["prestart"].as_array().unwrap();
        assert_eq!(pre.len(), 1, "{pre:?}");
        assert_eq!(pre[0]["args"][0], json!("nvidia-container-runtime-hook"));
        assert!(
            spec["hooks"].get("createContainer").is_none(),
            "no CDI edits in legacy mode: {spec}"
        );
        // Asked for nothing: nothing added.
        bed.set_env(&[]);
        bed.run("legacynone").ok();
        assert!(bed.spec()["hooks"].get("prestart").is_none());
    }
}

/// The shim's `create` of the bed's bundle under strace, with `-y` naming each call's file: its
/// own calls, up to its exec of the runtime.
pub fn traced_create(bed: &Bed, id: &str) -> Vec<String> {
    let trace = bed.t.join(&format!("{id}.trace"));
    let mut c = Command::new("strace");
    c.args([
        "-y",
        "-qq",
        "-s",
        "0",
        "-e",
        "trace=execve,openat,read,pread64,%%stat,linkat",
        "-o",
    ])
    .arg(&trace)
    .arg(&bed.shim)
    .env("GPUCTK_CONFIG", &bed.config)
    .arg("--root")
    .arg(&bed.state_root)
    .args(["create", "--bundle", bed.bundle.to_str().unwrap(), id]);
    for (k, _) in std::env::vars() {
        if k.starts_with("NVIDIA_") {
            c.env_remove(k);
        }
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("strace: {e} (install strace: scripts/setup.sh)"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(&trace).unwrap();
    // The first execve is the shim's own, the next one the runtime's.
    text.lines()
        .skip(1)
        .take_while(|l| !l.starts_with("execve("))
        .map(str::to_string)
        .collect()
}

/// Issue 21: the shim read config.toml, config.json, the image's ld.so.cache and ld.so.conf.d
/// files with a second read that only said "end of file", compared an application profile with
/// a second pread, and stat'ed config.json again before writing it. Each file whose size fstat
/// gave is now read in one read (its size plus one byte: a short read of a regular file is its
/// end), and config.json's mode comes from that read's fstat.
#[test]
fn create_reads_each_file_once_and_names_config_json_once() {
    let bed = Bed::new("runc", "debian", 2);
    recording_runtime(&bed);
    let real = |p: &std::path::Path| fs::canonicalize(p).unwrap().display().to_string();
    let config = real(&bed.config);
    let spec = real(&bed.bundle.join("config.json"));
    let rootfs = format!("{}/", real(&bed.bundle.join("rootfs")));
    // Twice: the second create finds in the image what the first wrote (the application
    // profile among them) and compares it before writing.
    for id in ["c1", "c2"] {
        bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
        let trace = traced_create(&bed, id);
        // (file, bytes returned) of every read and pread.
        let reads: Vec<(&str, i64)> = trace
            .iter()
            .filter(|l| l.starts_with("read(") || l.starts_with("pread64("))
            .filter_map(|l| {
                let file = l.split_once('<')?.1.split_once('>')?.0;
                let n = l.rsplit_once(" = ")?.1.split(' ').next()?.parse().ok()?;
                Some((file, n))
            })
            .collect();
        let read = |f: &dyn Fn(&str) -> bool| reads.iter().any(|(p, n)| f(p) && *n > 0);
        assert!(read(&|p| p == config), "{id}: config.toml read: {trace:#?}");
        assert!(read(&|p| p == spec), "{id}: config.json read: {trace:#?}");
        assert!(
            read(&|p| p == format!("{rootfs}etc/ld.so.cache")),
            "{id}: the image's ld.so.cache read: {trace:#?}"
        );
        assert!(
            read(&|p| p.starts_with(&format!("{rootfs}etc/ld.so.conf.d/"))),
            "{id}: the image's ld.so.conf.d read: {trace:#?}"
        );
        if id == "c2" {
            assert!(
                read(&|p| p.contains("/nvidia-application-profiles-rc.d/")),
                "{id}: the application profile compared: {trace:#?}"
            );
        }
        let ends: Vec<_> = reads
            .iter()
            .filter(|(p, n)| *n == 0 && (*p == config || *p == spec || p.starts_with(&rootfs)))
            .collect();
        assert!(
            ends.is_empty(),
            "{id}: reads that only found the end of a file whose size was known: {ends:?}"
        );
        // Its open for the read, and nothing else before the rename: no stat for its mode, no
        // link to its name to see whether it exists.
        let named: Vec<_> = trace
            .iter()
            .filter(|l| l.contains(&format!("\"{spec}\"")))
            .collect();
        assert!(
            named.len() == 1 && named[0].starts_with("openat("),
            "{id}: config.json's mode and being there are known from its read: {named:#?}"
        );
    }
}

/// config.json keeps its mode through the shim's rewrite (the mode now comes from the fstat of
/// the shim's read, not from a stat before the write).
#[test]
fn create_keeps_the_mode_of_config_json() {
    use std::os::unix::fs::PermissionsExt;
    let bed = Bed::new("runc", "debian", 1);
    recording_runtime(&bed);
    for mode in [0o600, 0o640, 0o444] {
        bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
        let p = bed.bundle.join("config.json");
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        let out = bed
            .shim_cmd(&["create", "--bundle", bed.bundle.to_str().unwrap(), "c1"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(bed.spec()["linux"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["path"] == "/dev/nvidia0"));
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            mode,
            "config.json keeps its mode"
        );
    }
}

/// What our hooks leave in a rootfs: every file and link under `/etc` and the library folders,
/// with content (files) or target (links).
fn in_root_state(rootfs: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![rootfs.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p
                .strip_prefix(rootfs)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            // var: ldconfig's aux-cache from building the image differs per build.
            if ["proc", "sys", "dev", "tmp", "var"].contains(&rel.as_str()) {
                continue;
            }
            let md = fs::symlink_metadata(&p).unwrap();
            if md.file_type().is_symlink() {
                out.push((rel, format!("-> {}", fs::read_link(&p).unwrap().display())));
            } else if md.is_dir() {
                out.push((rel, "dir".into()));
                stack.push(p);
            } else {
                let bytes = fs::read(&p).unwrap();
                let digest = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                out.push((rel, format!("{} bytes {digest:016x}", bytes.len())));
            }
        }
    }
    out.sort();
    out
}

/// The shim does our hooks' work itself (no hook process): the container's root must end up
/// byte for byte as the hooks leave it, on plain images and on images with their own
/// `ld.so.cache`, `ld.so.conf.d`, compat libraries and a read-only root. And where a spec mount
/// covers a path the hooks work on, the hooks stay hooks.
#[test]
fn hooks_in_shim_leave_the_root_as_the_hooks_do() {
    type Image = fn(&std::path::Path, &Bed);
    let plain: Image = |_, _| {};
    let own_config: Image = |r, _| {
        fs::create_dir_all(r.join("opt/lib")).unwrap();
        fs::write(
            r.join("etc/ld.so.conf.d/10-opt.conf"),
            "/opt/lib\n# comment\n",
        )
        .unwrap();
        fs::write(
            r.join("etc/ld.so.conf.d/00-compat-old.conf"),
            "/nonexistent\n",
        )
        .unwrap();
    };
    let compat: Image = |r, bed| {
        let dir = r.join("usr/local/cuda-12.9/compat");
        fs::create_dir_all(&dir).unwrap();
        let lib_dir = bed.host.manifest["lib_dir"].as_str().unwrap();
        let host_lib = format!("{}{lib_dir}/libcuda.so.570.124.06", bed.host.driver_root());
        fs::copy(host_lib, dir.join("libcuda.so.575.57.08")).unwrap();
        symlink("cuda-12.9", r.join("usr/local/cuda")).unwrap();
    };
    let no_cache: Image = |r, _| {
        fs::remove_file(r.join("etc/ld.so.cache")).unwrap();
    };
    let cases: [(&str, Image, bool); 5] = [
        ("plain", plain, false),
        ("own-config", own_config, false),
        ("compat", compat, false),
        ("no-cache", no_cache, false),
        ("readonly", plain, true),
    ];
    for (layout, runtime) in [("debian", "runc"), ("rhel", "crun")] {
        for (name, image, readonly) in cases {
            let mut states = Vec::new();
            for in_shim in [false, true] {
                let bed = Bed::new(runtime, layout, 2);
                if !in_shim {
                    bed.hooks_as_processes();
                }
                bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
                bed.edit(|s| s["root"]["readonly"] = json!(readonly));
                let rootfs = bed.bundle.join("rootfs");
                fs::remove_dir_all(&rootfs).unwrap();
                gpuctk_mockhost::create_rootfs(&rootfs, &gpuctk_mockhost::RootfsConfig::default())
                    .unwrap();
                image(&rootfs, &bed);
                let id = format!(
                    "{}-{name}",
                    bed.t.path().file_name().unwrap().to_string_lossy()
                );
                let out = bed
                    .shim_cmd(&["run", "--bundle", bed.bundle.to_str().unwrap(), &id])
                    .output()
                    .unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                // crun makes a read-only root read-only before createContainer hooks run, so
                // there the hooks cannot work at all; the shim, working before crun, can.
                if readonly && runtime == "crun" && !in_shim {
                    assert!(!out.status.success());
                    assert!(
                        String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    continue;
                }
                assert!(
                    out.status.success(),
                    "{layout} {name} in_shim={in_shim}: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let probe = ProbeReport::parse(stdout.split("---smi---").next().unwrap());
                assert!(
                    matches!(probe.libcuda, Some(LibraryLoad::Loaded { .. })),
                    "{layout} {name} in_shim={in_shim}: {stdout}"
                );
                let hooks = bed.spec()["hooks"]["createContainer"].clone();
                assert_eq!(hooks.is_null(), in_shim, "{name}: {hooks}");
                states.push(in_root_state(&rootfs));
            }
            if states.len() < 2 {
                continue;
            }
            let (hooks, shim) = (&states[0], &states[1]);
            for (a, b) in hooks.iter().zip(shim.iter()) {
                assert_eq!(a, b, "{layout}/{runtime} {name}: hooks vs shim");
            }
            assert_eq!(hooks.len(), shim.len(), "{layout}/{runtime} {name}");
        }
    }

    // A spec mount over a library folder hides it from the shim: the hooks stay hooks.
    let bed = Bed::new("runc", "debian", 1);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0"]);
    let lib_dir = bed.host.manifest["lib_dir"].as_str().unwrap().to_string();
    let extra = bed.t.join("extra-lib");
    fs::create_dir_all(&extra).unwrap();
    bed.edit(|s| {
        s["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/etc",
            "type": "bind",
            "source": extra.join("../bundle/rootfs/etc").to_str().unwrap(),
            "options": ["rbind", "rw"]
        }));
    });
    let _ = lib_dir;
    // `create` leaves the container's init holding its stdio: give it files, not pipes.
    let err = bed.t.join("cover.stderr");
    let st = bed
        .shim_cmd(&[
            "create",
            "--bundle",
            bed.bundle.to_str().unwrap(),
            &format!(
                "{}-cover",
                bed.t.path().file_name().unwrap().to_string_lossy()
            ),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&err).unwrap())
        .status()
        .unwrap();
    let spec = bed.spec();
    assert!(
        spec["hooks"]["createContainer"].as_array().is_some(),
        "hooks kept when /etc is a mount ({st}): {spec}\n{}",
        fs::read_to_string(&err).unwrap_or_default()
    );
    let id = format!(
        "{}-cover",
        bed.t.path().file_name().unwrap().to_string_lossy()
    );
    let _ = Command::new("runc")
        .arg("--root")
        .arg(&bed.state_root)
        .args(["delete", "--force", &id])
        .status();
}

/// A shim link and a stand-in runtime named `name` in `dir` that records its argv to `argv`.
fn passthrough_bed(t: &TestDir, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = t.join("pt-bin");
    fs::create_dir_all(&bin).unwrap();
    let shim = bin.join("nvidia-container-runtime");
    symlink(GPUCTK, &shim).unwrap();
    let rt_dir = t.join("pt-runtimes");
    fs::create_dir_all(&rt_dir).unwrap();
    let argv = t.join("argv");
    let rt = rt_dir.join(name);
    fs::write(
        &rt,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > {}\n",
            argv.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&rt, fs::Permissions::from_mode(0o755)).unwrap();
    (shim, rt, argv)
}

fn recorded(argv: &std::path::Path) -> Vec<String> {
    fs::read_to_string(argv)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn passthrough_reads_only_the_runtimes_key() {
    let t = TestDir::new();
    let (shim, rt, argv) = passthrough_bed(&t, "my-runc");
    let config = t.join("config.toml");
    // Every other section is broken; the runtimes key can still be read.
    fs::write(
        &config,
        format!(
            "[nvidia-container-cli]\nroot = \"/\nldconfig = = 3\n[nvidia-container-runtime]\nmode = 7\nruntimes = [\"no-such-runtime\", \"{}\"]\n[gpuctk\nhooks-in-shim = \"x\n",
            rt.display()
        ),
    )
    .unwrap();
    for args in [
        vec!["--root", "/r", "state", "c1"],
        vec!["delete", "--force", "c1"],
        vec!["kill", "c1", "KILL"],
        vec!["--debug", "start", "c1"],
    ] {
        let _ = fs::remove_file(&argv);
        let out = Command::new(&shim)
            .env("GPUCTK_CONFIG", &config)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stderr.is_empty(), "no warnings on pass-through");
        let mut want = vec![rt.display().to_string()];
        want.extend(args.iter().map(|a| a.to_string()));
        assert_eq!(recorded(&argv), want, "argv passed through untouched");
    }
    // create still parses the whole file and stops on the first error, with the line.
    let bundle = t.join("bundle");
    fs::create_dir_all(&bundle).unwrap();
    fs::write(bundle.join("config.json"), "{}").unwrap();
    let _ = fs::remove_file(&argv);
    let out = Command::new(&shim)
        .env("GPUCTK_CONFIG", &config)
        .args(["create", "--bundle", bundle.to_str().unwrap(), "c2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:", config.display())), "{err}");
    assert!(!argv.exists(), "the runtime is not run");
}

/// The entry point replaces std's start-up (main.rs) but keeps what it did for us: a closed
/// stdout is reopened on `/dev/null` before any file is opened (or that file would take
/// descriptor 1), and the runtime we exec gets `SIGPIPE` at its default, as from std's `Command`.
#[test]
fn closed_stdout_is_dev_null_and_the_runtime_gets_sigpipe_default() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestDir::new();
    let (shim, rt, _) = passthrough_bed(&t, "runc");
    let seen = t.join("seen");
    // What the shell the shim execs (`$$`) inherited: its stdout, and its ignored signals.
    fs::write(
        &rt,
        format!(
            "#!/bin/sh\nout=$(readlink /proc/$$/fd/1 || echo closed)\n{{ echo \"$out\"; grep '^SigIgn:' /proc/$$/status; }} > {}\n",
            seen.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&rt, fs::Permissions::from_mode(0o755)).unwrap();
    let config = t.join("config.toml");
    fs::write(
        &config,
        format!(
            "[nvidia-container-runtime]\nruntimes = [\"{}\"]\n",
            rt.display()
        ),
    )
    .unwrap();
    let out = Command::new("sh")
        .args(["-c", "exec \"$0\" state c1 >&-"])
        .arg(&shim)
        .env("GPUCTK_CONFIG", &config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = fs::read_to_string(&seen).unwrap();
    let mut lines = seen.lines();
    assert_eq!(lines.next(), Some("/dev/null"), "{seen}");
    let ign = lines
        .next()
        .and_then(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap_or_else(|| panic!("{seen}"));
    assert_eq!(
        ign & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored in the runtime: {seen}"
    );
}

#[test]
fn passthrough_without_a_readable_config_uses_the_default_runtimes() {
    let t = TestDir::new();
    let (shim, rt, argv) = passthrough_bed(&t, "runc");
    // runc is the first default: a link to the shim named runc comes first in PATH and must be
    // skipped (it is us), then the stand-in runc.
    let loop_dir = t.join("pt-loop");
    fs::create_dir_all(&loop_dir).unwrap();
    symlink(&shim, loop_dir.join("runc")).unwrap();
    let path = format!("{}:{}", loop_dir.display(), rt.parent().unwrap().display());
    let missing = t.join("no-such-config.toml");
    let out = Command::new(&shim)
        .env("GPUCTK_CONFIG", &missing)
        .env("PATH", &path)
        .args(["state", "c1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(recorded(&argv), [rt.to_str().unwrap(), "state", "c1"]);
    // A FIFO where config.toml is, which nothing writes: not waited on. A pass-through call
    // gets the default runtimes; create fails naming it.
    let fifo = t.join("fifo-config.toml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let finished = |args: &[&str]| {
        let mut child = Command::new(&shim)
            .env("GPUCTK_CONFIG", &fifo)
            .env("PATH", &path)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Only a guard against a hang, which an open or read of the FIFO would be.
        for _ in 0..600 {
            if child.try_wait().unwrap().is_some() {
                return child.wait_with_output().unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        child.kill().unwrap();
        panic!("{args:?}: the shim waits on a FIFO for config.toml");
    };
    let out = finished(&["state", "c3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(recorded(&argv), [rt.to_str().unwrap(), "state", "c3"]);
    let out = finished(&["create", "--bundle", t.path().to_str().unwrap(), "c4"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fifo-config.toml: not a regular file"),
        "{err}"
    );
    // create with the missing config named by a variable is an error.
    let out = Command::new(&shim)
        .env("GPUCTK_CONFIG", &missing)
        .env("PATH", &path)
        .args(["create", "--bundle", t.path().to_str().unwrap(), "c2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-config.toml"));
}

#[test]
fn passthrough_version_and_missing_runtime() {
    let t = TestDir::new();
    let (shim, rt, argv) = passthrough_bed(&t, "runc");
    let config = t.join("config.toml");
    fs::write(
        &config,
        format!(
            "[nvidia-container-runtime]\nruntimes = [\n  \"{}\", # ours\n]\n",
            rt.display()
        ),
    )
    .unwrap();
    let out = Command::new(&shim)
        .env("GPUCTK_CONFIG", &config)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("gpuctk nvidia-container-runtime version")
    );
    assert_eq!(recorded(&argv), [rt.to_str().unwrap(), "--version"]);
    // No runtime: one line on stderr and in runc's --log file, for the engine.
    fs::write(
        &config,
        "[nvidia-container-runtime]\nruntimes = [\"/nonexistent/runc\"]\n",
    )
    .unwrap();
    let log = t.join("runc.log");
    let out = Command::new(&shim)
        .env("GPUCTK_CONFIG", &config)
        .args(["--log", log.to_str().unwrap(), "--log-format", "json"])
        .args(["delete", "c1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no low-level runtime found") && err.contains("/nonexistent/runc"),
        "{err}"
    );
    let line: Value =
        serde_json::from_str(fs::read_to_string(&log).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(line["level"], "error");
}

/// Issue 10: the image's own CUDA forward-compat `libcuda` is the one the container loads, and
/// the one answering `cuDriverGetVersion`, exactly when NVIDIA's rule says so. Compat libraries
/// older than, equal to and newer than the mock driver (570.124.06, CUDA 12.8), each carrying
/// the note real libraries do; through the shim (runc) and as hook processes (crun).
#[test]
fn compat_libcuda_is_loaded_only_when_newer() {
    const HOST_LIB: &str = "/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06";
    for (runtime, in_shim) in [("runc", true), ("crun", false)] {
        let bed = Bed::new(runtime, "debian", 1);
        if !in_shim {
            bed.hooks_as_processes();
        }
        for (version, cuda, used) in [
            ("560.35.03", (12, 6), false),
            ("570.124.06", (12, 8), false),
            ("575.57.08", (12, 9), true),
        ] {
            bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all"]);
            let lib = gpuctk_mockhost::compat_libcuda(version, cuda).unwrap();
            let image = |r: &std::path::Path| {
                let dir = r.join("usr/local/cuda-12.9/compat");
                fs::create_dir_all(&dir).unwrap();
                fs::write(dir.join(format!("libcuda.so.{version}")), &lib).unwrap();
                symlink("cuda-12.9", r.join("usr/local/cuda")).unwrap();
            };
            let ran = bed.run_image(&format!("compat-{}", cuda.1), &image);
            ran.ok();
            let (want_lib, want_cuda) = if used {
                (
                    format!("/usr/local/cuda-12.9/compat/libcuda.so.{version}"),
                    cuda.0 * 1000 + cuda.1 * 10,
                )
            } else {
                (HOST_LIB.to_string(), 12080)
            };
            let cache = Command::new("ldconfig")
                .arg("-p")
                .arg("-C")
                .arg(bed.bundle.join("rootfs/etc/ld.so.cache"))
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let what = format!(
                "{runtime} compat {version}: {}\ncache:\n{cache}",
                ran.stdout
            );
            assert_eq!(ran.libcuda().map(|l| l.1), Some(want_lib), "{what}");
            assert_eq!(
                ran.probe.cu_driver_version,
                Some((0, want_cuda as i32)),
                "{what}"
            );
        }
    }
}

/// Issue 10: requirements are enforced, whichever way the container is served. On the mock
/// driver (570.124.06, CUDA 12.8): `cuda>=12.9` is refused with one line that names the
/// variable and the fix, and leaves no container behind; the image's newer compat `libcuda`
/// saves it (and is what answers); `NVIDIA_DISABLE_REQUIRE` lets it run on the host's; a
/// legacy image's `CUDA_VERSION` is a requirement too; and the legacy prestart hook refuses
/// the same way under runc and crun.
#[test]
fn requirements_refuse_are_saved_by_compat_or_are_turned_off() {
    let compat = |r: &std::path::Path| {
        let dir = r.join("usr/local/cuda/compat");
        fs::create_dir_all(&dir).unwrap();
        let lib = gpuctk_mockhost::compat_libcuda("575.57.08", (12, 9)).unwrap();
        fs::write(dir.join("libcuda.so.575.57.08"), lib).unwrap();
    };
    let refused = |bed: &Bed, ran: &Ran, var: &str| {
        assert_ne!(ran.code, 0, "{}", ran.stdout);
        let line = format!("{var}: cuda>=12.9 not met");
        assert!(ran.stderr.contains(&line), "{}", ran.stderr);
        assert!(ran.stderr.contains("update the driver"), "{}", ran.stderr);
        assert!(!ran.stdout.contains("libcuda ok"), "it ran: {}", ran.stdout);
        assert!(
            !bed.listed().contains("req"),
            "a refused container was left behind: {}",
            bed.listed()
        );
    };
    let bed = Bed::new("runc", "debian", 1);
    let need = [
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.9",
    ];
    bed.set_env(&need);
    refused(&bed, &bed.run("req-refused"), "NVIDIA_REQUIRE_CUDA");

    bed.set_env(&need);
    let ran = bed.run_image("req-compat", &compat);
    ran.ok();
    assert_eq!(
        ran.libcuda().map(|l| l.1).as_deref(),
        Some("/usr/local/cuda/compat/libcuda.so.575.57.08"),
        "{}",
        ran.stdout
    );
    assert_eq!(ran.probe.cu_driver_version, Some((0, 12090)));

    bed.set_env(&[need[0], need[1], "NVIDIA_DISABLE_REQUIRE=true"]);
    let ran = bed.run("req-disabled");
    ran.ok();
    assert_eq!(
        ran.probe.cu_driver_version,
        Some((0, 12080)),
        "{}",
        ran.stdout
    );

    // A legacy image (CUDA_VERSION, no NVIDIA_REQUIRE_CUDA) requires its CUDA version.
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.9.1"]);
    refused(&bed, &bed.run("req-legacy-image"), "CUDA_VERSION");

    // The legacy prestart hook decides the same way.
    for runtime in ["runc", "crun"] {
        let bed = Bed::new(runtime, "debian", 1);
        let cfg = fs::read_to_string(&bed.config).unwrap().replace(
            "[nvidia-container-runtime]\n",
            "[nvidia-container-runtime]\nmode = \"legacy\"\n",
        );
        fs::write(&bed.config, cfg).unwrap();
        bed.set_env(&need);
        let ran = bed.run("req-hook");
        assert_ne!(ran.code, 0, "{runtime}: {}", ran.stdout);
        assert!(
            ran.stderr
                .contains("NVIDIA_REQUIRE_CUDA: cuda>=12.9 not met"),
            "{runtime}: {}",
            ran.stderr
        );
        bed.set_env(&need);
        bed.run_image("req-hook-compat", &compat).ok();
    }
}

/// Issue 11: the GPU Operator's runtime classes run `nvidia-container-runtime.cdi` and
/// `nvidia-container-runtime.legacy`, which force their mode whatever config.toml says; and
/// `create --help` through the shim is runc's help, not an attempt to read `./config.json`.
#[test]
fn cdi_and_legacy_personalities_force_their_mode() {
    let bed = Bed::new("runc", "debian", 2);
    let bin = bed.shim.parent().unwrap().to_path_buf();
    let as_name = |name: &str, args: &[&str]| {
        let exe = bin.join(name);
        if !exe.exists() {
            symlink(GPUCTK, &exe).unwrap();
        }
        let c = bed.shim_cmd(args);
        let mut d = Command::new(&exe);
        d.args(c.get_args());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => d.env(k, v),
                None => d.env_remove(k),
            };
        }
        d.output().unwrap()
    };
    let bundle = bed.bundle.to_str().unwrap().to_string();

    // .legacy: the prestart hook, no CDI edits (config.toml says auto).
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=1"]);
    let out = as_name(
        "nvidia-container-runtime.legacy",
        &["run", "--bundle", &bundle, "personality-legacy"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec = bed.spec();
    assert_eq!(
        spec["hooks"]["prestart"][0]["args"][0],
        "nvidia-container-runtime-hook"
    );
    assert!(spec["hooks"].get("createContainer").is_none(), "{spec}");

    // .cdi: a bare id goes through the CDI spec dirs (empty here), so it is refused by name.
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=1"]);
    let out = as_name(
        "nvidia-container-runtime.cdi",
        &["run", "--bundle", &bundle, "personality-cdi"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("nvidia.com/gpu=1"), "{err}");
    // The same request through the plain shim is planned just in time.
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=1"]);
    bed.run("personality-auto").ok();

    // create --help: runc's own help, exit 0, from a directory without config.json.
    let out = bed
        .shim_cmd(&["create", "--help"])
        .current_dir(bed.t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--bundle"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Issue 11 (rootless podman): podman gives `start` and `delete` almost no environment, so
/// they could find another config.toml than `create` did and go to another runtime ("container
/// does not exist", a container left behind). Every call on a container goes to the runtime
/// that created it.
#[test]
fn later_calls_go_to_the_runtime_create_used() {
    let bed = Bed::new("crun", "debian", 1);
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=0"]);
    let id = format!(
        "{}-sticky",
        bed.t.path().file_name().unwrap().to_string_lossy()
    );
    let bundle = bed.bundle.to_str().unwrap().to_string();
    // The record sits next to the runtime's state directory, and goes with the container.
    let mut record = bed.state_root.clone().into_os_string();
    record.push(format!(".gpuctk/{id}"));
    let record = PathBuf::from(record);
    // Issue 21: a record left by an earlier version for this id (a regular file naming runc),
    // which create replaces; and a temp file of a writer killed in an earlier version, which
    // stays: the shim no longer lists the bundle at every start (the bundle goes with the
    // container; a temp name of its own killed writers is removed by the next write, tested in
    // atomicfile).
    fs::create_dir_all(record.parent().unwrap()).unwrap();
    fs::write(&record, "/usr/bin/runc").unwrap();
    let killed = bed.bundle.join(".config.json.gpuctk-1-1.tmp");
    fs::write(&killed, "{}").unwrap();
    // The container's init keeps create's stdio until it starts: a file, not a pipe.
    let err = bed.t.join("create.err");
    let st = bed
        .shim_cmd(&["create", "--bundle", &bundle, &id])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&err).unwrap())
        .status()
        .unwrap();
    assert!(
        st.success(),
        "{}",
        fs::read_to_string(&err).unwrap_or_default()
    );
    let temps: Vec<_> = fs::read_dir(&bed.bundle)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".gpuctk-"))
        .collect();
    assert_eq!(
        temps,
        [".config.json.gpuctk-1-1.tmp"],
        "the bundle was listed, or a temp name was left"
    );
    // Issue 21: the record is a link naming the runtime, read in one readlink.
    let recorded_runtime = fs::read_link(&record)
        .unwrap_or_else(|e| panic!("no record link at {}: {e}", record.display()));
    assert!(
        recorded_runtime.ends_with("crun"),
        "{}",
        recorded_runtime.display()
    );
    // The temp link of a create killed while replacing an earlier record goes with delete.
    let temp_link = record.with_file_name(format!(".{id}.gpuctk-link.tmp"));
    symlink("/nowhere", &temp_link).unwrap();
    // What start and delete find: a config that names runc.
    let other = bed.t.join("other.toml");
    fs::write(
        &other,
        "[nvidia-container-runtime]\nruntimes = [\"runc\"]\n",
    )
    .unwrap();
    for verb in [&["start"][..], &["delete", "--force"]] {
        let mut args = vec!["--root", bed.state_root.to_str().unwrap()];
        args.extend_from_slice(verb);
        args.push(&id);
        let out = Command::new(&bed.shim)
            .args(&args)
            .env("GPUCTK_CONFIG", &other)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{verb:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!bed.listed().contains(&id), "left behind: {}", bed.listed());
    assert!(
        fs::symlink_metadata(&record).is_err(),
        "the record outlived its container"
    );
    assert!(
        fs::symlink_metadata(&temp_link).is_err(),
        "the temp link outlived the container"
    );
    // A record whose container the runtime no longer has (a create that failed after it was
    // written): delete fails as the runtime fails, with its status, and the record goes. It is
    // a regular file, as versions before issue 21 wrote it: still honoured after an upgrade.
    let ghost = record.with_file_name(format!("{id}-ghost"));
    fs::write(&ghost, recorded_runtime.as_os_str().as_encoded_bytes()).unwrap();
    let out = Command::new(&bed.shim)
        .args(["--root", bed.state_root.to_str().unwrap(), "delete"])
        .arg(format!("{id}-ghost"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "deleting a container that is not there"
    );
    assert!(
        !ghost.exists(),
        "the record of a container that is gone stayed"
    );
}

/// Two faults of the runtime record, against real runc and crun (config: runc; the records:
/// crun, told apart by their messages for a container that is not there). A record that was
/// a FIFO blocked every later call on its id in `open`; now only a regular file opened without
/// blocking (as versions before issue 21 wrote records), or a link read without following it
/// (as records are written since), is a record. And every word after the command that did not start with `-` was
/// looked up, so `exec -t nosuchid sh -c true` ran the runtime recorded for a container named
/// `sh`; now the id is where runc's grammar puts it. `timeout` guards against the hang.
#[test]
fn records_are_regular_files_under_the_container_id() {
    let t = TestDir::new();
    let shim = t.join("nvidia-container-runtime");
    symlink(GPUCTK, &shim).unwrap();
    let config = t.join("config.toml");
    fs::write(
        &config,
        "[nvidia-container-runtime]\nruntimes = [\"runc\"]\n",
    )
    .unwrap();
    let crun = Command::new("sh")
        .args(["-c", "command -v crun"])
        .output()
        .unwrap();
    let crun = String::from_utf8(crun.stdout).unwrap().trim().to_string();
    assert!(crun.starts_with('/'), "install crun");
    let state = t.join("state");
    fs::create_dir_all(&state).unwrap();
    let records = t.join("state.gpuctk");
    fs::create_dir_all(&records).unwrap();
    fs::write(records.join("sh"), &crun).unwrap();
    let st = Command::new("mkfifo")
        .arg(records.join("piped"))
        .status()
        .unwrap();
    assert!(st.success());
    symlink(&crun, records.join("linked")).unwrap();
    symlink(records.join("piped"), records.join("to-pipe")).unwrap();
    let call = |args: &[&str]| {
        let out = Command::new("timeout")
            .arg("20")
            .arg(&shim)
            .arg("--root")
            .arg(&state)
            .args(args)
            .env("GPUCTK_CONFIG", &config)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let by_runc = |err: &str| err.contains("container does not exist");
    let by_crun = |err: &str| err.contains("error opening file");
    // Control: the record of `sh` is used for a call on `sh`.
    let (_, err) = call(&["state", "sh"]);
    assert!(by_crun(&err), "the record names crun: {err}");
    let (code, err) = call(&["exec", "-t", "nosuchid", "sh", "-c", "true"]);
    assert_ne!(code, Some(124), "hung");
    assert!(
        by_runc(&err) && !by_crun(&err),
        "exec on nosuchid used the record of `sh`: {err}"
    );
    let (code, err) = call(&["state", "piped"]);
    assert_ne!(code, Some(124), "a FIFO record blocked the call: {err}");
    assert!(by_runc(&err), "a FIFO is no record: {err}");
    assert!(
        err.contains("piped: runtime record: not a regular file; ignored"),
        "said: {err}"
    );
    // Issue 21: a link is a record of its target's path; one naming a FIFO is not followed
    // into it, and names no executable: no record.
    let (_, err) = call(&["state", "linked"]);
    assert!(by_crun(&err), "the link record names crun: {err}");
    let (code, err) = call(&["state", "to-pipe"]);
    assert_ne!(code, Some(124), "a link to a FIFO blocked the call: {err}");
    assert!(by_runc(&err) && !by_crun(&err), "{err}");
}

/// `NVIDIA_MIG_CONFIG_DEVICES` / `NVIDIA_MIG_MONITOR_DEVICES` through the legacy prestart hook
/// (NVIDIA serves them in legacy mode only): refused in an unprivileged container, as NVIDIA's
/// hook refuses it; given to a privileged one (the capability files read-only and the
/// `/dev/nvidia-caps` nodes, allowed by the device cgroup). Through the shim's just-in-time
/// edits they are ignored with a warning, while `NVIDIA_IMEX_CHANNELS` gives its channels.
#[test]
fn mig_and_imex_env_through_the_hook_and_the_shim() {
    let bed = Bed::new("runc", "debian", 2);
    let legacy = fs::read_to_string(&bed.config).unwrap().replace(
        "[nvidia-container-runtime]\n",
        "[nvidia-container-runtime]\nmode = \"legacy\"\n",
    );
    let auto = fs::read_to_string(&bed.config).unwrap();
    fs::write(&bed.config, &legacy).unwrap();
    let env = [
        "NVIDIA_VISIBLE_DEVICES=1",
        "NVIDIA_MIG_CONFIG_DEVICES=all",
        "NVIDIA_MIG_MONITOR_DEVICES=all",
    ];
    bed.set_env(&env);
    let r = bed.run("mig-unprivileged");
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains(
            "NVIDIA_MIG_CONFIG_DEVICES: MIG config needs a privileged container (CAP_SYS_ADMIN"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("libcuda ok"), "it ran: {}", r.stdout);

    let privileged = |s: &mut Value| {
        // As a privileged container has them: the nodes are 0444, as the driver makes them,
        // and the probe opens them read-write.
        for set in ["bounding", "effective", "permitted"] {
            let set = s["process"]["capabilities"][set].as_array_mut().unwrap();
            set.push(json!("CAP_SYS_ADMIN"));
            set.push(json!("CAP_DAC_OVERRIDE"));
        }
        s["process"]["args"] = json!([
            "/bin/sh",
            "-c",
            "/usr/bin/gpuctk-probe; echo ---smi---; cat /proc/driver/nvidia/capabilities/mig/monitor; \
             touch /proc/driver/nvidia/capabilities/x 2>/dev/null && echo writable || echo read-only"
        ]);
        // The mock driver is not in the kernel's procfs, where the hook binds the files over
        // the driver's own folder: a tmpfs on /proc/driver stands for it (runc takes no bind
        // mount inside /proc but this).
        s["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/proc/driver",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "noexec", "mode=755"]
        }));
    };
    bed.set_env(&env);
    bed.edit(privileged);
    let r = bed.run("mig-privileged");
    r.ok();
    assert_eq!(r.gpus(), [1], "{}", r.stdout);
    for n in [
        "/dev/nvidia-caps/nvidia-cap1",
        "/dev/nvidia-caps/nvidia-cap2",
    ] {
        assert_eq!(r.probe.device(n), Some("ENXIO"), "{n}: {}", r.stdout);
    }
    assert_eq!(
        r.smi, "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\nread-only\n",
        "{}",
        r.stdout
    );

    // The shim in its default mode: the MIG capabilities are ignored with a warning, the
    // IMEX channel asked is given (the mock host's channel made here).
    fs::write(&bed.config, &auto).unwrap();
    let imex_major = bed.host.manifest["imex_major"].as_u64().unwrap() as u32;
    let dir = PathBuf::from(bed.host.dev_root()).join("dev/nvidia-caps-imex-channels");
    fs::create_dir_all(&dir).unwrap();
    let st = Command::new("mknod")
        .args(["-m", "666"])
        .arg(dir.join("channel5"))
        .args(["c", &imex_major.to_string(), "5"])
        .status()
        .unwrap();
    assert!(st.success());
    bed.set_env(&[env[0], env[1], "NVIDIA_IMEX_CHANNELS=5"]);
    bed.edit(privileged);
    let r = bed.run("mig-shim");
    r.ok();
    assert!(
        r.stderr
            .contains("MIG config ignored: served in legacy mode only"),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.probe.device("/dev/nvidia-caps-imex-channels/channel5"),
        Some("ENXIO"),
        "{}",
        r.stdout
    );
    assert!(r.probe.device("/dev/nvidia-caps/nvidia-cap1").is_none());
    let nodes = bed.spec()["linux"]["devices"].to_string();
    assert!(
        nodes.contains("/dev/nvidia-caps-imex-channels/channel5"),
        "{nodes}"
    );
}

/// The loaders' vendor files and the DRM nodes follow the capabilities, through the shim's
/// just-in-time edits and through the legacy prestart hook: `graphics` gives the EGL vendor file
/// and the Vulkan ICD at the paths the loaders read (NVIDIA's), the driver's bytes, and the
/// selected GPU's `/dev/dri` card and render nodes and their by-path links (not the other
/// GPU's); `compute` gives the OpenCL ICD only; `utility` none.
#[test]
fn vendor_files_and_drm_nodes_follow_the_capabilities() {
    let bed = Bed::new("runc", "debian", 2);
    let auto = fs::read_to_string(&bed.config).unwrap();
    let legacy = auto.replace(
        "[nvidia-container-runtime]\n",
        "[nvidia-container-runtime]\nmode = \"legacy\"\n",
    );
    let files = [
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/etc/vulkan/icd.d/nvidia_icd.json",
        "/etc/OpenCL/vendors/nvidia.icd",
    ];
    for (mode, config) in [("auto", &auto), ("legacy", &legacy)] {
        fs::write(&bed.config, config).unwrap();
        for (caps, want) in [
            ("graphics", &files[..2]),
            ("compute", &files[2..]),
            ("utility", &[][..]),
            ("compute,graphics", &files[..]),
        ] {
            bed.set_env(&[
                "NVIDIA_VISIBLE_DEVICES=0",
                &format!("NVIDIA_DRIVER_CAPABILITIES={caps}"),
            ]);
            bed.edit(|s| {
                let mut script: Vec<String> = files
                    .iter()
                    .map(|f| format!("echo '=={f}'; cat {f} 2>/dev/null || echo absent"))
                    .collect();
                script.push("echo '==dri'; ls /dev/dri 2>/dev/null | tr '\\n' ' '; echo".into());
                // GBM's backend link, resolved in the container.
                script.push(
                    "echo '==gbm'; g=/usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so; \
                     readlink $g; test -f $g && echo resolves; true"
                        .into(),
                );
                s["process"]["args"] = json!(["/bin/sh", "-c", script.join("; ")]);
            });
            let r = bed.run(&format!("vendor-{mode}-{caps}"));
            assert_eq!(r.code, 0, "{mode} {caps}: {}", r.stderr);
            let (dri, gbm) = r
                .stdout
                .split("==dri\n")
                .nth(1)
                .unwrap_or("")
                .split_once("==gbm\n")
                .unwrap_or_else(|| panic!("{mode} {caps}: {}", r.stdout));
            let graphics = caps.contains("graphics");
            let want_dri = if graphics {
                "by-path card0 renderD128"
            } else {
                ""
            };
            assert_eq!(dri.trim(), want_dri, "{mode} {caps}: {}", r.stdout);
            // The allocator comes with compute, the link with graphics.
            let want_gbm = if caps == "compute,graphics" {
                "../libnvidia-allocator.so.1\nresolves\n"
            } else {
                ""
            };
            assert_eq!(gbm, want_gbm, "{mode} {caps}: {}", r.stdout);
            for f in files {
                let seen = r
                    .stdout
                    .split(&format!("=={f}\n"))
                    .nth(1)
                    .and_then(|rest| rest.split("==").next())
                    .unwrap_or_else(|| panic!("{mode} {caps}: {}", r.stdout));
                let host = fs::read_to_string(
                    std::path::Path::new(&bed.host.driver_root()).join(
                        gpuctk_mockhost::VENDOR_FILES
                            .iter()
                            .find(|(rel, _)| rel.ends_with(f.rsplit('/').next().unwrap()))
                            .unwrap()
                            .0,
                    ),
                )
                .unwrap();
                if want.contains(&f) {
                    assert_eq!(seen, host, "{mode} {caps}: {f}");
                } else {
                    assert_eq!(seen, "absent\n", "{mode} {caps}: {f}");
                }
            }
        }
    }
    // A `run` in the foreground is deleted by the runtime when it ends: it leaves no record.
    let mut records = bed.state_root.clone().into_os_string();
    records.push(".gpuctk");
    let left: Vec<_> = fs::read_dir(&records)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "records left by runs: {left:?}");
}

/// Issue 18 §3: the container's `/proc/driver/nvidia/params` says `ModifyDeviceFiles: 0` (the
/// host's file otherwise byte for byte, read-only), and the driver's application profile names
/// the container's GPUs only; through the shim (the hooks in it and as processes: a hook under
/// runc, which takes no mount inside `/proc`, the runtime's own mount under crun) and legacy
/// injection. The mock driver is not in the kernel's procfs: a tmpfs on `/proc/driver/nvidia`
/// stands for its folder there.
fn driver_guards(runtime: &str) {
    let bed = Bed::new(runtime, "debian", 4);
    let host_params =
        fs::read_to_string(PathBuf::from(bed.host.proc_root()).join("driver/nvidia/params"))
            .unwrap();
    assert!(host_params.contains("\nModifyDeviceFiles: 1\n"));
    let want = host_params.replace("\nModifyDeviceFiles: 1\n", "\nModifyDeviceFiles: 0\n");
    let minor = bed.host.manifest["gpus"][2]["minor"].as_u64().unwrap();
    let profile = format!(
        r#"{{"profiles":[{{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x{:x}]}}],"rules":[{{"pattern":[],"profile":"_container_"}}]}}"#,
        1u64 << minor
    );
    let crun = runtime == "crun";
    let gpus_dir = PathBuf::from(bed.host.proc_root()).join("driver/nvidia/gpus");
    let bus = |i: usize| {
        bed.host.manifest["gpus"][i]["bus_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Its own GPU's folder only (libnvidia-container's procfs mask): the others are empty.
    let folders: String = if crun {
        (0..4)
            .map(|i| {
                let b = bus(i);
                let ls = if i == 2 { "information" } else { "" };
                format!("/proc/driver/nvidia/gpus/{b}: {ls}\n")
            })
            .collect()
    } else {
        String::new()
    };
    let driver_procfs = |s: &mut Value| {
        s["process"]["args"] = json!([
            "/bin/sh",
            "-c",
            "cat /proc/driver/nvidia/params; echo ---; \
             cat /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf; echo; echo ---; \
             (echo x > /proc/driver/nvidia/params) 2>/dev/null && echo writable || echo read-only"
        ]);
        for (dir, mode) in [
            ("/proc/driver", "mode=755"),
            ("/proc/driver/nvidia", "mode=555"),
        ] {
            s["mounts"].as_array_mut().unwrap().push(json!({
                "destination": dir,
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "noexec", mode]
            }));
        }
        // The GPUs' folders too, where the runtime takes a bind inside /proc (crun).
        if crun {
            s["mounts"].as_array_mut().unwrap().push(json!({
                "destination": "/proc/driver/nvidia/gpus",
                "type": "bind",
                "source": gpus_dir,
                "options": ["rbind", "ro"]
            }));
            let args = s["process"]["args"][2].as_str().unwrap().to_string();
            s["process"]["args"][2] = json!(format!(
                "{args}; for d in /proc/driver/nvidia/gpus/*; do echo \"$d: $(ls $d)\"; done"
            ));
        }
    };
    let auto = fs::read_to_string(&bed.config).unwrap();
    for (how, in_shim, legacy) in [
        ("shim", true, false),
        ("hooks", false, false),
        ("legacy", true, true),
    ] {
        fs::write(&bed.config, &auto).unwrap();
        if !in_shim {
            bed.hooks_as_processes();
        }
        if legacy {
            let cfg = auto.replace(
                "[nvidia-container-runtime]\n",
                "[nvidia-container-runtime]\nmode = \"legacy\"\n",
            );
            fs::write(&bed.config, cfg).unwrap();
        }
        bed.set_env(&["NVIDIA_VISIBLE_DEVICES=2", "NVIDIA_DRIVER_CAPABILITIES=all"]);
        bed.edit(driver_procfs);
        let r = bed.run(&format!("guard-{how}"));
        r.ok();
        assert_eq!(
            r.stdout,
            format!("{want}---\n{profile}\n---\nread-only\n{folders}"),
            "{runtime} {how}: {}",
            r.stderr
        );
        if legacy {
            continue;
        }
        let masked: Vec<String> = bed.spec()["linux"]["maskedPaths"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m.as_str())
            .filter(|m| m.starts_with("/proc/driver/"))
            .map(String::from)
            .collect();
        let others: Vec<String> = [0, 1, 3]
            .iter()
            .map(|i| format!("/proc/driver/nvidia/gpus/{}", bus(*i)))
            .collect();
        assert_eq!(masked, others, "{how}");
        // Under crun the shim turned the hook into the runtime's mount of the bundle's file;
        // runc keeps it, as does `hooks-in-shim = false`.
        let spec = bed.spec();
        let hooked = spec["hooks"]["createContainer"]
            .as_array()
            .is_some_and(|h| {
                h.iter()
                    .any(|h| h["args"][1] == json!("disable-device-node-modification"))
            });
        let mounted = spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["destination"] == json!("/proc/driver/nvidia/params"));
        assert_eq!(
            (hooked, mounted),
            (runtime == "runc" || !in_shim, runtime == "crun" && in_shim),
            "{how}: {spec}"
        );
    }
    // Without the driver's folder in the container's procfs nothing is bound, and it starts.
    fs::write(&bed.config, &auto).unwrap();
    bed.set_env(&["NVIDIA_VISIBLE_DEVICES=2"]);
    bed.run("guard-noproc").ok();
}

#[test]
fn runc_driver_guards() {
    driver_guards("runc");
}

#[test]
fn crun_driver_guards() {
    driver_guards("crun");
}

/// A graphics container run by a non-root user, through the shim with runc and crun: its card
/// node keeps its group (video, 44) and the user gets the group in `additionalGids`, so opening
/// it reaches the (absent) driver, `ENXIO`, instead of `EACCES`; udev's by-path links lead to
/// the selected GPU's nodes, and the other GPU's links are not made.
#[test]
fn graphics_node_group_and_by_path_links() {
    for runtime in ["runc", "crun"] {
        let bed = Bed::new(runtime, "debian", 2);
        let bus0 = bed.host.manifest["gpus"][0]["bus_id"]
            .as_str()
            .unwrap()
            .to_string();
        let bus1 = bed.host.manifest["gpus"][1]["bus_id"]
            .as_str()
            .unwrap()
            .to_string();
        bed.set_env(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=graphics",
        ]);
        bed.edit(|s| {
            s["process"]["user"] = json!({"uid": 1000, "gid": 1000});
            s["process"]["args"] = json!(["/bin/sh", "-c", format!(
                "grep ^Groups: /proc/self/status; ls -ln /dev/dri/card0 | awk '{{print $4}}'; \
                 cat /dev/dri/card0 2>&1 | head -n1; \
                 readlink /dev/dri/by-path/pci-{bus0}-card; readlink /dev/dri/by-path/pci-{bus0}-render; \
                 ls /dev/dri/by-path/pci-{bus1}-card 2>&1 | head -n1"
            )]);
        });
        let r = bed.run(&format!("gids-{runtime}"));
        assert_eq!(r.code, 0, "{runtime}: {}", r.stderr);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 6, "{runtime}: {:?} {}", r.stdout, r.stderr);
        assert!(
            lines[0].split_whitespace().skip(1).any(|g| g == "44"),
            "{runtime}: {}",
            r.stdout
        );
        assert_eq!(lines[1], "44", "{runtime}: {}", r.stdout);
        assert!(
            lines[2].contains("No such device or address"),
            "{runtime}: {}",
            r.stdout
        );
        assert_eq!(
            lines[3..5],
            ["../card0", "../renderD128"],
            "{runtime}: {}",
            r.stdout
        );
        assert!(lines[5].contains("No such file"), "{runtime}: {}", r.stdout);
    }
    // NVIDIA's feature flag leaves the group out; the node keeps it.
    let bed = Bed::new("runc", "debian", 1);
    bed.write_config("[features]\nno-additional-gids-for-device-nodes = true\n");
    bed.set_env(&[
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_DRIVER_CAPABILITIES=graphics",
    ]);
    bed.edit(|s| {
        s["process"]["user"] = json!({"uid": 1000, "gid": 1000});
        s["process"]["args"] = json!([
            "/bin/sh",
            "-c",
            "grep ^Groups: /proc/self/status; ls -ln /dev/dri/card0 | awk '{print $4}'"
        ]);
    });
    let r = bed.run("gids-off");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let words: Vec<&str> = r.stdout.split_whitespace().collect();
    assert_eq!(words, ["Groups:", "44"], "{}", r.stdout);
}

/// `NVIDIA_GDS=enabled` and `NVIDIA_GDRCOPY=enabled` with a device request give the host's
/// `/dev/nvidia-fs*` (opening one reaches the absent driver, `ENXIO`), `/dev/gdrdrv`, GDS's
/// `/etc/cufile.json` and `/run/udev`, through the shim (runc, crun) and the
/// legacy prestart hook; `NVIDIA_MOFED` unset gives no `/dev/infiniband`; without the variable,
/// or without a device request, no `nvidia-fs` node.
#[test]
fn gated_modes_through_the_shim_and_the_hook() {
    let script = "cat /dev/nvidia-fs0 2>&1 | head -n1; ls /dev/gdrdrv 2>&1; \
                  ls /dev/infiniband 2>&1 | head -n1; head -c 1 /etc/cufile.json 2>&1; echo; \
                  test -d /run/udev && echo udev || echo no-udev";
    for runtime in ["runc", "crun"] {
        let bed = Bed::new_with(runtime, "debian", 1, &["--gds", "--gdrcopy", "--mofed"]);
        let auto = fs::read_to_string(&bed.config).unwrap();
        let legacy = auto.replace(
            "[nvidia-container-runtime]\n",
            "[nvidia-container-runtime]\nmode = \"legacy\"\n",
        );
        let modes: &[(&str, &String)] = if runtime == "runc" {
            &[("auto", &auto), ("legacy", &legacy)]
        } else {
            &[("auto", &auto)]
        };
        for (mode, config) in modes {
            fs::write(&bed.config, config).unwrap();
            let with_env = |env: &[&str]| {
                bed.set_env(env);
                bed.edit(|s| s["process"]["args"] = json!(["/bin/sh", "-c", script]));
            };
            with_env(&[
                "NVIDIA_VISIBLE_DEVICES=0",
                "NVIDIA_GDS=enabled",
                "NVIDIA_GDRCOPY=enabled",
            ]);
            let r = bed.run(&format!("gated-{runtime}-{mode}"));
            assert_eq!(r.code, 0, "{runtime} {mode}: {}", r.stderr);
            let lines: Vec<&str> = r.stdout.lines().collect();
            assert_eq!(
                lines.len(),
                5,
                "{runtime} {mode}: {:?} {}",
                r.stdout,
                r.stderr
            );
            assert!(
                lines[0].contains("No such device or address"),
                "{runtime} {mode}: {}",
                r.stdout
            );
            assert_eq!(lines[1], "/dev/gdrdrv", "{runtime} {mode}");
            assert!(
                lines[2].contains("No such file"),
                "{runtime} {mode}: {}",
                r.stdout
            );
            assert_eq!(lines[3], "{", "{runtime} {mode}: {}", r.stdout);
            assert_eq!(lines[4], "udev", "{runtime} {mode}: {}", r.stdout);
            for env in [
                &["NVIDIA_VISIBLE_DEVICES=0"][..],
                &["NVIDIA_GDS=enabled"][..],
            ] {
                with_env(env);
                let r = bed.run(&format!("gated-{runtime}-{mode}-off"));
                assert_eq!(r.code, 0, "{runtime} {mode} {env:?}: {}", r.stderr);
                assert!(
                    r.stdout
                        .lines()
                        .next()
                        .unwrap_or("")
                        .contains("No such file"),
                    "{runtime} {mode} {env:?}: {}",
                    r.stdout
                );
            }
        }
    }
}

/// Issue 18 §4: `NVIDIA_MOFED` and `NVIDIA_NVSWITCH` through the shim and the prestart hook,
/// under runc and crun: with a device asked for, exactly those modes' nodes, each allowed by
/// the device cgroup (ENXIO, or ENODEV for the misc-major `rdma_cm`); without a device, none.
#[test]
fn mofed_and_nvswitch_through_the_shim_and_the_hook() {
    let script =
        "for n in $(find /dev -type c | grep -E '^/dev/(nvidia-nvswitch|infiniband/)' | sort); do \
                  echo \"$n $(head -c1 $n 2>&1 >/dev/null | sed 's/.*: //')\"; done";
    let want = [
        "/dev/infiniband/rdma_cm",
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/uverbs1",
        "/dev/nvidia-nvswitch0",
        "/dev/nvidia-nvswitch1",
        "/dev/nvidia-nvswitchctl",
    ];
    for runtime in ["runc", "crun"] {
        let bed = Bed::new_with(runtime, "debian", 1, &["--mofed", "--nvswitches", "2"]);
        let auto = fs::read_to_string(&bed.config).unwrap();
        let legacy = auto.replace(
            "[nvidia-container-runtime]\n",
            "[nvidia-container-runtime]\nmode = \"legacy\"\n",
        );
        for (mode, config) in [("auto", &auto), ("legacy", &legacy)] {
            fs::write(&bed.config, config).unwrap();
            for (env, expected) in [
                (
                    &[
                        "NVIDIA_VISIBLE_DEVICES=0",
                        "NVIDIA_MOFED=enabled",
                        "NVIDIA_NVSWITCH=enabled",
                    ][..],
                    &want[..],
                ),
                (
                    &["NVIDIA_MOFED=enabled", "NVIDIA_NVSWITCH=enabled"][..],
                    &[][..],
                ),
            ] {
                bed.set_env(env);
                bed.edit(|s| s["process"]["args"] = json!(["/bin/sh", "-c", script]));
                let r = bed.run(&format!("mofed-{mode}-{}", expected.len()));
                assert_eq!(r.code, 0, "{runtime} {mode}: {}", r.stderr);
                let got: Vec<(&str, &str)> =
                    r.stdout.lines().filter_map(|l| l.split_once(' ')).collect();
                assert_eq!(
                    got.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
                    expected,
                    "{runtime} {mode} {env:?}: {}",
                    r.stdout
                );
                for (p, res) in got {
                    assert!(
                        res == "No such device or address" || res == "No such device",
                        "{runtime} {mode}: {p}: {res}"
                    );
                }
            }
        }
    }
}

/// A `delete` with a runtime record waits for the runtime (to remove the record after it)
/// instead of exec'ing it. Issue 21 made that child share the shim's memory until it execs
/// (`clone` with `CLONE_VFORK`) instead of forking: the runtime still gets the arguments,
/// `argv[0]`, environment and signal state an exec would give it, the shim exits with its
/// status, and it dies with the shim (an engine's timeout kills the shim).
#[test]
fn a_delete_that_waits_passes_everything_on_and_its_runtime_dies_with_the_shim() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestDir::new();
    let out = t.join("out");
    fs::create_dir(&out).unwrap();
    let rt = t.join("runtime.sh");
    fs::write(
        &rt,
        format!(
            "#!/bin/sh\nO={}\necho \"$0\" > $O/argv0\nprintf '%s\\n' \"$@\" > $O/args\necho \"$FOO\" > $O/env\nwhile read -r k v; do case $k in SigBlk:|SigIgn:) echo \"$k $v\";; esac; done < /proc/$$/status > $O/sig\necho $$ > $O/pid.tmp && mv $O/pid.tmp $O/pid\n[ -e $O/hang ] && exec sleep 60\nexit 3\n",
            out.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&rt, fs::Permissions::from_mode(0o755)).unwrap();
    let state = t.join("state");
    fs::create_dir(&state).unwrap();
    let records = t.join("state.gpuctk");
    fs::create_dir(&records).unwrap();
    let config = t.join("config.toml");
    fs::write(
        &config,
        "[nvidia-container-runtime]\nruntimes = [\"runc\"]\n",
    )
    .unwrap();
    let shim = t.join("nvidia-container-runtime");
    symlink(GPUCTK, &shim).unwrap();
    let delete = |id: &str| {
        symlink(&rt, records.join(id)).unwrap();
        let mut c = Command::new(&shim);
        c.args(["--root", state.to_str().unwrap(), "delete", id])
            .env("GPUCTK_CONFIG", &config)
            .env("FOO", "bar baz")
            .stdin(std::process::Stdio::null());
        c
    };

    let st = delete("c1").status().unwrap();
    assert_eq!(st.code(), Some(3), "the runtime's status");
    let read = |f: &str| fs::read_to_string(out.join(f)).unwrap();
    assert_eq!(read("argv0").trim(), rt.to_str().unwrap());
    assert_eq!(
        read("args").lines().collect::<Vec<_>>(),
        ["--root", state.to_str().unwrap(), "delete", "c1"]
    );
    assert_eq!(read("env").trim(), "bar baz");
    // SIGPIPE (13) no longer ignored as in the shim, and nothing blocked. (The script reads its
    // own status with builtins: a `grep` forked by dash can see dash's mask of the moment.)
    let sig = read("sig");
    assert_eq!(sig.lines().count(), 2, "{sig}");
    for l in sig.lines() {
        let mask = u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap();
        if l.starts_with("SigBlk") {
            assert_eq!(mask, 0, "{sig}");
        } else {
            assert_eq!(mask & (1 << 12), 0, "SIGPIPE ignored: {sig}");
        }
    }
    // The container's state is gone (it never had any): the record went too.
    assert!(fs::symlink_metadata(records.join("c1")).is_err());

    fs::write(out.join("hang"), "").unwrap();
    fs::remove_file(out.join("pid")).unwrap();
    let mut child = delete("c2").spawn().unwrap();
    let pid_file = out.join("pid");
    let t0 = std::time::Instant::now();
    while !pid_file.exists() {
        assert!(t0.elapsed().as_secs() < 20, "the runtime never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid: i32 = read("pid").trim().parse().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // Gone, or a zombie waiting for whoever adopted it.
    let alive = || {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                let state = s.rsplit(") ").next().unwrap_or("").chars().next();
                state != Some('Z')
            })
            .unwrap_or(false)
    };
    let t0 = std::time::Instant::now();
    while alive() {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the runtime (pid {pid}) outlived the shim killed while waiting for it"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Issue 21: a `delete` whose record names the runtime the config it finds names too needs no
/// record to reach that runtime again: the record goes first and the shim becomes the runtime
/// (no process waiting beside it), as for every other call. A delete the runtime fails is
/// tried again on the same runtime without the record. Where the config names another runtime
/// the shim still waits, and the record stays while the container does.
#[test]
fn a_delete_of_the_configured_runtime_execs_it_without_its_record() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestDir::new();
    let out = t.join("out");
    fs::create_dir(&out).unwrap();
    let state = t.join("state");
    fs::create_dir(&state).unwrap();
    let records = t.join("state.gpuctk");
    fs::create_dir(&records).unwrap();
    // Says its pid, whether the record was there when it ran, and exits with the status in
    // `out/status` (what the test asks of this delete).
    let rt = t.join("runtime.sh");
    fs::write(
        &rt,
        format!(
            "#!/bin/sh\nO={}\nid=$(for a; do :; done; echo \"$a\")\nif [ -L {}/$id ]; then r=kept; else r=gone; fi\necho \"$$ $r\" > $O/ran\nexit $(cat $O/status)\n",
            out.display(),
            records.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&rt, fs::Permissions::from_mode(0o755)).unwrap();
    let config = |runtime: &std::path::Path| {
        let c = t.join("config.toml");
        fs::write(
            &c,
            format!("[nvidia-container-runtime]\nruntimes = [{:?}]\n", runtime),
        )
        .unwrap();
        c
    };
    let shim = t.join("nvidia-container-runtime");
    symlink(GPUCTK, &shim).unwrap();
    // Runs `delete id` with the runtime exiting `status`: the shim's status, and the pid and
    // record the runtime saw, with whether the runtime was the shim's own process.
    let delete = |id: &str, config: &std::path::Path, status: i32| {
        fs::write(out.join("status"), status.to_string()).unwrap();
        let _ = fs::remove_file(out.join("ran"));
        let mut child = Command::new(&shim)
            .args(["--root", state.to_str().unwrap(), "delete", id])
            .env("GPUCTK_CONFIG", config)
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let shim_pid = child.id();
        let code = child.wait().unwrap().code();
        let ran = fs::read_to_string(out.join("ran")).unwrap();
        let (pid, record) = ran.trim().split_once(' ').unwrap();
        (
            code,
            pid.parse::<u32>().unwrap() == shim_pid,
            record.to_string(),
        )
    };

    // The config names the recorded runtime: exec'd, the record gone before it ran.
    let same = config(&rt);
    symlink(&rt, records.join("c1")).unwrap();
    assert_eq!(
        delete("c1", &same, 1),
        (Some(1), true, "gone".to_string()),
        "(status, became the runtime, record)"
    );
    assert!(fs::symlink_metadata(records.join("c1")).is_err());
    // Tried again: the configured runtime, the same one.
    assert_eq!(delete("c1", &same, 0), (Some(0), true, "gone".to_string()));

    // The config names another runtime: the shim waits, the record is there while the runtime
    // runs, and stays after a failed delete of a container whose state is still there.
    let other = config(std::path::Path::new("/bin/true"));
    symlink(&rt, records.join("c2")).unwrap();
    fs::create_dir(state.join("c2")).unwrap();
    assert_eq!(
        delete("c2", &other, 1),
        (Some(1), false, "kept".to_string())
    );
    assert!(fs::symlink_metadata(records.join("c2")).is_ok());
    assert_eq!(
        delete("c2", &other, 0),
        (Some(0), false, "kept".to_string())
    );
    assert!(
        fs::symlink_metadata(records.join("c2")).is_err(),
        "the record outlived a successful delete"
    );
}
