//! The runtime shim, `nvidia-container-runtime`, invoked exactly like runc. Every command but
//! `create` and `run` goes to the low-level runtime untouched (`passthrough`; runc's argv is read
//! by `runc`). On `create` and `run` it reads the bundle's `config.json`, takes `core::decide`'s
//! decision for the container's request, merges the edits into `config.json` (atomically), does
//! our createContainer hooks' work on the rootfs itself where it can see what the container will
//! (docs/architecture.md, "No hook processes on the shim's path"), or in legacy mode adds the
//! prestart hook, and then execs the low-level runtime with the original argv.
//!
//! The hot path does no NVML and spawns nothing: a CDI request parses only the spec files that
//! mention its vendor, anything else runs discovery (procfs, stat, ld.so.cache, ELF headers),
//! which lists no library directory.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use gpuctk_cdi::spec::ContainerEdits;
use gpuctk_core::request::Delivery;
use gpuctk_core::{parse_request, Decision, InRootOp};

use crate::config::{self, Config, Mode};
use crate::decision::LiveHost;
use crate::runc::{find_runtime, parse_runc_args, RuncArgs};

/// Largest `config.json` we read. Engines write a few KiB; even a pod with thousands of env
/// entries stays far below. Checked before reading, so a huge file fails at once.
pub const MAX_CONFIG_JSON: u64 = 16 << 20;

/// `time` in RFC 3339, UTC, to the second, as runc's log lines carry it (a time before 1970
/// prints as the epoch).
fn rfc3339(time: std::time::SystemTime) -> String {
    let secs = time
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86400, secs % 86400);
    let (y, m, d) = crate::logging::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Tell the engine why: on stderr, and in runc's `--log` file, which containerd and docker read
