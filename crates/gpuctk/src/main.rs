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
        .unwrap_or_else(|e| usage_error(name, e));
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(name, e));
    logging::init(cli.global.level());
    commands::run(cli)
}

/// Help and version go out as clap prints them; a usage error becomes one line, like every
/// other error, so scripts can grep it.
fn usage_error(name: &str, e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
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
    let _ = writeln!(std::io::stderr(), "{name}: error: {line} (see --help)");
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
