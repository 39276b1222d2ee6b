//! The delivery paths: how one prepared [`Case`] is run through the shim (create + start +
//! delete, or run) under runc or crun, the legacy prestart hook, `nvidia-container-cli
//! configure` behind `containerd oci-hook` (as `ctr run --gpus` sets it up), or podman with our
//! generated CDI spec. Every command runs in its own process group with a deadline; on expiry
//! the group is killed, a reader stuck on a planted FIFO is released, and the container deleted.

use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::lab::{Case, Flip};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Runc,
    Crun,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Runc => "runc",
            Runtime::Crun => "crun",
        }
    }
}

/// Which program of ours delivers: it decides which request sources count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    Shim,
    Hook,
    Cli,
    Podman,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// `nvidia-container-runtime create`, then `start`, wait, `delete`.
    ShimCsd(Runtime),
    /// `nvidia-container-runtime run`.
    ShimRun(Runtime),
    /// Plain `runc|crun run` with our `nvidia-container-runtime-hook prestart` in the spec.
    Hook(Runtime),
    /// `runc run` with `containerd oci-hook -- nvidia-container-cli configure --pid ... ROOTFS`.
    Cli,
    /// `podman run --device nvidia.com/gpu=... --rootfs` with a spec from `gpuctk cdi generate`.
    Podman,
}

impl PathKind {
    pub fn delivery(self) -> Delivery {
        match self {
            PathKind::ShimCsd(_) | PathKind::ShimRun(_) => Delivery::Shim,
            PathKind::Hook(_) => Delivery::Hook,
            PathKind::Cli => Delivery::Cli,
            PathKind::Podman => Delivery::Podman,
        }
    }

    fn runtime(self) -> Runtime {
        match self {
            PathKind::ShimCsd(r) | PathKind::ShimRun(r) | PathKind::Hook(r) => r,
            PathKind::Cli => Runtime::Runc,
            PathKind::Podman => Runtime::Crun,
        }
    }
}

impl fmt::Display for PathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathKind::ShimCsd(r) => write!(f, "shim-{}-create-start-delete", r.name()),
            PathKind::ShimRun(r) => write!(f, "shim-{}-run", r.name()),
            PathKind::Hook(r) => write!(f, "prestart-hook-{}", r.name()),
            PathKind::Cli => f.write_str("nvidia-container-cli-configure"),
            PathKind::Podman => f.write_str("podman-cdi"),
        }
    }
}

