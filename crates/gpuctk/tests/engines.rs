//! The real engines from Debian: dockerd 20.10 (`--gpus` through our prestart hook, `--runtime`
//! through our shim), Podman 4.3 (CDI), containerd 1.6 (`ctr run --runc-binary`, `ctr run --gpus`
//! through our nvidia-container-cli), and `gpuctk runtime configure` on their config files.
//!
//! Each daemon is started here with its own data dirs and socket, inside a private mount
//! namespace where our config.toml is bind-mounted at /etc/nvidia-container-runtime (the hooks
//! docker and containerd run get no environment to point them elsewhere), and stopped by pid.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

const IMAGE: &str = "gpuctk-test:latest";
pub(crate) const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A mock host, an image, our binaries under their NVIDIA names, and the config they read.
pub(crate) struct Bed {
    pub(crate) t: TestDir,
    pub(crate) host: Host,
    pub(crate) bin: PathBuf,
    pub(crate) etc: PathBuf,
}

impl Bed {
    pub(crate) fn new(gpus: u32) -> Bed {
        Bed::with_host_flags(gpus, &[])
    }

    /// [`Bed::new`] on a mock host made with `mock-host create` flags `flags` too.
    pub(crate) fn with_host_flags(gpus: u32, flags: &[&str]) -> Bed {
        let t = TestDir::new();
        let host = mock_host_with(&t, "host", gpus, "570.124.06", "debian", flags);
        ok(&["mock-host", "rootfs", t.join("rootfs").to_str().unwrap()]);
        let bin = t.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for name in [
            "nvidia-container-runtime",
            "nvidia-container-runtime-hook",
            "nvidia-container-cli",
            "nvidia-ctk",
        ] {
            symlink(GPUCTK, bin.join(name)).unwrap();
        }
        let etc = t.join("etc-nvidia-container-runtime");
        fs::create_dir_all(&etc).unwrap();
        fs::write(
            etc.join("config.toml"),
            format!(
                "[nvidia-container-cli]\nroot = \"{}\"\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\nhook-path = \"{GPUCTK}\"\n",
                host.driver_root(),
                host.dev_root(),
                host.proc_root()
            ),
        )
        .unwrap();
        // The mount point for the bind mount in the daemons' private namespaces.
        fs::create_dir_all("/etc/nvidia-container-runtime").unwrap();
        Bed { t, host, bin, etc }
    }

    pub(crate) fn path_env(&self) -> String {
        format!("{}:{SYSTEM_PATH}", self.bin.display())
    }

    /// `argv` in a private mount namespace that sees our config at the NVIDIA path.
    pub(crate) fn in_ns(&self, argv: &[String]) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/nvidia-container-runtime && exec "$@""#)
            .arg(&self.etc)
            .args(argv)
            .env("PATH", self.path_env());
        c
    }

    pub(crate) fn rootfs_tar(&self) -> PathBuf {
        let tar = self.t.join("rootfs.tar");
        if !tar.exists() {
            let st = Command::new("tar")
                .arg("-C")
                .arg(self.t.join("rootfs"))
                .args(["-cf"])
                .arg(&tar)
                .arg(".")
                .status()
                .unwrap();
            assert!(st.success());
        }
        tar
    }
}

pub(crate) fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < timeout,
            "{what} did not come up in {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A daemon we started; stopped by its pid.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) pidfile: Option<PathBuf>,
    pub(crate) log: PathBuf,
}

