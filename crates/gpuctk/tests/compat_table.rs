//! `docs/compat.md` cannot drift from the code: every flag in a row marked done (or ours, or
//! differs: implemented differently) of the `nvidia-ctk`, `nvidia-cdi-hook` and
//! `nvidia-container-cli` tables appears in that command's own help, and every config.toml key
//! in such a row loads with no warning (neither unknown nor "not applied").

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::util::*;

fn compat_md() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/compat.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The table rows of the section headed `## {title}`: cells, with `\|` kept inside a cell.
fn rows(md: &str, title: &str) -> Vec<Vec<String>> {
    let head = format!("## {title}");
    let start = md
        .find(&head)
        .unwrap_or_else(|| panic!("no section {head:?} in docs/compat.md"));
    let body = &md[start + head.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .skip(1) // the header
        .map(|l| {
            l.replace("\\|", "\u{1}")
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|"))
                .collect()
        })
        .collect()
}

fn implemented(status: &str) -> bool {
    let s = status.to_ascii_lowercase();
    !s.starts_with("not yet")
        && (s.starts_with("done") || s.starts_with("ours") || s.starts_with("differs"))
}

/// The text between backticks in `cell`.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// Every `--flag` in the backticked spans of `cells`.
fn flags(cells: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for span in cells.iter().flat_map(|c| code_spans(c)) {
        for w in span.split(|c: char| c.is_whitespace() || c == '/' || c == '[' || c == ']') {
            let w = w.split('=').next().unwrap_or("").trim_end_matches('.');
            if let Some(name) = w.strip_prefix("--") {
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
                {
                    out.insert(w.to_string());
                }
            }
        }
    }
    out
}

fn help(exe: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(exe).args(args).output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn has_flag(corpus: &str, flag: &str) -> bool {
    corpus.match_indices(flag).any(|(i, _)| {
        let after = corpus[i + flag.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    })
}

#[test]
fn every_done_flag_is_accepted() {
    let md = compat_md();
    let t = TestDir::new();
    let exe = |name: &str| {
        let p = t.join(name);
        if !p.exists() {
            std::os::unix::fs::symlink(GPUCTK, &p).unwrap();
        }
        p
    };
    let ctk = exe("nvidia-ctk");
    let mut ctk_help = String::new();
    for cmd in [
        // The global flags (`--version`, `--config`).
        &[][..],
        &["cdi", "generate"],
        &["cdi", "list"],
        &["cdi", "validate"],
        &["cdi", "transform", "root"],
        &["runtime", "configure"],
        &["runtime", "unconfigure"],
        &["system", "create-dev-char-symlinks"],
        &["system", "create-device-nodes"],
        &["config"],
        &["config", "default"],
        &["info"],
        &["doctor"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        ctk_help.push_str(&help(&ctk, &args));
    }
    let hook = exe("nvidia-cdi-hook");
    let mut hook_help = String::new();
    for sub in [
        "update-ldcache",
        "create-symlinks",
        "enable-cuda-compat",
        "chmod",
        "disable-device-node-modification",
        "update-application-profile",
    ] {
        hook_help.push_str(&help(&hook, &[sub, "--help"]));
    }
    let cli_help = help(&exe("nvidia-container-cli"), &["--help"]);
    let installer_help = format!(
        "{}{}",
        help(&ctk, &["install", "--help"]),
        help(&ctk, &["uninstall", "--help"])
    );

    let mut missing = Vec::new();
    let mut checked = 0;
    for (section, corpus) in [
        ("`nvidia-ctk` commands", &ctk_help),
        ("`nvidia-cdi-hook`", &hook_help),
        ("`nvidia-container-cli`", &cli_help),
        (
            "`nvidia-ctk-installer` (the GPU Operator's toolkit container)",
            &installer_help,
        ),
    ] {
        for row in rows(&md, section) {
            // A hidden flag (tests only) is not in the help.
            if row.len() < 2 || !implemented(&row[1]) || row[0].contains("(hidden)") {
                continue;
            }
            // The notes of a done row list its flags too (`runtime configure`).
            for f in flags(&row) {
                checked += 1;
                if !has_flag(corpus, &f) {
                    missing.push(format!("{section}: {f} (row {:?})", row[0]));
                }
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} flags found: is the table still parsed?"
    );
    assert!(
        missing.is_empty(),
        "docs/compat.md says done, the command does not take:\n{}",
        missing.join("\n")
    );
}

/// A value each done key takes; keys not named take `true` if boolean, else a string.
fn value_for(key: &str) -> &'static str {
    match key {
        "nvidia-container-runtime.mode" => "auto",
        "nvidia-container-runtime.log-level" => "info",
        "nvidia-container-runtime.runtimes" => "runc:crun",
        "nvidia-container-runtime.modes.cdi.spec-dirs" => "/etc/cdi",
        "nvidia-container-runtime.modes.cdi.default-kind" => "nvidia.com/gpu",
        "nvidia-container-runtime.modes.cdi.annotation-prefixes" => "cdi.k8s.io/",
        "nvidia-container-runtime.modes.legacy.cuda-compat-mode" => "ldconfig",
        "supported-driver-capabilities" => "utility,compute",
        "swarm-resource" => "DOCKER_RESOURCE_GPU",
        "nvidia-container-runtime.debug" => "/dev/null",
        "nvidia-container-cli.root" => "/",
        "gpuctk.dev-root" => "/",
        "gpuctk.proc-root" => "/proc",
        "gpuctk.hook-path" => "/usr/bin/nvidia-cdi-hook",
        _ => "true",
    }
}

#[test]
fn every_done_config_key_loads_without_a_warning() {
    let md = compat_md();
    let mut keys = BTreeSet::new();
    for row in rows(&md, "`config.toml`") {
        if row.len() < 2 || !implemented(&row[1]) {
            continue;
        }
        for span in code_spans(&row[0]) {
            if span.contains("config.toml") || span.contains('$') || span.contains("CONFIG") {
                continue; // the row naming where the file is
            }
            let (table, names) = match span.strip_prefix('[') {
                Some(rest) => {
                    let (t, names) = rest.split_once(']').unwrap();
                    (format!("{t}."), names.to_string())
                }
                None => (String::new(), span.clone()),
            };
            for n in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                keys.insert(format!("{table}{n}"));
            }
        }
    }
    assert!(keys.len() > 15, "only {keys:?}: is the table still parsed?");
    let t = TestDir::new();
    let file = t.join("config.toml");
    for key in &keys {
        let r = run(&[
            "config",
            "-c",
            file.to_str().unwrap(),
            "--set",
            &format!("{key}={}", value_for(key)),
        ]);
        assert_eq!(r.code, 0, "{key}: {}", r.stderr);
        assert!(
            !r.stderr.contains("unknown key") && !r.stderr.contains("does not apply"),
            "docs/compat.md says {key} is done: {}",
            r.stderr
        );
    }
}