/// to show a failed runtime's message.
fn report(args: &RuncArgs, msg: &str) {
    let _ = writeln!(std::io::stderr(), "nvidia-container-runtime: error: {msg}");
    if let Some(log) = &args.log {
        let line = if args.log_json {
            serde_json::json!({"level": "error", "msg": format!("nvidia-container-runtime: {msg}"), "time": rfc3339(std::time::SystemTime::now())}).to_string()
        } else {
            format!(
                "time=\"{}\" level=error msg=\"nvidia-container-runtime: {}\"",
                rfc3339(std::time::SystemTime::now()),
                msg.replace('"', "'")
            )
        };
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// `nvidia-container-runtime ARGS...` (`args` without argv[0]).
pub fn main(args: &[OsString]) -> ExitCode {
    main_as(args, None)
}

/// The shim with the mode forced, as NVIDIA's `nvidia-container-runtime.cdi` (`cdi`) and
/// `nvidia-container-runtime.legacy` (`legacy`) do, whatever config.toml says.
pub fn main_as(args: &[OsString], forced: Option<Mode>) -> ExitCode {
    let parsed = parse_runc_args(args);
    // Everything but create/run: find the runtime and exec it, nothing else (passthrough.rs).
    if crate::passthrough::applies(&parsed) {
        let msg = crate::passthrough::exec(args, &parsed);
        report(&parsed, &msg);
        return ExitCode::FAILURE;
    }
    let mut cfg = match config::load_from_env() {
        Ok(c) => c,
        Err(e) => {
            report(&parsed, &e.to_string());
            return ExitCode::FAILURE;
        }
    };
    if let Some(m) = forced {
        cfg.mode = m;
    }
    crate::logging::init_runtime(&cfg);
    crate::logging::warn_config_keys(&cfg);
    let runtime = match find_runtime(&cfg.runtimes, std::env::var_os("PATH").as_deref()) {
        Ok(r) => r,
        Err(e) => {
            report(&parsed, &e.to_string());
            return ExitCode::FAILURE;
        }
    };
    if parsed.version {
        println!(
            "gpuctk nvidia-container-runtime version {}",
            env!("CARGO_PKG_VERSION")
        );
    }
    if matches!(parsed.command.as_deref(), Some("create" | "run")) {
        let bundle = match &parsed.bundle {
            Some(b) => b.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        };
        if let Err(e) = modify_bundle(&bundle, &cfg, &runtime) {
            report(&parsed, &crate::one_line::one_line(&e));
            return ExitCode::FAILURE;
        }
    }
    if matches!(parsed.command.as_deref(), Some("create" | "run")) {
        // Later calls on this container (start, kill, delete) must reach the same runtime,
        // whatever config their environment finds (podman passes start and delete almost
        // none). After the spec is written: a failed create records nothing.
        if let Err(e) = crate::passthrough::record_runtime(&parsed, &runtime) {
            tracing::warn!("cannot record the runtime of this container: {e}");
        }
    }
    let err = std::process::Command::new(&runtime)
        .arg0(&runtime)
        .args(args)
        .exec();
    report(&parsed, &format!("exec {}: {err}", runtime.display()));
    ExitCode::FAILURE
}

/// Edit `<bundle>/config.json` for the container's GPU request; leave it untouched when the
/// container asks for nothing.
pub fn modify_bundle(bundle: &Path, cfg: &Config, runtime: &Path) -> anyhow::Result<()> {
    match modify_bundle_once(bundle, cfg, runtime, true) {
        // Noticed before anything was written: once more, discovering.
        Err(e) if e.is::<crate::snapshot::Lied>() => {
            tracing::warn!("{e}");
            modify_bundle_once(bundle, cfg, runtime, false)
        }
        r => r,
    }
}

/// [`modify_bundle`], reading the discovery snapshot when `snapshot` says so.
fn modify_bundle_once(
    bundle: &Path,
    cfg: &Config,
    runtime: &Path,
    snapshot: bool,
) -> anyhow::Result<()> {
    let path = bundle.join("config.json");
    let (bytes, md) = crate::capped::read_capped_meta(&path, MAX_CONFIG_JSON, "the OCI spec")?;
    let mode = std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o7777;
    let mut spec: serde_json::Value =
        crate::capped::parse_json(&bytes).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if !spec.is_object() {
        bail!("{}: not a JSON object", path.display());
    }
    let request = parse_request(&spec, &cfg.policy, Delivery::Shim)?;
    for w in &request.ignored {
        tracing::warn!("{w}");
    }
    let rootfs = rootfs_of(&spec, bundle);
    let mut host = if snapshot {
        LiveHost::new(cfg, rootfs.as_deref())
    } else {
        LiveHost::without_snapshot(cfg, rootfs.as_deref())
    };
    let platform = crate::decision::platform_injection(
        &request,
        cfg,
        Delivery::Shim,
        &mut host,
        jetpack_all_csv(&spec),
    )?;
    let mut injection = match platform {
        Some(None) => {
            tracing::debug!("{}: no GPU requested; spec left as is", path.display());
            return Ok(());
        }
        Some(Some(i)) => Box::new(i),
        None => match crate::decision::decide_with(&request, cfg, Delivery::Shim, &mut host)? {
            Decision::Untouched => {
                tracing::debug!("{}: no GPU requested; spec left as is", path.display());
                return Ok(());
            }
            Decision::PrestartHook => {
                if add_prestart_hook(&mut spec, cfg) {
                    write_spec(&path, &spec, mode)?;
                    tracing::info!("{}: added the legacy prestart hook", path.display());
                }
                return Ok(());
            }
            Decision::Inject(injection) => injection,
        },
    };
    // Edits planned from a snapshot: their mount sources are checked by the hook work below
    // (but for those the snapshot vouches for); where that does not happen, they are checked.
    let mut unchecked = host.snapshot_used.is_some();
    if cfg.hooks_in_shim {
        let ops = crate::decision::typed_ops(&injection);
        let (done, mut ops) = hooks_in_shim(
            &spec,
            bundle,
            &mut injection.edits,
            ops,
            host.snapshot_used.as_ref(),
            &host.libraries,
            cfg.snapshot_dir().as_deref(),
        )?;
        tracing::debug!("{}: {done} hooks done by the shim", path.display());
        unchecked &= done == 0;
        crate::guard::params_in_shim(&spec, &mut injection.edits, &mut ops, bundle, runtime)?;
    }
    if let (true, Some(vouched)) = (unchecked, &host.snapshot_used) {
        if let Some(gone) = crate::snapshot::first_gone(&injection.edits, vouched) {
            return Err(crate::snapshot::Lied(gone).into());
        }
    }
    let edits = &injection.edits;
    // On an error nothing is written and the spec is dropped: no copy to roll back to.
    gpuctk_cdi::apply::apply_edits_in_place(&mut spec, edits)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    crate::guard::mask_other_gpus(&mut spec, &cfg.proc_root, host.known_gpus())?;
    if !edits.hooks.is_empty() {
        pass_hook_errors_on(&mut spec, runtime);
    }
    write_spec(&path, &spec, mode)?;
    tracing::info!(
        "{}: injected {} device nodes, {} mounts, {} hooks",
        path.display(),
        edits.device_nodes.len(),
        edits.mounts.len(),
        edits.hooks.len()
    );
    // The runtime's exec follows at once (`main_as`, the one caller): freeing these would be
    // work thrown away with the address space (the spec's tree alone was 2 % of a create's CPU).
    std::mem::forget((spec, bytes, request, host, injection));
    Ok(())
}

/// Whether the container's env has `NVIDIA_REQUIRE_JETPACK` with `csv-mounts=all`: CSV mode
/// then reads every CSV file, not only the three base ones (NVIDIA's rule).
pub(crate) fn jetpack_all_csv(spec: &serde_json::Value) -> bool {
    spec.pointer("/process/env")
        .and_then(|e| e.as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str()?.strip_prefix("NVIDIA_REQUIRE_JETPACK="))
        .any(|v| v.split([' ', ',']).any(|w| w == "csv-mounts=all"))
}

/// The container's root on the host: `root.path`, relative to the bundle unless absolute.
fn rootfs_of(spec: &serde_json::Value, bundle: &Path) -> Option<PathBuf> {
    let root = spec.pointer("/root/path").and_then(|p| p.as_str())?;
    Some(if Path::new(root).is_absolute() {
        PathBuf::from(root)
    } else {
        bundle.join(root)
    })
}

/// The destinations of the spec's `mounts` worth resolving in the image: not one inside an
/// earlier mount of a file system the kernel or the runtime makes (the runtime's `/dev/pts`
/// inside its `/dev`), which the runtime resolves inside that mount, not in the image, and which
/// covers only what the earlier one does, as written and as resolved. Linear in the spec: each
/// destination's own prefixes are looked up, however many mounts there are.
fn dests_to_resolve<'s>(spec_mounts: &[&'s serde_json::Value]) -> Vec<&'s str> {
    let mut made = Covering::default();
    let mut out = Vec::new();
    for m in spec_mounts {
        let Some(d) = m.get("destination").and_then(|d| d.as_str()) else {
            continue;
        };
        let plain = is_plain_path(d);
        let d = if plain { d.trim_end_matches('/') } else { d };
        if !(plain && made.any_covers(d)) {
            out.push(d);
        }
        if plain && made_by_runtime(m) {
            made.add(d);
        }
    }
    out
}