/// What a run produced.
#[derive(Debug, Default)]
pub struct Ran {
    /// The exit code of the failing step, or of the container (0 when it ran to its end).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub timed_out: bool,
    /// Changes an overlay sandbox caught on the host's `/` (empty without a sandbox).
    pub host_damage: Vec<String>,
}

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Run `case` through `kind`, within `bound`.
pub fn execute(case: &Case, kind: PathKind, bound: Duration) -> Ran {
    if let Some(root) = &case.host_root {
        return execute_host_root(case, kind, root, bound);
    }
    let rt = kind.runtime();
    let config = case.write_config(rt.name());
    let mut spec = case.spec.clone();
    match kind {
        PathKind::Hook(_) => {
            let hook = case.lab.bin.join("nvidia-container-runtime-hook");
            push_hook(
                &mut spec,
                json!({
                    "path": hook,
                    "args": [hook, "-config", config, "prestart"],
                }),
            );
        }
        PathKind::Cli => {
            // What `ctr run --gpus` writes (containerd 1.6 contrib/nvidia), with ctr's own env.
            let cli = case.lab.bin.join("nvidia-container-cli");
            push_hook(
                &mut spec,
                json!({
                    "path": "/usr/bin/containerd",
                    "args": [
                        "containerd", "oci-hook", "--", cli, "--load-kmods", "configure",
                        format!("--device={}", case.cli_devices),
                        "--compute", "--compat32", "--graphics", "--utility", "--video", "--display",
                        "--ldconfig=@/sbin/ldconfig", "--pid={{pid}}", "{{rootfs}}"
                    ],
                    "env": [format!("GPUCTK_CONFIG={}", config.display()), format!("PATH={SYSTEM_PATH}")],
                }),
            );
            // ctr puts no NVIDIA_* variable in the container.
            if let Some(e) = spec["process"]["env"].as_array_mut() {
                e.retain(|v| !v.as_str().unwrap_or("").starts_with("NVIDIA_"));
            }
        }
        _ => {}
    }
    let bytes = serde_json::to_vec(&spec).unwrap();
    fs::write(case.bundle.join("config.json"), &bytes).unwrap();
    drop(bytes);
    drop(spec);

    let wrap = |argv: Vec<String>| -> Command {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        for (k, _) in std::env::vars() {
            if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") || k.starts_with("LD_") {
                c.env_remove(k);
            }
        }
        c.env("PATH", SYSTEM_PATH);
        c
    };
    let state = case.dir.join("state");
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let shim = s(&case.lab.bin.join("nvidia-container-runtime"));
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let deadline = start + bound;
    let mut ran = std::thread::scope(|scope| {
        let flipper = case.flip.clone().map(|f| {
            let rootfs = case.rootfs.clone();
            let stop = &stop;
            scope.spawn(move || flip_loop(&rootfs, &f, stop))
        });
        let ran = match kind {
            PathKind::ShimCsd(rt) => {
                let mut create = wrap(vec![
                    shim.clone(),
                    "--root".into(),
                    s(&state),
                    "create".into(),
                    "--bundle".into(),
                    s(&case.bundle),
                    "--pid-file".into(),
                    s(&case.dir.join("pid")),
                    case.id.clone(),
                ]);
                create.env("GPUCTK_CONFIG", &config);
                let r = bounded(&mut create, case, "create", deadline);
                if r.timed_out || r.code != 0 {
                    r
                } else {
                    let mut startc = wrap(vec![
                        rt.name().into(),
                        "--root".into(),
                        s(&state),
                        "start".into(),
                        case.id.clone(),
                    ]);
                    let mut r2 = bounded(&mut startc, case, "start", deadline);
                    r2.stdout = r.stdout + &r2.stdout;
                    r2.stderr = r.stderr + &r2.stderr;
                    if r2.timed_out || r2.code != 0 {
                        r2
                    } else {
                        let pid: i32 = fs::read_to_string(case.dir.join("pid"))
                            .ok()
                            .and_then(|p| p.trim().parse().ok())
                            .unwrap_or(0);
                        while pid > 0 && alive(pid) && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        r2.timed_out = pid > 0 && alive(pid);
                        let mut del = wrap(vec![
                            rt.name().into(),
                            "--root".into(),
                            s(&state),
                            "delete".into(),
                            case.id.clone(),
                        ]);
                        let r3 =
                            bounded(&mut del, case, "delete", deadline + Duration::from_secs(5));
                        // The container wrote into create's stdout.
                        let out =
                            fs::read_to_string(case.dir.join("create.out")).unwrap_or_default();
                        Ran {
                            code: if r3.code != 0 {
                                r3.code
                            } else if out.contains("---end---") {
                                0
                            } else {
                                1
                            },
                            stdout: out,
                            stderr: r2.stderr + &r3.stderr,
                            timed_out: r2.timed_out || r3.timed_out,
                            ..Ran::default()
                        }
                    }
                }
            }
            PathKind::ShimRun(_) => {
                let mut run = wrap(vec![
                    shim.clone(),
                    "--root".into(),
                    s(&state),
                    "run".into(),
                    "--bundle".into(),
                    s(&case.bundle),
                    case.id.clone(),
                ]);
                run.env("GPUCTK_CONFIG", &config);
                bounded(&mut run, case, "run", deadline)
            }
            PathKind::Hook(rt) => {
                let mut run = wrap(vec![
                    rt.name().into(),
                    "--root".into(),
                    s(&state),
                    "run".into(),
                    "--bundle".into(),
                    s(&case.bundle),
                    case.id.clone(),
                ]);
                bounded(&mut run, case, "run", deadline)
            }
            PathKind::Cli => {
                let mut run = wrap(vec![
                    "runc".into(),
                    "--root".into(),
                    s(&state),
                    "run".into(),
                    "--bundle".into(),
                    s(&case.bundle),
                    case.id.clone(),
                ]);
                bounded(&mut run, case, "run", deadline)
            }
            PathKind::Podman => {
                let mut run = podman(case, &podman_run_args(case));
                bounded(&mut run, case, "run", deadline)
            }
        };
        stop.store(true, Ordering::Relaxed);
        if let Some(f) = flipper {
            f.join().unwrap();
        }
        ran
    });
    ran.elapsed = start.elapsed();
    // Clean up whatever is left, within the same namespace.
    if kind == PathKind::Podman {
        let mut rm = podman(
            case,
            &["rm".into(), "-f".into(), "-i".into(), case.id.clone()],
        );
        let _ = rm.stdout(Stdio::null()).stderr(Stdio::null()).status();
    } else {
        let mut del = wrap(vec![
            rt.name().into(),
            "--root".into(),
            s(&state),
            "delete".into(),
            "--force".into(),
            case.id.clone(),
        ]);
        let _ = del.stdout(Stdio::null()).stderr(Stdio::null()).status();
        remove_cgroups(&case.id);
    }
    ran
}

