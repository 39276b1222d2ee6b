//! Where this binary is, for the hook entries that make the runtime call us back.

use std::path::PathBuf;

/// The path of the running binary, written into hook entries so the runtime calls us back.
pub fn self_path() -> String {
    std::env::current_exe()
        .ok()
        .or_else(|| std::env::args_os().next().map(PathBuf::from))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/usr/bin/nvidia-cdi-hook".to_string())
}
