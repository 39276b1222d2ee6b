//! The engine: its files, the runtimes' registration under the config's lock, and the reload
//! (a signal to its pid, or systemd) with the check that no container still runs through us.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};

use gpuctk_engines::{apply, ConfigLock, Engine, Options};

use crate::cli::{EngineArg, HostArgs, RestartMode};

use super::files::{runtimes, BINARY};
use super::host::*;

/// The engine's config and drop-in, as the host sees them: the flags, else the defaults
/// (docker has no drop-in; asking for one is an error).
pub(super) fn engine_files(
    engine: Engine,
    config: Option<&Path>,
    drop_in: Option<&Path>,
) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    let config = config
        .map(Path::to_path_buf)
        .unwrap_or_else(|| gpuctk_engines::default_config_path(engine));
    let drop_in = match (engine, drop_in) {
        (Engine::Docker, Some(_)) => {
            bail!("--drop-in-config: docker reads no drop-in files, only daemon.json; leave it out for docker")
        }
        (Engine::Docker, None) => None,
        (_, Some(d)) => Some(d.to_path_buf()),
        (Engine::Containerd, None) => Some(PathBuf::from("/etc/containerd/conf.d/99-nvidia.toml")),
        (Engine::Crio, None) => Some(PathBuf::from("/etc/crio/crio.conf.d/99-nvidia.toml")),
    };
    for p in std::iter::once(&config).chain(drop_in.iter()) {
        if !p.is_absolute() {
            bail!(
                "{}: give the path as the host sees it, absolute (it is resolved under --host-root)",
                p.display()
            );
        }
    }
    Ok((config, drop_in))
}

/// The socket and systemd unit of each engine.
pub(super) fn engine_defaults(engine: Engine) -> (&'static str, &'static str) {
    match engine {
        Engine::Containerd => ("/run/containerd/containerd.sock", "containerd"),
        Engine::Docker => ("/var/run/docker.sock", "docker"),
        Engine::Crio => ("/var/run/crio/crio.sock", "crio"),
    }
}

pub(super) fn engine_of(e: EngineArg) -> Engine {
    match e {
        EngineArg::Docker => Engine::Docker,
        EngineArg::Containerd => Engine::Containerd,
        EngineArg::Crio => Engine::Crio,
    }
}