/// The state a runtime hands a hook.
fn state_json(case: &Case, pid: u32) -> String {
    json!({
        "ociVersion": "1.0.2",
        "id": case.id,
        "status": "creating",
        "pid": pid,
        "bundle": case.bundle,
        "annotations": {}
    })
    .to_string()
}

/// A container root that is the host's `/` (issue 8 §1.3): runc and crun refuse such bundles or
/// fail on them before any hook of ours runs, so our programs are called directly, as a confused
/// engine or a wrong `--container-spec` would, inside the overlay sandbox: the shim with a
/// no-op runtime and then each createContainer hook it added (with the OCI state runc gives),
/// the prestart hook and `nvidia-container-cli configure` for a container process living in the
/// sandbox. Every one of them must refuse, and nothing may change on the host's `/`.
fn execute_host_root(case: &Case, kind: PathKind, root: &str, bound: Duration) -> Ran {
    let mut spec = case.spec.clone();
    spec["root"]["path"] = json!(root);
    fs::write(
        case.bundle.join("config.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
    let sb = Sandbox::start(case);
    let holder = sb.pid();
    let inside = |argv: &[String]| -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &holder.to_string(), "-m", "-r", "-w", "--"])
            .args(argv);
        for (k, _) in std::env::vars() {
            if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") || k.starts_with("LD_") {
                c.env_remove(k);
            }
        }
        c.env("PATH", SYSTEM_PATH);
        c
    };
    let start = Instant::now();
    let deadline = start + bound;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let state = state_json(case, holder);
    let mut ran = match kind.delivery() {
        Delivery::Shim => {
            // The shim with a runtime that does nothing: only its own work shows.
            let config = case.write_config("/bin/true");
            let mut c = inside(&[
                s(&case.lab.bin.join("nvidia-container-runtime")),
                "--root".into(),
                s(&case.dir.join("state")),
                "create".into(),
                "--bundle".into(),
                s(&case.bundle),
                case.id.clone(),
            ]);
            c.env("GPUCTK_CONFIG", &config);
            let mut r = bounded(&mut c, case, "create", deadline);
            if r.code == 0 && !r.timed_out {
                // It accepted: run the createContainer hooks it added, as runc would.
                let edited: serde_json::Value =
                    serde_json::from_slice(&fs::read(case.bundle.join("config.json")).unwrap())
                        .unwrap_or_default();
                let hooks = edited["hooks"]["createContainer"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for (i, h) in hooks.iter().enumerate() {
                    let argv: Vec<String> = h["args"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|v| v.as_str().unwrap_or("").to_string())
                                .collect()
                        })
                        .unwrap_or_default();
                    // runc gives the hook args[0] as its argv[0] (our personality switch):
                    // a link by that name does the same through nsenter.
                    let path = h["path"].as_str().unwrap_or("");
                    let exe = match argv.first() {
                        Some(a0) if !a0.contains('/') && !path.ends_with(&format!("/{a0}")) => {
                            let link = case.dir.join(a0);
                            let _ = std::os::unix::fs::symlink(path, &link);
                            s(&link)
                        }
                        _ => path.to_string(),
                    };
                    let mut c = Command::new("nsenter");
                    c.args(["-t", &holder.to_string(), "-m", "-r", "-w", "--"])
                        .arg(exe)
                        .args(argv.iter().skip(1))
                        .env_clear();
                    for e in h["env"].as_array().into_iter().flatten() {
                        if let Some((k, v)) = e.as_str().unwrap_or("").split_once('=') {
                            c.env(k, v);
                        }
                    }
                    let hr = bounded_stdin(&mut c, case, &format!("hook{i}"), deadline, &state);
                    r.stderr.push_str(&hr.stderr);
                    if hr.code != 0 || hr.timed_out {
                        r.code = hr.code;
                        r.timed_out = hr.timed_out;
                        break;
                    }
                }
            }
            r
        }
        Delivery::Hook => {
            let config = case.write_config("runc");
            let mut c = inside(&[
                s(&case.lab.bin.join("nvidia-container-runtime-hook")),
                "-config".into(),
                s(&config),
                "prestart".into(),
            ]);
            bounded_stdin(&mut c, case, "prestart", deadline, &state)
        }
        _ => {
            let config = case.write_config("runc");
            let rootfs = if root.starts_with('/') {
                root.to_string()
            } else {
                s(&case.bundle.join(root))
            };
            let mut c = inside(&[
                s(&case.lab.bin.join("nvidia-container-cli")),
                "--load-kmods".into(),
                "configure".into(),
                format!("--device={}", case.cli_devices),
                "--compute".into(),
                "--utility".into(),
                format!("--pid={holder}"),
                rootfs,
            ]);
            c.env("GPUCTK_CONFIG", &config);
            bounded(&mut c, case, "configure", deadline)
        }
    };
    ran.elapsed = start.elapsed();
    ran.host_damage = sb.finish(case);
    ran
}

