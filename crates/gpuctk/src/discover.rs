//! Host discovery as the commands and the legacy hook run it: `gpuctk_host::discover` with its
//! warnings logged.

use gpuctk_host::{DiscoverOptions, Inventory, Roots};

/// Discover `roots`, logging the warnings.
pub fn discover(roots: &Roots, opts: &DiscoverOptions) -> anyhow::Result<Inventory> {
    let inv = gpuctk_host::discover(roots, opts)?;
    for w in &inv.warnings {
        tracing::warn!("{w}");
    }
    Ok(inv)
}
