//! Running an outside program (the NVML helper, `systemctl show`) with a time limit and capped
//! output: stdin empty, its own process group, and that whole group killed when it runs past
//! its time or writes more than its cap. Each caller sets the program's arguments, environment
//! and working directory, and says in its own words what went wrong.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the program may run and how much of it is read.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Killed when it runs longer.
    pub time: Duration,
    /// Killed when it writes more to stdout.
    pub stdout: u64,
    /// The most of its stderr kept (the rest is drained); `None`: stderr goes nowhere.
    pub stderr: Option<u64>,
}

/// A program that exited in time.
#[derive(Debug)]
pub struct Finished {
    /// How it exited.
    pub status: ExitStatus,
    /// All it wrote to stdout.
    pub stdout: Vec<u8>,
    /// The first of what it wrote to stderr.
    // Read by the NVML helper's caller, which a build with in-process NVML leaves out.
    #[cfg_attr(feature = "nvml", allow(dead_code))]
    pub stderr: Vec<u8>,
}

/// Why a program gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// It could not be started.
    #[error("{0}")]
    Start(std::io::Error),
    /// It ran past its time and was killed.
    #[error("no answer in time; killed")]
    Timeout,
    /// It wrote more than its cap and was killed.
    #[error("answer over its cap; killed")]
    TooLong,
    /// Reading its pipes or its exit failed; it was killed.
    #[error("{0}")]
    Io(std::io::Error),
}

/// Which pipe a reader thread finished.
enum Pipe {
    Out(std::io::Result<Vec<u8>>),
    Err(Vec<u8>),
}

/// Run `cmd` within `limits`.
pub fn run(mut cmd: Command, limits: &Limits) -> Result<Finished, RunError> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if limits.stderr.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0)
        .spawn()
        .map_err(RunError::Start)?;
    let deadline = Instant::now() + limits.time;
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        let cap = limits.stdout;
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let r = out.take(cap + 1).read_to_end(&mut buf).map(|_| buf);
            let _ = tx.send(Pipe::Out(r));
        });
    }
    let mut stderr = None;
    match (child.stderr.take(), limits.stderr) {
        (Some(mut err), Some(cap)) => {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = (&mut err).take(cap).read_to_end(&mut buf);
                // The rest is drained, so that a chatty program never blocks on a full pipe.
                let _ = std::io::copy(&mut err, &mut std::io::sink());
                let _ = tx.send(Pipe::Err(buf));
            });
        }
        _ => stderr = Some(Vec::new()),
    }
    let mut stdout = None;
    while stdout.is_none() || stderr.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Pipe::Out(r)) => {
                let bytes = r.map_err(|e| {
                    kill(&mut child);
                    RunError::Io(e)
                })?;
                if bytes.len() as u64 > limits.stdout {
                    kill(&mut child);
                    return Err(RunError::TooLong);
                }
                stdout = Some(bytes);
            }
            Ok(Pipe::Err(bytes)) => stderr = Some(bytes),
            Err(_) => {
                kill(&mut child);
                return Err(RunError::Timeout);
            }
        }
    }
    // Both pipes are closed: the program is exiting (or closed them and hangs on).
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                kill(&mut child);
                return Err(RunError::Timeout);
            }
            Err(e) => {
                kill(&mut child);
                return Err(RunError::Io(e));
            }
        }
    };
    Ok(Finished {
        status,
        stdout: stdout.unwrap_or_default(),
        stderr: stderr.unwrap_or_default(),
    })
}

/// Kill the program's whole process group (anything it started too) and reap it.
fn kill(child: &mut Child) {
    // The group the program leads (`process_group(0)`): its id is the program's pid.
    if let Some(pgid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    const LIMITS: Limits = Limits {
        time: Duration::from_secs(30),
        stdout: 16,
        stderr: Some(4),
    };

    #[test]
    fn gives_status_stdout_and_the_first_of_stderr() {
        let done = run(sh("echo out; echo chatty >&2; exit 3"), &LIMITS).unwrap();
        assert_eq!(done.status.code(), Some(3));
        assert_eq!(done.stdout, b"out\n");
        assert_eq!(done.stderr, b"chat");
        let quiet = Limits {
            stderr: None,
            ..LIMITS
        };
        let done = run(sh("echo out; echo chatty >&2"), &quiet).unwrap();
        assert!(done.status.success());
        assert!(done.stderr.is_empty());
    }

    #[test]
    fn too_much_output_too_long_and_no_program_are_errors() {
        assert!(matches!(
            run(sh("while :; do echo more; done"), &LIMITS),
            Err(RunError::TooLong)
        ));
        let short = Limits {
            time: Duration::from_millis(200),
            ..LIMITS
        };
        // The pipe stays open in the child it started: its whole group is killed.
        assert!(matches!(
            run(sh("sleep 60 & wait"), &short),
            Err(RunError::Timeout)
        ));
        assert!(matches!(
            run(Command::new("/nonexistent/program"), &LIMITS),
            Err(RunError::Start(_))
        ));
    }
}
