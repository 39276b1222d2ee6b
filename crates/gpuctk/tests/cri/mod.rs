//! The Kubernetes node path: containerd 1.6's own CRI plugin, configured by our
//! `nvidia-ctk runtime configure --runtime=containerd`, driven through the CRI gRPC API as the
//! kubelet drives it (host-network pod sandbox, containers, their log files), with the
//! RuntimeClass handler `nvidia` running our shim and `runc` as the default.
//!
//! A [`Node`] is a private containerd (own root, state, sockets, runc root, CNI dirs) started in
//! the engines tests' private mount namespace, where our config.toml is bind-mounted at
//! /etc/nvidia-container-runtime. Its images are imported from archives built here: a pause
//! image (a static C `pause`, compiled with gcc) and the mock rootfs. Each container runs the
//! mock host's `nvidia-smi -L` and the probe, and the test reads what they printed from the
//! container's CRI log.

pub(crate) mod client;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use client::{stream_text, ContainerSpec, Cri, PodSpec};

use crate::engines::{gpus_seen, oci_archive, pick, uuids_in, wait_for, Bed, Daemon, Out};
use crate::util::*;

/// The image the pods run (the mock rootfs: busybox, glibc, the probe; no nvidia-smi).
pub(crate) const WORKLOAD: &str = "docker.io/library/gpuctk-test:latest";
/// The sandbox image, containerd's `sandbox_image`.
pub(crate) const PAUSE: &str = "docker.io/library/gpuctk-pause:1";

/// A pause process for the sandbox: sleeps until SIGTERM or SIGINT (as PID 1 it must catch
/// them, the kernel drops unhandled signals to a namespace's init).
const PAUSE_C: &str = r#"#include <signal.h>
#include <unistd.h>
static void done(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGTERM, done);
    signal(SIGINT, done);
    for (;;) pause();
}
"#;

/// A node: a bed (mock host, our binaries under NVIDIA's names, config.toml) and a private
/// containerd with the CRI plugin and the `nvidia` handler.
pub(crate) struct Node {
    pub(crate) bed: Bed,
    /// containerd's files: config, root, state, sockets, runc root, logs.
    pub(crate) dir: PathBuf,
    pub(crate) sock: PathBuf,
    cri: Option<Cri>,
    daemon: Option<Daemon>,
    /// Mount points of containerd's namespace that are the test's own, not leaks.
    own_mounts: Vec<String>,
}

impl Node {
    /// Start a node on `bed`: containerd's default config pointed into the temp dir, then
    /// `nvidia-ctk runtime configure --runtime=containerd` on it as a user would, then the
    /// daemon and the two images.
    pub(crate) fn start(bed: Bed) -> Node {
        let dir = bed.t.join("containerd");
        fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.toml");
        fs::write(&config, containerd_config(&dir)).unwrap();
        let shim = bed.bin.join("nvidia-container-runtime");
        let r = out(Command::new(bed.bin.join("nvidia-ctk"))
            .args(["runtime", "configure", "--runtime=containerd"])
            .arg(format!("--config={}", config.display()))
            .arg(format!("--nvidia-runtime-path={}", shim.display())));
        assert_eq!(r.code, 0, "runtime configure: {}{}", r.stdout, r.stderr);
        let cmd = bed.in_ns(&[
            "containerd".into(),
            "--config".into(),
            config.to_string_lossy().into_owned(),
        ]);
        let sock = dir.join("containerd.sock");
        Node::launch(bed, dir, sock, cmd, &["/etc/nvidia-container-runtime"])
    }

