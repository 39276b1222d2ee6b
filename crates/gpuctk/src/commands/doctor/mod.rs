//! `gpuctk doctor`: walks the chain on this host, driver to image, and says per link what it
//! found and how to fix it. The facts come from `gpuctk_host` (discovery and `checks`), the
//! CDI registry and the config as the runtime loads it; the decisions are the ones the
//! deliveries take (`core::stale_reason`, `core::require::check`, the compat rule of
//! `container::hooks::judge_cuda_compat`), and what is left is the verdict (`judge_image`, pure).
//!
//! One module per link of the chain: [`driver`], [`devices`] (and [`mig`]), [`config`] (the
//! toolkit's own settings), [`policy`], [`cdi`], [`engines`], [`boot`] (what keeps it right
//! across reboots) and [`image`]. This module holds the report and runs them in order.

mod boot;
mod cdi;
mod config;
mod devices;
mod driver;
mod engines;
mod image;
mod mig;
mod policy;
mod read;
mod report;

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use gpuctk_host::Roots;

use crate::cli::DoctorArgs;

use report::Checks;
use report::{Report, Status};

pub fn run(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let report = diagnose(&a);
    let text = if a.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        render(&report)
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(if report.status == Status::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The human-readable report: one line per check, the fix after it, then the verdict.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    for c in &r.checks {
        let _ = write!(
            s,
            "{:<4} {}/{}: {}",
            c.status.as_str(),
            c.group,
            c.name,
            c.found
        );
        if let Some(fix) = &c.fix {
            let _ = write!(s, "; fix: {fix}");
        }
        s.push('\n');
    }
    if let Some(v) = &r.verdict {
        let _ = write!(
            s,
            "{:<4} verdict: CUDA {} start in this image: {}",
            v.status.as_str(),
            if v.cuda_starts { "will" } else { "will not" },
            v.reason
        );
        if let Some(fix) = &v.fix {
            let _ = write!(s, "; fix: {fix}");
        }
        s.push('\n');
    }
    let count = |st| r.checks.iter().filter(|c| c.status == st).count();
    let _ = writeln!(
        s,
        "{}: {} ok, {} warn, {} fail",
        r.status.as_str(),
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail)
    );
    s
}

/// Run every check the arguments ask for.
pub fn diagnose(a: &DoctorArgs) -> Report {
    let mut c = Checks(Vec::new());
    let cfg = config::check_config(a, &mut c);
    let driver_root = a
        .driver_root
        .clone()
        .unwrap_or_else(|| cfg.driver_root.clone());
    let roots = Roots::new(
        driver_root,
        a.dev_root.clone().or_else(|| cfg.dev_root.clone()),
        a.proc_root.clone().unwrap_or_else(|| cfg.proc_root.clone()),
    );
    let path_env = std::env::var_os("PATH");

    // The config check ran first (the roots come from it) but is shown with the toolkit's.
    let config_checks = std::mem::take(&mut c.0);
    let host = driver::check_driver(&roots, &mut c);
    let mut mig_names = None;
    if host.driver.is_none() && !roots.proc_root.join("driver/nvidia").exists() {
        // Without the module every node check fails for the same reason: say it once.
        c.fail(
            "devices",
            "nodes",
            "not checked: the NVIDIA kernel module is not loaded (see driver/kernel-module)",
            "load the driver first, then run gpuctk doctor again",
        );
    } else {
        devices::check_devices(&roots, &mut c);
        mig_names = mig::check_nvml_and_mig(host.inventory.as_ref(), &cfg, &mut c);
    }
    c.0.extend(config_checks);
    config::check_low_level_runtime(&cfg, path_env.as_deref(), &mut c);
    let spec_dirs = if a.spec_dirs.is_empty() {
        cfg.spec_dirs.clone()
    } else {
        a.spec_dirs.clone()
    };
    // The engines are read first (the CDI checks ask which dirs they read) but shown after.
    let mut engine_checks = Checks(Vec::new());
    let engine_facts = engines::check_engines(
        &a.docker_config,
        &a.containerd_config,
        &a.crio_config,
        path_env.as_deref(),
        &mut engine_checks,
    );
    let specs = cdi::check_cdi_specs(
        &spec_dirs,
        host.driver.as_ref().map(|d| d.as_str()),
        mig_names.as_deref(),
        &engine_facts,
        &mut c,
    );
    policy::check_policy(&cfg, &engine_facts, &mut c);
    c.0.extend(engine_checks.0);
    boot::check_refresh(&a.host_root, &a.systemctl, specs, &mut c);
    boot::check_udev(&a.host_root, &mut c);
    let verdict = if a.rootfs.is_some() || a.bundle.is_some() || a.image_env.is_some() {
        Some(image::check_image(a, &cfg, &host, &mut c))
    } else {
        None
    };
    let mut status = c.0.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    if let Some(v) = &verdict {
        status = status.max(v.status);
    }
    Report {
        status,
        roots,
        checks: c.0,
        verdict,
    }
}
