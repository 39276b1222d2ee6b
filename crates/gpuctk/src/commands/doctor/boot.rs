//! What keeps the chain right across reboots and driver changes: the CDI refresh units (their
//! unit files under the host root, and their state from systemd where it runs) and the udev rule
//! that makes the `/dev/char` links.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{read::list_dir, report::Checks};

const G: &str = "boot";

/// Where systemd looks for unit files, highest priority first.
const UNIT_DIRS: [&str; 4] = [
    "etc/systemd/system",
    "run/systemd/system",
    "usr/lib/systemd/system",
    "lib/systemd/system",
];

/// Where udev looks for rules, highest priority first (a file of the same name earlier wins).
const RULE_DIRS: [&str; 4] = [
    "etc/udev/rules.d",
    "run/udev/rules.d",
    "usr/lib/udev/rules.d",
    "lib/udev/rules.d",
];

/// The refresh units: gpuctk's (its package), then NVIDIA's (the toolkit's 1.18 packages).
const REFRESH_UNITS: [(&str, &str); 2] = [
    ("gpuctk-cdi-refresh.path", "gpuctk-cdi-refresh.service"),
    ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"),
];

/// The most bytes of a udev rules file, and of `systemctl show`'s answer.
const MAX_RULES: u64 = 1 << 20;
const MAX_SHOW: u64 = 64 << 10;

/// How long `systemctl show` may take (a wedged D-Bus must not hang doctor).
const SYSTEMCTL_TIMEOUT: Duration = Duration::from_secs(5);

/// `host_root` as a prefix of the paths named in a line (`/` is no prefix).
fn shown(host_root: &Path) -> String {
    host_root
        .display()
        .to_string()
        .trim_end_matches('/')
        .to_string()
}

/// The unit file `name` under `host_root`, as systemd would pick it.
fn unit_file(host_root: &Path, name: &str) -> Option<PathBuf> {
    UNIT_DIRS
        .iter()
        .map(|d| host_root.join(d).join(name))
        .find(|p| p.symlink_metadata().is_ok())
}

/// The refresh units' files, their state from systemd where it runs, else "not checked".
/// `specs` says whether the spec dirs hold a spec (without one there is nothing to refresh).
pub(super) fn check_refresh(host_root: &Path, systemctl: &Path, specs: bool, c: &mut Checks) {
    const N: &str = "cdi-refresh";
    if !specs {
        c.ok(G, N, "no CDI spec in the spec dirs: nothing to refresh");
        return;
    }
    let Some((path_unit, service, file)) = REFRESH_UNITS.iter().find_map(|(p, s)| {
        unit_file(host_root, p)
            .or_else(|| unit_file(host_root, s))
            .map(|f| (*p, *s, f))
    }) else {
        c.warn(
            G,
            N,
            format!(
                "no CDI refresh unit (gpuctk-cdi-refresh.path/.service, or NVIDIA's nvidia-cdi-refresh) in {}/{{etc,usr/lib,lib}}/systemd/system: after a driver upgrade the spec names files that are gone, and every container that asks for a CDI device fails",
                shown(host_root)
            ),
            "install the gpuctk package (it ships and enables gpuctk-cdi-refresh.path and .service), or run nvidia-ctk cdi generate after every driver change",
        );
        return;
    };
    if !host_root.join("run/systemd/system").is_dir() {
        c.ok(
            G,
            N,
            format!(
                "{}: present; its state not checked: systemd does not run here (no {})",
                file.display(),
                host_root.join("run/systemd/system").display()
            ),
        );
        return;
    }
    let answer = match systemctl_show(systemctl, &[path_unit, service]) {
        Ok(a) => a,
        Err(e) => {
            c.warn(
                G,
                N,
                format!("{}: present, but systemd could not be asked: {e}", file.display()),
                format!("run systemctl status {path_unit} {service}; with systemctl elsewhere, give --systemctl"),
            );
            return;
        }
    };
    match judge_refresh(&answer, path_unit, service) {
        Ok(found) => c.ok(G, N, found),
        Err((found, fix)) => c.warn(G, N, found, fix),
    }
}

/// `systemctl show` of `units`: one property map per unit, in order.
fn systemctl_show(systemctl: &Path, units: &[&str]) -> Result<String, String> {
    use crate::bounded_run::{run, Limits, RunError};
    let mut cmd = Command::new(systemctl);
    cmd.args([
        "show",
        "--no-pager",
        "--property=Id,LoadState,ActiveState,Result,UnitFileState",
    ])
    .args(units)
    .env_clear()
    .env("PATH", gpuctk_host::catalog::STANDARD_PATH.join(":"))
    .env("LC_ALL", "C");
    let limits = Limits {
        time: SYSTEMCTL_TIMEOUT,
        stdout: MAX_SHOW,
        stderr: None,
    };
    let shown = systemctl.display();
    let done = run(cmd, &limits).map_err(|e| match e {
        RunError::Start(e) | RunError::Io(e) => format!("{shown}: {e}"),
        RunError::Timeout => format!(
            "{shown} show did not answer within {}s",
            SYSTEMCTL_TIMEOUT.as_secs()
        ),
        RunError::TooLong => format!("{shown} show: answer longer than {MAX_SHOW} bytes"),
    })?;
    if !done.status.success() {
        return Err(format!("{shown} show exited with {}", done.status));
    }
    Ok(String::from_utf8(done.stdout).unwrap_or_default())
}

