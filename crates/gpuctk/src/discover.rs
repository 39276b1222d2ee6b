//! Host discovery as the commands and the legacy hook run it: `gpuctk_host::discover` with its
//! warnings logged.

use gpuctk_host::{DiscoverOptions, Discovery, Inventory, Roots};

/// Discover `roots`, logging the warnings.
pub fn discover(roots: &Roots, opts: &DiscoverOptions) -> anyhow::Result<Inventory> {
    discovery(roots, opts).map(|d| d.inventory)
}

/// [`discover`], keeping what tells the graphics-only parts apart (`Discovery::without_graphics`).
pub fn discovery(roots: &Roots, opts: &DiscoverOptions) -> anyhow::Result<Discovery> {
    let d = Discovery::run(roots, opts)?;
    for w in &d.inventory.warnings {
        tracing::warn!("{w}");
    }
    Ok(d)
}
