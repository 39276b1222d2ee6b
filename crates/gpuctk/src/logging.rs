//! Logging to stderr with `tracing`; `-v`/`--debug` raise the level, `--quiet` lowers it.

mod subscriber;

use std::time::SystemTime;

pub(crate) use subscriber::civil_from_days;
use subscriber::Logger;
use tracing::Level;

/// Colour on stderr only for a terminal, and never with `NO_COLOR` set to anything
/// (no-color.org).
fn color() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Install a subscriber; the first one installed in a process stays (tests init again).
fn install(logger: impl tracing::Subscriber + Send + Sync + 'static) {
    let _ = tracing::subscriber::set_global_default(logger);
}

/// Install the stderr subscriber once: lines without a time.
pub fn init(level: Level) {
    install(Logger::new(std::io::stderr(), level, None, color));
}

/// A log file opened to append, created where missing (mode 0666 less the umask, as std's
/// `OpenOptions` does), in one system call (see `capped::open_read`).
fn open_append(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::from_raw_mode(0o666))?.into())
}

/// Log to `path` (appended), or stderr when it cannot be opened: `nvidia-container-cli --debug`.
pub fn init_file(path: &std::path::Path, level: Level) {
    match open_append(path) {
        Ok(f) => {
            install(Logger::new(f, level, Some(SystemTime::now), || false));
        }
        Err(_) => init(level),
    }
}

/// The runtime's logging: NVIDIA's `[nvidia-container-runtime] debug` file and `log-level`,
/// else warnings to stderr (the engine keeps the runtime's stderr).
pub fn init_runtime(cfg: &crate::config::Config) {
    let level = match cfg.log_level.as_str() {
        "trace" => Level::TRACE,
        "debug" => Level::DEBUG,
        "info" => Level::INFO,
        "error" | "fatal" | "panic" => Level::ERROR,
        _ => Level::WARN,
    };
    if let Some(path) = &cfg.debug_log {
        if let Ok(f) = open_append(path) {
            install(Logger::new(f, level, Some(SystemTime::now), || false));
            return;
        }
    }
    init(Level::WARN.min(level));
}

/// crun gives hooks `/dev/null` for stderr, so a failing hook's one line would never reach
/// the engine. A prestart hook's parent is crun itself, whose stderr the engine reads: when
/// ours is `/dev/null` and the parent is crun, the line goes to the parent's stderr as well.
/// (runc already passes a hook's stderr on in its own error.)
pub fn pass_on_through_crun(line: &str) {
    use std::io::Write;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let ours_is_null = std::fs::metadata("/proc/self/fd/2")
        .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == libc::makedev(1, 3));
    if !ours_is_null {
        return;
    }
    let ppid = rustix::process::Pid::as_raw(rustix::process::getppid());
    let parent_is_crun =
        std::fs::read_to_string(format!("/proc/{ppid}/comm")).is_ok_and(|c| c.trim_end() == "crun");
    if !parent_is_crun {
        return;
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/{ppid}/fd/2"))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// One warning per config.toml key that is not known, or known and not applied. (Here, not in
/// `config.rs`, which the fuzzing crate compiles without tracing.)
pub fn warn_config_keys(cfg: &crate::config::Config) {
    let file = cfg
        .path
        .as_deref()
        .unwrap_or(std::path::Path::new("config.toml"));
    for k in &cfg.unknown_keys {
        tracing::warn!("{}: unknown key {k} ignored", file.display());
    }
    for k in &cfg.not_applied {
        tracing::warn!(
            "{}: {k} is one of NVIDIA's keys that gpuctk does not apply; it has no effect",
            file.display()
        );
    }
}
