//! `gpuctk install | uninstall --host-root DIR`: what a DaemonSet runs to put gpuctk on a node,
//! as the GPU Operator's toolkit container does for NVIDIA's toolkit.
//!
//! `install` copies the running binary into the toolkit dir (`/usr/local/nvidia/toolkit`) with
//! its personalities as symlinks, writes `config.toml` where that binary looks first
//! (`<toolkit>/.config/nvidia-container-runtime/config.toml`), writes the CDI spec into the
//! host's `/var/run/cdi`, registers the `nvidia`, `nvidia-cdi` and `nvidia-legacy` runtimes with
//! the engine (a drop-in for containerd and CRI-O) and asks the engine to reload. Every path is a
//! path on the host, reached under `--host-root` with symlinks resolved inside it (the host's
//! `/var/run` is a link to `/run`), and written as the host sees it.
//!
//! It is idempotent: a second run writes no file (each is compared byte for byte first) and
//! reloads nothing. What it created, what it replaced (whose original it kept as `<file>.bak`)
//! and the engine-config backups it took are recorded in a manifest in the toolkit dir, so that
//! `uninstall` removes exactly that, restores the engine's config and leaves the host as it was.
//! Each path is recorded (the manifest rewritten atomically) before it is created, moved or
//! written: an install that fails or is killed part way leaves a manifest naming everything it
//! touched, and a retry (the kubelet restarting the pod) or an uninstall works from it. A path
//! recorded but never written is skipped by uninstall. Files the manifest does not name are never
//! adopted, even when they hold what install would write: with recording first, only something
//! else could have put them there.
//!
//! `uninstall` unregisters the runtimes and reloads the engine before it removes anything; a
//! container containerd still runs through our runtime keeps the runtime's entry point on the
//! host (its shim runs it to kill and delete), and uninstall finishes on a later run.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use gpuctk_cdi::spec::Format;
use gpuctk_cdi::transform::{transform_root, RelativeTo};
use gpuctk_core::{build_spec, plan, CapabilitySet, PlanOptions, SpecOptions};
use gpuctk_engines::{apply, Backup, ConfigLock, Engine, Options};
use gpuctk_host::{DiscoverOptions, Roots};

use crate::cli::{EngineArg, HostArgs, InstallArgs, RestartMode, UninstallArgs};

/// The binary's name in the toolkit dir.
pub const BINARY: &str = "gpuctk";

/// The names the binary answers to, each a symlink to [`BINARY`] in the toolkit dir.
pub const PERSONALITIES: &[&str] = &[
    "nvidia-container-runtime",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
    "nvidia-container-cli",
    "nvidia-cdi-hook",
    "nvidia-ctk",
];

/// The manifest's name in the toolkit dir.
pub const MANIFEST: &str = ".gpuctk-install.json";

/// Where the config goes, relative to the toolkit dir: where NVIDIA's toolkit container puts
/// it, and where the installed binary looks first (see `config::config_path`).
pub const CONFIG: &str = crate::config::INSTALLED_CONFIG;

/// The CDI spec's file name in the spec dir.
pub const SPEC: &str = "nvidia.yaml";

/// The management spec's file name (kind `management.nvidia.com/gpu`), as NVIDIA's installer
/// names it: monitoring agents and NVIDIA's NRI plugin ask for `management.nvidia.com/gpu=all`.
pub const MANAGEMENT_SPEC: &str = "management.nvidia.com-gpu.yaml";

/// One runtime registered with the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// Its name in the engine (and the RuntimeClass handler).
    pub name: String,
    /// The executable, as the host sees it.
    pub binary: PathBuf,
    /// Made the engine's default runtime.
    pub default: bool,
}

/// The runtimes install registers, as the GPU Operator does: `NAME` (the mode config.toml
/// says), `NAME-cdi` and `NAME-legacy` (that mode whatever the config says).
pub fn runtimes(toolkit: &Path, name: &str, set_as_default: bool) -> Vec<Runtime> {
    [("", ""), ("-cdi", ".cdi"), ("-legacy", ".legacy")]
        .into_iter()
        .map(|(suffix, ext)| Runtime {
            name: format!("{name}{suffix}"),
            binary: toolkit.join(format!("nvidia-container-runtime{ext}")),
            default: set_as_default && suffix.is_empty(),
        })
        .collect()
}

