//! The malicious-image suite (issue 8 §2): every attack in [`catalog`] run through every
//! delivery path in [`paths`], one test per path, attacks in sequence after a benign control.
//!
//! Each attack must leave the sentinel trees (next to the bundle, in the case dir) and the mock
//! host unchanged (content, mode, owner, mtime), must not let image code run on the host (the
//! marker library and the planted `ldconfig` write only to a host-only folder), and the container
//! must either run with its GPUs injected inside its own root or fail with a clear message, all
//! within a time bound. A failing attack does not stop the others: the test reports every
//! failure at the end.
//!
//! `GPUCTK_ATTACKS=a,b` runs only the attacks whose names contain `a` or `b` (the control always
//! runs); `GPUCTK_ATTACKS_REPORT=FILE` appends one line per attack and path to FILE;
//! `GPUCTK_ATTACKS_KEEP=1` keeps each case's directory; `GPUCTK_ATTACKS_TIMING=1` prints where
//! each attack's time went.

mod catalog;
mod lab;
mod paths;

use std::fs;
use std::io::Write;
use std::time::{Duration, Instant};

use gpuctk_mockhost::{LibraryLoad, ProbeReport};

use catalog::{Attack, Expect};
use lab::{diff, snapshot, Case, Lab};
use paths::{execute, Delivery, PathKind, Ran, Runtime};

/// Messages our programs print, one of which a hook failure must carry to the engine.
const OUR_MESSAGES: &[&str] = &[
    "nvidia-container-runtime: error:",
    "nvidia-container-runtime-hook: error:",
    "nvidia-container-cli: ",
    "nvidia-cdi-hook ",
    "gpuctk: error:",
];

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

/// Why `ran` is not a clear failure, or `None` when it is one.
fn unclear_failure(ran: &Ran) -> Option<String> {
    if ran.code == 0 {
        return Some("it exited 0".into());
    }
    let err = ran.stderr.trim();
    if err.is_empty() {
        return Some(format!("exit {} with nothing on stderr", ran.code));
    }
    if err.contains("panicked") || err.contains("RUST_BACKTRACE") {
        return Some(format!("a panic: {}", tail(err, 6)));
    }
    if err.to_ascii_lowercase().contains("hook") && !OUR_MESSAGES.iter().any(|m| err.contains(m)) {
        return Some(format!(
            "a hook failed and its message is lost: {}",
            tail(err, 4)
        ));
    }
    None
}

/// Why `ran` is not the container running with exactly `want` injected, or `None`.
fn not_injected(case: &Case, ran: &Ran, exp: &Expect) -> Option<String> {
    if ran.code != 0 {
        return Some(format!("exit {}: {}", ran.code, tail(&ran.stderr, 6)));
    }
    let (probe_text, smi) = ran
        .stdout
        .split_once("---smi---\n")
        .unwrap_or((&ran.stdout, ""));
    if !ran.stdout.contains("---end---") {
        return Some(format!(
            "the container did not finish its script: {}",
            tail(&ran.stdout, 6)
        ));
    }
    let probe = ProbeReport::parse(probe_text);
    let mut got = Vec::new();
    for (path, result) in &probe.devices {
        if let Some(n) = path
            .strip_prefix("/dev/nvidia")
            .and_then(|n| n.parse::<u32>().ok())
        {
            if result != "ENXIO" {
                return Some(format!("{path} is present but opens with {result}"));
            }
            got.push(n);
        }
    }
    got.sort();
    if got != exp.want {
        return Some(format!(
            "GPU nodes {got:?}, want {:?}; stderr: {}",
            exp.want,
            tail(&ran.stderr, 4)
        ));
    }
    if exp.want.is_empty() {
        return None;
    }
    let uuids = case.host().uuids();
    let want_uuids: Vec<String> = exp
        .want
        .iter()
        .map(|i| uuids[*i as usize].clone())
        .collect();
    let smi_uuids: Vec<String> = smi
        .lines()
        .filter_map(|l| l.split("(UUID: ").nth(1))
        .map(|u| u.trim_end_matches(')').to_string())
        .collect();
    if smi_uuids != want_uuids {
        return Some(format!("nvidia-smi -L: {}", tail(smi, 6)));
    }
    if exp.libcuda {
        match &probe.libcuda {
            Some(LibraryLoad::Loaded { .. }) => {}
            other => return Some(format!("libcuda did not load: {other:?}")),
        }
        if probe.cu_device_count != Some((0, exp.want.len() as i32)) {
            return Some(format!(
                "cuDeviceGetCount {:?}, want {}",
                probe.cu_device_count,
                exp.want.len()
            ));
        }
    }
    if case.in_root_marker {
        let n = fs::read_dir(case.at("evil-ran"))
            .map(|d| d.count())
            .unwrap_or(0);
        if n == 0 {
            return Some("attack not armed: the image's code did not run in the container".into());
        }
    }
    None
}