/// Whether spec mount `m` is of a file system the kernel or the runtime makes, empty or of the
/// kernel's own making (procfs, sysfs, a tmpfs, devpts, mqueue, cgroup), not a bind mount of a
/// host folder, whose links could lead a mount inside it anywhere.
fn made_by_runtime(m: &serde_json::Value) -> bool {
    let kind = m.get("type").and_then(|t| t.as_str()).unwrap_or_default();
    let bind = m
        .get("options")
        .and_then(|o| o.as_array())
        .into_iter()
        .flatten()
        .any(|o| matches!(o.as_str(), Some("bind" | "rbind")));
    !bind
        && matches!(
            kind,
            "proc" | "sysfs" | "tmpfs" | "devpts" | "mqueue" | "cgroup" | "cgroup2"
        )
}

/// An absolute container path with no `.` or `..` component and no empty one, so that a
/// prefix of it as written is a prefix of it as walked.
fn is_plain_path(p: &str) -> bool {
    p.strip_prefix('/').is_some_and(|rest| {
        rest.trim_end_matches('/')
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
    })
}

/// Whether a mount at `dest` hides container path `path` (or is it): what [`Covering`] answers
/// for many at once (kept as the rule it is checked against).
#[cfg(test)]
fn covers(dest: &str, path: &str) -> bool {
    let dest = dest.trim_end_matches('/');
    let path = path.trim_end_matches('/');
    dest.is_empty() || dest == path || path.strip_prefix(dest).is_some_and(|r| r.starts_with('/'))
}

/// Mount destinations, each as [`covers`] compares it: whether any covers a path is a lookup
/// per prefix of the path, not a comparison per mount (a create asks it for every path the
/// hooks work on, of a spec with dozens of mounts).
#[derive(Default)]
struct Covering<'d>(foldhash::HashSet<&'d str>);

impl<'d> Covering<'d> {
    fn add(&mut self, dest: &'d str) {
        self.0.insert(dest.trim_end_matches('/'));
    }

    /// Whether any of the destinations [`covers`] `path`.
    fn any_covers(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        // Each prefix ending before a `/`, found a byte at a time: `match_indices` searches
        // with memchr from each slash, which costs more on paths this short.
        self.0.contains("")
            || self.0.contains(path)
            || path
                .bytes()
                .enumerate()
                .any(|(i, b)| b == b'/' && i > 0 && self.0.contains(&path[..i]))
    }
}

/// Where our createContainer hooks run: left to the runtime (and why), or done by the shim.
enum ShimChoice {
    /// The runtime runs them as hooks.
    Hooks(String),
    /// The shim does these (index into the edits' hooks, operation) on `root`; the others stay
    /// hooks.
    Shim {
        root: gpuctk_container::Root,
        ops: Vec<(usize, InRootOp)>,
    },
}

/// Whether the shim can do our hooks itself: only where it sees what the container will. Not
/// with no rootfs directory on the host, in a user namespace (files must be created as the
/// container's root), or where a spec mount covers a path the hooks work on (`/etc`, a library
/// folder, a link's directory, the compat root, `/dev`). Those needing the created container
/// (its procfs) stay hooks whatever the answer.
fn shim_choice(
    spec: &serde_json::Value,
    bundle: &Path,
    edits: &ContainerEdits,
    ops: Vec<(usize, InRootOp)>,
) -> ShimChoice {
    let hooks = |why: &str| ShimChoice::Hooks(why.to_string());
    if ops.is_empty() {
        return hooks("no hooks of ours");
    }
    if spec
        .pointer("/linux/uidMappings")
        .is_some_and(|m| m.as_array().is_some_and(|a| !a.is_empty()))
    {
        return hooks("a user namespace");
    }
    let ops: Vec<(usize, InRootOp)> = ops
        .into_iter()
        .filter(|(_, o)| !o.needs_live_container())
        .collect();
    let spec_mounts: Vec<&serde_json::Value> = spec
        .get("mounts")
        .and_then(|m| m.as_array())
        .into_iter()
        .flatten()
        .collect();
    let mut resolve_dests = dests_to_resolve(&spec_mounts);
    resolve_dests.extend(edits.mounts.iter().map(|m| m.container_path.as_str()));
    // The paths the hooks work on, and whether each is followed to its end.
    let paths: Vec<(String, bool)> = ops.iter().flat_map(|(_, op)| op.paths()).collect();
    // A mount over one of them as the two are written (the runtime's `/dev` over a static
    // spec's DRM links): known without opening the root and walking it.
    let mut written = Covering::default();
    for d in spec_mounts
        .iter()
        .filter_map(|m| m.get("destination").and_then(|d| d.as_str()))
        .chain(edits.mounts.iter().map(|m| m.container_path.as_str()))
    {
        written.add(d);
    }
    if let Some((p, _)) = paths.iter().find(|(p, _)| written.any_covers(p)) {
        return ShimChoice::Hooks(format!("a spec mount covers {p}"));
    }
    let Some(rootfs) = rootfs_of(spec, bundle) else {
        return hooks("no root.path");
    };
    let Ok(mut root) = gpuctk_container::Root::open_container(&rootfs) else {
        return hooks("no rootfs on the host");
    };
    // Paths as the runtime will resolve them in the root (an image's symlink can lead a library
    // folder into `/proc`, which is a mount): a path that does not resolve leaves it to hooks.
    let mut resolver = Resolver::new(&mut root);
    // What is resolved of each hook path: the whole of it where it is followed to its end;
    // else its folder (a name the hook replaces: a link, the cache), with the name to put back.
    // (`None`: a name with no folder, which does not resolve.)
    let walked: Vec<Option<(&str, Option<&str>)>> = paths
        .iter()
        .map(
            |(p, follow)| match p.trim_end_matches('/').rsplit_once('/') {
                _ if *follow => Some((p.as_str(), None)),
                Some((parent, last)) => {
                    Some((if parent.is_empty() { "/" } else { parent }, Some(last)))
                }
                None => None,
            },
        )
        .collect();
    resolver.expect(
        resolve_dests
            .iter()
            .copied()
            .chain(walked.iter().flatten().map(|(w, _)| *w)),
    );
    // Our mounts are of files (libraries, programs, firmware, sockets): a destination a
    // runtime made before, in a root that persists, is read as a link at once.
    resolver.expect_files(edits.mounts.iter().map(|m| m.container_path.as_str()));
    let mut resolved = |p: &str| resolver.resolve(p);
    let mut mounts: Vec<String> = Vec::new();
    for d in &resolve_dests {
        let Some(r) = resolved(d) else {
            return ShimChoice::Hooks(format!("mount {d} does not resolve in the root"));
        };
        mounts.push(r);
    }
    let mut covering = Covering::default();
    for d in resolve_dests
        .iter()
        .copied()
        .chain(mounts.iter().map(String::as_str))
    {
        covering.add(d);
    }
    for ((p, _), walk) in paths.iter().zip(&walked) {
        let r = walk.and_then(|(walk, last)| {
            resolved(walk).map(|d| match last {
                Some(last) => format!("{}/{last}", d.trim_end_matches('/')),
                None => d,
            })
        });
        let Some(r) = r else {
            return ShimChoice::Hooks(format!("{p} does not resolve in the root"));
        };
        if covering.any_covers(p) || covering.any_covers(&r) {
            return ShimChoice::Hooks(format!("a spec mount covers {p} ({r})"));
        }
    }
    // The hooks' work then opens the folders the walks opened, not their paths again.
    resolver.keep_folders();
    ShimChoice::Shim { root, ops }
}

