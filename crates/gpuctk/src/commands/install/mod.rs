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

mod engine;
mod files;
mod host;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};

use gpuctk_engines::{Backup, Engine, Options};

use crate::cli::{InstallArgs, RestartMode, UninstallArgs};

use engine::*;
use files::*;
use host::*;

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
    let sig = gpuctk_host::watch::wait_for_signal(&set).context("sigwait")?;
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
