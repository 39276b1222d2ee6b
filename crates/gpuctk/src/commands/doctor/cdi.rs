//! The CDI specs in the spec dirs: valid, made for the running driver, every path they name
//! present and every hook they run installed; named as requests name GPUs (`all`, UUIDs); one
//! spec per kind; in a directory every configured engine reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpuctk_cdi::registry::Registry;
use gpuctk_core::{spec_driver_version, stale_reason};
use gpuctk_host::checks;

use super::engines::EngineFacts;
use super::report::Checks;

const G: &str = "toolkit";

/// The specs' checks; whether the dirs hold any spec (valid or not).
pub(super) fn check_cdi_specs(
    dirs: &[PathBuf],
    running: Option<&str>,
    mig: Option<&[String]>,
    engines: &EngineFacts,
    c: &mut Checks,
) -> bool {
    let reg = Registry::load(dirs);
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    for (path, err) in reg.errors() {
        c.fail(
            G,
            "cdi-spec",
            format!("{}: {err}", path.display()),
            format!(
                "regenerate it (nvidia-ctk cdi generate --output {}) or remove it; engines skip an invalid spec",
                path.display()
            ),
        );
    }
    if reg.specs().is_empty() {
        if reg.errors().is_empty() {
            c.ok(
                G,
                "cdi-spec",
                format!(
                    "no CDI spec in {}: containers get their edits just in time",
                    shown.join(", ")
                ),
            );
        }
        return !reg.errors().is_empty();
    }
    for loaded in reg.specs() {
        let path = loaded.path.display().to_string();
        let spec = &loaded.spec;
        let regenerate = format!("regenerate it: nvidia-ctk cdi generate --output {path}");
        let paths: Vec<(&str, &str)> = spec
            .all_edits()
            .flat_map(|e| {
                e.mounts
                    .iter()
                    .filter(|m| m.host_path.starts_with('/'))
                    .map(|m| ("mount source", m.host_path.as_str()))
                    .chain(
                        e.device_nodes
                            .iter()
                            .map(|n| ("device node", n.host_path.as_deref().unwrap_or(&n.path))),
                    )
            })
            .collect();
        let missing = gpuctk_host::first_missing(paths.iter().copied());
        let made_for = spec_driver_version(spec);
        if let Some(why) = stale_reason(
            &[(path.clone(), made_for.clone())],
            running,
            missing.as_deref(),
        ) {
            c.fail(
                G,
                "cdi-spec",
                format!("{path}: stale: {why}"),
                format!("{regenerate} (cdi mode refuses it; auto mode falls back to just-in-time edits with a warning)"),
            );
            continue;
        }
        let bad_hooks: Vec<String> = spec
            .all_edits()
            .flat_map(|e| e.hooks.iter())
            .map(|h| h.path.clone())
            .filter(|p| !checks::is_executable(Path::new(p)))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !bad_hooks.is_empty() {
            c.fail(
                G,
                "cdi-spec",
                format!(
                    "{path}: hook {} does not exist or is not executable: every container using the spec fails to start",
                    bad_hooks.join(", ")
                ),
                format!("install the hook there, or {regenerate} --nvidia-cdi-hook-path <the installed nvidia-cdi-hook>"),
            );
            continue;
        }
        c.ok(
            G,
            "cdi-spec",
            format!(
                "{path}: valid, {} device(s), for driver {}, every host path present",
                spec.devices.len(),
                made_for.as_deref().unwrap_or("(not recorded)")
            ),
        );
    }
    check_names(&reg, c);
    if let Some(mig) = mig {
        check_mig_layout(&reg, mig, c);
    }
    check_kinds(&reg, c);
    check_engine_dirs(&reg, engines, c);
    true
}

/// The GPU kind's names: `all` (what `--device nvidia.com/gpu=all` and `--gpus all` ask for) and
/// the UUIDs (what the device plugin and `NVIDIA_VISIBLE_DEVICES=GPU-...` ask for).
fn check_names(reg: &Registry, c: &mut Checks) {
    for loaded in reg.specs() {
        let spec = &loaded.spec;
        if spec.kind != "nvidia.com/gpu" || spec.devices.is_empty() {
            continue;
        }
        let path = loaded.path.display();
        let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
        let mut missing = Vec::new();
        if !names.contains(&"all") {
            missing.push("no `all` device: --device nvidia.com/gpu=all and NVIDIA_VISIBLE_DEVICES=all fail with \"unresolvable CDI devices\"");
        }
        if !names
            .iter()
            .any(|n| n.starts_with("GPU-") || n.starts_with("MIG-"))
        {
            missing.push("no UUID names: the device plugin and NVIDIA_VISIBLE_DEVICES=GPU-<uuid> ask by UUID, and fail with \"unresolvable CDI devices\"");
        }
        if missing.is_empty() {
            c.ok(
                G,
                "cdi-names",
                format!("{path}: `all`, indexes and UUIDs ({} names)", names.len()),
            );
        } else {
            c.warn(
                G,
                "cdi-names",
                format!("{path}: {}", missing.join("; ")),
                format!("regenerate it with the default names: nvidia-ctk cdi generate --output {path} (--device-name-strategy index,uuid, without --no-all-device)"),
            );
        }
    }
}