/// The verdict on one attack: problems, empty when it was contained as expected.
fn judge(case: &Case, ran: &Ran, exp: &Expect, bound: Duration) -> Vec<String> {
    let mut problems = Vec::new();
    if ran.timed_out {
        problems.push(format!(
            "did not finish within {bound:?} (killed); stderr: {}",
            tail(&ran.stderr, 4)
        ));
        return problems;
    }
    if exp.must_refuse {
        if let Some(why) = unclear_failure(ran) {
            problems.push(format!(
                "expected a clear refusal, got {why}; stdout: {}",
                tail(&ran.stdout, 3)
            ));
        }
        return problems;
    }
    if exp.runs_any && ran.code == 0 {
        return problems;
    }
    if let Some(why) = not_injected(case, ran, exp) {
        if exp.may_refuse {
            if let Some(why2) = unclear_failure(ran) {
                problems.push(format!(
                    "neither ran with GPUs {:?} ({why}) nor failed clearly ({why2})",
                    exp.want
                ));
            }
        } else {
            problems.push(why);
        }
    }
    problems
}

fn selected(a: &Attack) -> bool {
    match std::env::var("GPUCTK_ATTACKS") {
        Ok(f) if !f.is_empty() => f.split(',').any(|p| a.name.contains(p)),
        _ => true,
    }
}

/// Prepare, run and judge one attack on one path; the problems found.
fn attempt(lab: &Lab, kind: PathKind, a: &Attack) -> (Vec<String>, Duration, String) {
    let t0 = Instant::now();
    let mut case = lab.case(&a.name, a.layout);
    let t1 = Instant::now();
    (a.prepare)(&mut case);
    let t2 = Instant::now();
    let watched = case.watched();
    let before: Vec<_> = watched.iter().map(|p| snapshot(p)).collect();
    let t3 = Instant::now();
    let bound = if a.baseline {
        a.bound + paths::baseline(&case, kind)
    } else {
        a.bound
    };
    let ran = execute(&case, kind, bound);
    let t4 = Instant::now();
    if std::env::var_os("GPUCTK_ATTACKS_TIMING").is_some() {
        eprintln!(
            "{}: case {:?} prepare {:?} snapshot {:?} execute {:?}",
            a.name,
            t1 - t0,
            t2 - t1,
            t3 - t2,
            t4 - t3
        );
    }
    let exp = (a.expect)(kind.delivery());
    let mut problems = judge(&case, &ran, &exp, bound);
    // A flip breaks the image while it is created, and a hook may then fail on it. Under podman
    // with a CDI spec, crun runs our hooks with `/dev/null` for stderr and only the engine could
    // redirect it (`run.oci.hooks.stderr`), so the message cannot reach the user there: the
    // refusal still counts, and the sentinel and marker checks below still hold it to account.
    if case.flip.is_some() && matches!(kind.delivery(), Delivery::Podman) {
        problems.retain(|p| !p.contains("its message is lost"));
    }
    let mut changed = Vec::new();
    for (p, b) in watched.iter().zip(&before) {
        for d in diff(b, &snapshot(p)) {
            changed.push(d.replace(&p.to_string_lossy().into_owned(), "{sentinel}"));
        }
    }
    let mut notes = Vec::new();
    if !changed.is_empty() {
        // Some runtimes write through an image's symlinks themselves: run the same image, with
        // the same device nodes and mounts, by the runtime alone, and hold against us only what
        // it does not do on its own.
        let edited: Option<serde_json::Value> = matches!(kind.delivery(), Delivery::Shim)
            .then(|| fs::read(case.bundle.join("config.json")).ok())
            .flatten()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let alone = runtime_alone_changes(lab, kind, a, edited);
        let raced = if case.flip.is_some()
            && matches!(kind.delivery(), Delivery::Shim | Delivery::Podman)
        {
            mount_point_race(&case, &changed)
        } else {
            Vec::new()
        };
        for d in changed {
            if alone.contains(&d) {
                notes.push(d);
            } else if raced.contains(&d) {
                notes.push(format!(
                    "{d} (the runtime's mount-point race, CVE-2024-45310 class)"
                ));
            } else {
                problems.push(format!("sentinel: {d}"));
            }
        }
    }
    let markers: Vec<String> = fs::read_dir(&lab.markers)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if !markers.is_empty() {
        problems.push(format!("image code ran on the host: markers {markers:?}"));
        for m in &markers {
            let _ = fs::remove_file(lab.markers.join(m));
        }
    }
    for d in &ran.host_damage {
        problems.push(format!("host /: {d}"));
    }
    let t5 = Instant::now();
    if std::env::var_os("GPUCTK_ATTACKS_KEEP").is_none() {
        paths::release_fifos(&case);
        let _ = fs::remove_dir_all(&case.dir);
        let _ = fs::remove_dir_all(&case.sentinel);
    }
    if std::env::var_os("GPUCTK_ATTACKS_TIMING").is_some() {
        eprintln!("{}: judge {:?} cleanup {:?}", a.name, t5 - t4, t5.elapsed());
    }
    let mut outcome = if ran.timed_out {
        "killed at the bound".to_string()
    } else if ran.code == 0 {
        "ran".to_string()
    } else {
        let last = ran
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .take(300)
            .collect::<String>();
        format!("refused: {last}")
    };
    if !notes.is_empty() {
        outcome.push_str(&format!(
            " [the runtime alone also changes: {}]",
            notes.join("; ")
        ));
    }
    (problems, ran.elapsed, outcome)
}

