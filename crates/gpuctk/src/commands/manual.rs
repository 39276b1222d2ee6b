//! `gpuctk completion SHELL` and `gpuctk man --output DIR`: shell completions and man pages made
//! from the clap definitions the binary parses with, so they name exactly the commands and flags
//! it takes. The package build (`scripts/package.sh`) runs both with the binary it packages.
//!
//! The personalities that parse by hand (`nvidia-container-runtime` takes runc's command line,
//! `nvidia-container-runtime-hook` and `nvidia-container-cli` take NVIDIA's Go and C flags) get a
//! page whose synopsis and text are the usage each prints for `--help`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::cli::{Cli, CompletionArgs, ManArgs, ShellArg};

/// The name this process was invoked as: completions are for the command the user types.
fn invoked_name() -> String {
    crate::self_exe::argv0()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "gpuctk".to_string())
}

/// The full command line under `name` (`gpuctk` or `nvidia-ctk`).
fn ctk_command(name: &str) -> Command {
    // clap wants a 'static name; this runs once or twice per process.
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    Cli::command().name(name).bin_name(name)
}

/// `completion SHELL`: the script on stdout, for the name we were invoked as.
pub fn completion(a: CompletionArgs) -> anyhow::Result<ExitCode> {
    let name = invoked_name();
    let mut cmd = ctk_command(&name);
    let mut buf = Vec::new();
    match a.shell {
        ShellArg::Bash => return bash_completion(&mut cmd, &name),
        ShellArg::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, &name, &mut buf)
        }
        ShellArg::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, &name, &mut buf)
        }
    }
    std::io::stdout().lock().write_all(&buf)?;
    Ok(ExitCode::SUCCESS)
}