/// The engine's config and drop-in, as the host sees them: the flags, else the defaults
/// (docker has no drop-in; asking for one is an error).
pub fn engine_files(
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
fn engine_defaults(engine: Engine) -> (&'static str, &'static str) {
    match engine {
        Engine::Containerd => ("/run/containerd/containerd.sock", "containerd"),
        Engine::Docker => ("/var/run/docker.sock", "docker"),
        Engine::Crio => ("/var/run/crio/crio.sock", "crio"),
    }
}

/// config.toml for the toolkit dir: `config default`, with the hooks in the toolkit dir, the
/// driver root when it is not `/` and the dev root when it is not the driver root.
pub fn config_text(
    toolkit: &Path,
    driver_root: &Path,
    dev_root: Option<&Path>,
) -> anyhow::Result<String> {
    let mut doc: toml_edit::DocumentMut = super::config_cmd::default_text()
        .parse()
        .context("the default config.toml does not parse")?;
    let hook = toolkit.join("nvidia-cdi-hook");
    super::config_cmd::set(
        &mut doc,
        "gpuctk.hook-path",
        toml_edit::Value::from(hook.to_string_lossy().as_ref()),
    )?;
    if driver_root != Path::new("/") {
        super::config_cmd::set(
            &mut doc,
            "nvidia-container-cli.root",
            toml_edit::Value::from(driver_root.to_string_lossy().as_ref()),
        )?;
    }
    if let Some(d) = dev_root.filter(|d| *d != driver_root) {
        super::config_cmd::set(
            &mut doc,
            "gpuctk.dev-root",
            toml_edit::Value::from(d.to_string_lossy().as_ref()),
        )?;
    }
    Ok(doc.to_string())
}

/// What install did, so that uninstall undoes exactly that. Paths are as the host sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The engine registered with.
    pub engine: String,
    /// Its config file.
    pub config: PathBuf,
    /// The drop-in the runtimes are in (none for docker).
    pub drop_in: Option<PathBuf>,
    /// The runtime names registered.
    pub runtimes: Vec<String>,
    /// Files and links install created (nothing was there).
    pub created: BTreeSet<PathBuf>,
    /// Directories install created.
    pub dirs: BTreeSet<PathBuf>,
    /// Files install replaced; each original is kept in `<file>.bak` until uninstall puts it back.
    pub replaced: BTreeSet<PathBuf>,
    /// Backups of the engine's config that install's registration wrote.
    pub backups: BTreeSet<PathBuf>,
    /// The engine's config changed but telling the engine failed: the next install tries again
    /// even though nothing changes then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reload_pending: bool,
}

/// Resolve `host` (absolute, as the host sees it) under `root` as the host would: symlinks are
/// followed inside `root` (an absolute target starts again at `root`), `..` stops at it. Every
/// component is resolved, the last one too.
pub fn resolve_in_root(root: &Path, host: &Path) -> PathBuf {
    let mut cur = PathBuf::new();
    let mut pending: Vec<std::ffi::OsString> = host
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut links = 0;
    while let Some(c) = pending.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        let full = root.join(&next);
        match std::fs::symlink_metadata(&full) {
            Ok(m) if m.file_type().is_symlink() && links < 40 => {
                links += 1;
                let Ok(target) = std::fs::read_link(&full) else {
                    cur = next;
                    continue;
                };
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => pending.push(n.to_os_string()),
                        Component::ParentDir => pending.push("..".into()),
                        _ => {}
                    }
                }
            }
            _ => cur = next,
        }
    }
    root.join(cur)
}

/// The host, seen from this container.
struct Host {
    root: PathBuf,
}

impl Host {
    /// Where this container reaches `host` (absolute, as the host sees it): its directory
    /// resolved under the host root, its own name kept (a link of ours is replaced, not
    /// followed).
    fn here(&self, host: &Path) -> PathBuf {
        match (host.parent(), host.file_name()) {
            (Some(dir), Some(name)) => resolve_in_root(&self.root, dir).join(name),
            _ => resolve_in_root(&self.root, host),
        }
    }