/// The MIG devices a GPU spec names (`N:M`) are the ones procfs shows now: a spec made before
/// the GPUs were repartitioned offers instances that are gone and lacks the new ones.
fn check_mig_layout(reg: &Registry, now: &[String], c: &mut Checks) {
    let mut now: Vec<&str> = now.iter().map(String::as_str).collect();
    now.sort();
    for loaded in reg.specs() {
        if loaded.spec.kind != "nvidia.com/gpu" {
            continue;
        }
        let mut named: Vec<&str> = loaded
            .spec
            .devices
            .iter()
            .map(|d| d.name.as_str())
            .filter(|n| gpuctk_core::mig::parse_mig_index(n).is_some())
            .collect();
        named.sort();
        let path = loaded.path.display();
        if named == now {
            if !now.is_empty() {
                c.ok(
                    G,
                    "cdi-mig",
                    format!("{path}: the {} MIG device(s) procfs shows", now.len()),
                );
            }
            continue;
        }
        let list = |v: &[&str]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        c.warn(
            G,
            "cdi-mig",
            format!(
                "{path}: older than the MIG layout: it names MIG devices {}, procfs shows {} (repartitioned since): requests for the new ones fail and the old names give the wrong instance or none",
                list(&named),
                list(&now)
            ),
            format!("regenerate it: nvidia-ctk cdi generate --output {path} (again after every MIG repartition; the refresh unit does not see one)"),
        );
    }
}

/// One spec per kind: a second one of the same kind (an old `/etc/cdi/nvidia.yaml` next to the
/// refresh unit's `/var/run/cdi/nvidia.yaml`) shadows or conflicts with it, name by name.
fn check_kinds(reg: &Registry, c: &mut Checks) {
    let mut by_kind: BTreeMap<&str, Vec<&gpuctk_cdi::registry::LoadedSpec>> = BTreeMap::new();
    for loaded in reg.specs() {
        by_kind.entry(&loaded.spec.kind).or_default().push(loaded);
    }
    for (kind, specs) in by_kind {
        if specs.len() < 2 {
            continue;
        }
        let paths: Vec<String> = specs.iter().map(|s| s.path.display().to_string()).collect();
        let top = specs.iter().map(|s| s.priority).max().unwrap_or(0);
        let winners: Vec<&str> = specs
            .iter()
            .filter(|s| s.priority == top)
            .map(|s| s.path.to_str().unwrap_or("?"))
            .collect();
        let effect = if winners.len() > 1 {
            "in one directory, so a name both define is dropped as a conflict".to_string()
        } else {
            format!(
                "a name both define comes from {}, and the other's devices are still offered: after a driver upgrade one of them is stale",
                winners[0]
            )
        };
        c.warn(
            G,
            "cdi-kinds",
            format!("{} specs of kind {kind}: {}; {effect}", paths.len(), paths.join(", ")),
            "keep one: remove the spec you did not mean (an old `nvidia-ctk cdi generate` output, when the refresh unit writes /var/run/cdi/nvidia.yaml)",
        );
    }
}

/// `/var/run` is a link to `/run` on every systemd host: the same dir for an engine.
fn same_dir(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| {
        let s = p.to_string_lossy();
        let s = s.trim_end_matches('/');
        match s.strip_prefix("/var/run/") {
            Some(rest) => format!("/run/{rest}"),
            None if s == "/var/run" => "/run".to_string(),
            None => s.to_string(),
        }
    };
    norm(a) == norm(b)
}

/// Every spec is in a directory that each configured engine reads (docker's `cdi-spec-dirs`,
/// containerd's and CRI-O's `cdi_spec_dirs`): else the engine resolves none of its names.
fn check_engine_dirs(reg: &Registry, engines: &EngineFacts, c: &mut Checks) {
    let mut dirs: Vec<&Path> = Vec::new();
    for loaded in reg.specs() {
        if let Some(d) = loaded.path.parent() {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    if dirs.is_empty() || engines.cdi_readers.is_empty() {
        return;
    }
    let mut bad = Vec::new();
    let mut fixes = Vec::new();
    for r in &engines.cdi_readers {
        let unread: Vec<String> = dirs
            .iter()
            .filter(|d| !r.dirs.iter().any(|e| same_dir(e, d)))
            .map(|d| d.display().to_string())
            .collect();
        if unread.is_empty() {
            continue;
        }
        let reads: Vec<String> = r.dirs.iter().map(|d| d.display().to_string()).collect();
        bad.push(format!(
            "{} reads {} ({}), not {}",
            r.engine,
            if reads.is_empty() {
                "no dir".to_string()
            } else {
                reads.join(", ")
            },
            r.source,
            unread.join(", ")
        ));
        fixes.push(format!(
            "add {} to {}'s {}",
            unread.join(", "),
            r.engine,
            match r.engine {
                "docker" => "cdi-spec-dirs (daemon.json)",
                _ => "cdi_spec_dirs",
            }
        ));
    }
    if bad.is_empty() {
        let engines: Vec<&str> = engines.cdi_readers.iter().map(|r| r.engine).collect();
        c.ok(
            G,
            "cdi-spec-dirs",
            format!("{} read the spec dirs", engines.join(", ")),
        );
    } else {
        c.warn(
            G,
            "cdi-spec-dirs",
            format!(
                "{}: those engines resolve no name of the specs there (\"unresolvable CDI devices\")",
                bad.join("; ")
            ),
            format!(
                "{}, and restart the engine; or generate the spec into a dir they read (/var/run/cdi or /etc/cdi)",
                fixes.join("; ")
            ),
        );
    }
}
