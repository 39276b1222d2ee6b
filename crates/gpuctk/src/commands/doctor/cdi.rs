//! The CDI specs in the spec dirs: valid, made for the running driver, every path they name
//! present.

use std::path::{Path, PathBuf};

use gpuctk_cdi::registry::Registry;
use gpuctk_cdi::spec::{ContainerEdits, Spec};
use gpuctk_core::{spec_driver_version, stale_reason};
use gpuctk_host::checks;

use super::Checks;

/// Every edit of `spec`: the top-level ones and each device's.
pub(super) fn all_edits(spec: &Spec) -> Vec<&ContainerEdits> {
    std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits))
        .collect()
}

pub(super) fn check_cdi_specs(dirs: &[PathBuf], running: Option<&str>, c: &mut Checks) {
    const G: &str = "toolkit";
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
        return;
    }
    for loaded in reg.specs() {
        let path = loaded.path.display().to_string();
        let spec = &loaded.spec;
        let regenerate = format!("regenerate it: nvidia-ctk cdi generate --output {path}");
        let edits = all_edits(spec);
        let paths: Vec<(&str, &str)> = edits
            .iter()
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
        let bad_hooks: Vec<String> = edits
            .iter()
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
}