/// Register (or remove) one runtime under the config's lock; returns the files changed.
pub(super) fn engine_step(
    host: &Host,
    engine: Engine,
    config: &Path,
    opts: &Options,
    remove: bool,
    before_apply: &mut dyn FnMut(&[gpuctk_engines::Edit]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<gpuctk_engines::Applied>> {
    let path = host.here(config);
    let _lock = ConfigLock::acquire(&path, gpuctk_engines::lock::DEFAULT_TIMEOUT)?;
    let current = gpuctk_engines::read_optional(&path).map_err(|e| {
        anyhow!(
            "{}: cannot read it: {e}; nothing was written",
            path.display()
        )
    })?;
    let edits = if remove {
        gpuctk_engines::unconfigure(engine, &path, current.as_deref(), opts)
    } else {
        gpuctk_engines::configure(engine, &path, current.as_deref(), opts)
    }
    .map_err(|e| anyhow!("{e}; nothing was written"))?;
    let changing: Vec<_> = edits.into_iter().filter(|e| !e.is_noop()).collect();
    before_apply(&changing)?;
    Ok(apply(&changing)?)
}

/// `--restart-mode`, or the engine's default: a SIGHUP, but a systemd restart for CRI-O, which
/// reloads on SIGHUP only the options crio.conf(5) marks as live-reloadable (the runtime table
/// has not always been one).
pub(super) fn restart_mode(h: &HostArgs, engine: Engine) -> RestartMode {
    h.restart_mode.unwrap_or(match engine {
        Engine::Crio => RestartMode::Systemd,
        _ => RestartMode::Signal,
    })
}

/// Two JSON texts with the same meaning (key order included, as daemon.json keeps it).
pub(super) fn same_json(a: &[u8], b: &[u8]) -> bool {
    match (
        serde_json::from_slice::<serde_json::Value>(a),
        serde_json::from_slice::<serde_json::Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// A file left by an unconfigure that holds nothing of anyone's: what configure creates from
/// nothing, emptied again.
pub(super) fn holds_nothing(bytes: &[u8]) -> bool {
    let t = String::from_utf8_lossy(bytes);
    matches!(t.trim(), "" | "{}" | "version = 2")
}

/// The task dirs of containerd's runc shims that may run containers through our runtime, as
/// the host sees them: containerd's own (its config's `state`, default `/run/containerd`) and
/// dockerd's containerd.
pub(super) fn task_dirs(
    host: &Host,
    engine: Engine,
    config: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut states = vec![PathBuf::from("/run/containerd")];
    if engine == Engine::Containerd {
        let here = host.here(config);
        let text = match std::fs::symlink_metadata(&here) {
            Ok(_) => Some(crate::capped::read_capped(
                &here,
                4 << 20,
                "containerd's config",
            )?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => bail!("{}: {e}", here.display()),
        };
        let state = text
            .and_then(|t| String::from_utf8(t).ok())
            .and_then(|t| t.parse::<toml_edit::DocumentMut>().ok())
            .and_then(|d| d.get("state").and_then(|s| s.as_str()).map(PathBuf::from))
            .filter(|s| s.is_absolute());
        if let Some(s) = state {
            states.insert(0, s);
        }
    }
    states.push(PathBuf::from("/run/docker/containerd/daemon"));
    states.dedup();
    Ok(states
        .into_iter()
        .map(|s| s.join("io.containerd.runtime.v2.task"))
        .collect())
}

/// The containers (`namespace/id`) whose task, in a containerd task dir, runs one of our
/// runtime's names: the runc shim keeps its `BinaryName` in the bundle's `runtime` file and
/// runs it for every kill and delete.
pub(super) fn containers_on(
    host: &Host,
    engine: Engine,
    config: &Path,
    toolkit: &Path,
) -> anyhow::Result<Vec<String>> {
    let ours: BTreeSet<Vec<u8>> = runtimes(toolkit, "", false)
        .into_iter()
        .map(|r| r.binary)
        .chain([toolkit.join(BINARY)])
        .map(|p| p.into_os_string().into_encoded_bytes())
        .collect();
    let root = gpuctk_container::Root::open(&host.root)
        .with_context(|| format!("--host-root {}", host.root.display()))?;
    // Gone between the listing and the look: not running.
    let absent = |e: &gpuctk_container::RootError| e.is_not_found();
    let mut found = Vec::new();
    for dir in task_dirs(host, engine, config)? {
        let dir = dir.to_string_lossy().into_owned();
        let namespaces = match root.read_dir_names_limited(&dir, 4096) {
            Err(e) if absent(&e) => continue,
            r => r.with_context(|| format!("{dir}: cannot list containerd's tasks"))?,
        };
        for ns in namespaces {
            let nsdir = format!("{dir}/{ns}");
            let ids = match root.read_dir_names_limited(&nsdir, 1 << 16) {
                Err(e) if absent(&e) => continue,
                r => r.with_context(|| format!("{nsdir}: cannot list containerd's tasks"))?,
            };
            for id in ids {
                let file = format!("{nsdir}/{id}/runtime");
                let bin = match root.read_to_vec(&file, 4096) {
                    Err(e) if absent(&e) => continue,
                    r => r.with_context(|| format!("{file}: cannot read the task's runtime"))?,
                };
                if ours.contains(bin.trim_ascii()) {
                    found.push(format!("{ns}/{id}"));
                }
            }
        }
    }
    Ok(found)
}

/// The pid at the other end of the unix socket `shown` (as the host sees it), reached at
/// `path`.
pub(super) fn socket_peer(path: &Path, shown: &Path) -> anyhow::Result<i32> {
    use std::os::fd::AsRawFd;
    let s = std::os::unix::net::UnixStream::connect(path).with_context(|| {
        format!(
            "--socket {} (here {}): cannot connect (is the engine running? give --socket or --pid-file, or --restart-mode none)",
            shown.display(),
            path.display()
        )
    })?;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid for the size given. Not rustix's `socket_peercred`: its
    // `UCred::pid` cannot hold the 0 the kernel gives for a peer outside our pid namespace.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        bail!(
            "--socket {}: cannot read its peer: {}",
            shown.display(),
            std::io::Error::last_os_error()
        );
    }
    let pid = cred.pid;
    if pid <= 0 {
        bail!(
            "--socket {}: its process is not visible from here; run with hostPID: true",
            shown.display()
        );
    }
    Ok(pid)
}

/// Tell the engine to read its new config, as `--restart-mode` says.
pub(super) fn reload(
    host: &Host,
    h: &HostArgs,
    mode: RestartMode,
    engine: Engine,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let (socket, unit) = engine_defaults(engine);
    match mode {
        RestartMode::None => {
            let what = match engine {
                Engine::Containerd => "restart containerd",
                _ => "send SIGHUP to it or restart it",
            };
            writeln!(
                out,
                "--restart-mode none: {engine} not told; {what} to use the change"
            )?;
        }
        RestartMode::Signal => {
            let pid = match &h.pid_file {
                Some(f) => {
                    let here = host.here(f);
                    let bytes = crate::capped::read_capped(&here, 4096, "the --pid-file")?;
                    String::from_utf8_lossy(&bytes)
                        .trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| anyhow!("--pid-file {}: holds no pid", here.display()))?
                }
                None => {
                    let s = h.socket.clone().unwrap_or_else(|| PathBuf::from(socket));
                    socket_peer(&resolve_in_root(&host.root, &s), &s)?
                }
            };
            let hup = rustix::process::Pid::from_raw(pid)
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))
                .and_then(|p| {
                    Ok(rustix::process::kill_process(
                        p,
                        rustix::process::Signal::HUP,
                    )?)
                });
            if let Err(e) = hup {
                bail!("cannot send SIGHUP to {engine} (pid {pid}): {e}");
            }
            let note = match engine {
                // containerd does not handle SIGHUP: it exits, and its service manager starts
                // it again with the new config (as with NVIDIA's installer).
                Engine::Containerd => {
                    "; containerd exits on it and its service manager restarts it"
                }
                Engine::Docker => "; dockerd reloads daemon.json, runtimes included",
                Engine::Crio => "; CRI-O reloads the options crio.conf(5) marks as live-reloadable",
            };
            writeln!(out, "sent SIGHUP to {engine} (pid {pid}){note}")?;
        }
        RestartMode::Systemd => {
            let unit = h.systemd_unit.clone().unwrap_or_else(|| unit.to_string());
            let prog = systemctl_path(host, &h.systemctl)?;
            let mut cmd = std::process::Command::new(&prog);
            cmd.args(["restart", &unit]);
            if host.root != Path::new("/") {
                let root = std::ffi::CString::new(host.root.as_os_str().as_encoded_bytes())
                    .context("--host-root holds a NUL byte")?;
                // SAFETY: raw chroot and chdir (rustix: no allocation, no lock) are
                // async-signal-safe; the CString outlives the closure's use in the child.
                #[allow(unsafe_code)]
                unsafe {
                    cmd.pre_exec(move || {
                        rustix::process::chroot(root.as_c_str())?;
                        Ok(rustix::process::chdir(c"/")?)
                    });
                }
            }
            let status = cmd.status().with_context(|| {
                format!("running {} restart {unit} in the host root", prog.display())
            })?;
            if !status.success() {
                bail!("{} restart {unit} failed ({status})", prog.display());
            }
            writeln!(out, "restarted {unit} ({} restart {unit})", prog.display())?;
        }
    }
    Ok(())
}

/// `systemctl` as the host sees it: a bare name is looked up in the host's usual directories.
pub(super) fn systemctl_path(host: &Host, given: &str) -> anyhow::Result<PathBuf> {
    if given.contains('/') {
        return Ok(PathBuf::from(given));
    }
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(given))
        .find(|p| gpuctk_host::checks::is_executable(&resolve_in_root(&host.root, p)))
        .ok_or_else(|| {
            anyhow!(
                "--systemctl {given}: not found in the host's /usr/bin, /bin, /usr/sbin or /sbin; use --restart-mode signal or none"
            )
        })
}