    /// Create `dir` (as the host sees it) and the missing directories above it, recording each
    /// one before it is created. A failure removes the ones this call created, so that none is
    /// left unrecorded before the toolkit dir (where the manifest goes) exists.
    fn make_dirs(&self, dir: &Path, b: &mut Book) -> anyhow::Result<()> {
        let mut missing = Vec::new();
        let mut d = Some(dir);
        while let Some(cur) = d {
            if self.here(cur).is_dir() {
                break;
            }
            missing.push(cur.to_path_buf());
            d = cur.parent();
        }
        let mut made: Vec<PathBuf> = Vec::new();
        let mut step = |cur: &Path, b: &mut Book| -> anyhow::Result<()> {
            b.record(self, |m| m.dirs.insert(cur.to_path_buf()))?;
            let here = self.here(cur);
            std::fs::create_dir(&here)
                .with_context(|| format!("{}: cannot create directory", here.display()))?;
            made.push(cur.to_path_buf());
            std::fs::set_permissions(&here, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("{}: cannot set its mode", here.display()))
        };
        for cur in missing.into_iter().rev() {
            if let Err(e) = step(&cur, b) {
                for d in made.iter().rev() {
                    if std::fs::remove_dir(self.here(d)).is_ok() {
                        b.m.dirs.remove(d);
                    }
                }
                let _ = b.save(self);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The manifest being built, and where it goes: every change to it is on disk before the path
/// it names is touched (once the toolkit dir, which holds it, exists).
struct Book {
    toolkit: PathBuf,
    m: Manifest,
}

impl Book {
    /// Apply `change` to the manifest and, when it changed something, write it.
    fn record(
        &mut self,
        host: &Host,
        change: impl FnOnce(&mut Manifest) -> bool,
    ) -> anyhow::Result<()> {
        if change(&mut self.m) {
            self.save(host)?;
        }
        Ok(())
    }

    /// Write the manifest, if its directory is there yet.
    fn save(&self, host: &Host) -> anyhow::Result<()> {
        if host.here(&self.toolkit).is_dir() {
            write_manifest(host, &self.toolkit, &self.m)?;
        }
        Ok(())
    }
}

/// What a step did, for the report.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Unchanged,
    Created,
    Replaced,
}

fn report(out: &mut impl Write, o: Outcome, host: &Path) -> std::io::Result<()> {
    let what = match o {
        Outcome::Unchanged => "unchanged",
        Outcome::Created => "created",
        Outcome::Replaced => "updated",
    };
    writeln!(out, "{what} {}", host.display())
}

/// `<path>.bak`.
fn bak(path: &Path) -> PathBuf {
    gpuctk_engines::default_backup_path(path)
}

/// Keep the original of a file we are about to replace for the first time in `<file>.bak`
/// (a file we created, or whose original is already kept, has none to keep). It is recorded
/// first; a record whose `.bak` is missing (the move failed) is moved again.
fn keep_original(host: &Host, path: &Path, b: &mut Book) -> anyhow::Result<()> {
    let here = host.here(path);
    let backup = bak(&here);
    if b.m.created.contains(path)
        || (b.m.replaced.contains(path) && std::fs::symlink_metadata(&backup).is_ok())
    {
        return Ok(());
    }
    if std::fs::symlink_metadata(&backup).is_ok() {
        bail!(
            "{}: install would replace it, but {} exists already; move one of them away and run install again",
            here.display(),
            backup.display()
        );
    }
    b.record(host, |m| m.replaced.insert(path.to_path_buf()))?;
    std::fs::rename(&here, &backup).with_context(|| {
        format!(
            "{}: cannot keep the original as {}",
            here.display(),
            backup.display()
        )
    })?;
    Ok(())
}

/// Put `bytes` at `path` (as the host sees it) with `mode`, atomically; nothing is written when
/// the file already holds them.
fn put_file(
    host: &Host,
    path: &Path,
    bytes: &[u8],
    mode: u32,
    b: &mut Book,
) -> anyhow::Result<Outcome> {
    let here = host.here(path);
    let outcome = match std::fs::symlink_metadata(&here) {
        Ok(md) if md.is_file() => {
            if md.mode() & 0o7777 == mode && std::fs::read(&here).ok().as_deref() == Some(bytes) {
                return Ok(Outcome::Unchanged);
            }
            Outcome::Replaced
        }
        Ok(_) => Outcome::Replaced,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Created,
        Err(e) => return Err(anyhow!("{}: {e}", here.display())),
    };
    if outcome == Outcome::Replaced {
        keep_original(host, path, b)?;
    } else {
        b.record(host, |m| m.created.insert(path.to_path_buf()))?;
    }
    gpuctk_atomicfile::write(&here, bytes, Some(mode))
        .with_context(|| format!("{}: cannot write it; it is unchanged", here.display()))?;
    Ok(outcome)
}

/// Make `path` (as the host sees it) a symlink to `target`; replaced atomically (a link at a
/// temp name renamed over it) when it is anything else.
fn put_link(host: &Host, path: &Path, target: &Path, b: &mut Book) -> anyhow::Result<Outcome> {
    let here = host.here(path);
    let outcome = match std::fs::symlink_metadata(&here) {
        Ok(md) if md.file_type().is_symlink() => {
            if std::fs::read_link(&here).ok().as_deref() == Some(target) {
                return Ok(Outcome::Unchanged);
            }
            Outcome::Replaced
        }
        Ok(_) => Outcome::Replaced,
        Err(_) => Outcome::Created,
    };
    if outcome == Outcome::Replaced {
        keep_original(host, path, b)?;
    }
    if outcome == Outcome::Created {
        b.record(host, |m| m.created.insert(path.to_path_buf()))?;
    }
    let name = here
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = here.with_file_name(format!(".{name}.gpuctk-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .with_context(|| format!("{}: cannot create the link", tmp.display()))?;
    std::fs::rename(&tmp, &here).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow!("{}: cannot put the link in place: {e}", here.display())
    })?;
    Ok(outcome)
}

/// The CDI spec of the host's GPUs and the management spec, with host paths as the host sees
/// them and the toolkit's hook.
/// The CDI spec, the management spec, and NVML's answers to record for the runtime (`None`
/// without NVML).
type SpecTexts = (String, String, Option<Vec<u8>>);

fn spec_texts(host: &Host, a: &InstallArgs, toolkit: &Path) -> anyhow::Result<SpecTexts> {
    let driver_root = resolve_in_root(&host.root, &a.driver_root);
    let dev_root = match &a.dev_root {
        Some(d) => resolve_in_root(&host.root, d),
        None => driver_root.clone(),
    };
    let roots = Roots {
        driver_root,
        dev_root,
        proc_root: a.proc_root.clone(),
    };
    let inv = super::discover(&roots, &DiscoverOptions::default()).with_context(|| {
        format!(
            "--driver-root {} (NVIDIA_DRIVER_ROOT), under --host-root: no driver found there yet; nothing was written",
            a.driver_root.display()
        )
    })?;
    if !inv.libraries.iter().any(|l| l.name == "libcuda.so") {
        bail!(
            "no libcuda.so under driver root {} (here {}): is the driver installed yet? Set --driver-root (NVIDIA_DRIVER_ROOT; /run/nvidia/driver with a containerized driver)",
            a.driver_root.display(),
            roots.driver_root.display()
        );
    }
    let hook = toolkit
        .join("nvidia-cdi-hook")
        .to_string_lossy()
        .into_owned();
    let mut p = plan(
        &inv,
        &PlanOptions {
            hook_path: hook.clone(),
            capabilities: CapabilitySet::all(),
        },
    );
    p.hooks_read_proc(&hook);
    // MIG devices as `cdi generate` gives them, and NVML's answers recorded for the runtime
    // (keyed inside the driver root, they hold for the host's view too), so that `MIG-<uuid>`
    // requests work as soon as install is done.
    let nvml = crate::mig::ask_nvml(&inv);
    let record = match nvml.as_ref().map(|i| crate::mig::record_text(&inv, i)) {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            tracing::warn!("NVML's answers not recorded for the runtime: {e}");
            None
        }
        Err(_) => None,
    };
    let migs = crate::mig::mig_devices(&inv, nvml.as_ref().ok())?;
    if let (Err(why), false) = (&nvml, migs.is_empty()) {
        tracing::warn!("{why}");
    }
    (p.mig, p.mig_gpus) = crate::mig::mig_plan(&inv, &migs, nvml.as_ref().ok(), &hook);
    // As `cdi generate` by default: `additionalGids` would need cdiVersion 0.7.0, which older
    // CDI clients refuse for the whole spec; the runtime's own edits carry the groups.
    p.without_additional_gids();
    let spec = build_spec(&inv, &p, &SpecOptions::default())?;
    let management =
        super::cdi::management_spec(&roots, &p, "management.nvidia.com", "gpu", &hook)?;
    let text = |mut spec: gpuctk_cdi::spec::Spec| -> anyhow::Result<String> {
        if host.root != Path::new("/") {
            // Discovery saw the host under the host root; the host sees it at /.
            transform_root(
                &mut spec,
                &host.root.to_string_lossy(),
                "/",
                RelativeTo::Host,
            );
        }
        Ok(super::cdi::validated(spec)?.to_format(Format::Yaml))
    };
    Ok((text(spec)?, text(management)?, record))
}

fn engine_of(e: EngineArg) -> Engine {
    match e {
        EngineArg::Docker => Engine::Docker,
        EngineArg::Containerd => Engine::Containerd,
        EngineArg::Crio => Engine::Crio,
    }
}

/// Check `--host-root` and `--toolkit-dir`.
fn host_of(h: &HostArgs) -> anyhow::Result<Host> {
    if !h.toolkit_dir.is_absolute() {
        bail!(
            "--toolkit-dir {}: give it as the host sees it, absolute",
            h.toolkit_dir.display()
        );
    }
    let root = std::path::absolute(&h.host_root)
        .with_context(|| format!("--host-root {}", h.host_root.display()))?;
    if !root.is_dir() {
        bail!(
            "--host-root {}: not a directory; mount the host's / there (hostPath /)",
            root.display()
        );
    }
    Ok(Host { root })
}

/// Read the manifest of an earlier install; `None` when there is none.
fn read_manifest(host: &Host, toolkit: &Path) -> anyhow::Result<Option<Manifest>> {
    let here = host.here(&toolkit.join(MANIFEST));
    match std::fs::symlink_metadata(&here) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("{}: {e}", here.display())),
        Ok(_) => {}
    }
    // Capped like every file we parse; a manifest lists a few dozen paths.
    let b = super::read_capped(&here, 4 << 20, "the install manifest")?;
    serde_json::from_slice(&b).map(Some).with_context(|| {
        format!(
            "{}: not a manifest gpuctk install wrote; remove it if nothing is installed",
            here.display()
        )
    })
}