    /// Start containerd with `cmd` (its config decided by the caller), files in `dir`, API on
    /// `sock`; `own_mounts` are the mount points `cmd` sets up in its namespace, which
    /// `shutdown` does not count as leaked. Then wait for the CRI and import the two images.
    pub(crate) fn launch(
        bed: Bed,
        dir: PathBuf,
        sock: PathBuf,
        mut cmd: Command,
        own_mounts: &[&str],
    ) -> Node {
        let log = dir.join("containerd.log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("containerd (apt-get install containerd)");
        let mut node = Node {
            bed,
            dir,
            sock,
            cri: None,
            daemon: Some(Daemon {
                child,
                pidfile: None,
                log,
            }),
            own_mounts: own_mounts.iter().map(|m| m.to_string()).collect(),
        };
        wait_for("containerd's CRI", Duration::from_secs(60), || {
            node.sock.exists()
                && Cri::connect(&node.sock)
                    .and_then(|c| c.version())
                    .is_ok_and(|v| v.runtime_api_version == "v1")
        });
        node.cri = Some(Cri::connect(&node.sock).unwrap());
        node.import(&pause_archive(&node.bed));
        node.import(&oci_archive(&node.bed));
        node
    }

    pub(crate) fn cri(&self) -> &Cri {
        self.cri.as_ref().unwrap()
    }

    pub(crate) fn log(&self) -> String {
        self.daemon.as_ref().map(Daemon::log).unwrap_or_default()
    }

    /// `ctr` against this containerd, in the CRI's namespace.
    pub(crate) fn ctr(&self, args: &[&str]) -> Out {
        out(Command::new("ctr")
            .arg("--address")
            .arg(&self.sock)
            .args(["--namespace", "k8s.io"])
            .args(args))
    }

    fn import(&self, archive: &Path) {
        let r = self.ctr(&["images", "import", archive.to_str().unwrap()]);
        assert_eq!(r.code, 0, "ctr import: {}{}", r.stderr, self.log());
    }

    /// A host-network pod with `handler` (empty: the default runtime), logs in the temp dir.
    pub(crate) fn pod(&self, name: &str, handler: &str) -> PodSpec {
        let log_dir = self.bed.t.join("pods").join(name);
        fs::create_dir_all(&log_dir).unwrap();
        PodSpec {
            name: name.to_string(),
            namespace: "default".to_string(),
            uid: format!("{name}-{}", std::process::id()),
            handler: handler.to_string(),
            log_dir,
            host_network: true,
            annotations: HashMap::new(),
        }
    }

    /// Run `c` (the workload image, `nvidia-smi -L; gpuctk-probe`) in a new sandbox of `pod`
    /// and return what it printed, as `Out`; the pod is stopped and removed afterwards.
    pub(crate) fn run(&self, pod: &PodSpec, c: ContainerSpec) -> Out {
        let cri = self.cri();
        let pod_id = cri
            .run_pod_sandbox(pod)
            .unwrap_or_else(|e| panic!("RunPodSandbox {}: {e}\n{}", pod.name, self.log()));
        let r = cri.run_to_exit(&pod_id, pod, &c, Duration::from_secs(120));
        let stopped = cri.stop_pod_sandbox(&pod_id);
        let removed = cri.remove_pod_sandbox(&pod_id);
        let (code, log) =
            r.unwrap_or_else(|e| panic!("{} in {}: {e}\n{}", c.name, pod.name, self.log()));
        stopped.unwrap();
        removed.unwrap();
        Out {
            code,
            stdout: stream_text(&log, "stdout"),
            stderr: stream_text(&log, "stderr"),
        }
    }

    /// Remove every pod, then check nothing is left: no sandbox or container in the CRI, none
    /// in runc's state, no mount under the temp dir in containerd's mount namespace. Then stop
    /// containerd.
    pub(crate) fn shutdown(mut self) {
        let cri = self.cri.take().unwrap();
        for p in cri.list_pod_sandboxes().unwrap() {
            let _ = cri.stop_pod_sandbox(&p.id);
            cri.remove_pod_sandbox(&p.id).unwrap();
        }
        assert!(cri.list_containers().unwrap().is_empty());
        assert!(cri.list_pod_sandboxes().unwrap().is_empty());
        drop(cri);
        let runc_root = self.runc_root();
        assert!(
            runtime_list("runc", &runc_root).is_empty(),
            "runc still knows containers in {}",
            runc_root.display()
        );
        let leaked = self.mounts();
        assert!(leaked.is_empty(), "mounts left: {leaked:#?}");
        drop(self.daemon.take());
    }

    /// runc's state root for the CRI's containers (the shim's `Root` option, per namespace).
    pub(crate) fn runc_root(&self) -> PathBuf {
        self.dir.join("runc/k8s.io")
    }

    /// The mounts under the temp dir in containerd's mount namespace (where its shims and
    /// containers' rootfs mounts live), but for the bed's own bind mount of config.toml's folder.
    pub(crate) fn mounts(&self) -> Vec<String> {
        let pid = self.daemon.as_ref().unwrap().child.id();
        let under = self.bed.t.path().to_string_lossy().into_owned();
        fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .unwrap()
            .lines()
            .filter(|l| l.contains(&under))
            // The namespace's own mounts (the bed's bind mount of config.toml's folder).
            .filter(|l| {
                l.split(' ')
                    .nth(4)
                    .is_none_or(|m| !self.own_mounts.iter().any(|o| o == m))
            })
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Node {
    /// On a failed test: remove what can be removed, then stop the daemon before the temp dir
    /// (the bed, dropped after this) goes.
    fn drop(&mut self) {
        if let Some(cri) = self.cri.take() {
            for p in cri.list_pod_sandboxes().unwrap_or_default() {
                let _ = cri.stop_pod_sandbox(&p.id);
                let _ = cri.remove_pod_sandbox(&p.id);
            }
        }
        drop(self.daemon.take());
    }
}

fn out(c: &mut Command) -> Out {
    let o = c.stdin(Stdio::null()).output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// containerd's default config (`containerd config default`, version 2) with every path in
/// `dir`, the plugins the CRI does not need off, the pause image as `sandbox_image`, overlayfs,
/// cgroupfs, and runc's state root in `dir`.
pub(crate) fn containerd_config(dir: &Path) -> String {
    let o = Command::new("containerd")
        .args(["config", "default"])
        .output()
        .expect("containerd (apt-get install containerd)");
    assert!(o.status.success(), "containerd config default");
    let mut doc: toml_edit::DocumentMut = String::from_utf8(o.stdout).unwrap().parse().unwrap();
    let p = |sub: &str| dir.join(sub).to_string_lossy().into_owned();
    doc["root"] = toml_edit::value(p("root"));
    doc["state"] = toml_edit::value(p("state"));
    doc["grpc"]["address"] = toml_edit::value(p("containerd.sock"));
    doc["ttrpc"]["address"] = toml_edit::value(p("containerd.sock.ttrpc"));
    let mut off = toml_edit::Array::new();
    for id in [
        "io.containerd.snapshotter.v1.aufs",
        "io.containerd.snapshotter.v1.btrfs",
        "io.containerd.snapshotter.v1.devmapper",
        "io.containerd.snapshotter.v1.zfs",
        "io.containerd.tracing.processor.v1.otlp",
        "io.containerd.internal.v1.tracing",
    ] {
        off.push(id);
    }
    doc["disabled_plugins"] = toml_edit::value(off);
    let plugins = &mut doc["plugins"];
    plugins["io.containerd.internal.v1.opt"]["path"] = toml_edit::value(p("opt"));
    let cri = &mut plugins["io.containerd.grpc.v1.cri"];
    cri["sandbox_image"] = toml_edit::value(PAUSE);
    cri["systemd_cgroup"] = toml_edit::value(false);
    // Sandboxes ask for oom_score_adj -998; where this test runs (itself in a container) a
    // value below containerd's own is refused, so containerd caps it at its own.
    cri["restrict_oom_score_adj"] = toml_edit::value(true);
    cri["cni"]["bin_dir"] = toml_edit::value(p("cni/bin"));
    cri["cni"]["conf_dir"] = toml_edit::value(p("cni/net.d"));
    let ctrd = &mut cri["containerd"];
    ctrd["snapshotter"] = toml_edit::value("overlayfs");
    let runc = &mut ctrd["runtimes"]["runc"]["options"];
    runc["SystemdCgroup"] = toml_edit::value(false);
    runc["Root"] = toml_edit::value(p("runc"));
    doc.to_string()
}

/// The pause image: `/pause` compiled static from [`PAUSE_C`], as an OCI archive.
fn pause_archive(bed: &Bed) -> PathBuf {
    let work = bed.t.join("pause");
    let root = work.join("rootfs");
    fs::create_dir_all(&root).unwrap();
    let src = work.join("pause.c");
    fs::write(&src, PAUSE_C).unwrap();
    let r = out(Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(root.join("pause"))
        .arg(&src));
    assert_eq!(
        r.code, 0,
        "gcc -static (install gcc, libc6-dev): {}",
        r.stderr
    );
    let layer = work.join("layer.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&layer)
        .arg("pause")
        .status()
        .unwrap();
    assert!(st.success());
    oci_archive_of(&work, &layer, PAUSE, &["/pause"])
}

fn oci_archive_of(work: &Path, layer: &Path, name: &str, entrypoint: &[&str]) -> PathBuf {
    crate::util::oci_archive(
        work,
        layer,
        name,
        serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Entrypoint": entrypoint}
        }),
    )
}

/// The workload: `nvidia-smi -L` (injected from the host, when a GPU is) and the probe.
pub(crate) fn workload(name: &str, env: &[(&str, &str)]) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        image: WORKLOAD.to_string(),
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "nvidia-smi -L; /usr/bin/gpuctk-probe".into(),
        ],
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// Put `extra` in front of the bed's config.toml (top-level keys must come before its tables).
fn add_config(bed: &Bed, extra: &str) {
    let f = bed.etc.join("config.toml");
    let text = fs::read_to_string(&f).unwrap();
    fs::write(&f, format!("{extra}\n{text}")).unwrap();
}

#[test]
fn cri_runtime_class_nvidia_env_and_default_runc() {
    let node = Node::start(Bed::new(4));
    let cri = node.cri();
    let v = cri.version().unwrap();
    assert_eq!(v.runtime_name, "containerd");
    let h = &node.bed.host;
    // An error comes back as the gRPC status, with the runtime's message.
    let pod = node.pod("noimage", "nvidia");
    let pod_id = cri.run_pod_sandbox(&pod).unwrap();
    let mut c = workload("smi", &[]);
    c.image = "docker.io/library/gpuctk-absent:1".into();
    match cri.create_container(&pod_id, &pod, &c) {
        Err(client::CriError::Status { code, message, .. }) => {
            assert!(
                code != 0 && message.contains("gpuctk-absent"),
                "{code} {message}"
            )
        }
        other => panic!("an absent image: {other:?}"),
    }
    cri.stop_pod_sandbox(&pod_id).unwrap();
    cri.remove_pod_sandbox(&pod_id).unwrap();

    let pod = node.pod("all", "nvidia");
    let r = node.run(&pod, workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "all")]));
    assert_eq!(gpus_seen(&r), h.uuids(), "{}", node.log());

    let pod = node.pod("one", "nvidia");
    let r = node.run(&pod, workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "1")]));
    assert_eq!(gpus_seen(&r), pick(h, &[1]));

    // The default handler (runc) gets no GPU, whatever the env asks.
    let pod = node.pod("plain", "");
    let r = node.run(&pod, workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "all")]));
    assert_eq!(gpus_seen(&r), Vec::<String>::new());
    assert!(r.stderr.contains("nvidia-smi: not found"), "{}", r.stderr);
    let pod = node.pod("runc", "runc");
    let r = node.run(&pod, workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "all")]));
    assert_eq!(gpus_seen(&r), Vec::<String>::new());

    // A long-running GPU container stopped as the kubelet stops one: StopContainer's signals
    // and the later deletes go through our shim to runc.
    let pod = node.pod("stop", "nvidia");
    let pod_id = cri.run_pod_sandbox(&pod).unwrap();
    let mut c = workload("sleeper", &[("NVIDIA_VISIBLE_DEVICES", "0")]);
    c.command = vec![
        "/bin/sh".into(),
        "-c".into(),
        "nvidia-smi -L; exec sleep 600".into(),
    ];
    let id = cri.create_container(&pod_id, &pod, &c).unwrap();
    cri.start_container(&id).unwrap();
    let log = pod.log_dir.join(c.log_path());
    wait_for(
        "nvidia-smi's line in the log",
        Duration::from_secs(60),
        || client::read_log(&log).is_ok_and(|l| stream_text(&l, "stdout").contains("GPU 0:")),
    );
    assert!(runtime_list("runc", &node.runc_root()).contains(&id));
    assert!(
        node.mounts().iter().any(|m| m.contains(&id)),
        "its rootfs is mounted while it runs: {:#?}",
        node.mounts()
    );
    cri.stop_container(&id, 1).unwrap();
    let st = cri.wait_exited(&id, Duration::from_secs(60)).unwrap();
    assert_ne!(st.exit_code, 0, "killed, not finished: {st:?}");
    let text = stream_text(&client::read_log(&log).unwrap(), "stdout");
    assert_eq!(uuids_in(&text), pick(h, &[0]), "{text}");
    // Left for shutdown to remove, as a kubelet's garbage collection would.
    node.shutdown();
}

