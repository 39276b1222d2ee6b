//! Where this binary is, for the hook entries that make the runtime call us back.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

static ARGV0: OnceLock<Option<OsString>> = OnceLock::new();

/// Records the name the binary was run under (`argv[0]`), for [`argv0`]. The binary's `main`
/// calls it once: under musl, where std's `main` wrapper does not run, `std::env::args_os` is
/// empty.
pub fn set_argv0(argv0: Option<OsString>) {
    let _ = ARGV0.set(argv0);
}

/// The name the binary was run under: what `main` recorded, else std's (a test harness).
pub fn argv0() -> Option<OsString> {
    match ARGV0.get() {
        Some(recorded) => recorded.clone(),
        None => std::env::args_os().next(),
    }
}

/// The path of the running binary, written into hook entries so the runtime calls us back.
pub fn self_path() -> String {
    std::env::current_exe()
        .ok()
        .or_else(|| argv0().map(PathBuf::from))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/usr/bin/nvidia-cdi-hook".to_string())
}
