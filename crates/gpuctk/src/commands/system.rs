//! `nvidia-ctk system create-dev-char-symlinks | create-device-nodes`: the device nodes the
//! loaded driver implies, and the `/dev/char/MAJOR:MINOR` links systemd needs to keep a running
//! container's device access across a `daemon-reload`. Facts from `gpuctk_host::nodes`; each
//! change is idempotent (a right node or link is left alone) and a wrong node is never replaced.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use gpuctk_host::nodes::{existing_nodes, expected_nodes, Node};

use crate::cli::{DevCharArgs, DeviceNodesArgs, SystemRoots};

/// `modprobe` the NVIDIA modules, as NVIDIA does (in a chroot when the driver root is not `/`).
/// Each is tried, so one that cannot load does not keep the others from loading; the error names
/// every module that failed.
fn load_modules(r: &SystemRoots) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for module in ["nvidia", "nvidia-uvm", "nvidia-modeset"] {
        let mut c = if r.driver_root == Path::new("/") {
            let mut c = Command::new(&r.modprobe);
            c.arg(module);
            c
        } else {
            let mut c = Command::new("chroot");
            c.arg(&r.driver_root).arg(&r.modprobe).arg(module);
            c
        };
        if r.dry_run {
            println!("would run {c:?}");
            continue;
        }
        match c.output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => failed.push(format!(
                "{c:?} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => failed.push(format!("running {c:?}: {e}")),
        }
    }
    if !failed.is_empty() {
        bail!("--load-kernel-modules: {}", failed.join("; "));
    }
    Ok(())
}

/// Make `node` under `dev` (mode 0666, as NVIDIA's), or leave it when it is there and right.
fn make_node(dev: &Path, node: &Node, dry_run: bool) -> anyhow::Result<()> {
    let path = dev.join(&node.name);
    match std::fs::symlink_metadata(&path) {
        Ok(md)
            if md.file_type().is_char_device()
                && (libc::major(md.rdev()), libc::minor(md.rdev())) == (node.major, node.minor) =>
        {
            return Ok(());
        }
        Ok(md) => bail!(
            "{}: exists but is not the character device {}:{} ({}); remove it first",
            path.display(),
            node.major,
            node.minor,
            if md.file_type().is_char_device() {
                format!(
                    "it is {}:{}",
                    libc::major(md.rdev()),
                    libc::minor(md.rdev())
                )
            } else {
                "not a character device".to_string()
            }
        ),
        Err(_) => {}
    }
    println!(
        "{} {} ({}:{})",
        if dry_run { "would create" } else { "created" },
        path.display(),
        node.major,
        node.minor
    );
    if dry_run {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let c = CString::new(path.as_os_str().as_bytes()).context("a path with NUL")?;
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &c,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(node.major, node.minor),
    )
    .map_err(std::io::Error::from)
    .with_context(|| format!("mknod {}", path.display()))?;
    // The umask applies to mknod; the mode is what the driver's own nodes have.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("chmod {}", path.display()))
}

pub fn device_nodes(a: DeviceNodesArgs) -> anyhow::Result<ExitCode> {
    // A module that cannot load (no modprobe in the driver root, module loading locked down)
    // still leaves the nodes of the driver as procfs shows it loaded to make; the failure is
    // the exit status once they are made.
    let not_loaded = if a.roots.load_kernel_modules {
        load_modules(&a.roots).err()
    } else {
        None
    };
    let made = make_nodes(&a);
    match (not_loaded, made) {
        (None, made) => made.map(|()| ExitCode::SUCCESS),
        (Some(e), Ok(())) => bail!("{e:#} (the nodes of the driver as loaded are made)"),
        (Some(e), Err(nodes)) => Err(nodes.context(format!("{e:#}"))),
    }
}

fn make_nodes(a: &DeviceNodesArgs) -> anyhow::Result<()> {
    let (gpus, control) = match (a.gpu_devices, a.control_devices) {
        (false, false) => (true, true),
        flags => flags,
    };
    let nodes = expected_nodes(&a.roots.proc_root, gpus, control)?;
    let roots = gpuctk_host::Roots::new(
        a.roots.driver_root.clone(),
        a.dev_root.clone(),
        a.roots.proc_root.clone(),
    );
    let dev = roots.dev_root.join("dev");
    for n in &nodes {
        make_node(&dev, n, a.roots.dry_run)?;
    }
    Ok(())
}

