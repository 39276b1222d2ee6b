//! `gpuctk runtime configure | unconfigure`: register our runtime with an engine, keeping the
//! rest of its config byte for byte (`crates/engines` does the editing).
//!
//! A run that writes holds the engine config's lock (`gpuctk_engines::lock`) from reading the
//! files to writing them, so that runs at once on the same file each see the previous one's
//! result and no change is lost.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use gpuctk_engines::{
    apply, configure, default_config_path, read_optional, unconfigure, Backup, ConfigLock, Engine,
    Options,
};

use crate::cli::{ConfigMode, ConfigSource, ConfigureArgs, EngineArg};

/// The runtime's name, and what NVIDIA writes by default.
const RUNTIME: &str = "nvidia-container-runtime";

use gpuctk_host::checks::is_executable as executable;

/// `name` looked up in this process's `PATH`.
fn in_path(name: &str) -> Option<PathBuf> {
    gpuctk_host::checks::which(name, std::env::var_os("PATH").as_deref())
}

/// The runtime path to register, as NVIDIA chooses it, with a warning when it does not lead to
/// an executable. docker looks a bare name up in dockerd's own `PATH`, so a bare name (the
/// default) is written as it is; containerd and CRI-O exec the path as written, so a bare name
/// becomes the executable found in `PATH`, else one next to this binary, else NVIDIA's
/// `/usr/bin/nvidia-container-runtime`.
fn runtime_path(engine: Engine, given: Option<&str>) -> (String, Option<String>) {
    let given = given.unwrap_or(RUNTIME);
    if given.starts_with('/') {
        let warn = (!executable(Path::new(given))).then(|| {
            format!("--nvidia-runtime-path {given}: no executable there; the engine will fail to start GPU containers until it exists")
        });
        return (given.to_string(), warn);
    }
    if given.contains('/') {
        return (
            given.to_string(),
            Some(format!(
                "--nvidia-runtime-path {given}: a relative path; give a bare name or an absolute path"
            )),
        );
    }
    if engine == Engine::Docker {
        let warn = in_path(given).is_none().then(|| {
            format!("{given} is not in this PATH; dockerd looks it up in its own PATH, so make sure it is there (or pass --nvidia-runtime-path with an absolute path)")
        });
        return (given.to_string(), warn);
    }
    if let Some(p) = in_path(given) {
        return (p.to_string_lossy().into_owned(), None);
    }
    if let Some(c) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(given)))
        .filter(|c| executable(c))
    {
        return (c.to_string_lossy().into_owned(), None);
    }
    let fallback = format!("/usr/bin/{given}");
    let warn = (!executable(Path::new(&fallback))).then(|| {
        format!("{given} is not in PATH; writing {fallback}, which does not exist yet: {engine} will fail to start GPU containers until it does")
    });
    (fallback, warn)
}