/// The changes a low-level runtime makes itself when a folder it creates mount points in is
/// swapped for a symlink between its check and its use (runc before 1.1.14 follows it: empty
/// files or folders named like the mounted driver files appear at the symlink's target, and the
/// parent's mtime moves). A race, so a run of the runtime alone cannot be relied on to show it.
/// Only for the shim and podman, where the runtime, not our code, makes the mount points.
fn mount_point_race(case: &Case, changed: &[String]) -> Vec<String> {
    let host = std::path::PathBuf::from(case.host().driver_root());
    let mut names = std::collections::BTreeSet::new();
    let mut todo = vec![host];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            names.insert(e.file_name().to_string_lossy().into_owned());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
        }
    }
    let mut raced: Vec<String> = changed
        .iter()
        .filter(|d| {
            d.strip_suffix(" appeared (file, 0 bytes)")
                .or_else(|| d.rsplit_once(" appeared (dir, ").map(|(p, _)| p))
                .and_then(|p| p.rsplit('/').next())
                .is_some_and(|n| names.contains(n))
        })
        .cloned()
        .collect();
    let parents: Vec<String> = raced
        .iter()
        .filter_map(|d| {
            d.rsplit_once('/')
                .map(|(p, _)| format!("{p} changed: mtime changed"))
        })
        .collect();
    raced.extend(
        changed
            .iter()
            .filter(|d| parents.iter().any(|p| d.starts_with(p.as_str())))
            .cloned(),
    );
    raced
}