/// [`bounded`] with `input` on stdin (an OCI state for a hook).
fn bounded_stdin(
    cmd: &mut Command,
    case: &Case,
    step: &str,
    deadline: Instant,
    input: &str,
) -> Ran {
    let input_path = case.dir.join(format!("{step}.in"));
    fs::write(&input_path, input).unwrap();
    cmd.stdin(fs::File::open(&input_path).unwrap());
    spawn_bounded(cmd, case, step, deadline)
}

/// The same container run by the low-level runtime (or podman) alone, without any program of
/// ours but with the same device nodes and mounts (`edited`: the spec our shim produced, minus
/// our hooks). What it changes outside the root is the runtime's doing, not ours.
pub fn run_alone(case: &Case, kind: PathKind, edited: Option<serde_json::Value>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let flipper = case.flip.clone().map(|f| {
            let rootfs = case.rootfs.clone();
            let stop = &stop;
            scope.spawn(move || flip_loop(&rootfs, &f, stop))
        });
        run_alone_inner(case, kind, edited);
        stop.store(true, Ordering::Relaxed);
        if let Some(f) = flipper {
            f.join().unwrap();
        }
    });
}

fn run_alone_inner(case: &Case, kind: PathKind, edited: Option<serde_json::Value>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    if kind == PathKind::Podman {
        let mut a: Vec<String> = vec![
            "run".into(),
            "--rm".into(),
            "--name".into(),
            case.id.clone(),
            "--network".into(),
            "none".into(),
            "--ulimit".into(),
            "nofile=20000:20000".into(),
            "--ulimit".into(),
            "nproc=32768:32768".into(),
        ];
        let dev = std::path::PathBuf::from(case.host().dev_root()).join("dev");
        for n in [
            "nvidia0",
            "nvidia2",
            "nvidiactl",
            "nvidia-uvm",
            "nvidia-uvm-tools",
            "nvidia-modeset",
        ] {
            a.push("--device".into());
            a.push(format!("{}:/dev/{n}", dev.join(n).display()));
        }
        a.push("--rootfs".into());
        a.push(case.rootfs.to_string_lossy().into_owned());
        a.extend(["/bin/sh".into(), "-c".into(), super::lab::SCRIPT.into()]);
        let mut c = podman(case, &a);
        bounded(&mut c, case, "alone", deadline);
        let mut rm = podman(
            case,
            &["rm".into(), "-f".into(), "-i".into(), case.id.clone()],
        );
        let _ = rm.stdout(Stdio::null()).stderr(Stdio::null()).status();
        return;
    }
    let mut spec = edited.unwrap_or_else(|| case.spec.clone());
    if let Some(h) = spec.get_mut("hooks") {
        *h = json!({});
    }
    fs::write(
        case.bundle.join("config.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
    let rt = kind.runtime().name();
    let state = case.dir.join("state-alone");
    let mut c = Command::new(rt);
    c.arg("--root")
        .arg(&state)
        .args(["run", "--bundle"])
        .arg(&case.bundle)
        .arg(&case.id);
    bounded(&mut c, case, "alone", deadline);
    let _ = Command::new(rt)
        .arg("--root")
        .arg(&state)
        .args(["delete", "--force", &case.id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    remove_cgroups(&case.id);
}

/// How long the low-level runtime alone takes on this case's `config.json`, with a no-op in
/// place of our hook (for inputs that slow the runtime itself down, such as a huge config.json).
pub fn baseline(case: &Case, kind: PathKind) -> Duration {
    let mut spec = case.spec.clone();
    match kind {
        PathKind::Hook(_) => push_hook(&mut spec, json!({"path": "/bin/true", "args": ["true"]})),
        PathKind::Cli => push_hook(
            &mut spec,
            json!({"path": "/usr/bin/containerd", "args": ["containerd", "oci-hook", "--", "/bin/true", "{{pid}}", "{{rootfs}}"]}),
        ),
        _ => {}
    }
    fs::write(
        case.bundle.join("config.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
    drop(spec);
    let id = format!("{}-base", case.id);
    let state = case.dir.join("state-base");
    let rt = kind.runtime().name();
    let start = Instant::now();
    let mut c = Command::new(rt);
    c.arg("--root")
        .arg(&state)
        .args(["run", "--bundle"])
        .arg(&case.bundle)
        .arg(&id);
    let r = bounded(&mut c, case, "baseline", start + Duration::from_secs(120));
    let took = start.elapsed();
    let _ = Command::new(rt)
        .arg("--root")
        .arg(&state)
        .args(["delete", "--force", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    remove_cgroups(&id);
    assert!(!r.timed_out, "{rt} alone did not finish in 120 s");
    took
}

fn push_hook(spec: &mut serde_json::Value, hook: serde_json::Value) {
    if !spec["hooks"].is_object() {
        spec["hooks"] = json!({});
    }
    if !spec["hooks"]["prestart"].is_array() {
        spec["hooks"]["prestart"] = json!([]);
    }
    spec["hooks"]["prestart"].as_array_mut().unwrap().push(hook);
}

/// A process is gone once it has no /proc entry or is a zombie nobody reaped yet.
fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Run `cmd` in its own process group with stdout and stderr in the case dir; kill the group at
/// `deadline`.
fn bounded(cmd: &mut Command, case: &Case, step: &str, deadline: Instant) -> Ran {
    cmd.stdin(Stdio::null());
    spawn_bounded(cmd, case, step, deadline)
}

/// Run `cmd` (stdin set by the caller) in its own process group: stdout to a file in the case
/// dir (a container started by `create` keeps writing there), stderr through a pipe as engines
/// give it (our shim passes a pipe on to crun's hooks; a regular file it cannot); kill the group
/// at `deadline`.
fn spawn_bounded(cmd: &mut Command, case: &Case, step: &str, deadline: Instant) -> Ran {
    let out_path = case.dir.join(format!("{step}.out"));
    let err_path = case.dir.join(format!("{step}.err"));
    cmd.stdout(fs::File::create(&out_path).unwrap())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut pipe = child.stderr.take().unwrap();
    let mut sink = fs::File::create(&err_path).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    // Detached: a container started by `create` holds the pipe until it exits.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut pipe, &mut sink);
        let _ = done_tx.send(());
    });
    let (status, timed_out) = wait_until(&mut child, deadline, case);
    let _ = done_rx.recv_timeout(Duration::from_millis(500));
    Ran {
        code: status.and_then(|s| s.code()).unwrap_or(-1),
        stdout: fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
        timed_out,
        ..Ran::default()
    }
}

fn wait_until(child: &mut Child, deadline: Instant, case: &Case) -> (Option<ExitStatus>, bool) {
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (Some(st), false);
        }
        if Instant::now() >= deadline {
            let pgid = child.id() as i32;
            // Hooks run by `runc init` or crun live in other sessions: kill every process below
            // the one we started, and those naming this case's container (conmon and crun,
            // which podman detaches), before the group.
            let mut pids = descendants(&[pgid]);
            let named = naming(&case.id);
            pids.extend(descendants(&named));
            for pid in pids {
                // SAFETY: kill(2) on a process this test started, directly or through the
                // runtime it ran.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            // SAFETY: kill(2) on the process group of a child we started in its own group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            release_fifos(case);
            let st = child.wait().ok();
            return (st, true);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `roots` and every process below them, from /proc.
fn descendants(roots: &[i32]) -> Vec<i32> {
    let mut children: std::collections::HashMap<i32, Vec<i32>> = Default::default();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut todo: Vec<i32> = roots.to_vec();
    while let Some(p) = todo.pop() {
        if out.contains(&p) {
            continue;
        }
        out.push(p);
        todo.extend(children.get(&p).into_iter().flatten());
    }
    out
}

/// Processes whose command line names `id` (a container id unique to one case).
fn naming(id: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmdline
            .split(|&b| b == 0)
            .any(|arg| String::from_utf8_lossy(arg).contains(id))
        {
            out.push(pid);
        }
    }
    out
}

/// Empty cgroups runc and crun leave behind when a run is killed: `/<id>` under each hierarchy.
pub fn remove_cgroups(id: &str) {
    for e in fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let _ = fs::remove_dir(e.path().join(id));
    }
}

/// A hook blocked opening a planted FIFO for reading is released by a writer that opens and
/// closes it (O_NONBLOCK: only succeeds when a reader is waiting).
pub fn release_fifos(case: &Case) {
    for f in &case.fifos {
        let c = std::ffi::CString::new(f.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; the descriptor is closed right away.
        unsafe {
            let fd = libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
}

/// Swap `rel` with a symlink to the flip's target until told to stop.
fn flip_loop(rootfs: &Path, f: &Flip, stop: &AtomicBool) {
    let a = rootfs.join(&f.rel);
    let b = a.with_file_name(format!(
        ".flip-{}",
        a.file_name().unwrap().to_string_lossy()
    ));
    let _ = fs::remove_file(&b);
    std::os::unix::fs::symlink(&f.target, &b).unwrap();
    let ca = std::ffi::CString::new(a.to_str().unwrap()).unwrap();
    let cb = std::ffi::CString::new(b.to_str().unwrap()).unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: valid C strings; renameat2(RENAME_EXCHANGE) swaps two names atomically.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                ca.as_ptr(),
                libc::AT_FDCWD,
                cb.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
        n += 1;
        if n % 64 == 0 {
            std::thread::yield_now();
        }
    }
    if n % 2 == 1 {
        // Leave the real directory in place.
        // SAFETY: as above.
        unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                ca.as_ptr(),
                libc::AT_FDCWD,
                cb.as_ptr(),
                libc::RENAME_EXCHANGE,
            );
        }
    }
}

// ------------------------------------------------------------------ podman

/// Podman's own storage, one per lab, with the lab's spec dir as /run/cdi (podman 4.3 reads
/// CDI specs only from /etc/cdi and /var/run/cdi) in a private mount namespace.
fn podman(case: &Case, args: &[String]) -> Command {
    let root = case.lab.t.join("podman");
    let cdi = case.dir.join("cdi");
    fs::create_dir_all("/run/cdi").unwrap();
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$0" /run/cdi && exec "$@""#)
        .arg(&cdi)
        .arg("podman")
        .arg("--root")
        .arg(root.join("storage"))
        .arg("--runroot")
        .arg(root.join("run"))
        .arg("--tmpdir")
        .arg(root.join("tmp"))
        .args([
            "--storage-driver",
            "vfs",
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "none",
        ])
        .args(args)
        .env("PATH", SYSTEM_PATH);
    for (k, _) in std::env::vars() {
        if k.starts_with("NVIDIA_") || k.starts_with("GPUCTK_") || k.starts_with("LD_") {
            c.env_remove(k);
        }
    }
    c
}

fn podman_run_args(case: &Case) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--rm",
        "--name",
        &case.id,
        "--network",
        "none",
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=32768:32768",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for d in &case.podman_devices {
        a.push("--device".into());
        a.push(d.clone());
    }
    for e in &case.extra_env {
        a.push("-e".into());
        a.push(e.clone());
    }
    a.push("--rootfs".into());
    a.push(case.rootfs.to_string_lossy().into_owned());
    a.extend(["/bin/sh".into(), "-c".into(), super::lab::SCRIPT.into()]);
    a
}

// ------------------------------------------------------------------ host-root sandbox

/// A private mount namespace whose root is an overlay of the host's `/` (and of `/dev`), upper
/// layers on a tmpfs: a hook told that the container root is `/` writes only there. A holder
/// process chrooted into it keeps it alive; commands enter it with `nsenter -t PID -m -r -w`.
struct Sandbox {
    child: Child,
    ovl: PathBuf,
}

const SANDBOX_SETUP: &str = r#"set -e
O="$0"
mount -t tmpfs tmpfs "$O"
mkdir -p "$O/up" "$O/wk" "$O/m" "$O/dup" "$O/dwk"
mount -t overlay overlay -o "lowerdir=/,upperdir=$O/up,workdir=$O/wk" "$O/m"
mount -t overlay overlay -o "lowerdir=/dev,upperdir=$O/dup,workdir=$O/dwk" "$O/m/dev"
mount --rbind /dev/pts "$O/m/dev/pts"
mount --rbind /dev/shm "$O/m/dev/shm"
mount --rbind /proc "$O/m/proc"
mount --rbind /sys "$O/m/sys"
# The case lives in a temp dir that may be on another file system (/dev/shm is bound above).
case "$1" in /dev/shm/*) ;; *) mkdir -p "$O/m$1" 2>/dev/null || true; mount --rbind "$1" "$O/m$1" ;; esac
echo ready
exec chroot "$O/m" /bin/sleep 100000
"#;

impl Sandbox {
    fn start(case: &Case) -> Sandbox {
        let ovl = case.dir.join("sandbox-ovl");
        fs::create_dir_all(&ovl).unwrap();
        let mut child = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                SANDBOX_SETUP,
            ])
            .arg(&ovl)
            .arg(case.lab.t.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.trim() != "ready" {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "host-root sandbox did not come up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Wait for the exec into the chroot, so -r finds the overlay root: commands entered
        // with the host's root instead would write to the host and leave the overlay clean, and
        // the case would pass. The holder either gets there or exits (`set -e`); no clock.
        let pid = child.id();
        let want = ovl.join("m");
        loop {
            match fs::read_link(format!("/proc/{pid}/root")) {
                Ok(r) if r == want => break,
                _ => {}
            }
            if let Some(st) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!(
                    "host-root sandbox exited ({st}) before its chroot: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Sandbox { child, ovl }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the container run left in the overlay's upper layers, outside the case's own dir
    /// (where the runtime's state and the rewritten config.json legitimately go), then stop.
    fn finish(mut self, case: &Case) -> Vec<String> {
        let out = Command::new("nsenter")
            .args(["-t", &self.pid().to_string(), "-m", "--"])
            .args(["find"])
            .arg(self.ovl.join("up"))
            .arg(self.ovl.join("dup"))
            .args(["-mindepth", "1", "-printf", "%H|%P|%y|%m\n"])
            .output()
            .unwrap();
        let mut damage = Vec::new();
        let own = case.dir.strip_prefix("/").unwrap().to_path_buf();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut it = line.splitn(4, '|');
            let (layer, rel, kind, mode) = (
                it.next().unwrap_or(""),
                it.next().unwrap_or(""),
                it.next().unwrap_or(""),
                it.next().unwrap_or(""),
            );
            let host_path = if layer.ends_with("/dup") {
                Path::new("/dev").join(rel)
            } else {
                Path::new("/").join(rel)
            };
            let relp = Path::new(rel);
            // The case dir and the directories above it are copied up for the runtime's writes.
            if !layer.ends_with("/dup") && (relp.starts_with(&own) || own.starts_with(relp)) {
                continue;
            }
            let lower = fs::symlink_metadata(&host_path).ok().map(|m| {
                use std::os::unix::fs::PermissionsExt;
                format!("{:o}", m.permissions().mode() & 0o7777)
            });
            match lower {
                Some(l) if kind == "d" && l == mode => {
                    // A directory copied up for something written below it: reported there.
                }
                Some(l) => damage.push(format!(
                    "{} ({kind}, mode {mode}; the host's has mode {l}) was written or changed",
                    host_path.display()
                )),
                None => damage.push(format!(
                    "{} ({kind}, mode {mode}) was created",
                    host_path.display()
                )),
            }
        }
        if !out.status.success() {
            damage.push(format!(
                "cannot inspect the sandbox: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        damage
    }
}

/// The host's `/` as the container root, two ways.
pub fn host_root_symlink(case: &Case) -> PathBuf {
    let p = case.dir.join("hostroot");
    let _ = fs::remove_file(&p);
    std::os::unix::fs::symlink("/", &p).unwrap();
    p
}