/// clap_complete's bash script spells its case labels and the variable it matches them
/// against differently when the command name holds a '-' (`nvidia-ctk` then completes nothing
/// past the first word), so the script is made under the name with '_' and its `complete`
/// lines are pointed back at the real name.
fn bash_completion(cmd: &mut Command, name: &str) -> anyhow::Result<ExitCode> {
    let safe = name.replace('-', "_");
    let mut buf = Vec::new();
    clap_complete::generate(clap_complete::Shell::Bash, cmd, &safe, &mut buf);
    let text = String::from_utf8(buf).context("the bash completion script is not UTF-8")?;
    let suffix = format!(" {safe}");
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        match line.strip_suffix(&suffix) {
            Some(head) if line.trim_start().starts_with("complete ") => {
                out.push_str(head);
                out.push(' ');
                out.push_str(name);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `man --output DIR`: every page, written atomically, one line saying how many.
pub fn man(a: ManArgs) -> anyhow::Result<ExitCode> {
    let pages = pages()?;
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("--output {}: cannot create it", a.output.display()))?;
    for (name, text) in &pages {
        let path = a.output.join(name);
        gpuctk_atomicfile::write(&path, text, Some(0o644))
            .with_context(|| format!("--output: cannot write {}", path.display()))?;
    }
    writeln!(
        std::io::stdout().lock(),
        "wrote {} man pages to {}",
        pages.len(),
        a.output.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Every page as (file name, roff source).
pub fn pages() -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    tree(ctk_command("gpuctk"), &mut out)?;
    tree(ctk_command("nvidia-ctk"), &mut out)?;
    tree(crate::hook::command(), &mut out)?;
    for (name, mode) in [
        ("nvidia-container-runtime", None),
        ("nvidia-container-runtime.cdi", Some("cdi")),
        ("nvidia-container-runtime.legacy", Some("legacy")),
    ] {
        out.push((format!("{name}.1"), shim_page(name, mode)));
    }
    out.push((
        "nvidia-container-runtime-hook.1".into(),
        usage_page(
            "nvidia-container-runtime-hook",
            "the legacy OCI prestart hook (docker run --gpus)",
            crate::legacy::HOOK_USAGE,
        ),
    ));
    // NVIDIA's old name for the hook, which the binary answers to as well.
    out.push((
        "nvidia-container-toolkit.1".into(),
        b".so man1/nvidia-container-runtime-hook.1\n".to_vec(),
    ));
    out.push((
        "nvidia-container-cli.1".into(),
        usage_page(
            "nvidia-container-cli",
            "libnvidia-container's command line, the parts engines call",
            crate::legacy::CLI_USAGE,
        ),
    ));
    Ok(out)
}

fn page_of(cmd: Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd)
        .source(format!("gpuctk {}", env!("CARGO_PKG_VERSION")))
        .manual("gpuctk manual")
}

/// One page for `cmd` and one for each of its visible subcommands, recursively, named as
/// `git` names its pages (`gpuctk-cdi-generate.1`).
fn tree(mut cmd: Command, out: &mut Vec<(String, Vec<u8>)>) -> anyhow::Result<()> {
    // Built first so that subcommands carry their full names ("gpuctk cdi generate").
    cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        tree(sub.clone(), out)?;
    }
    let man = page_of(cmd);
    let mut buf = Vec::new();
    man.render(&mut buf)?;
    out.push((man.get_filename(), buf));
    Ok(())
}

/// The runtime shim's page: it takes runc's command line, so its synopsis is runc's.
fn shim_page(name: &str, mode: Option<&str>) -> Vec<u8> {
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let mode_text = match mode {
        Some(m) => format!(
            "\n\nThis name forces mode = \"{m}\" whatever config.toml says (the GPU Operator's nvidia-{m} runtime class)."
        ),
        None => String::new(),
    };
    let cmd = Command::new(name)
        .version(env!("CARGO_PKG_VERSION"))
        .about("OCI runtime shim: adds the GPUs a container asks for to its spec, then runs runc or crun")
        .long_about(format!(
            "An OCI runtime, invoked exactly like runc. On create and run it reads <bundle>/config.json, \
             adds the GPUs the container asks for (NVIDIA_VISIBLE_DEVICES, CDI annotations, \
             --gpus) as config.toml directs, writes the spec back atomically and executes the \
             low-level runtime (nvidia-container-runtime.runtimes, default runc then crun) with \
             the same arguments. Every other command is passed through untouched.{mode_text}"
        ))
        .override_usage(format!("{name} [RUNC-GLOBAL-OPTION]... COMMAND [ARG]..."))
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(
            Arg::new("args")
                .value_name("RUNC-ARGS")
                .action(ArgAction::Append)
                .help("runc's command line, passed on unchanged"),
        )
        .after_long_help(
            "Files: /etc/nvidia-container-runtime/config.toml ($NVIDIA_CTK_CONFIG_FILE_PATH, \
             or $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml, names another). \
             See also nvidia-ctk(1), nvidia-ctk-runtime-configure(1).",
        );
    let mut buf = Vec::new();
    // Rendering into memory cannot fail.
    let _ = page_of(cmd).render(&mut buf);
    buf
}

/// A page whose description is the usage text the command prints for `--help`, kept as
/// printed (its option columns would not survive filling).
fn usage_page(name: &str, summary: &str, usage: &str) -> Vec<u8> {
    let (synopsis, body) = usage.split_once("\n\n").unwrap_or((usage, ""));
    let synopsis = synopsis.trim_start_matches("usage: ");
    let mut s = String::new();
    s.push_str(&format!(
        ".TH {} 1 \"\" \"gpuctk {}\" \"gpuctk manual\"\n",
        name.to_uppercase(),
        env!("CARGO_PKG_VERSION")
    ));
    s.push_str(".SH NAME\n");
    s.push_str(&format!("{} \\- {}\n", roff_line(name), roff_line(summary)));
    s.push_str(".SH SYNOPSIS\n.nf\n");
    for l in synopsis.lines() {
        s.push_str(&roff_line(l));
        s.push('\n');
    }
    s.push_str(".fi\n.SH DESCRIPTION\n.nf\n");
    for l in body.lines() {
        s.push_str(&roff_line(l));
        s.push('\n');
    }
    s.push_str(".fi\n.SH FILES\n/etc/nvidia-container-runtime/config.toml\n");
    s.push_str(".SH SEE ALSO\nnvidia\\-ctk(1), nvidia\\-container\\-runtime(1)\n");
    s.into_bytes()
}

/// `text` as one line of roff: backslashes and dashes escaped, and a leading `.` or `'` (a
/// control line) protected.
fn roff_line(text: &str) -> String {
    let mut s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        s.insert_str(0, "\\&");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_lines_are_escaped() {
        assert_eq!(roff_line(".x -a \\b"), "\\&.x \\-a \\eb");
        assert_eq!(roff_line("'q"), "\\&'q");
    }

    #[test]
    fn pages_cover_every_visible_command_once() {
        let pages = pages().unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        for want in [
            "gpuctk.1",
            "gpuctk-cdi-generate.1",
            "gpuctk-runtime-configure.1",
            "gpuctk-completion.1",
            "nvidia-ctk.1",
            "nvidia-ctk-system-create-dev-char-symlinks.1",
            "nvidia-cdi-hook.1",
            "nvidia-cdi-hook-update-ldcache.1",
            "nvidia-container-runtime.1",
            "nvidia-container-runtime.cdi.1",
            "nvidia-container-runtime-hook.1",
            "nvidia-container-cli.1",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(!names
            .iter()
            .any(|n| n.contains("-man.") || n.contains("-help.")));
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "a page name twice: {names:?}");
    }
}
