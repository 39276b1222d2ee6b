//! gpuctk's deliveries and commands: everything the `gpuctk` binary does, behind the few entry
//! points its `main` dispatches to by the name it was invoked as (see docs/architecture.md).
//!
//! The modules are private; what is public is one entry point per personality, the command
//! line's type, `config.toml`'s parser (which the fuzzing crate drives) and the reader of a
//! discovery snapshot's inventory (which the tests compare with discovery).

// System calls are safe functions (rustix, or the library crates' `sys` modules); one
// `pre_exec` hook, `spawn`'s clone of a child that execs the runtime, the auxiliary vector's
// read and one `getsockopt` are allowed where they stand.
#![deny(unsafe_code)]

mod bounded_run;
mod capped;
mod cli;
mod commands;
mod compact;
mod config;
mod decision;
mod discover;
mod guard;
mod hook;
mod legacy;
mod logging;
mod mig;
#[cfg(not(feature = "nvml"))]
mod nvml_helper;
mod one_line;
mod passthrough;
mod runc;
mod runtime;
mod seen_libraries;
mod self_exe;
mod snapshot;
mod spawn;
mod spec_cache;

/// `gpuctk` and `nvidia-ctk`: the command line, and the command it names.
pub use cli::Cli;
pub use commands::run as run_command;
/// `config.toml`: what the runtime, the hooks and the commands read.
pub use config::{parse as parse_config, Config, ConfigError, Mode};
/// `nvidia-cdi-hook`: the OCI hooks named in CDI specs.
pub use hook::main as cdi_hook_main;
/// `nvidia-container-runtime-hook` (the legacy prestart hook) and `nvidia-container-cli`.
pub use legacy::{cli_main as legacy_cli_main, hook_main as legacy_hook_main};
pub use logging::init as init_logging;
/// An error and its causes as one line, as every personality prints it.
pub use one_line::one_line;
/// `nvidia-container-runtime`: the runtime shim, with the mode config.toml gives or a forced one.
pub use runtime::{main as runtime_main, main_as as runtime_main_as};
/// The binary's `main` records `argv[0]` here (a musl build's std does not have it).
pub use self_exe::set_argv0;
pub use snapshot::read_inventory as read_snapshot_inventory;