/// Performs our createContainer hooks itself, on the bundle's rootfs, and drops them from
/// `edits`, so runc spawns no hook process (three processes cost about 8 ms of a start). The
/// result is what the hooks would produce after the runtime's mounts: the library mounts about
/// to be added are taken as discovery found them (`libraries`: soname and ABI), or read from
/// their host files where it did not ([`gpuctk_container::hooks::Pending`]). `snapshot`: the
/// files a discovery snapshot vouches for, where the edits were planned from one: a mount
/// source among them is taken as there, as the kind discovery found, with no `stat`; another
/// that is gone means the snapshot lied ([`crate::snapshot::Lied`]).
///
/// Leaves the hooks in place (does none) where [`shim_choice`] says so. Returns how many hooks
/// it did, and `ops` less those, indexed into the hooks left.
fn hooks_in_shim(
    spec: &serde_json::Value,
    bundle: &Path,
    edits: &mut ContainerEdits,
    all: Vec<(usize, InRootOp)>,
    snapshot: Option<&crate::snapshot::Vouched>,
    libraries: &[gpuctk_host::Library],
    cache_dir: Option<&Path>,
) -> anyhow::Result<(usize, Vec<(usize, InRootOp)>)> {
    let (root, ops) = match shim_choice(spec, bundle, edits, all.clone()) {
        ShimChoice::Shim { root, ops } => (root, ops),
        ShimChoice::Hooks(why) => {
            tracing::debug!("hooks left to the runtime: {why}");
            return Ok((0, all));
        }
    };
    let mut pending = gpuctk_container::hooks::Pending::default();
    // The `/dev` the runtime will make: the spec's devices once the edits are in. The edits'
    // nodes are filled from the host here, once, so that applying them for good stats nothing.
    let in_spec = |e| anyhow!("{}: {e}", bundle.join("config.json").display());
    for n in &mut edits.device_nodes {
        gpuctk_cdi::apply::fill_from_host(n).map_err(in_spec)?;
    }
    pending.set_gpu_minors(crate::guard::gpu_minors_with_nodes(
        spec,
        &edits.device_nodes,
    ));
    // Discovery's libraries with what `update-ldcache` needs of them: soname and cache flags.
    // By the host path's bytes: hashing a `Path` parses its components.
    let known: foldhash::HashMap<(&std::ffi::OsStr, &str), (&str, i32)> = libraries
        .iter()
        .filter_map(|l| {
            let abi = l.elf?;
            let class = if abi.elf64 {
                gpuctk_container::elf::Class::Elf64
            } else {
                gpuctk_container::elf::Class::Elf32
            };
            let flags = gpuctk_container::elf::cache_flags_for(abi.machine, class, abi.flags)?;
            Some((
                (l.host_path.as_os_str(), l.path.as_str()),
                (l.soname.as_deref()?, flags),
            ))
        })
        .collect();
    let gone = |m: &gpuctk_cdi::spec::Mount| crate::snapshot::Lied(m.host_path.clone().into());
    let from_snapshot = snapshot.is_some();
    for m in &edits.mounts {
        let name = m.container_path.rsplit('/').next().unwrap_or_default();
        let library = known.get(&(
            std::ffi::OsStr::new(&m.host_path),
            m.container_path.as_str(),
        ));
        if library.is_none() && gpuctk_container::hooks::is_dso_name(name) {
            // A library discovery did not read (a CDI spec's own mount): its ELF is read.
            let file = match std::fs::File::open(&m.host_path) {
                Ok(f) => f,
                Err(e) if from_snapshot && e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(gone(m).into());
                }
                Err(_) => continue,
            };
            if file.metadata().is_ok_and(|md| md.is_file()) {
                pending.add(&m.container_path, file);
            }
            continue;
        }
        let add = |pending: &mut gpuctk_container::hooks::Pending| match library {
            Some((soname, flags)) => pending.add_known(&m.container_path, soname, *flags),
            None => pending.add_other(&m.container_path),
        };
        // Vouched for by its folder: there, as what discovery found (a regular file, or not).
        match snapshot.and_then(|v| v.kind(Path::new(&m.host_path))) {
            Some(crate::snapshot::Kind::File) => {
                add(&mut pending);
                continue;
            }
            Some(crate::snapshot::Kind::Other) => continue,
            None => {}
        }
        // Known, or no library: one stat says it is there (a snapshot that names a gone path
        // is found out here as where it was opened), nothing is read.
        match std::fs::metadata(&m.host_path) {
            Ok(md) if md.is_file() => add(&mut pending),
            Ok(_) => {}
            Err(e) if from_snapshot && e.kind() == std::io::ErrorKind::NotFound => {
                return Err(gone(m).into());
            }
            Err(_) => {}
        }
    }
    // The image's libraries as earlier containers' scans found them, and what they found in
    // place in a root that persists (`cache_dir`, beside the discovery snapshot): those of an
    // image seen before are not read again, nor what is in place looked at again.
    let memo = ops.iter().any(|(_, op)| {
        matches!(
            op,
            InRootOp::UpdateLdcache { .. }
                | InRootOp::CreateSymlinks { .. }
                | InRootOp::UpdateApplicationProfile
        )
    });
    if let (true, Some(dir)) = (memo, cache_dir) {
        pending.set_seen(crate::seen_libraries::load(dir));
    }
    for (_, op) in &ops {
        gpuctk_container::ops::run(&root, op, &mut pending)?;
    }
    if let (Some(dir), Some(seen)) = (cache_dir, pending.take_seen()) {
        crate::seen_libraries::store(dir, &seen);
    }
    // The runtime is exec'd next (or the process exits): the exec closes the root's folders.
    root.close_at_exec();
    let done: foldhash::HashSet<usize> = ops.iter().map(|(i, _)| *i).collect();
    let mut i = 0;
    edits.hooks.retain(|_| {
        let keep = !done.contains(&i);
        i += 1;
        keep
    });
    let left = all
        .into_iter()
        .filter(|(i, _)| !done.contains(i))
        .map(|(i, op)| (i - done.iter().filter(|d| **d < i).count(), op))
        .collect();
    Ok((done.len(), left))
}