/// NVIDIA's device plugin with `DEVICE_LIST_STRATEGY=cdi-annotations` answers Allocate with
/// `cdi.k8s.io/nvidia-device-plugin_<response id>: nvidia.com/gpu=<uuid>,...` (its default
/// device id strategy, uuid); the kubelet puts that on the container. containerd 1.6 has no
/// CDI of its own: our shim resolves the names from the spec in the configured spec dir.
#[test]
fn cri_device_plugin_cdi_annotations() {
    let bed = Bed::new(4);
    let specs = bed.t.join("cdi");
    fs::create_dir_all(&specs).unwrap();
    ok(&with(
        &[
            "cdi",
            "generate",
            "--output",
            specs.join("nvidia.yaml").to_str().unwrap(),
            "--nvidia-cdi-hook-path",
            GPUCTK,
        ],
        &bed.host.roots(),
    ));
    add_config(
        &bed,
        &format!(
            "[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{}\"]\n",
            specs.display()
        ),
    );
    let node = Node::start(bed);
    let h = &node.bed.host;
    let u = h.uuids();
    let mut c = workload("smi", &[]);
    c.annotations.insert(
        "cdi.k8s.io/nvidia-device-plugin_4f6b3a0e-9d1c-4c55-8a3e-2f0c7b6d1e90".into(),
        format!("nvidia.com/gpu={},nvidia.com/gpu={}", u[0], u[2]),
    );
    let pod = node.pod("cdi", "nvidia");
    let r = node.run(&pod, c.clone());
    assert_eq!(gpus_seen(&r), pick(h, &[0, 2]), "{}", node.log());
    // The same container on the default handler: nobody reads the annotation.
    let pod = node.pod("cdi-runc", "");
    assert_eq!(gpus_seen(&node.run(&pod, c)), Vec::<String>::new());
    node.shutdown();
}