impl Daemon {
    pub(crate) fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = self
            .pidfile
            .as_ref()
            .and_then(|p| fs::read_to_string(p).ok())
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(self.child.id() as i32);
        // SAFETY: kill(2) on a pid we started.
        unsafe {
            libc_kill(pid, 15);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        unsafe {
            libc_kill(pid, 9);
        }
        let _ = self.child.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

pub(crate) struct Out {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn out(c: &mut Command) -> Out {
    let o = c.stdin(Stdio::null()).output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

pub(crate) fn uuids_in(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split("(UUID: ").nth(1))
        .map(|u| u.trim_end_matches(')').to_string())
        .collect()
}

pub(crate) fn pick(host: &Host, idx: &[usize]) -> Vec<String> {
    let u = host.uuids();
    idx.iter().map(|i| u[*i].clone()).collect()
}

// ------------------------------------------------------------------ docker

struct Docker {
    daemon: Daemon,
    sock: PathBuf,
}

impl Docker {
    fn start(bed: &Bed, name: &str, config: Option<&Path>) -> Docker {
        let d = bed.t.join(name);
        fs::create_dir_all(&d).unwrap();
        let sock = d.join("docker.sock");
        let mut argv: Vec<String> = [
            "dockerd",
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-masq=false",
            "--storage-driver",
            "vfs",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (flag, sub) in [
            ("--data-root", "data"),
            ("--exec-root", "exec"),
            ("--pidfile", "docker.pid"),
        ] {
            argv.push(flag.into());
            argv.push(d.join(sub).to_string_lossy().into_owned());
        }
        argv.push("--host".into());
        argv.push(format!("unix://{}", sock.display()));
        if let Some(c) = config {
            argv.push("--config-file".into());
            argv.push(c.to_string_lossy().into_owned());
        }
        let log = d.join("dockerd.log");
        let child = bed
            .in_ns(&argv)
            .stdout(fs::File::create(&log).unwrap())
            .stderr(fs::File::create(d.join("dockerd.err")).unwrap())
            .spawn()
            .expect("dockerd (apt-get install docker.io)");
        let docker = Docker {
            daemon: Daemon {
                child,
                pidfile: Some(d.join("docker.pid")),
                log: d.join("dockerd.err"),
            },
            sock,
        };
        wait_for("dockerd", Duration::from_secs(60), || {
            docker.cli(&["version"]).code == 0
        });
        docker
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("/usr/bin/docker");
        c.arg("-H")
            .arg(format!("unix://{}", self.sock.display()))
            .args(args);
        c
    }

    fn cli(&self, args: &[&str]) -> Out {
        out(&mut self.cmd(args))
    }

    fn import(&self, tar: &Path) {
        let r = out(&mut self.cmd(&["import", tar.to_str().unwrap(), IMAGE]));
        assert_eq!(r.code, 0, "docker import: {}", r.stderr);
    }

    /// `docker run --rm --network none ARGS IMAGE nvidia-smi -L`, the seed's own command.
    fn smi(&self, args: &[&str]) -> Out {
        let mut a = vec!["run", "--rm", "--network", "none"];
        a.extend_from_slice(args);
        a.extend_from_slice(&[
            IMAGE,
            "/bin/sh",
            "-c",
            "nvidia-smi -L; /usr/bin/gpuctk-probe",
        ]);
        self.cli(&a)
    }
}

pub(crate) fn gpus_seen(r: &Out) -> Vec<String> {
    assert_eq!(r.code, 0, "container failed:\n{}\n{}", r.stdout, r.stderr);
    let probe = gpuctk_mockhost::ProbeReport::parse(&r.stdout);
    let nodes = probe
        .devices
        .iter()
        .filter(|(p, _)| p.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok())
        .inspect(|(p, res)| assert_eq!(res, "ENXIO", "{p} present but not allowed: {}", r.stdout))
        .count();
    let uuids = uuids_in(&r.stdout);
    assert_eq!(nodes, uuids.len(), "nodes vs nvidia-smi: {}", r.stdout);
    if nodes > 0 {
        assert!(
            matches!(
                probe.libcuda,
                Some(gpuctk_mockhost::LibraryLoad::Loaded { .. })
            ),
            "libcuda: {}",
            r.stdout
        );
    }
    uuids
}

#[test]
fn docker_gpus_flag_through_our_prestart_hook() {
    let bed = Bed::new(4);
    let docker = Docker::start(&bed, "docker", None);
    docker.import(&bed.rootfs_tar());
    let h = &bed.host;
    assert_eq!(
        gpus_seen(&docker.smi(&["--gpus", "all"])),
        h.uuids(),
        "{}",
        docker.daemon.log()
    );
    assert_eq!(gpus_seen(&docker.smi(&["--gpus", "2"])), pick(h, &[0, 1]));
    assert_eq!(
        gpus_seen(&docker.smi(&["--gpus", "\"device=1,3\""])),
        pick(h, &[1, 3])
    );
    let u2 = h.uuids()[2].clone();
    assert_eq!(
        gpus_seen(&docker.smi(&["--gpus", &format!("\"device={u2}\"")])),
        vec![u2]
    );
    // No GPU asked: the container is untouched.
    let r = docker.smi(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("nvidia-smi: not found") && !r.stdout.contains("dev /dev/nvidia"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    // A failing hook fails `docker run` with our message and leaves no container.
    let r = docker.smi(&["--gpus", "\"device=9\""]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr
            .contains("no GPU with index 9 (this host has GPUs 0-3)"),
        "{}",
        r.stderr
    );
    let ps = docker.cli(&["ps", "-aq"]);
    assert_eq!(ps.stdout.trim(), "", "no container left behind");
}

#[test]
fn docker_runtime_flag_after_runtime_configure() {
    let bed = Bed::new(4);
    let daemon_json = bed.t.join("daemon.json");
    fs::write(&daemon_json, "{\n    \"log-level\": \"warn\"\n}\n").unwrap();
    let shim = bed.bin.join("nvidia-container-runtime");
    let cfg = daemon_json.to_str().unwrap();
    let r = ok(&[
        "runtime",
        "configure",
        "--runtime=docker",
        "--config",
        cfg,
        "--nvidia-runtime-path",
        shim.to_str().unwrap(),
        "--dry-run",
    ]);
    assert!(r.stdout.contains("+    \"runtimes\""), "{}", r.stdout);
    assert_eq!(
        fs::read_to_string(&daemon_json).unwrap(),
        "{\n    \"log-level\": \"warn\"\n}\n",
        "--dry-run writes nothing"
    );
    // NVIDIA's default for docker: the bare name, which dockerd finds in its own PATH (where
    // the bed put our binary); this run's PATH lacks it, which is a warning, not an error.
    let r = ok(&["runtime", "configure", "--runtime=docker", "--config", cfg]);
    assert!(r.stderr.contains("not in this PATH"), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&daemon_json).unwrap()).unwrap();
    assert_eq!(v["runtimes"]["nvidia"]["path"], "nvidia-container-runtime");
    assert_eq!(v["log-level"], "warn");
    {
        let docker = Docker::start(&bed, "docker1", Some(&daemon_json));
        docker.import(&bed.rootfs_tar());
        let h = &bed.host;
        assert_eq!(
            gpus_seen(&docker.smi(&["--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0,2"])),
            pick(h, &[0, 2])
        );
        // Shim and hook together inject once: the shim marks the spec (NVIDIA_VISIBLE_DEVICES=void).
        assert_eq!(
            gpus_seen(&docker.smi(&["--runtime=nvidia", "--gpus", "all"])),
            h.uuids()
        );
        // Plain runc still works next to it.
        assert_eq!(
            gpus_seen(&docker.smi(&["-e", "NVIDIA_VISIBLE_DEVICES=0,2"])),
            Vec::<String>::new()
        );
    }
    ok(&[
        "runtime",
        "configure",
        "--runtime=docker",
        "--config",
        cfg,
        "--nvidia-runtime-path",
        shim.to_str().unwrap(),
        "--set-as-default",
        "--cdi.enabled",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&daemon_json).unwrap()).unwrap();
    assert_eq!(v["default-runtime"], "nvidia");
    assert_eq!(v["features"]["cdi"], true);
    let ledger = bed.t.join("daemon.json.gpuctk-added.json");
    assert!(ledger.is_file(), "configure records what it added");
    {
        let docker = Docker::start(&bed, "docker2", Some(&daemon_json));
        docker.import(&bed.rootfs_tar());
        assert_eq!(
            gpus_seen(&docker.smi(&["-e", "NVIDIA_VISIBLE_DEVICES=1"])),
            pick(&bed.host, &[1])
        );
    }
    ok(&[
        "runtime",
        "unconfigure",
        "--runtime=docker",
        "--config",
        cfg,
        "--nvidia-runtime-path",
        shim.to_str().unwrap(),
    ]);
    assert_eq!(
        fs::read_to_string(&daemon_json).unwrap(),
        "{\n    \"log-level\": \"warn\"\n}\n",
        "unconfigure restores the original: runtime, default and features.cdi all gone"
    );
    assert!(!ledger.exists());
    {
        // And dockerd loads what unconfigure left.
        let docker = Docker::start(&bed, "docker3", Some(&daemon_json));
        let r = docker.cli(&["info", "--format", "{{json .Runtimes}}"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(!r.stdout.contains("nvidia"), "{}", r.stdout);
    }
}

// ------------------------------------------------------------------ podman

pub(crate) fn podman(bed: &Bed, extra: &[&str]) -> Command {
    bed.in_ns(&podman_argv(bed, extra))
}

/// podman's command line with this test's own storage, run root and temp dir.
pub(crate) fn podman_argv(bed: &Bed, extra: &[&str]) -> Vec<String> {
    let root = bed.t.join("podman");
    let mut argv: Vec<String> = vec![
        "podman".into(),
        "--root".into(),
        root.join("storage").to_string_lossy().into_owned(),
        "--runroot".into(),
        root.join("run").to_string_lossy().into_owned(),
        "--tmpdir".into(),
        root.join("tmp").to_string_lossy().into_owned(),
        "--storage-driver".into(),
        "vfs".into(),
        "--cgroup-manager".into(),
        "cgroupfs".into(),
        "--events-backend".into(),
        "none".into(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv
}

/// `podman run` of `image` (imported by [`podman_import`]) with `devices` (`--device` values)
/// running `script`, Podman's CDI folder /var/run/cdi replaced by `cdi` in the call's private
/// mount namespace, so the specs a test generates never touch the host's own.
pub(crate) fn podman_with_spec_dir(bed: &Bed, cdi: &Path, devices: &[&str], script: &str) -> Out {
    podman_run_with_spec_dir(bed, cdi, devices, &[], script)
}

/// [`podman_with_spec_dir`] with more `podman run` options `extra`.
pub(crate) fn podman_run_with_spec_dir(
    bed: &Bed,
    cdi: &Path,
    devices: &[&str],
    extra: &[&str],
    script: &str,
) -> Out {
    // The mount point; the host's folder stays as it is.
    fs::create_dir_all("/var/run/cdi").unwrap();
    let mut args = vec![
        "run",
        "--rm",
        "--network",
        "none",
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=32768:32768",
    ];
    for d in devices {
        args.extend(["--device", d]);
    }
    args.extend(extra);
    args.extend([IMAGE, "/bin/sh", "-c", script]);
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        r#"mount --bind "$0" /var/run/cdi && exec "$@""#.into(),
        cdi.to_string_lossy().into_owned(),
    ];
    argv.extend(podman_argv(bed, &args));
    out(&mut bed.in_ns(&argv))
}

/// The bed's image imported into its podman storage.
pub(crate) fn podman_import(bed: &Bed) {
    let r = out(&mut podman(
        bed,
        &["import", bed.rootfs_tar().to_str().unwrap(), IMAGE],
    ));
    assert_eq!(r.code, 0, "podman import: {}", r.stderr);
}

/// The character devices a container listed with [`LIST_NODES`] that are NVIDIA's or the gated
/// modes', each with what opening it gave.
pub(crate) fn listed_nodes(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("node "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(p, _)| {
            p.starts_with("/dev/nvidia")
                || p.starts_with("/dev/infiniband/")
                || p.starts_with("/dev/gdrdrv")
                || p.starts_with("/dev/dri/")
        })
        .map(|(p, r)| (p.to_string(), r.to_string()))
        .collect()
}

/// A shell line printing `node PATH RESULT` for each NVIDIA, gated-mode or DRM character device
/// under /dev (not the others: a terminal's read blocks), RESULT what reading a byte from it
/// said (ENXIO, "No such device or address", for a node the device cgroup allows whose driver is
/// not there).
pub(crate) const LIST_NODES: &str = "for n in $(find /dev -type c | \
    grep -E '^/dev/(nvidia|infiniband/|gdrdrv|dri/)' | sort); do \
    echo \"node $n $(head -c1 $n 2>&1 >/dev/null | sed 's/.*: //')\"; done";

/// `cdi generate --mode gds|mofed|gdrcopy|nvswitch|imex` specs consumed by real Podman: each
/// container given one kind's device sees exactly that mode's nodes, each allowed (ENXIO, or
/// ENODEV for the misc-major `rdma_cm`), and GDS its `cufile.json`.
#[test]
fn podman_runs_the_gated_specs() {
    let bed = Bed::with_host_flags(
        1,
        &[
            "--gds",
            "--mofed",
            "--gdrcopy",
            "--nvswitches",
            "2",
            "--imex-channels",
            "3",
        ],
    );
    let cdi = bed.t.join("cdi");
    fs::create_dir_all(&cdi).unwrap();
    for mode in ["gds", "mofed", "gdrcopy", "nvswitch", "imex"] {
        ok(&with(
            &[
                "cdi",
                "generate",
                "--mode",
                mode,
                "--output",
                cdi.join(format!("{mode}.yaml")).to_str().unwrap(),
            ],
            &bed.host.roots(),
        ));
    }
    podman_import(&bed);
    let enxio = "No such device or address";
    let cases: [(&[&str], Vec<String>); 6] = [
        (
            &["nvidia.com/gds=all"],
            (0..16).map(|i| format!("/dev/nvidia-fs{i}")).collect(),
        ),
        (
            &["nvidia.com/mofed=all"],
            vec![
                "/dev/infiniband/rdma_cm".into(),
                "/dev/infiniband/uverbs0".into(),
                "/dev/infiniband/uverbs1".into(),
            ],
        ),
        (&["nvidia.com/gdrcopy=all"], vec!["/dev/gdrdrv".into()]),
        (
            &["nvidia.com/nvswitch=all"],
            vec![
                "/dev/nvidia-nvswitch0".into(),
                "/dev/nvidia-nvswitch1".into(),
                "/dev/nvidia-nvswitchctl".into(),
            ],
        ),
        (
            &["nvidia.com/imex-channel=1"],
            vec!["/dev/nvidia-caps-imex-channels/channel1".into()],
        ),
        (
            &["nvidia.com/imex-channel=all", "nvidia.com/gdrcopy=all"],
            vec![
                "/dev/gdrdrv".into(),
                "/dev/nvidia-caps-imex-channels/channel0".into(),
                "/dev/nvidia-caps-imex-channels/channel1".into(),
                "/dev/nvidia-caps-imex-channels/channel2".into(),
            ],
        ),
    ];
    for (devices, want) in cases {
        let script = format!("{LIST_NODES}; test -f /etc/cufile.json && echo cufile; true");
        let r = podman_with_spec_dir(&bed, &cdi, devices, &script);
        assert_eq!(r.code, 0, "{devices:?}: {}\n{}", r.stdout, r.stderr);
        let mut want = want;
        want.sort();
        let got = listed_nodes(&r.stdout);
        assert_eq!(
            got.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
            want,
            "{devices:?}: {}",
            r.stdout
        );
        // Allowed by the device cgroup (EPERM otherwise); no driver behind it.
        for (p, res) in &got {
            assert!(
                res == enxio || res == "No such device",
                "{devices:?}: {p}: {}",
                r.stdout
            );
        }
        assert_eq!(
            r.stdout.lines().any(|l| l == "cufile"),
            devices[0].starts_with("nvidia.com/gds"),
            "{devices:?}: {}",
            r.stdout
        );
    }
}

/// Issue 18 §3 with Podman reading a generated spec: its `disable-device-node-modification`
/// hook gives the container `ModifyDeviceFiles: 0` (the host's params otherwise, read-only),
/// and `update-application-profile` names the container's GPU only. The mock driver is not in
/// the kernel's procfs: a tmpfs on `/proc/driver/nvidia` stands for its folder.
#[test]
fn podman_runs_the_guard_hooks_of_a_spec() {
    let bed = Bed::new(2);
    let cdi = bed.t.join("cdi");
    fs::create_dir_all(&cdi).unwrap();
    bed.host.write_spec(&cdi.join("nvidia.yaml"));
    podman_import(&bed);
    let host_params =
        fs::read_to_string(PathBuf::from(bed.host.proc_root()).join("driver/nvidia/params"))
            .unwrap();
    let want = host_params.replace("\nModifyDeviceFiles: 1\n", "\nModifyDeviceFiles: 0\n");
    assert_ne!(want, host_params);
    let minor = bed.host.manifest["gpus"][1]["minor"].as_u64().unwrap();
    let r = podman_run_with_spec_dir(
        &bed,
        &cdi,
        &["nvidia.com/gpu=1"],
        &[
            "--mount",
            "type=tmpfs,destination=/proc/driver,tmpfs-mode=755",
            "--mount",
            "type=tmpfs,destination=/proc/driver/nvidia,tmpfs-mode=555",
        ],
        "cat /proc/driver/nvidia/params; echo ---; \
         cat /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf; echo; echo ---; \
         (echo x > /proc/driver/nvidia/params) 2>/dev/null && echo writable || echo read-only",
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let profile = format!(
        r#"{{"profiles":[{{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x{:x}]}}],"rules":[{{"pattern":[],"profile":"_container_"}}]}}"#,
        1u64 << minor
    );
    assert_eq!(
        r.stdout,
        format!("{want}---\n{profile}\n---\nread-only\n"),
        "{}",
        r.stderr
    );
}

/// Podman reads CDI specs only from /etc/cdi and /var/run/cdi; this test owns its file there.
pub(crate) struct SpecFile(pub(crate) PathBuf);
impl Drop for SpecFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

#[test]
fn podman_cdi_devices_and_our_shim() {
    let bed = Bed::new(4);
    fs::create_dir_all("/var/run/cdi").unwrap();
    let spec = PathBuf::from(format!(
        "/var/run/cdi/gpuctk-test-{}.yaml",
        std::process::id()
    ));
    let _guard = SpecFile(spec.clone());
    bed.host.write_spec(&spec);
    let r = out(&mut podman(
        &bed,
        &["import", bed.rootfs_tar().to_str().unwrap(), IMAGE],
    ));
    assert_eq!(r.code, 0, "podman import: {}", r.stderr);
    let run = |args: &[&str]| {
        let mut a = vec![
            "run",
            "--rm",
            "--network",
            "none",
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768",
        ];
        a.extend_from_slice(args);
        a.extend_from_slice(&[
            IMAGE,
            "/bin/sh",
            "-c",
            "nvidia-smi -L; /usr/bin/gpuctk-probe",
        ]);
        out(&mut podman(&bed, &a))
    };
    let h = &bed.host;
    assert_eq!(
        gpus_seen(&run(&["--device", "nvidia.com/gpu=1"])),
        pick(h, &[1])
    );
    assert_eq!(
        gpus_seen(&run(&["--device", "nvidia.com/gpu=all"])),
        h.uuids()
    );
    let shim = bed.bin.join("nvidia-container-runtime");
    let shim = shim.to_str().unwrap();
    assert_eq!(
        gpus_seen(&run(&[
            "--runtime",
            shim,
            "-e",
            "NVIDIA_VISIBLE_DEVICES=0,3"
        ])),
        pick(h, &[0, 3])
    );
    assert_eq!(gpus_seen(&run(&[])), Vec::<String>::new());

    // A management spec, as NVIDIA's installer writes it for monitoring agents: its one `all`
    // device brings every GPU and the host's other NVIDIA nodes (the MIG monitor capability; not
    // the config one, which only privileged containers get).
    let management = spec.with_file_name(format!(
        "gpuctk-test-{}-management.yaml",
        std::process::id()
    ));
    let _guard_management = SpecFile(management.clone());
    ok(&with(
        &[
            "cdi",
            "generate",
            "--mode",
            "management",
            "--vendor",
            "management.nvidia.com",
            "--output",
            management.to_str().unwrap(),
            "--nvidia-cdi-hook-path",
            GPUCTK,
        ],
        &bed.host.roots(),
    ));
    let r = run(&["--device", "management.nvidia.com/gpu=all"]);
    assert_eq!(gpus_seen(&r), h.uuids(), "{}", r.stderr);
    let r = out(&mut podman(
        &bed,
        &[
            "run",
            "--rm",
            "--network",
            "none",
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768",
            "--device",
            "management.nvidia.com/gpu=all",
            IMAGE,
            "/bin/sh",
            "-c",
            "ls /dev/nvidia-caps; stat -c %a /dev/nvidia-caps",
        ],
    ));
    assert!(
        !r.stdout.contains("nvidia-cap1\n")
            && r.stdout.contains("nvidia-cap2\n")
            && r.stdout.contains("755"),
        "{} {}",
        r.stdout,
        r.stderr
    );

    // NVIDIA's oci-hook mode: podman runs our prestart hook from a hooks dir, for every
    // container; the hook injects into those that ask.
    let hooks = bed.t.join("hooks.d");
    let hook_file = hooks.join("oci-nvidia-hook.json");
    let hook_bin = bed.bin.join("nvidia-container-runtime-hook");
    let configure = |verb: &str| {
        ok(&[
            "runtime",
            verb,
            "--config-mode",
            "oci-hook",
            "--oci-hook-path",
            hook_file.to_str().unwrap(),
            "--nvidia-runtime-hook-path",
            hook_bin.to_str().unwrap(),
        ])
    };
    configure("configure");
    let hooked = |env: &str| {
        out(&mut podman(
            &bed,
            &[
                "--hooks-dir",
                hooks.to_str().unwrap(),
                "run",
                "--rm",
                "--network",
                "none",
                "--ulimit",
                "nofile=20000:20000",
                "--ulimit",
                "nproc=32768:32768",
                "-e",
                env,
                IMAGE,
                "/bin/sh",
                "-c",
                "nvidia-smi -L; /usr/bin/gpuctk-probe",
            ],
        ))
    };
    assert_eq!(
        gpus_seen(&hooked("NVIDIA_VISIBLE_DEVICES=2")),
        pick(h, &[2])
    );
    assert_eq!(gpus_seen(&hooked("X=1")), Vec::<String>::new());
    configure("unconfigure");
    assert!(!hook_file.exists(), "unconfigure removes the hook file");
}

// ------------------------------------------------------------------ containerd

/// An OCI image archive of the mock rootfs, for `ctr image import` (no registry).
pub(crate) fn oci_archive(bed: &Bed) -> PathBuf {
    let work = bed.t.join("image");
    fs::create_dir_all(&work).unwrap();
    crate::util::oci_archive(
        &work,
        &bed.rootfs_tar(),
        "docker.io/library/gpuctk-test:latest",
        serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": [format!("PATH={SYSTEM_PATH}")]}
        }),
    )
}

#[test]
fn containerd_runc_binary_and_gpus_flag() {
    let bed = Bed::new(4);
    let d = bed.t.join("containerd");
    fs::create_dir_all(&d).unwrap();
    let sock = d.join("containerd.sock");
    let config = d.join("config.toml");
    fs::write(
        &config,
        format!(
            "version = 2\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\n[grpc]\n  address = \"{}\"\n\n[ttrpc]\n  address = \"{}\"\n",
            d.join("root").display(),
            d.join("state").display(),
            sock.display(),
            d.join("ttrpc.sock").display()
        ),
    )
    .unwrap();
    let log = d.join("containerd.log");
    let child = bed
        .in_ns(&[
            "containerd".into(),
            "--config".into(),
            config.to_string_lossy().into_owned(),
        ])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .expect("containerd (apt-get install containerd)");
    let daemon = Daemon {
        child,
        pidfile: None,
        log,
    };
    let ctr = |args: &[&str]| {
        let mut c = Command::new("ctr");
        c.arg("--address")
            .arg(&sock)
            .args(args)
            .env("PATH", bed.path_env());
        out(&mut c)
    };
    wait_for("containerd", Duration::from_secs(30), || {
        ctr(&["version"]).code == 0
    });
    let r = ctr(&["images", "import", oci_archive(&bed).to_str().unwrap()]);
    assert_eq!(r.code, 0, "ctr import: {} {}", r.stderr, daemon.log());
    let image = "docker.io/library/gpuctk-test:latest";
    let shim = bed.bin.join("nvidia-container-runtime");
    let h = &bed.host;
    let run = |id: &str, extra: &[&str]| {
        let mut a = vec!["run", "--rm", "--snapshotter", "native"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&[
            image,
            id,
            "/bin/sh",
            "-c",
            "nvidia-smi -L; /usr/bin/gpuctk-probe",
        ]);
        ctr(&a)
    };
    let r = run(
        "c1",
        &[
            "--runc-binary",
            shim.to_str().unwrap(),
            "--env",
            "NVIDIA_VISIBLE_DEVICES=0,2",
        ],
    );
    assert_eq!(gpus_seen(&r), pick(h, &[0, 2]), "{}", daemon.log());
    // `ctr run --gpus` adds a prestart hook that runs our nvidia-container-cli configure.
    assert_eq!(
        gpus_seen(&run("c2", &["--gpus", "1"])),
        pick(h, &[1]),
        "{}",
        daemon.log()
    );
    assert_eq!(gpus_seen(&run("c3", &[])), Vec::<String>::new());
}

// ------------------------------------------------------------------ runtime configure

#[test]
fn runtime_configure_containerd_is_idempotent_and_reversible() {
    let t = TestDir::new();
    let cfg = t.join("config.toml");
    let original = "# containerd config\nversion = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n      default_runtime_name = \"runc\" # keep me\n      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n        runtime_type = \"io.containerd.runc.v2\"\n        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n          SystemdCgroup = true\n";
    fs::write(&cfg, original).unwrap();
    let c = cfg.to_str().unwrap();
    let args = [
        "runtime",
        "configure",
        "--runtime=containerd",
        "--config",
        c,
        "--nvidia-runtime-path",
        "/usr/bin/nvidia-container-runtime",
    ];
    let r = ok(&with(&args, &["--dry-run".to_string()]));
    assert!(
        r.stdout
            .contains("+          BinaryName = \"/usr/bin/nvidia-container-runtime\""),
        "{}",
        r.stdout
    );
    assert_eq!(fs::read_to_string(&cfg).unwrap(), original);
    ok(&args);
    let once = fs::read_to_string(&cfg).unwrap();
    assert!(
        once.starts_with(original.trim_end()),
        "the original bytes are kept: {once}"
    );
    assert!(
        once.contains("SystemdCgroup = true"),
        "runc's options copied"
    );
    let r = ok(&args);
    assert!(r.stdout.contains("already configured"), "{}", r.stdout);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), once);
    assert_eq!(
        fs::read_to_string(t.join("config.toml.bak")).unwrap(),
        original
    );
    ok(&[
        "runtime",
        "unconfigure",
        "--runtime=containerd",
        "--config",
        c,
    ]);
    assert_eq!(
        fs::read_to_string(&cfg).unwrap(),
        original,
        "unconfigure restores the bytes"
    );

    // As default, with CDI: containerd reads it so; unconfigure gives the user's default (and
    // its comment) back and turns CDI off again, and containerd reads that too.
    let dump = || {
        let o = Command::new("containerd")
            .args(["--config", c, "config", "dump"])
            .output()
            .expect("containerd (apt-get install containerd)");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    ok(&with(
        &args,
        &["--set-as-default".to_string(), "--cdi.enabled".to_string()],
    ));
    let d = dump();
    assert!(d.contains("default_runtime_name = \"nvidia\""), "{d}");
    // containerd 1.6 has no enable_cdi (1.7 added it) and ignores the key: the file has it.
    assert!(fs::read_to_string(&cfg)
        .unwrap()
        .contains("enable_cdi = true"));
    assert!(t.join("config.toml.gpuctk-added.json").is_file());
    ok(&[
        "runtime",
        "unconfigure",
        "--runtime=containerd",
        "--config",
        c,
    ]);
    assert_eq!(fs::read_to_string(&cfg).unwrap(), original);
    assert!(!t.join("config.toml.gpuctk-added.json").exists());
    let d = dump();
    assert!(d.contains("default_runtime_name = \"runc\""), "{d}");
}
