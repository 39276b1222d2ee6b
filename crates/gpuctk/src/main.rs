//! `gpuctk`: one binary, many names. It dispatches on the basename of `argv[0]`:
//! `nvidia-container-runtime` is the runtime shim, `nvidia-cdi-hook` the OCI hooks, and every
//! other name (`gpuctk`, `nvidia-ctk`) the full command line. What each does is in the library
//! (`src/lib.rs`); this file dispatches and prints usage errors and failures as one line.

// System calls are safe functions (rustix, or the library crates' `sys` modules); the one
// exception is the entry point at the end.
#![deny(unsafe_code)]
// The C runtime calls our own `main`, not std's wrapper: see `main` at the end.
#![no_main]

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use gpuctk::Mode;

/// Our own allocator on every target, so that the tests run the one the shipped musl build
/// needs (musl's malloc maps and unmaps on most size changes: `gpuctk_alloc`'s header says why).
#[global_allocator]
static ALLOC: gpuctk_alloc::Alloc = gpuctk_alloc::Alloc::new();

// The musl build's `memcpy` and friends (`gpuctk_mem`'s header says why): linked for its symbols.
#[cfg(target_arch = "x86_64")]
use gpuctk_mem as _;

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
    let matches = gpuctk::Cli::command()
        .name(name)
        .bin_name(name)
        .try_get_matches_from(args)
        .unwrap_or_else(|e| {
            let env = from_env(&e, args);
            usage_error(name, e, env)
        });
    let cli =
        gpuctk::Cli::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(name, e, None));
    gpuctk::init_logging(cli.global.level());
    gpuctk::run_command(cli)
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
    let var = find(&gpuctk::Cli::command(), long)?;
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

fn gpuctk_main(args: Vec<OsString>) -> ExitCode {
    let argv0 = args
        .first()
        .cloned()
        .unwrap_or_else(|| OsString::from("gpuctk"));
    let name = basename(&argv0);
    let result = match name.as_str() {
        "nvidia-container-runtime" => return gpuctk::runtime_main(&args[1..]),
        // The GPU Operator's `nvidia-cdi` and `nvidia-legacy` runtime classes.
        "nvidia-container-runtime.cdi" => {
            return gpuctk::runtime_main_as(&args[1..], Some(Mode::Cdi))
        }
        "nvidia-container-runtime.legacy" => {
            return gpuctk::runtime_main_as(&args[1..], Some(Mode::Legacy))
        }
        "nvidia-cdi-hook" => return gpuctk::cdi_hook_main(&args),
        "nvidia-container-runtime-hook" | "nvidia-container-toolkit" => {
            return gpuctk::legacy_hook_main(&args)
        }
        "nvidia-container-cli" => return gpuctk::legacy_cli_main(&args),
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
            let line = gpuctk::one_line(&e);
            let _ = writeln!(std::io::stderr(), "{name}: error: {line}");
            ExitCode::FAILURE
        }
    }
}

/// The process's entry point, called by the C runtime in place of std's `main` wrapper. That
/// wrapper costs about 20 system calls on every start (glibc reads `/proc/self/maps` to find
/// the main thread's stack guard, std installs an alternate signal stack and `SIGSEGV`/`SIGBUS`
/// handlers for its stack-overflow message), and the shim's create and pass-through calls pay
/// them for nothing (issue 21). What we keep of it: descriptors 0 to 2 open (`/dev/null` where
/// one is closed, so no file we open later becomes our stdout or stderr) and `SIGPIPE` ignored
/// (a closed pipe is an `EPIPE` to handle, as under std; `Command` restores the default before
/// it execs the runtime). The arguments are read from `argv` ([`arguments`]), and
/// `process::exit` flushes stdout as a return from `main` would. A stack overflow is a plain
/// `SIGSEGV`, without std's message.
/// The command line as the C runtime hands it to `main`. std's own `args_os` is empty in a
/// musl build when std's `main` wrapper does not run (glibc alone hands the arguments to
/// `.init_array`, where std also picks them up), so the binary reads them here on every target.
#[allow(unsafe_code)]
unsafe fn arguments(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> Vec<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let n = if argv.is_null() {
        0
    } else {
        usize::try_from(argc).unwrap_or(0)
    };
    let mut args = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `i < argc`, and the caller vouches for `argv`'s first `argc` entries.
        let arg = unsafe { *argv.add(i) };
        if arg.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated string that outlives this copy.
        let bytes = unsafe { std::ffi::CStr::from_ptr(arg) }.to_bytes();
        args.push(std::ffi::OsStr::from_bytes(bytes).to_os_string());
    }
    args
}

#[allow(unsafe_code)]
#[no_mangle]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // SAFETY: system calls on descriptors 0 to 2 and a signal disposition, made before any
    // other code of ours runs; nothing is borrowed past a call.
    unsafe {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        });
        let polled = libc::poll(fds.as_mut_ptr(), 3, 0) != -1;
        for f in &fds {
            let closed = if polled {
                f.revents & libc::POLLNVAL != 0
            } else {
                libc::fcntl(f.fd, libc::F_GETFD) == -1
            };
            // The lowest free descriptor: the closed one.
            if closed && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) == -1 {
                libc::abort();
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // SAFETY: the C runtime hands `main` `argc` strings in `argv`, each NUL-terminated, alive
    // for the whole process; a null entry ends them early all the same.
    let args = unsafe { arguments(argc, argv) };
    gpuctk::set_argv0(args.first().cloned());
    let code = gpuctk_main(args);
    // `ExitCode` has no stable way out but comparison; every code is one of these.
    let n = (0..=u8::MAX)
        .find(|n| ExitCode::from(*n) == code)
        .unwrap_or(1);
    // Flushes stdout, as a return from std's `main` would.
    std::process::exit(i32::from(n))
}