/// [`gpuctk_container::Root::resolve_lexically`] for many paths, each name of each folder looked
/// up once ([`gpuctk_container::root::LexicalResolver`]): most paths here are library mounts in
/// one or two folders, and the folders of all of them share their first components (`/usr`,
/// `/etc`), which a walk each looked up again from the root.
struct Resolver<'r>(gpuctk_container::root::LexicalResolver<'r>);

impl<'r> Resolver<'r> {
    fn new(root: &'r mut gpuctk_container::Root) -> Resolver<'r> {
        Resolver(gpuctk_container::root::LexicalResolver::new(root))
    }

    /// Where `p` leads in the root; `None` where it does not resolve.
    fn resolve(&mut self, p: &str) -> Option<String> {
        self.0.resolve(p).ok()
    }

    /// Every path [`Resolver::resolve`] will be asked, before the first
    /// ([`gpuctk_container::root::LexicalResolver::expect`]).
    fn expect<'p>(&mut self, paths: impl IntoIterator<Item = &'p str>) {
        self.0.expect(paths);
    }

    /// Which of them most likely end in a file
    /// ([`gpuctk_container::root::LexicalResolver::expect_files`]).
    fn expect_files<'p>(&mut self, paths: impl IntoIterator<Item = &'p str>) {
        self.0.expect_files(paths);
    }

    /// Hands the folders the walks opened to the root ([`LexicalResolver::keep_folders`]).
    ///
    /// [`LexicalResolver::keep_folders`]: gpuctk_container::root::LexicalResolver::keep_folders
    fn keep_folders(self) {
        self.0.keep_folders();
    }
}

/// `config.json` is written atomically but not fsynced: the engine writes it again for every
/// container, so surviving a power cut buys nothing, and two fsyncs cost milliseconds a start.
/// `mode` is the one config.json had when read (from that read's `fstat`): the new file keeps
/// it, and neither a `stat` of config.json nor a link to its name (which would fail: it exists)
/// comes before the write.
fn write_spec(path: &Path, spec: &serde_json::Value, mode: u32) -> anyhow::Result<()> {
    let out = serde_json::to_vec(spec)?;
    // The bundle is the container's own folder, removed with it: no listing of it for stale
    // temp names on every start (a killed writer's is still removed by the next write).
    let opts = gpuctk_atomicfile::Options {
        mode: Some(mode),
        replaces: true,
        no_sync: true,
        lazy_cleanup: true,
        ..Default::default()
    };
    gpuctk_atomicfile::replace(path, &out, &opts)
        .with_context(|| format!("{}: cannot write", path.display()))
}

/// The names NVIDIA's legacy hook goes by; a prestart hook with one of them already injects.
const LEGACY_HOOK_NAMES: [&str; 2] = ["nvidia-container-runtime-hook", "nvidia-container-toolkit"];

/// `mode = "legacy"`, as NVIDIA's runtime does it: add our prestart hook (this binary, under
/// the hook's name) and leave the rest of the spec alone; the hook injects into the live
/// container. Nothing is added when such a hook is there already (docker `--gpus` adds one).
/// Returns whether the spec changed.
fn add_prestart_hook(spec: &mut serde_json::Value, cfg: &Config) -> bool {
    let is_ours = |h: &serde_json::Value| {
        let base = |v: Option<&str>| {
            v.and_then(|p| Path::new(p).file_name())
                .is_some_and(|n| LEGACY_HOOK_NAMES.iter().any(|l| n == *l))
        };
        base(h.get("path").and_then(|p| p.as_str()))
            || base(h.pointer("/args/0").and_then(|p| p.as_str()))
    };
    let Some(obj) = spec.as_object_mut() else {
        return false;
    };
    let hooks = obj.entry("hooks").or_insert_with(|| serde_json::json!({}));
    let Some(hooks) = hooks.as_object_mut() else {
        return false;
    };
    let prestart = hooks
        .entry("prestart")
        .or_insert_with(|| serde_json::json!([]));
    let Some(list) = prestart.as_array_mut() else {
        return false;
    };
    if list.iter().any(is_ours) {
        return false;
    }
    let mut args = vec![LEGACY_HOOK_NAMES[0].to_string()];
    // runc gives a hook only the hook's own env: name a non-default config explicitly.
    if let Some(p) = cfg
        .path
        .as_deref()
        .filter(|p| *p != Path::new(config::DEFAULT_CONFIG))
    {
        args.push("-config".into());
        args.push(p.to_string_lossy().into_owned());
    }
    args.push("prestart".into());
    list.push(serde_json::json!({
        "path": crate::self_exe::self_path(),
        "args": args,
    }));
    true
}