/// The sentinel changes (with `{sentinel}` for the tree's root) that the runtime makes on its
/// own for attack `a`, on a fresh case.
fn runtime_alone_changes(
    lab: &Lab,
    kind: PathKind,
    a: &Attack,
    edited: Option<serde_json::Value>,
) -> Vec<String> {
    let mut case = lab.case(&format!("{}-alone", a.name), a.layout);
    (a.prepare)(&mut case);
    let edited = edited.map(|mut e| {
        // The same devices and mounts, on this case's own rootfs.
        e["root"]["path"] = serde_json::json!(case.rootfs);
        e
    });
    let watched = case.watched();
    let before: Vec<_> = watched.iter().map(|p| snapshot(p)).collect();
    paths::run_alone(&case, kind, edited);
    let mut out = Vec::new();
    for (p, b) in watched.iter().zip(&before) {
        for d in diff(b, &snapshot(p)) {
            out.push(d.replace(&p.to_string_lossy().into_owned(), "{sentinel}"));
        }
    }
    if std::env::var_os("GPUCTK_ATTACKS_KEEP").is_none() {
        paths::release_fifos(&case);
        let _ = fs::remove_dir_all(&case.dir);
        let _ = fs::remove_dir_all(&case.sentinel);
    }
    out
}

fn run_path(kind: PathKind) {
    let started = Instant::now();
    let lab = Lab::new();
    let control = catalog::control();
    let (problems, _, _) = attempt(&lab, kind, &control);
    assert!(
        problems.is_empty(),
        "{kind}: the benign control image failed, so no attack can be judged:\n{}",
        problems.join("\n")
    );
    let attacks: Vec<Attack> = catalog::all()
        .into_iter()
        .filter(|a| a.on.contains(&kind.delivery()) && selected(a))
        .collect();
    let mut failed = Vec::new();
    let mut lines = Vec::new();
    for a in &attacks {
        let (problems, took, outcome) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| attempt(&lab, kind, a)))
                .unwrap_or_else(|e| {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    (
                        vec![format!("the test itself failed: {msg}")],
                        Duration::ZERO,
                        String::new(),
                    )
                });
        let verdict = if problems.is_empty() { "ok" } else { "FAIL" };
        lines.push(format!(
            "{kind}\t{}\t{verdict}\t{}\t{}\t{}",
            a.name,
            took.as_millis(),
            outcome.replace(['\n', '\t'], " "),
            problems.join(" | ").replace(['\n', '\t'], " ")
        ));
        if !problems.is_empty() {
            failed.push(format!(
                "{} ({}):\n    {}",
                a.name,
                a.what,
                problems.join("\n    ")
            ));
        }
    }
    if let Ok(path) = std::env::var("GPUCTK_ATTACKS_REPORT") {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        for l in &lines {
            writeln!(f, "{l}").unwrap();
        }
    }
    if std::env::var_os("GPUCTK_ATTACKS_KEEP").is_some() {
        eprintln!("{kind}: kept {}", lab.t.path().display());
        std::mem::forget(lab);
    }
    eprintln!(
        "{kind}: {} attacks, {} contained, {} failed, {:.1} s",
        attacks.len(),
        attacks.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "{kind}: {} of {} attacks not contained:\n{}",
        failed.len(),
        attacks.len(),
        failed.join("\n")
    );
}

#[test]
fn catalog_has_thirty_distinct_attacks_per_path() {
    let all = catalog::all();
    let mut names: Vec<&str> = all.iter().map(|a| a.name.as_str()).collect();
    names.sort();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "attack names are unique");
    for d in [
        Delivery::Shim,
        Delivery::Hook,
        Delivery::Cli,
        Delivery::Podman,
    ] {
        let count = all.iter().filter(|a| a.on.contains(&d)).count();
        assert!(count >= 30, "{d:?}: only {count} attacks");
    }
}

#[test]
fn shim_runc_create_start_delete() {
    run_path(PathKind::ShimCsd(Runtime::Runc));
}

#[test]
fn shim_runc_run() {
    run_path(PathKind::ShimRun(Runtime::Runc));
}

#[test]
fn shim_crun_create_start_delete() {
    run_path(PathKind::ShimCsd(Runtime::Crun));
}

#[test]
fn shim_crun_run() {
    run_path(PathKind::ShimRun(Runtime::Crun));
}

#[test]
fn prestart_hook_runc() {
    run_path(PathKind::Hook(Runtime::Runc));
}

#[test]
fn prestart_hook_crun() {
    run_path(PathKind::Hook(Runtime::Crun));
}

#[test]
fn nvidia_container_cli_configure() {
    run_path(PathKind::Cli);
}

#[test]
fn podman_cdi() {
    run_path(PathKind::Podman);
}
