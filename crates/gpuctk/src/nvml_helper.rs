//! NVML through the helper: a build without in-process NVML (the static binary that ships, which
//! cannot `dlopen`) runs `gpuctk-nvml LIBRARY` (`[gpuctk] nvml-helper`) and reads its JSON. The
//! helper is run as an outside program: absolute path, cleared environment, `/` as working
//! directory, its own process group, killed after [`TIMEOUT`]; its answer is capped at
//! [`MAX_ANSWER`] bytes and vetted by `NvmlInfo::check` before anything uses it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// Which pipe a reader thread finished.
enum Pipe {
    Out(std::io::Result<Vec<u8>>),
    Err(Vec<u8>),
}

/// Ask NVML at `library` through `helper`.
pub fn ask(helper: &Path, library: &Path) -> Result<NvmlInfo, HelperError> {
    let start_err = |reason: String| HelperError::Start {
        helper: helper.to_path_buf(),
        reason,
    };
    if !helper.is_absolute() {
        return Err(start_err("not an absolute path".into()));
    }
    // Relative roots name the library from our working directory; the helper runs in `/`.
    let library = std::path::absolute(library).map_err(|e| start_err(e.to_string()))?;
    let mut child = Command::new(helper)
        .arg(&library)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| start_err(e.to_string()))?;
    let deadline = Instant::now() + TIMEOUT;
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let r = out.take(MAX_ANSWER + 1).read_to_end(&mut buf).map(|_| buf);
            let _ = tx.send(Pipe::Out(r));
        });
    }
    if let Some(mut err) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = (&mut err).take(MAX_STDERR).read_to_end(&mut buf);
            // The rest is drained, so that a chatty helper never blocks on a full pipe.
            let _ = std::io::copy(&mut err, &mut std::io::sink());
            let _ = tx.send(Pipe::Err(buf));
        });
    }
    let (mut answer, mut stderr) = (None, None);
    while answer.is_none() || stderr.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Pipe::Out(r)) => {
                let bytes = r.map_err(|source| {
                    kill(&mut child);
                    HelperError::Io {
                        helper: helper.to_path_buf(),
                        source,
                    }
                })?;
                if bytes.len() as u64 > MAX_ANSWER {
                    kill(&mut child);
                    return Err(HelperError::TooLong {
                        helper: helper.to_path_buf(),
                    });
                }
                answer = Some(bytes);
            }
            Ok(Pipe::Err(bytes)) => stderr = Some(bytes),
            Err(_) => {
                kill(&mut child);
                return Err(HelperError::Timeout {
                    helper: helper.to_path_buf(),
                });
            }
        }
    }
    // Both pipes are closed: the helper is exiting (or closed them and hangs on).
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                kill(&mut child);
                return Err(HelperError::Timeout {
                    helper: helper.to_path_buf(),
                });
            }
            Err(source) => {
                kill(&mut child);
                return Err(HelperError::Io {
                    helper: helper.to_path_buf(),
                    source,
                });
            }
        }
    };
    if !status.success() {
        return Err(HelperError::Failed {
            helper: helper.to_path_buf(),
            status,
            said: first_line(&stderr.unwrap_or_default()),
        });
    }
    let garbage = |reason: String| HelperError::Garbage {
        helper: helper.to_path_buf(),
        reason,
    };
    let info: NvmlInfo =
        serde_json::from_slice(&answer.unwrap_or_default()).map_err(|e| garbage(e.to_string()))?;
    info.check().map_err(|e| garbage(e.to_string()))?;
    Ok(info)
}

/// Kill the helper's whole process group (anything it started too) and reap it.
fn kill(child: &mut Child) {
    // The group the helper leads (`process_group(0)`): its id is the helper's pid.
    if let Some(pgid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
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
