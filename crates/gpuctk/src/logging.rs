//! Logging to stderr with `tracing`; `-v`/`--debug` raise the level, `--quiet` lowers it.

use tracing::Level;

/// Install the stderr subscriber once.
pub fn init(level: Level) {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .try_init();
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
        if let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = tracing_subscriber::fmt()
                .with_writer(std::sync::Mutex::new(f))
                .with_max_level(level)
                .with_ansi(false)
                .with_target(false)
                .try_init();
            return;
        }
    }
    init(Level::WARN.min(level));
}
