//! The package build, `--no-default-features`, carries no test fakes: the `mock` feature is the
//! only way the mock host (fake libcuda, nvidia-smi, the probe, all embedded by
//! `gpuctk-mockhost`) gets into the binary, and the build without it compiles cleanly.
//!
//! Cheap on purpose (CI builds the workspace once already): `cargo tree` shows what would be
//! linked, and `cargo check` (no codegen, in the tests' own target dir) proves it compiles.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cargo(args: &[&str], target_dir: Option<&Path>) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args)
        .arg("--offline")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if let Some(dir) = target_dir {
        cmd.env("CARGO_TARGET_DIR", dir);
    }
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The crates `gpuctk`'s binary links, with or without its default features.
fn linked_crates(default_features: bool) -> Vec<String> {
    let mut args = vec![
        "tree",
        "-p",
        "gpuctk",
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ];
    if !default_features {
        args.push("--no-default-features");
    }
    let out = cargo(&args, None);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn no_default_features_links_no_mock_host() {
    let with = linked_crates(true);
    assert!(
        with.iter().any(|c| c == "gpuctk-mockhost"),
        "the default build should have the mock host: {with:?}"
    );
    let without = linked_crates(false);
    assert!(
        !without.iter().any(|c| c.contains("mockhost")),
        "--no-default-features still links the mock host: {without:?}"
    );
}

#[test]
fn no_default_features_compiles_without_warnings() {
    // The test build's own target dir: proc macros and build scripts are shared with it, and
    // `check` writes metadata only, so target/debug/gpuctk (built with `mock`, which the other
    // tests run) is never replaced.
    let target: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf();
    let out = cargo(
        &[
            "check",
            "-p",
            "gpuctk",
            "--no-default-features",
            "--bin",
            "gpuctk",
            "--locked",
            "--message-format",
            "short",
        ],
        Some(&target),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("warning:") && l.contains("crates/gpuctk/"))
        .collect();
    assert!(warnings.is_empty(), "{}", warnings.join("\n"));
}