/// crun's annotation that gives hooks a stderr; without it a failing hook's message goes to
/// `/dev/null` and the engine shows only "exit code 1".
pub const CRUN_HOOKS_STDERR: &str = "run.oci.hooks.stderr";

/// Under crun, point our hooks' stderr at crun's own (`/dev/stderr`, which crun opens in its
/// own process), so a hook's one-line error reaches the engine as runc's does. Only when this
/// process's stderr (which crun inherits through exec) is a pipe or a terminal that can be
/// reopened: crun fails the container if it cannot open the file, and a regular file not opened
/// for appending would be overwritten. An annotation the user set is left alone.
fn pass_hook_errors_on(spec: &mut serde_json::Value, runtime: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let is_crun = runtime
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("crun"));
    if !is_crun {
        return;
    }
    let reopenable = std::fs::OpenOptions::new()
        .append(true)
        .open("/proc/self/fd/2")
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device());
    if !reopenable {
        return;
    }
    let Some(obj) = spec.as_object_mut() else {
        return;
    };
    let ann = obj
        .entry("annotations")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(ann) = ann.as_object_mut() {
        ann.entry(CRUN_HOOKS_STDERR)
            .or_insert_with(|| serde_json::Value::String("/dev/stderr".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolver_agrees_with_a_whole_walk() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["usr/lib/x86_64-linux-gnu", "etc", "proc", "real"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("usr/lib/x86_64-linux-gnu/libc.so.6"), b"x").unwrap();
        // An image's links: a folder, a last name, one out to /proc, an absolute one, a loop.
        symlink("usr/lib", r.join("lib")).unwrap();
        symlink("libc.so.6", r.join("usr/lib/x86_64-linux-gnu/libcuda.so.1")).unwrap();
        symlink("/proc/self/root/x", r.join("usr/lib64")).unwrap();
        symlink("/real", r.join("etc/alias")).unwrap();
        symlink("loop", r.join("etc/loop")).unwrap();
        std::fs::write(r.join("etc/file"), b"x").unwrap();
        // Up and out again through `..`, from a folder the resolver has open.
        symlink("../../../etc", r.join("usr/lib/x86_64-linux-gnu/up")).unwrap();
        // 39 links to reach a folder, and names in it that take 1 and 2 more: the kernel's
        // limit of 40 counts them together, whatever the resolver remembers of the folder.
        std::fs::create_dir_all(r.join("c/d")).unwrap();
        for i in 0..38 {
            symlink(format!("a{}", i + 1), r.join(format!("c/a{i}"))).unwrap();
        }
        symlink("d", r.join("c/a38")).unwrap();
        symlink("y", r.join("c/d/x")).unwrap();
        symlink("z1", r.join("c/d/z")).unwrap();
        symlink("y", r.join("c/d/z1")).unwrap();
        let root = gpuctk_container::Root::open(r).unwrap();
        let mut walked = gpuctk_container::Root::open(r).unwrap();
        let mut resolver = Resolver::new(&mut walked);
        for p in [
            "/",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libcuda.so.1",
            "/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/usr/lib64/libcuda.so.1",
            "/usr/local/cuda/compat",
            "/usr/local/cuda/compat/libcuda.so.1",
            "/etc/alias/x",
            "/etc/alias",
            "/etc/loop",
            "/etc/loop/x",
            "/etc/file/x",
            "/etc/ld.so.cache",
            "/dev/pts",
            "/lib/../etc/x",
            "/usr/lib/x86_64-linux-gnu/",
            "/usr/lib/x86_64-linux-gnu/up/file",
            "/lib/x86_64-linux-gnu/up/alias/y",
            "/usr/lib/x86_64-linux-gnu/../../../../../etc/ld.so.cache",
            "/etc/alias/../usr/lib",
            "/usr/lib64/../lib",
            "/c/a0/x",
            "/c/a0/z",
            "/c/a0/z/w",
            "/c/a1/z",
            "/c/d/z",
        ] {
            // Twice: the second comes from the folders already looked up.
            for _ in 0..2 {
                assert_eq!(resolver.resolve(p), root.resolve_lexically(p).ok(), "{p}");
            }
        }
        // What the limit cases are, so that the agreement above means something.
        assert_eq!(resolver.resolve("/c/a0/x").as_deref(), Some("/c/d/y"));
        assert_eq!(resolver.resolve("/c/a0/z"), None, "41 links");
        assert_eq!(resolver.resolve("/c/a1/z").as_deref(), Some("/c/d/y"));
        assert_eq!(
            resolver
                .resolve("/usr/lib/x86_64-linux-gnu/up/file")
                .as_deref(),
            Some("/etc/file")
        );
    }

    /// The runtime's own mounts inside its `/dev`, `/sys` (and any mount inside an earlier
    /// procfs, sysfs, tmpfs, devpts, mqueue or cgroup mount) are not resolved in the image:
    /// they land inside that mount. A bind mount's inside, a mount before its parent, and a
    /// path with `..` are resolved as before.
    #[test]
    fn mounts_inside_a_runtime_mount_are_not_resolved_in_the_image() {
        let m = |d: &str, t: &str, o: &[&str]| serde_json::json!({"destination": d, "type": t, "source": t, "options": o});
        let mounts = [
            m("/proc", "proc", &[]),
            m("/dev", "tmpfs", &["nosuid"]),
            m("/dev/pts", "devpts", &[]),
            m("/dev/shm/", "tmpfs", &[]),
            m("/dev/mqueue", "mqueue", &[]),
            m("/sys", "sysfs", &["ro"]),
            m("/sys/fs/cgroup", "cgroup", &["ro"]),
            m("/data", "none", &["rbind"]),
            m("/data/x", "tmpfs", &[]),
            m("/run/y", "tmpfs", &[]),
            m("/run", "tmpfs", &[]),
            m("/dev/../etc", "tmpfs", &[]),
            m("/dev//x", "tmpfs", &[]),
            m("/proc/x/.", "tmpfs", &[]),
            m("/devices", "tmpfs", &[]),
        ];
        let refs: Vec<&serde_json::Value> = mounts.iter().collect();
        assert_eq!(
            dests_to_resolve(&refs),
            [
                "/proc",
                "/dev",
                "/sys",
                "/data",
                "/data/x",
                "/run/y",
                "/run",
                "/dev/../etc",
                "/dev//x",
                "/proc/x/.",
                "/devices"
            ]
        );
    }

    /// Regression (issue 21): an image whose `/dev/pts` is a link to `/etc` no longer sends
    /// the hooks to the runtime: the runtime's devpts lands in its own `/dev` tmpfs, not where
    /// the image's hidden link points. (Before, each such mount also cost a lookup per create.)
    #[test]
    fn an_image_link_under_the_runtimes_dev_does_not_leave_the_hooks_to_the_runtime() {
        let t = tempfile::tempdir().unwrap();
        let rootfs = t.path().join("rootfs");
        for d in ["dev", "etc", "usr/lib/x86_64-linux-gnu"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("../etc", rootfs.join("dev/pts")).unwrap();
        let spec = serde_json::json!({
            "root": {"path": rootfs},
            "mounts": [
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
            ],
        });
        let ops = vec![(
            0,
            InRootOp::UpdateLdcache {
                folders: vec!["/usr/lib/x86_64-linux-gnu".into()],
            },
        )];
        let choice = shim_choice(&spec, t.path(), &ContainerEdits::default(), ops.clone());
        assert!(
            matches!(choice, ShimChoice::Shim { .. }),
            "{:?}",
            match choice {
                ShimChoice::Hooks(why) => why,
                ShimChoice::Shim { .. } => String::new(),
            }
        );
        // The same link under a bind mount's destination still sends them to the runtime.
        let spec = serde_json::json!({
            "root": {"path": rootfs},
            "mounts": [
                {"destination": "/dev", "type": "bind", "source": "/dev", "options": ["rbind"]},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
            ],
        });
        assert!(matches!(
            shim_choice(&spec, t.path(), &ContainerEdits::default(), ops),
            ShimChoice::Hooks(_)
        ));
    }

    /// The set's answer is the rule's, for every pair of odd and plain paths.
    #[test]
    fn covering_agrees_with_covers() {
        let all = [
            "",
            "/",
            "//",
            "/dev",
            "/dev/",
            "//dev",
            "/dev/pts",
            "/dev/pts/",
            "/devices",
            "dev",
            "dev/x",
            "/dev/../etc",
            "/etc",
            "/etc/ld.so.cache",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib",
            "/usr/lib/",
            "/usr//lib/x",
        ];
        for d in all {
            let mut c = Covering::default();
            c.add(d);
            for p in all {
                assert_eq!(c.any_covers(p), covers(d, p), "{d:?} over {p:?}");
            }
        }
        let mut c = Covering::default();
        for d in ["/dev", "/proc", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"] {
            c.add(d);
        }
        for p in all {
            let want = ["/dev", "/proc", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"]
                .iter()
                .any(|d| covers(d, p));
            assert_eq!(c.any_covers(p), want, "{p:?}");
        }
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn finds_command_bundle_and_log() {
        let a = parse_runc_args(&os(&[
            "--root",
            "/run/x",
            "--log",
            "/l.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/b",
            "id",
        ]));
        assert_eq!(a.command.as_deref(), Some("create"));
        assert_eq!(a.bundle.as_deref(), Some(Path::new("/b")));
        assert_eq!(a.log.as_deref(), Some(Path::new("/l.json")));
        assert!(a.log_json);
        let a = parse_runc_args(&os(&["--root=/r", "run", "-b=/c", "id"]));
        assert_eq!(a.command.as_deref(), Some("run"));
        assert_eq!(a.bundle.as_deref(), Some(Path::new("/c")));
        // `--bundle create` is a bundle named create, not the command.
        let a = parse_runc_args(&os(&["start", "--bundle", "create"]));
        assert_eq!(a.command.as_deref(), Some("start"));
        let a = parse_runc_args(&os(&["--version"]));
        assert!(a.version && a.command.is_none());
        let a = parse_runc_args(&os(&["--log", "create", "state", "x"]));
        assert_eq!(
            a.command.as_deref(),
            Some("state"),
            "a flag's value is not the command"
        );
    }

    /// The container id as runc's grammar places it, for every command: the first positional
    /// argument after the command's flags and their values, never a flag's value nor a word
    /// of exec's command or kill's signal.
    #[test]
    fn container_id_by_command() {
        let id = |v: &[&str]| parse_runc_args(&os(v)).id;
        let cases: &[(&[&str], Option<&str>)] = &[
            // The bug: `sh`, a word of the command, was looked up as well.
            (
                &["exec", "-t", "nosuchid", "sh", "-c", "true"],
                Some("nosuchid"),
            ),
            (
                &[
                    "--root",
                    "/r",
                    "exec",
                    "--cwd",
                    "/",
                    "-e",
                    "A=1",
                    "--env=B=2",
                    "-u",
                    "0:0",
                    "-g",
                    "5",
                    "--process",
                    "/p.json",
                    "--pid-file",
                    "/pid",
                    "--console-socket",
                    "/s",
                    "--process-label",
                    "l",
                    "--apparmor",
                    "a",
                    "-c",
                    "CAP_X",
                    "--cap",
                    "CAP_Y",
                    "--preserve-fds",
                    "1",
                    "--cgroup",
                    "c",
                    "--pidfd-socket",
                    "/f",
                    "-d",
                    "--no-new-privs",
                    "--ignore-paused",
                    "the-id",
                    "ps",
                    "-u",
                    "x",
                ],
                Some("the-id"),
            ),
            (&["exec", "-cwd", "/tmp", "id1", "true"], Some("id1")),
            // crun's argp: a cluster ending in a value letter, a value attached to a letter.
            (&["exec", "-tu", "0", "id2", "true"], Some("id2")),
            (&["exec", "-uroot", "id3", "true"], Some("id3")),
            (&["exec", "--", "id4", "--help"], Some("id4")),
            (
                &["create", "--bundle", "/b", "--pid-file", "/p", "id5"],
                Some("id5"),
            ),
            (&["create", "-b=/b", "--no-pivot", "id6"], Some("id6")),
            (&["create", "-f", "cfg.json", "id6f"], Some("id6f")),
            (
                &["run", "-d", "--console-socket", "/s", "-b", "/b", "id7"],
                Some("id7"),
            ),
            (&["run", "id8", "--bundle", "/b"], Some("id8")),
            (&["delete", "--force", "id9"], Some("id9")),
            (&["delete", "id10", "-f"], Some("id10")),
            (&["kill", "--all", "id11", "KILL"], Some("id11")),
            (&["kill", "id12", "9"], Some("id12")),
            (&["start", "id13"], Some("id13")),
            (&["state", "id14"], Some("id14")),
            (&["pause", "id15"], Some("id15")),
            (&["resume", "id16"], Some("id16")),
            (&["ps", "-f", "json", "id17", "--", "-ef"], Some("id17")),
            (&["ps", "--format=table", "id18"], Some("id18")),
            (
                &["events", "--interval", "1s", "--stats", "id19"],
                Some("id19"),
            ),
            (
                &[
                    "update",
                    "-r",
                    "/res.json",
                    "--memory",
                    "1G",
                    "--cpu-idle",
                    "1",
                    "id20",
                ],
                Some("id20"),
            ),
            (&["update", "--resources", "-", "id21"], Some("id21")),
            (
                &[
                    "checkpoint",
                    "--image-path",
                    "/i",
                    "--work-path",
                    "/w",
                    "--leave-running",
                    "--page-server",
                    "h:1",
                    "--manage-cgroups-mode",
                    "soft",
                    "--empty-ns",
                    "network",
                    "id22",
                ],
                Some("id22"),
            ),
            (
                &[
                    "restore",
                    "-b",
                    "/b",
                    "--image-path",
                    "/i",
                    "-d",
                    "--lsm-profile",
                    "x:y",
                    "--console-socket",
                    "/s",
                    "id23",
                ],
                Some("id23"),
            ),
            (&["list", "-f", "json"], None),
            (&["list", "-q"], None),
            (&["spec", "--bundle", "/b", "--rootless"], None),
            (&["features"], None),
            (&["--root", "/r", "no-such-command", "x"], None),
            (&["--root", "/r"], None),
            (&["start"], None),
            (
                &["--cgroup-manager", "systemd", "delete", "id24"],
                Some("id24"),
            ),
        ];
        for (argv, want) in cases {
            assert_eq!(id(argv).as_deref(), *want, "{argv:?}");
        }
    }

    #[test]
    fn detach_bundle_and_help_by_command() {
        let p = |v: &[&str]| parse_runc_args(&os(v));
        assert!(p(&["run", "-d", "id"]).detach);
        assert!(p(&["run", "--detach=true", "id"]).detach);
        assert!(p(&["run", "id", "--detach"]).detach);
        assert!(!p(&["run", "--detach=false", "id"]).detach);
        assert!(!p(&["run", "id"]).detach);
        assert!(!p(&["run", "--pid-file", "-d", "id"]).detach, "a value");
        assert!(p(&["exec", "-td", "id", "sh"]).detach);
        assert!(!p(&["exec", "id", "sh", "-d"]).detach, "the command's flag");
        assert_eq!(
            p(&["run", "--pid-file", "/p", "-b", "/b", "id"])
                .bundle
                .as_deref(),
            Some(Path::new("/b"))
        );
        assert_eq!(
            p(&["start", "--bundle", "x", "id"]).bundle,
            None,
            "not start's flag"
        );
        assert!(p(&["create", "--help"]).help);
        assert!(!p(&["exec", "id", "sh", "--help"]).help);
    }

    #[test]
    fn time_format() {
        use std::time::{Duration, UNIX_EPOCH};
        let at = |secs: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_399), "2000-02-28T23:59:59Z");
        // 2000 is a leap year (divisible by 400), 2100 is not (by 100).
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(951_868_800), "2000-03-01T00:00:00Z");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(at(1_764_841_530), "2025-12-04T09:45:30Z");
        assert_eq!(at(253_402_300_799), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339(UNIX_EPOCH - Duration::from_secs(1)), at(0));
    }
}

#[cfg(test)]
#[path = "runtime_shim_tests.rs"]
mod shim_tests;