/// Register (or remove) one runtime under the config's lock; returns the files changed.
fn engine_step(
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

/// The host-view path of `here`, a path under the host root.
fn host_view(host: &Host, here: &Path) -> PathBuf {
    match here.strip_prefix(&host.root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => here.to_path_buf(),
    }
}

pub fn install(a: InstallArgs) -> anyhow::Result<ExitCode> {
    if a.uninstall_on_exit && !a.wait {
        bail!("--uninstall-on-exit (UNINSTALL_ON_EXIT): only with --wait, which is when install exits on a signal");
    }
    // Blocked before the work, so a SIGTERM during it waits for the files to be whole.
    let signals = if a.wait {
        Some(
            gpuctk_host::watch::block_stop_signals()
                .map(|(set, _)| set)
                .context("cannot block SIGTERM and SIGINT")?,
        )
    } else {
        None
    };
    let code = install_once(&a)?;
    let Some(set) = signals else {
        return Ok(code);
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "installed; waiting for SIGTERM")?;
        out.flush()?;
    }
    let mut sig: libc::c_int = 0;
    // SAFETY: `set` is an initialised signal set and `sig` a valid out-pointer.
    if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
        bail!("sigwait: {}", std::io::Error::last_os_error());
    }
    tracing::info!("signal {sig}: exiting");
    if a.uninstall_on_exit {
        return uninstall(UninstallArgs {
            host: a.host.clone(),
        });
    }
    Ok(ExitCode::SUCCESS)
}