/// The property `key` of the block of `systemctl show` whose `Id` is `unit`.
fn property<'a>(answer: &'a str, unit: &str, key: &str) -> Option<&'a str> {
    answer
        .split("\n\n")
        .find(|b| b.lines().any(|l| l == format!("Id={unit}")))?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

/// The verdict on the refresh units from `systemctl show`: the path unit loaded and enabled
/// (else a driver change is not seen), the service's last run not failed (else the spec was not
/// regenerated).
fn judge_refresh(answer: &str, path_unit: &str, service: &str) -> Result<String, (String, String)> {
    let get = |u: &str, k: &str| property(answer, u, k).unwrap_or("");
    for u in [path_unit, service] {
        if get(u, "LoadState") != "loaded" {
            return Err((
                format!(
                    "{u}: LoadState={}: systemd does not know the unit, so nothing regenerates the spec",
                    property(answer, u, "LoadState").unwrap_or("(no answer)")
                ),
                format!("systemctl daemon-reload && systemctl enable --now {path_unit}"),
            ));
        }
    }
    let enabled = |u: &str| {
        matches!(
            get(u, "UnitFileState"),
            "enabled" | "enabled-runtime" | "static" | "alias"
        )
    };
    if !enabled(path_unit) {
        return Err((
            format!(
                "{path_unit} is {}: a driver upgrade leaves the CDI spec stale until someone regenerates it",
                get(path_unit, "UnitFileState")
            ),
            format!("systemctl enable --now {path_unit} {service}"),
        ));
    }
    if get(service, "ActiveState") == "failed" || !matches!(get(service, "Result"), "success" | "")
    {
        return Err((
            format!(
                "{service} failed (ActiveState={}, Result={}): the spec was not regenerated for the driver now installed",
                get(service, "ActiveState"),
                get(service, "Result")
            ),
            format!("journalctl -u {service} says why; fix that, then systemctl restart {service}"),
        ));
    }
    Ok(format!(
        "{path_unit} enabled ({}), {service} last run {}",
        get(path_unit, "ActiveState"),
        get(service, "Result")
    ))
}

/// A udev rule that makes the `/dev/char` links when the driver loads: gpuctk's
/// (`99-gpuctk-nvidia.rules`, from its package) or one an admin wrote as NVIDIA's docs say.
pub(super) fn check_udev(host_root: &Path, c: &mut Checks) {
    const N: &str = "udev-char-links";
    let mut seen: Vec<String> = Vec::new();
    for dir in RULE_DIRS {
        let d = host_root.join(dir);
        let Ok(entries) = list_dir(&d) else {
            continue;
        };
        for (name, _) in entries {
            if !name.ends_with(".rules") || seen.contains(&name) {
                continue;
            }
            // A file of the same name in a higher directory (a /dev/null link masks) wins.
            seen.push(name.clone());
            let Ok(bytes) = crate::capped::read_capped(&d.join(&name), MAX_RULES, "udev rules")
            else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            if text
                .lines()
                .any(|l| !l.trim_start().starts_with('#') && l.contains("create-dev-char-symlinks"))
            {
                c.ok(
                    G,
                    N,
                    format!(
                        "{} makes the /dev/char links when the driver loads",
                        d.join(&name).display()
                    ),
                );
                return;
            }
        }
    }
    c.warn(
        G,
        N,
        format!(
            "no udev rule in {}/{{etc,usr/lib,lib}}/udev/rules.d runs create-dev-char-symlinks: the /dev/char links are gone after a reboot or a driver reload, and a systemd daemon-reload then takes the GPUs away from running containers",
            shown(host_root)
        ),
        "install /usr/lib/udev/rules.d/99-gpuctk-nvidia.rules (the gpuctk package ships it) and run udevadm control --reload-rules",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `systemctl show` as systemd 252 prints it for the two units.
    fn show(path_state: &str, svc_active: &str, svc_result: &str) -> String {
        format!(
            "Id=gpuctk-cdi-refresh.path\nLoadState=loaded\nActiveState=active\nResult=success\nUnitFileState={path_state}\n\nId=gpuctk-cdi-refresh.service\nLoadState=loaded\nActiveState={svc_active}\nResult={svc_result}\nUnitFileState=enabled\n"
        )
    }

    const P: &str = "gpuctk-cdi-refresh.path";
    const S: &str = "gpuctk-cdi-refresh.service";

    #[test]
    fn refresh_units_enabled_and_run_are_fine() {
        let ok = judge_refresh(&show("enabled", "inactive", "success"), P, S).unwrap();
        assert!(ok.contains("enabled"), "{ok}");
    }

    #[test]
    fn refresh_path_unit_disabled() {
        let (found, fix) =
            judge_refresh(&show("disabled", "inactive", "success"), P, S).unwrap_err();
        assert!(found.contains("is disabled"), "{found}");
        assert!(fix.contains("systemctl enable --now"), "{fix}");
    }

    #[test]
    fn refresh_service_failed() {
        let (found, fix) =
            judge_refresh(&show("enabled", "failed", "exit-code"), P, S).unwrap_err();
        assert!(found.contains("Result=exit-code"), "{found}");
        assert!(
            fix.contains("journalctl -u gpuctk-cdi-refresh.service"),
            "{fix}"
        );
    }

    #[test]
    fn refresh_unit_unknown_to_systemd() {
        let answer = show("enabled", "inactive", "success").replacen(
            "LoadState=loaded",
            "LoadState=not-found",
            1,
        );
        let (found, fix) = judge_refresh(&answer, P, S).unwrap_err();
        assert!(found.contains("LoadState=not-found"), "{found}");
        assert!(fix.contains("daemon-reload"), "{fix}");
    }
}
