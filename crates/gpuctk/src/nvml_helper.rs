//! NVML through the helper: a build without in-process NVML (the static binary that ships, which
//! cannot `dlopen`) runs `gpuctk-nvml LIBRARY` (`[gpuctk] nvml-helper`) and reads its JSON. The
//! helper is run as an outside program ([`crate::bounded_run`]): absolute path, cleared
//! environment, `/` as working directory, its own process group, killed after [`TIMEOUT`]; its
//! answer is capped at [`MAX_ANSWER`] bytes and vetted by `NvmlInfo::check` before anything
//! uses it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use gpuctk_host::nvml::NvmlInfo;

/// Longest answer read: a few hundred bytes per GPU and MIG device, 256 GPUs at most.
pub const MAX_ANSWER: u64 = 1 << 20;
/// How long NVML may take: its initialisation on a large machine without the persistence
/// daemon takes seconds.
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// Most of the helper's stderr kept, for the one line that says why it failed.
const MAX_STDERR: u64 = 4096;

/// Why the helper gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// Not there, not executable, not absolute.
    #[error("NVML helper {}: {reason} (install gpuctk's gpuctk-nvml there, or name it in config.toml's [gpuctk] nvml-helper)", helper.display())]
    Start {
        /// The helper.
        helper: PathBuf,
        /// What `exec` said.
        reason: String,
    },
    /// It ran past [`TIMEOUT`] and was killed.
    #[error("NVML helper {}: no answer within {} s; killed", helper.display(), TIMEOUT.as_secs())]
    Timeout {
        /// The helper.
        helper: PathBuf,
    },
    /// It wrote more than [`MAX_ANSWER`] bytes and was killed.
    #[error("NVML helper {}: answer longer than {MAX_ANSWER} bytes; killed", helper.display())]
    TooLong {
        /// The helper.
        helper: PathBuf,
    },
    /// It exited unsuccessfully.
    #[error("NVML helper {}: {status}{}", helper.display(), if said.is_empty() { String::new() } else { format!(": {said}") })]
    Failed {
        /// The helper.
        helper: PathBuf,
        /// How it exited.
        status: ExitStatus,
        /// The first line of its stderr, cleaned.
        said: String,
    },
    /// It answered something that is not NVML's answer.
    #[error("NVML helper {}: not an NVML answer: {reason}", helper.display())]
    Garbage {
        /// The helper.
        helper: PathBuf,
        /// The parser's or the check's words.
        reason: String,
    },
    /// Reading its pipes failed.
    #[error("NVML helper {}: {source}", helper.display())]
    Io {
        /// The helper.
        helper: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Ask NVML at `library` through `helper`.
pub fn ask(helper: &Path, library: &Path) -> Result<NvmlInfo, HelperError> {
    use crate::bounded_run::{run, Limits, RunError};
    let start_err = |reason: String| HelperError::Start {
        helper: helper.to_path_buf(),
        reason,
    };
    if !helper.is_absolute() {
        return Err(start_err("not an absolute path".into()));
    }
    // Relative roots name the library from our working directory; the helper runs in `/`.
    let library = std::path::absolute(library).map_err(|e| start_err(e.to_string()))?;
    let mut cmd = Command::new(helper);
    cmd.arg(&library).env_clear().current_dir("/");
    let limits = Limits {
        time: TIMEOUT,
        stdout: MAX_ANSWER,
        stderr: Some(MAX_STDERR),
    };
    let helper_buf = || helper.to_path_buf();
    let done = run(cmd, &limits).map_err(|e| match e {
        RunError::Start(e) => start_err(e.to_string()),
        RunError::Timeout => HelperError::Timeout {
            helper: helper_buf(),
        },
        RunError::TooLong => HelperError::TooLong {
            helper: helper_buf(),
        },
        RunError::Io(source) => HelperError::Io {
            helper: helper_buf(),
            source,
        },
    })?;
    if !done.status.success() {
        return Err(HelperError::Failed {
            helper: helper_buf(),
            status: done.status,
            said: first_line(&done.stderr),
        });
    }
    let garbage = |reason: String| HelperError::Garbage {
        helper: helper_buf(),
        reason,
    };
    let info: NvmlInfo =
        serde_json::from_slice(&done.stdout).map_err(|e| garbage(e.to_string()))?;
    info.check().map_err(|e| garbage(e.to_string()))?;
    Ok(info)
}

/// The first non-empty line of `bytes`, printable, at most 200 characters: one line of ours.
fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    line.unwrap_or("")
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(200)
        .collect()
}
