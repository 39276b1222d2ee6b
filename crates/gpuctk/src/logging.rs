//! Logging to stderr with `tracing`; `-v`/`--debug` raise the level, `--quiet` lowers it.

use tracing::Level;

/// Install the stderr subscriber once.
pub fn init(level: Level) {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .without_time()
        .try_init();
}