/// The device plugin's `volume-mounts` strategy under the unprivileged policy: it mounts
/// `/dev/null` at `/var/run/nvidia-container-devices/<id>` per allocated GPU; the image (or
/// the pod author) also sets `NVIDIA_VISIBLE_DEVICES=all`, which must not widen the grant.
#[test]
fn cri_device_plugin_volume_mounts_unprivileged() {
    let bed = Bed::new(4);
    add_config(
        &bed,
        "accept-nvidia-visible-devices-as-volume-mounts = true\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n",
    );
    let node = Node::start(bed);
    let h = &node.bed.host;
    let u3 = h.uuids()[3].clone();
    let mut c = workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "all")]);
    for id in ["1", u3.as_str()] {
        c.mounts.push((
            PathBuf::from("/dev/null"),
            format!("/var/run/nvidia-container-devices/{id}"),
            false,
        ));
    }
    let pod = node.pod("mounts", "nvidia");
    let r = node.run(&pod, c);
    assert_eq!(gpus_seen(&r), pick(h, &[1, 3]), "{}", node.log());
    // Without the mounts, the env alone gets nothing from an unprivileged container.
    let pod = node.pod("env-only", "nvidia");
    let r = node.run(&pod, workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "all")]));
    assert_eq!(gpus_seen(&r), Vec::<String>::new());
    node.shutdown();
}

/// The CRI log format: partial entries (`P`) join the next, each stream on its own; a line that
/// is not in the format is an error naming the file and line.
#[test]
fn cri_log_format() {
    let t = TestDir::new();
    let f = t.join("c.log");
    fs::write(
        &f,
        "2026-01-01T00:00:00.000000001Z stdout P GPU 0: \n\
         2026-01-01T00:00:00.000000002Z stderr F warn\n\
         2026-01-01T00:00:00.000000003Z stdout F mock (UUID: GPU-x)\n\
         2026-01-01T00:00:00.000000004Z stdout F \n",
    )
    .unwrap();
    let log = client::read_log(&f).unwrap();
    assert_eq!(log.len(), 4);
    assert_eq!(stream_text(&log, "stdout"), "GPU 0: mock (UUID: GPU-x)\n\n");
    assert_eq!(stream_text(&log, "stderr"), "warn\n");
    fs::write(&f, "2026-01-01T00:00:00Z stdout F ok\nnot a log line\n").unwrap();
    let e = client::read_log(&f).unwrap_err().to_string();
    assert!(e.contains("c.log line 2"), "{e}");
}