/// The engine's current config as the engine itself prints it (`--config-source command`), by
/// `executable` (`--executable-path`) or the engine's binary in `PATH`.
fn current_from_command(engine: Engine, executable: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    let (default, args): (&str, &[&str]) = match engine {
        Engine::Containerd => ("containerd", &["config", "dump"]),
        Engine::Crio => ("crio", &["status", "config"]),
        Engine::Docker => {
            bail!("--config-source command: docker has no such command; use --config-source file")
        }
    };
    let prog = executable
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| default.to_string());
    let out = std::process::Command::new(&prog)
        .args(args)
        .output()
        .with_context(|| format!("--config-source command: running {prog} {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "--config-source command: {prog} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// `--config-mode oci-hook`: write (or remove) the OCI hook file that runs our prestart hook.
fn run_oci_hook(a: &ConfigureArgs, remove: bool) -> anyhow::Result<ExitCode> {
    use gpuctk_engines::ocihook;
    let path = &a.oci_hook_path;
    let _lock = if a.dry_run {
        None
    } else {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--oci-hook-path: cannot create {}", dir.display()))?;
        }
        Some(ConfigLock::acquire(
            path,
            gpuctk_engines::lock::DEFAULT_TIMEOUT,
        )?)
    };
    let current = read_optional(path).map_err(|e| {
        anyhow!(
            "--oci-hook-path {}: cannot read it: {e}; nothing was written",
            path.display()
        )
    })?;
    let edit = if remove {
        ocihook::unconfigure(path, current.as_deref())?
    } else {
        Some(ocihook::configure(
            path,
            current.as_deref(),
            &a.nvidia_runtime_hook_path,
        )?)
    };
    let done = finish(
        edit.into_iter().collect(),
        a.dry_run,
        a.json,
        remove,
        path,
        "podman",
    )?;
    let hook = &a.nvidia_runtime_hook_path;
    if !remove && !Path::new(hook).is_file() {
        tracing::warn!(
            "--nvidia-runtime-hook-path {hook}: no file there; every container podman starts will fail until it exists"
        );
    }
    Ok(done)
}

pub fn run(a: ConfigureArgs, remove: bool) -> anyhow::Result<ExitCode> {
    if a.config_mode != ConfigMode::ConfigFile {
        return run_oci_hook(&a, remove);
    }
    let engine = match a.runtime {
        EngineArg::Docker => Engine::Docker,
        EngineArg::Containerd => Engine::Containerd,
        EngineArg::Crio => Engine::Crio,
    };
    let path: PathBuf = a
        .config
        .clone()
        .unwrap_or_else(|| default_config_path(engine));
    if engine == Engine::Docker && a.drop_in_config.is_some() {
        bail!("--drop-in-config: docker reads no drop-in files, only daemon.json; leave the flag out for docker");
    }
    let drop_in = match &a.drop_in_config {
        Some(p) => Some(
            std::path::absolute(p).with_context(|| format!("--drop-in-config {}", p.display()))?,
        ),
        None => None,
    };
    // NVIDIA's `--executable-path` names the engine binary `--config-source command` runs; it
    // means nothing for docker, or with the config read from the file.
    if let Some(exe) = &a.executable_path {
        if engine == Engine::Docker {
            tracing::warn!(
                "--executable-path {}: ignored for docker (no command prints its config)",
                exe.display()
            );
        } else if a.config_source == ConfigSource::File {
            tracing::warn!(
                "--executable-path {}: only used with --config-source command; ignored",
                exe.display()
            );
        }
    }
    let (runtime_path, warning) = runtime_path(engine, a.runtime_path.as_deref());
    let opts = Options {
        runtime_name: a.runtime_name.clone(),
        runtime_path,
        set_as_default: a.set_as_default,
        enable_cdi: a.enable_cdi,
        drop_in,
    };
    // Held until the edits are written: what we read is what we change.
    let _lock = if a.dry_run {
        None
    } else {
        let lock = ConfigLock::acquire(&path, gpuctk_engines::lock::DEFAULT_TIMEOUT)?;
        if let Some(e) = lock.unsupported() {
            tracing::warn!(
                "{}: cannot lock ({e}); a `runtime configure` running at the same time may undo this one",
                lock.dir().display()
            );
        }
        Some(lock)
    };
    let current = match a.config_source {
        ConfigSource::File => read_optional(&path).map_err(|e| {
            anyhow!(
                "--config {}: cannot read it: {e}; nothing was written",
                path.display()
            )
        })?,
        ConfigSource::Command => Some(current_from_command(engine, a.executable_path.as_deref())?),
    };
    let mut edits = if remove {
        unconfigure(engine, &path, current.as_deref(), &opts)
    } else {
        configure(engine, &path, current.as_deref(), &opts)
    }
    .map_err(|e| anyhow!("{e}; nothing was written"))?;
    // With the config from the engine's command, the edit starts from the engine's view but
    // replaces the file as it is on disk (NVIDIA's writes the dump, changed, to --config):
    // that is what is backed up, diffed and checked for a change made meanwhile.
    if a.config_source == ConfigSource::Command {
        let on_disk = read_optional(&path).map_err(|e| {
            anyhow!(
                "--config {}: cannot read it: {e}; nothing was written",
                path.display()
            )
        })?;
        for e in edits.iter_mut().filter(|e| e.path == path) {
            e.before = on_disk.clone();
        }
    }
    let done = finish(edits, a.dry_run, a.json, remove, &path, engine.as_str())?;
    // After the work: a failure stays one line, and the warning is about what was written.
    if let (Some(w), false) = (warning, remove) {
        tracing::warn!("{w}");
    }
    Ok(done)
}

/// Print the diff (`--dry-run`) or write the edits, and say what was done.
fn finish(
    edits: Vec<gpuctk_engines::Edit>,
    dry_run: bool,
    json: bool,
    remove: bool,
    path: &Path,
    engine: &str,
) -> anyhow::Result<ExitCode> {
    let changing: Vec<_> = edits.into_iter().filter(|e| !e.is_noop()).collect();
    let mut out = std::io::stdout().lock();
    if json {
        if !dry_run {
            apply(&changing)?;
        }
        let changes: Vec<serde_json::Value> = changing
            .iter()
            .map(|e| {
                serde_json::json!({
                    "file": e.path.display().to_string(),
                    "action": if e.delete { "remove" } else { "write" },
                    "diff": e.unified_diff(),
                })
            })
            .collect();
        let v = serde_json::json!({ "dry_run": dry_run, "changes": changes });
        writeln!(out, "{v:#}")?;
        return Ok(ExitCode::SUCCESS);
    }
    if changing.is_empty() {
        writeln!(
            out,
            "{}: already {}",
            path.display(),
            if remove { "unconfigured" } else { "configured" }
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if dry_run {
        for e in &changing {
            out.write_all(e.unified_diff().as_bytes())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let done = apply(&changing)?;
    for d in &done {
        let verb = if d.removed { "removed" } else { "wrote" };
        match &d.backup {
            Backup::Written(b) => writeln!(
                out,
                "{verb} {} (its previous content is in {})",
                d.path.display(),
                b.display()
            )?,
            Backup::Kept(b) => writeln!(
                out,
                "{verb} {} (backup {} from an earlier run kept as it was)",
                d.path.display(),
                b.display()
            )?,
            Backup::None => writeln!(out, "{verb} {} (a new file)", d.path.display())?,
            Backup::Ours => writeln!(
                out,
                "{verb} {} (a file gpuctk created: no backup)",
                d.path.display()
            )?,
        }
    }
    if engine == "podman" {
        writeln!(out, "podman reads it for every new container")?;
    } else {
        writeln!(out, "restart {engine} to use the change")?;
    }
    Ok(ExitCode::SUCCESS)
}
