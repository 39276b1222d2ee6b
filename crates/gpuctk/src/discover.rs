//! Host discovery as the commands and the legacy hook run it: `gpuctk_host::discover` with its
//! warnings logged.

use gpuctk_host::{DiscoverOptions, Discovery, Inventory, Roots};

/// Discover `roots`, logging the warnings.
pub fn discover(roots: &Roots, opts: &DiscoverOptions) -> anyhow::Result<Inventory> {
    discovery(roots, opts).map(|d| d.inventory)
}

/// [`discover`], keeping what tells the graphics-only parts apart (`Discovery::without_graphics`).
pub fn discovery(roots: &Roots, opts: &DiscoverOptions) -> anyhow::Result<Discovery> {
    Ok(logged(Discovery::run(roots, opts)?))
}

/// [`discovery`] for the running driver as the caller read it (`None`: no version file), not
/// read again.
pub fn discovery_with_driver(
    driver: Option<&gpuctk_host::DriverVersion>,
    roots: &Roots,
    opts: &DiscoverOptions,
) -> anyhow::Result<Discovery> {
    Ok(logged(Discovery::run_with_driver(roots, opts, driver)?))
}

/// `d`, its warnings logged.
fn logged(d: Discovery) -> Discovery {
    for w in &d.inventory.warnings {
        tracing::warn!("{w}");
    }
    d
}
