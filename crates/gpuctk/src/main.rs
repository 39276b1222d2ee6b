//! `gpuctk`: one binary, many names. It dispatches on the basename of `argv[0]`:
//! `nvidia-container-runtime` is the runtime shim, `nvidia-cdi-hook` the OCI hooks, and every
//! other name (`gpuctk`, `nvidia-ctk`) the full command line.

mod cli;
mod commands;
mod config;
mod decision;
mod guard;
mod hook;
mod legacy;
mod logging;
mod mig;
#[cfg(not(feature = "nvml"))]
mod nvml_helper;
mod passthrough;
mod runtime;

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

fn basename(argv0: &OsString) -> String {
    Path::new(argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "gpuctk".to_string())
}

/// `gpuctk`, `nvidia-ctk` or any other name: the full command line, shown under the name it
/// was invoked as.
fn run_ctk(name: &str, args: &[OsString]) -> anyhow::Result<ExitCode> {
    // clap wants a 'static name; this runs once per process.
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let matches = cli::Cli::command()
        .name(name)
        .bin_name(name)
        .try_get_matches_from(args)
        .unwrap_or_else(|e| {
            let env = from_env(&e, args);
            usage_error(name, e, env)
        });
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(name, e, None));
    logging::init(cli.global.level());
    commands::run(cli)
}

/// What `-v`/`--version` prints. Under the name `nvidia-ctk`, NVIDIA's shape, which scripts
/// parse: `NVIDIA Container Toolkit CLI version X`, then `commit: C` when the build knows it
/// (`GPUCTK_COMMIT` at build time, as NVIDIA's Makefile sets its commit); else `NAME X`.
fn version_text(name: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    if name != "nvidia-ctk" {
        return format!("{name} {version}\n");
    }
    let mut text = format!("NVIDIA Container Toolkit CLI version {version}\n");
    if let Some(commit) = option_env!("GPUCTK_COMMIT").filter(|c| !c.is_empty()) {
        text.push_str(&format!("commit: {commit}\n"));
    }
    text
}

/// The environment variable a bad value came from, when it did: the flag clap names in `e`
/// was not on the command line and its variable is set. (An admin's `nvidia-cdi-refresh.env`
/// is where such a value is, and clap names only the flag.)
fn from_env(e: &clap::Error, args: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    fn find(cmd: &clap::Command, long: &str) -> Option<String> {
        cmd.get_arguments()
            .find(|a| a.get_long() == Some(long))
            .and_then(|a| a.get_env())
            .map(|v| v.to_string_lossy().into_owned())
            .or_else(|| cmd.get_subcommands().find_map(|c| find(c, long)))
    }
    let var = find(&cli::Cli::command(), long)?;
    let on_line = args.iter().any(|a| {
        a.to_str()
            .and_then(|a| a.strip_prefix("--"))
            .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
    });
    (!on_line && std::env::var_os(&var).is_some()).then_some(var)
}

/// Help goes out as clap prints it, the version as [`version_text`] says; a usage error becomes
/// one line, like every other error, so scripts can grep it, naming the variable a bad value
/// came from (`env`).
fn usage_error(name: &str, e: clap::Error, env: Option<String>) -> ! {
    use clap::error::ErrorKind;
    if e.kind() == ErrorKind::DisplayVersion {
        let _ = std::io::stdout().write_all(version_text(name).as_bytes());
        std::process::exit(0);
    }
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .map(|l| l.strip_prefix("error: ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join(" ");
    match env {
        Some(var) => {
            let _ = writeln!(
                std::io::stderr(),
                "{name}: error: {line}, from the environment variable {var}: fix or unset it (see --help)"
            );
        }
        None => {
            let _ = writeln!(std::io::stderr(), "{name}: error: {line} (see --help)");
        }
    }
    std::process::exit(2);
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args
        .first()
        .cloned()
        .unwrap_or_else(|| OsString::from("gpuctk"));
    let name = basename(&argv0);
    let result = match name.as_str() {
        "nvidia-container-runtime" => return runtime::main(&args[1..]),
        // The GPU Operator's `nvidia-cdi` and `nvidia-legacy` runtime classes.
        "nvidia-container-runtime.cdi" => {
            return runtime::main_as(&args[1..], Some(config::Mode::Cdi))
        }
        "nvidia-container-runtime.legacy" => {
            return runtime::main_as(&args[1..], Some(config::Mode::Legacy))
        }
        "nvidia-cdi-hook" => return hook::main(&args),
        "nvidia-container-runtime-hook" | "nvidia-container-toolkit" => {
            return legacy::hook_main(&args)
        }
        "nvidia-container-cli" => return legacy::cli_main(&args),
        _ => run_ctk(&name, &args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // A closed stdout (`gpuctk cdi list | head`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            let mut line = format!("{e}");
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !line.contains(&c) {
                    line.push_str(": ");
                    line.push_str(&c);
                }
            }
            let _ = writeln!(std::io::stderr(), "{name}: error: {line}");
            ExitCode::FAILURE
        }
    }
}
