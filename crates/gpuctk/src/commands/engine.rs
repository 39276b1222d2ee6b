//! `gpuctk runtime configure | unconfigure`: register our runtime with an engine, keeping the
//! rest of its config byte for byte (`crates/engines` does the editing).
//!
//! A run that writes holds the engine config's lock (`gpuctk_engines::lock`) from reading the
//! files to writing them, so that runs at once on the same file each see the previous one's
//! result and no change is lost.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use gpuctk_engines::{
    apply, configure, default_config_path, read_optional, unconfigure, Backup, ConfigLock, Engine,
    Options,
};

use crate::cli::{ConfigSource, ConfigureArgs, EngineArg};

/// Our `nvidia-container-runtime`: in PATH, else next to this binary, else NVIDIA's location.
fn default_runtime_path() -> String {
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let c = d.join("nvidia-container-runtime");
            if c.is_file() {
                return c.to_string_lossy().into_owned();
            }
        }
    }
    if let Some(c) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("nvidia-container-runtime")))
        .filter(|c| c.exists())
    {
        return c.to_string_lossy().into_owned();
    }
    "/usr/bin/nvidia-container-runtime".to_string()
}

fn current_from_command(engine: Engine) -> anyhow::Result<Vec<u8>> {
    let (prog, args): (&str, &[&str]) = match engine {
        Engine::Containerd => ("containerd", &["config", "dump"]),
        Engine::Crio => ("crio", &["status", "config"]),
        Engine::Docker => {
            bail!("--config-source command: docker has no such command; use --config-source file")
        }
    };
    let out = std::process::Command::new(prog)
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

pub fn run(a: ConfigureArgs, remove: bool) -> anyhow::Result<ExitCode> {
    let engine = match a.runtime {
        EngineArg::Docker => Engine::Docker,
        EngineArg::Containerd => Engine::Containerd,
        EngineArg::Crio => Engine::Crio,
    };
    let path: PathBuf = a
        .config
        .clone()
        .unwrap_or_else(|| default_config_path(engine));
    let runtime_path = a.runtime_path.clone().unwrap_or_else(default_runtime_path);
    if !runtime_path.starts_with('/') {
        bail!("--nvidia-runtime-path {runtime_path:?}: give an absolute path");
    }
    let opts = Options {
        runtime_name: a.runtime_name.clone(),
        runtime_path,
        set_as_default: a.set_as_default,
        enable_cdi: a.enable_cdi,
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
        ConfigSource::Command => Some(current_from_command(engine)?),
    };
    let edits = if remove {
        unconfigure(engine, &path, current.as_deref(), &opts)
    } else {
        configure(engine, &path, current.as_deref(), &opts)
    }
    .map_err(|e| anyhow!("{e}; nothing was written"))?;
    let changing: Vec<_> = edits.iter().filter(|e| !e.is_noop()).cloned().collect();
    let mut out = std::io::stdout().lock();
    if changing.is_empty() {
        writeln!(
            out,
            "{}: already {}",
            path.display(),
            if remove { "unconfigured" } else { "configured" }
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.dry_run {
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
    writeln!(out, "restart {engine} to use the change")?;
    Ok(ExitCode::SUCCESS)
}