/// Point `link` at `target`, replacing a wrong link atomically; a right one is left alone.
fn make_link(link: &Path, target: &Path, dry_run: bool) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(link) {
        Ok(md) if md.file_type().is_symlink() => {
            if std::fs::read_link(link).is_ok_and(|t| t == target) {
                return Ok(());
            }
        }
        Ok(_) => bail!(
            "{}: exists and is not a symlink; remove it first",
            link.display()
        ),
        Err(_) => {}
    }
    println!(
        "{} {} -> {}",
        if dry_run { "would link" } else { "linked" },
        link.display(),
        target.display()
    );
    if dry_run {
        return Ok(());
    }
    let tmp = link.with_file_name(format!(
        ".{}.gpuctk-{}",
        link.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .with_context(|| format!("symlink {}", tmp.display()))?;
    std::fs::rename(&tmp, link).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("rename to {}", link.display())
    })
}

pub fn dev_char(a: DevCharArgs) -> anyhow::Result<ExitCode> {
    let r = &a.roots;
    let dev = r.driver_root.join("dev");
    let nodes: Vec<Node> = if a.create_all {
        if r.load_kernel_modules {
            load_modules(r)?;
        }
        if a.create_device_nodes {
            // NVIDIA's flag creates the control nodes only.
            for n in expected_nodes(&r.proc_root, false, true)? {
                make_node(&dev, &n, r.dry_run)?;
            }
        }
        expected_nodes(&r.proc_root, true, true)?
    } else {
        if r.load_kernel_modules || a.create_device_nodes {
            tracing::warn!(
                "--load-kernel-modules and --create-device-nodes apply with --create-all only; ignored"
            );
        }
        existing_nodes(&r.driver_root).with_context(|| format!("listing {}", dev.display()))?
    };
    if a.watch {
        return watch(&a, nodes);
    }
    if nodes.is_empty() {
        println!("no NVIDIA device nodes under {}", dev.display());
        return Ok(ExitCode::SUCCESS);
    }
    link_nodes(&a, &nodes)?;
    Ok(ExitCode::SUCCESS)
}

/// `/dev/char/MAJOR:MINOR` -> the node, for each of `nodes`.
fn link_nodes(a: &DevCharArgs, nodes: &[Node]) -> anyhow::Result<()> {
    let dev = a.roots.driver_root.join("dev");
    if !a.roots.dry_run && !nodes.is_empty() {
        std::fs::create_dir_all(&a.dev_char_path)
            .with_context(|| format!("cannot create {}", a.dev_char_path.display()))?;
    }
    for n in nodes {
        let link = a.dev_char_path.join(format!("{}:{}", n.major, n.minor));
        let target: PathBuf = dev.join(&n.name);
        make_link(&link, &target, a.roots.dry_run)?;
    }
    Ok(())
}

/// `--watch`: link `first` (what the flags asked for), then every NVIDIA node that appears in
/// the driver root's `/dev` (or its `nvidia-caps/`), until SIGINT or SIGTERM; exit 0 then.
/// The watch starts before the first links, so a node created meanwhile is not missed.
fn watch(a: &DevCharArgs, first: Vec<Node>) -> anyhow::Result<ExitCode> {
    use gpuctk_host::watch::{DirWatch, Woken};
    let dev = a.roots.driver_root.join("dev");
    let caps = dev.join("nvidia-caps");
    let mut w = DirWatch::new()?;
    w.add(&dev)?;
    if caps.is_dir() {
        w.add(&caps)?;
    }
    let existing = || {
        existing_nodes(&a.roots.driver_root).with_context(|| format!("listing {}", dev.display()))
    };
    link_nodes(a, &first)?;
    link_nodes(a, &existing()?)?;
    eprintln!(
        "watching {} for new NVIDIA device nodes (SIGINT or SIGTERM stops)",
        dev.display()
    );
    loop {
        match w.wait()? {
            Woken::Stopped(sig) => {
                eprintln!("stopped by signal {sig}");
                return Ok(ExitCode::SUCCESS);
            }
            Woken::Appeared(entries) => {
                let ours =
                    |n: &std::ffi::OsStr| n.is_empty() || n.as_bytes().starts_with(b"nvidia");
                if !entries.iter().any(|(_, n)| ours(n)) {
                    continue;
                }
                if entries.iter().any(|(d, n)| *d == dev && n == "nvidia-caps") {
                    w.add(&caps)?;
                }
                // Relist rather than trust the event: a node may be replaced or still being
                // made (udev sets its mode after creating it), and a list is idempotent.
                link_nodes(a, &existing()?)?;
            }
        }
    }
}