fn install_once(a: &InstallArgs) -> anyhow::Result<ExitCode> {
    let host = host_of(&a.host)?;
    let toolkit = a.host.toolkit_dir.clone();
    if !a.driver_root.is_absolute() {
        bail!(
            "--driver-root {}: give it as the host sees it, absolute",
            a.driver_root.display()
        );
    }
    let engine = engine_of(a.runtime);
    let (config, drop_in) = engine_files(engine, a.config.as_deref(), a.drop_in_config.as_deref())?;
    let runtimes = runtimes(&toolkit, &a.runtime_name, a.set_as_default);
    let previous = read_manifest(&host, &toolkit)?;
    let mut m = previous.clone().unwrap_or_default();
    if let Some(p) = &previous {
        if p.engine != engine.as_str() || p.config != config || p.drop_in != drop_in {
            bail!(
                "{}: an earlier install registered with {} ({}); run `gpuctk uninstall` first to change the engine or its files",
                toolkit.join(MANIFEST).display(),
                p.engine,
                p.config.display()
            );
        }
    }
    m.engine = engine.as_str().to_string();
    m.config = config.clone();
    m.drop_in = drop_in.clone();
    for r in &runtimes {
        if !m.runtimes.contains(&r.name) {
            m.runtimes.push(r.name.clone());
        }
    }

    // Everything is computed before the first write: a host without a driver fails here.
    let binary = std::fs::read("/proc/self/exe")
        .context("/proc/self/exe: cannot read the running binary to install it")?;
    if a.dev_root.as_deref().is_some_and(|d| !d.is_absolute()) {
        bail!("--dev-root: give it as the host sees it, absolute");
    }
    let config_toml = config_text(&toolkit, &a.driver_root, a.dev_root.as_deref())?;
    let (spec, management_spec, nvml_record) = spec_texts(&host, a, &toolkit)?;

    let mut out = std::io::stdout().lock();
    let mut b = Book {
        toolkit: toolkit.clone(),
        m,
    };
    host.make_dirs(&toolkit, &mut b)?;
    // From here on every change of the manifest is on disk before what it names.
    b.save(&host)?;
    // The binary, then its names, then what they read.
    let bin_path = toolkit.join(BINARY);
    let o = put_file(&host, &bin_path, &binary, 0o755, &mut b)?;
    report(&mut out, o, &bin_path)?;
    for name in PERSONALITIES {
        let link = toolkit.join(name);
        let o = put_link(&host, &link, Path::new(BINARY), &mut b)?;
        report(&mut out, o, &link)?;
    }
    let config_path = toolkit.join(CONFIG);
    if let Some(dir) = config_path.parent() {
        host.make_dirs(dir, &mut b)?;
    }
    let o = put_file(&host, &config_path, config_toml.as_bytes(), 0o644, &mut b)?;
    report(&mut out, o, &config_path)?;
    host.make_dirs(&a.cdi_spec_dir, &mut b)?;
    let spec_path = a.cdi_spec_dir.join(SPEC);
    let o = put_file(&host, &spec_path, spec.as_bytes(), 0o644, &mut b)?;
    report(&mut out, o, &spec_path)?;
    let management_path = a.cdi_spec_dir.join(MANAGEMENT_SPEC);
    let o = put_file(
        &host,
        &management_path,
        management_spec.as_bytes(),
        0o644,
        &mut b,
    )?;
    report(&mut out, o, &management_path)?;
    if let Some(record) = &nvml_record {
        let path = Path::new(crate::config::DEFAULT_NVML_CACHE);
        if let Some(dir) = path.parent() {
            host.make_dirs(dir, &mut b)?;
        }
        let o = put_file(&host, path, record, 0o644, &mut b)?;
        report(&mut out, o, path)?;
    }

    // The engine: its config's directory and the drop-in's are ours to create if missing.
    if let Some(dir) = config.parent() {
        host.make_dirs(dir, &mut b)?;
    }
    if let Some(dir) = drop_in.as_deref().and_then(Path::parent) {
        host.make_dirs(dir, &mut b)?;
    }
    let mut engine_changed = false;
    for r in &runtimes {
        let opts = Options {
            runtime_name: r.name.clone(),
            runtime_path: r.binary.to_string_lossy().into_owned(),
            set_as_default: r.default,
            enable_cdi: a.enable_cdi,
            drop_in: drop_in.as_ref().map(|d| host.here(d)),
        };
        // The files the edits will create and the backups they will take, recorded first.
        let config_here = host.here(&config);
        let mut record = |edits: &[gpuctk_engines::Edit]| {
            b.record(&host, |m| {
                let mut changed = false;
                for e in edits {
                    if !e.delete && e.before.is_none() {
                        changed |= m.created.insert(host_view(&host, &e.path));
                        if e.path == config_here {
                            changed |= m.created.insert(config.clone());
                        }
                    } else if !e.delete
                        && !e.ours
                        && std::fs::symlink_metadata(&e.backup)
                            .is_err_and(|x| x.kind() == std::io::ErrorKind::NotFound)
                    {
                        changed |= m.backups.insert(host_view(&host, &e.backup));
                    }
                }
                changed
            })
        };
        let done = engine_step(&host, engine, &config, &opts, false, &mut record)?;
        for done in done {
            engine_changed = true;
            let hv = host_view(&host, &done.path);
            if let Backup::Written(bk) = &done.backup {
                b.m.backups.insert(host_view(&host, bk));
            }
            if matches!(done.backup, Backup::None) && !done.removed {
                b.m.created.insert(hv.clone());
            }
            writeln!(out, "registered {} in {}", r.name, hv.display())?;
        }
    }
    let mut m = b.m;
    if !engine_changed {
        writeln!(
            out,
            "{}: {} already registered",
            config.display(),
            m.runtimes.join(", ")
        )?;
    }

    // A reload that failed last time is tried again, even with nothing new to read.
    let need_reload = engine_changed || previous.as_ref().is_some_and(|p| p.reload_pending);
    let mode = restart_mode(&a.host, engine);
    m.reload_pending = need_reload && mode != RestartMode::None;
    write_manifest(&host, &toolkit, &m)?;
    if need_reload {
        reload(&host, &a.host, mode, engine, &mut out)?;
        if m.reload_pending {
            m.reload_pending = false;
            write_manifest(&host, &toolkit, &m)?;
        }
    } else {
        writeln!(out, "nothing changed for {engine}: not reloaded")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Write the manifest (not in its own lists: uninstall removes it last, whatever it says);
/// nothing is written when it holds these bytes already.
fn write_manifest(host: &Host, toolkit: &Path, m: &Manifest) -> anyhow::Result<()> {
    let here = host.here(&toolkit.join(MANIFEST));
    let mut text = serde_json::to_string_pretty(m)?;
    text.push('\n');
    if std::fs::read(&here).ok().as_deref() != Some(text.as_bytes()) {
        gpuctk_atomicfile::write(&here, text.as_bytes(), Some(0o644)).with_context(|| {
            format!(
                "{}: cannot record what was installed; run install again",
                here.display()
            )
        })?;
    }
    Ok(())
}

/// `--restart-mode`, or the engine's default: a SIGHUP, but a systemd restart for CRI-O, which
/// reloads on SIGHUP only the options crio.conf(5) marks as live-reloadable (the runtime table
/// has not always been one).
fn restart_mode(h: &HostArgs, engine: Engine) -> RestartMode {
    h.restart_mode.unwrap_or(match engine {
        Engine::Crio => RestartMode::Systemd,
        _ => RestartMode::Signal,
    })
}

/// Two JSON texts with the same meaning (key order included, as daemon.json keeps it).
fn same_json(a: &[u8], b: &[u8]) -> bool {
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
fn holds_nothing(bytes: &[u8]) -> bool {
    let t = String::from_utf8_lossy(bytes);
    matches!(t.trim(), "" | "{}" | "version = 2")
}

pub fn uninstall(a: UninstallArgs) -> anyhow::Result<ExitCode> {
    let host = host_of(&a.host)?;
    let toolkit = a.host.toolkit_dir.clone();
    let mut out = std::io::stdout().lock();
    let Some(mut m) = read_manifest(&host, &toolkit)? else {
        writeln!(
            out,
            "nothing installed: no {} under {}",
            toolkit.join(MANIFEST).display(),
            host.root.display()
        )?;
        return Ok(ExitCode::SUCCESS);
    };
    let engine: Engine = m
        .engine
        .parse()
        .map_err(|e| anyhow!("{}: {e}", toolkit.join(MANIFEST).display()))?;

    // The engine first: once it no longer names our runtimes, removing them breaks nothing.
    let mut engine_changed = false;
    for name in m.runtimes.iter().rev() {
        let opts = Options {
            runtime_name: name.clone(),
            drop_in: m.drop_in.as_ref().map(|d| host.here(d)),
            ..Options::default()
        };
        for done in engine_step(&host, engine, &m.config, &opts, true, &mut |_| Ok(()))? {
            engine_changed = true;
            writeln!(
                out,
                "unregistered {name} from {}",
                host_view(&host, &done.path).display()
            )?;
        }
    }
    let config_here = host.here(&m.config);
    let now = std::fs::read(&config_here).ok();
    if m.created.contains(&m.config) && now.as_deref().is_some_and(holds_nothing) {
        std::fs::remove_file(&config_here)
            .with_context(|| format!("{}: cannot remove it", config_here.display()))?;
        writeln!(out, "removed {}", m.config.display())?;
    }
    for b in &m.backups {
        // The backup holds the original; once the config is that again it has nothing to keep.
        let here = host.here(b);
        let kept = match std::fs::read(&here) {
            Ok(k) => Some(k),
            // Recorded before the write that would have taken it, which never came.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => bail!("{}: cannot read it: {e}", here.display()),
        };
        if kept == now {
            std::fs::remove_file(&here)
                .with_context(|| format!("{}: cannot remove it", here.display()))?;
            writeln!(
                out,
                "removed {} (the config is its original again)",
                b.display()
            )?;
        } else if let (Some(orig), Some(cur), Engine::Docker) = (&kept, &now, engine) {
            // daemon.json is re-rendered with a 4-space indent; when it means what the original
            // meant, the original's own bytes go back.
            if !same_json(orig, cur) {
                writeln!(
                    out,
                    "kept {} (the config differs from it: changed since install)",
                    b.display()
                )?;
                continue;
            }
            gpuctk_atomicfile::write(&config_here, orig, None).with_context(|| {
                format!(
                    "{}: cannot put its original bytes back",
                    config_here.display()
                )
            })?;
            std::fs::remove_file(&here)
                .with_context(|| format!("{}: cannot remove it", here.display()))?;
            writeln!(out, "restored {} from {}", m.config.display(), b.display())?;
        } else {
            writeln!(
                out,
                "kept {} (the config differs from it: changed since install)",
                b.display()
            )?;
        }
    }

    // The engine told before anything it may still run is removed; a reload that fails stops
    // here, recorded, and the next uninstall tries it again.
    if engine_changed || m.reload_pending {
        let mode = restart_mode(&a.host, engine);
        m.runtimes.clear();
        m.reload_pending = mode != RestartMode::None;
        write_manifest(&host, &toolkit, &m)?;
        reload(&host, &a.host, mode, engine, &mut out).map_err(|e| {
            anyhow!("{e}; the runtimes are unregistered but nothing else was removed: restart {engine} yourself and run uninstall again")
        })?;
        m.reload_pending = false;
    }

    // Containers the engine started through our runtime need it to be stopped and removed
    // (their shim runs it for kill and delete): while any is left, the runtime's entry point
    // stays.
    let busy = containers_on(&host, engine, &m.config, &toolkit)?;
    let keep: BTreeSet<PathBuf> = if busy.is_empty() {
        BTreeSet::new()
    } else {
        runtimes(&toolkit, "", false)
            .into_iter()
            .map(|r| r.binary)
            .chain([toolkit.join(BINARY), toolkit.join(CONFIG)])
            .filter(|p| m.created.contains(p))
            .collect()
    };

    // Our files, then the originals they replaced, then the directories we made.
    for p in &m.created {
        if *p == m.config || keep.contains(p) {
            continue;
        }
        let here = host.here(p);
        match std::fs::remove_file(&here) {
            Ok(()) => writeln!(out, "removed {}", p.display())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("{}: cannot remove it: {e}", here.display()),
        }
    }
    for p in &m.replaced {
        let here = host.here(p);
        if std::fs::symlink_metadata(bak(&here))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            // Recorded before the move to `.bak`, which never happened: the original is in place.
            writeln!(out, "kept {} (its original was never moved)", p.display())?;
            continue;
        }
        std::fs::rename(bak(&here), &here).with_context(|| {
            format!(
                "{}: cannot put the original back from {}",
                here.display(),
                bak(&here).display()
            )
        })?;
        writeln!(out, "restored {}", p.display())?;
    }
    let manifest = host.here(&toolkit.join(MANIFEST));
    if keep.is_empty() {
        std::fs::remove_file(&manifest)
            .with_context(|| format!("{}: cannot remove it", manifest.display()))?;
    }
    let mut dirs: Vec<&PathBuf> = m.dirs.iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let here = host.here(d);
        match std::fs::remove_dir(&here) {
            Ok(()) => writeln!(out, "removed {}/", d.display())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Someone else's files are in it now: theirs to remove.
            Err(e) if !keep.is_empty() && e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
            Err(e) => writeln!(out, "kept {}/ ({e})", d.display())?,
        }
    }
    if keep.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    // What is left, for the next uninstall.
    let left = Manifest {
        runtimes: Vec::new(),
        created: keep.clone(),
        dirs: m
            .dirs
            .iter()
            .filter(|d| host.here(d).is_dir())
            .cloned()
            .collect(),
        replaced: BTreeSet::new(),
        backups: BTreeSet::new(),
        reload_pending: false,
        ..m
    };
    write_manifest(&host, &toolkit, &left)?;
    for p in &keep {
        writeln!(out, "kept {}", p.display())?;
    }
    let shown: Vec<&str> = busy.iter().take(10).map(String::as_str).collect();
    let more = if busy.len() > shown.len() {
        format!(" and {} more", busy.len() - shown.len())
    } else {
        String::new()
    };
    bail!(
        "{} container(s) still run on gpuctk's runtime ({}{more}): its entry point ({}) is kept so that they can be stopped and removed; everything else is uninstalled. Run uninstall again once they are gone",
        busy.len(),
        shown.join(", "),
        toolkit.join("nvidia-container-runtime*").display()
    )
}

/// The task dirs of containerd's runc shims that may run containers through our runtime, as
/// the host sees them: containerd's own (its config's `state`, default `/run/containerd`) and
/// dockerd's containerd.
fn task_dirs(host: &Host, engine: Engine, config: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut states = vec![PathBuf::from("/run/containerd")];
    if engine == Engine::Containerd {
        let here = host.here(config);
        let text = match std::fs::symlink_metadata(&here) {
            Ok(_) => Some(super::read_capped(&here, 4 << 20, "containerd's config")?),
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
fn containers_on(
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
fn socket_peer(path: &Path, shown: &Path) -> anyhow::Result<i32> {
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
    // SAFETY: cred and len are valid for the size given.
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
    if cred.pid <= 0 {
        bail!(
            "--socket {}: its process is not visible from here; run with hostPID: true",
            shown.display()
        );
    }
    Ok(cred.pid)
}

/// Tell the engine to read its new config, as `--restart-mode` says.
fn reload(
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
                    let bytes = super::read_capped(&here, 4096, "the --pid-file")?;
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
            // SAFETY: kill has no memory effects.
            if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
                bail!(
                    "cannot send SIGHUP to {engine} (pid {pid}): {}",
                    std::io::Error::last_os_error()
                );
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
                // SAFETY: chroot and chdir are async-signal-safe; the CString outlives the
                // closure's use in the child.
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
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
fn systemctl_path(host: &Host, given: &str) -> anyhow::Result<PathBuf> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_and_engine_files() {
        let r = runtimes(Path::new("/t"), "nvidia", true);
        assert_eq!(
            r.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["nvidia", "nvidia-cdi", "nvidia-legacy"]
        );
        assert_eq!(r[1].binary, Path::new("/t/nvidia-container-runtime.cdi"));
        assert!(r[0].default && !r[1].default && !r[2].default);
        let (c, d) = engine_files(Engine::Containerd, None, None).unwrap();
        assert_eq!(c, Path::new("/etc/containerd/config.toml"));
        assert_eq!(
            d.as_deref(),
            Some(Path::new("/etc/containerd/conf.d/99-nvidia.toml"))
        );
        assert_eq!(engine_files(Engine::Docker, None, None).unwrap().1, None);
        assert!(engine_files(Engine::Docker, None, Some(Path::new("/x"))).is_err());
        assert!(engine_files(Engine::Crio, Some(Path::new("rel")), None).is_err());
    }

    #[test]
    fn config_points_at_the_toolkit() {
        let t = config_text(
            Path::new("/usr/local/nvidia/toolkit"),
            Path::new("/run/nvidia/driver"),
            Some(Path::new("/")),
        )
        .unwrap();
        let c = crate::config::parse(&t, Path::new("c.toml")).unwrap();
        assert_eq!(
            c.hook_path.as_deref(),
            Some("/usr/local/nvidia/toolkit/nvidia-cdi-hook")
        );
        assert_eq!(c.driver_root, Path::new("/run/nvidia/driver"));
        assert_eq!(c.dev_root.as_deref(), Some(Path::new("/")));
        assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
        let t = config_text(Path::new("/t"), Path::new("/"), None).unwrap();
        assert!(!t.contains("\nroot = "), "{t}");
    }

    #[test]
    fn resolves_links_inside_the_root() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("run/cdi")).unwrap();
        std::fs::create_dir_all(r.join("var")).unwrap();
        std::os::unix::fs::symlink("/run", r.join("var/run")).unwrap();
        std::os::unix::fs::symlink("../../..", r.join("run/cdi/up")).unwrap();
        assert_eq!(
            resolve_in_root(r, Path::new("/var/run/cdi/x.yaml")),
            r.join("run/cdi/x.yaml")
        );
        // `..`, in a link or in the path, stops at the root.
        assert_eq!(
            resolve_in_root(r, Path::new("/var/run/cdi/up/etc")),
            r.join("etc")
        );
        assert_eq!(resolve_in_root(r, Path::new("/../../etc")), r.join("etc"));
    }
}
