//! `NVIDIA_DRIVER_CAPABILITIES`: which parts of the driver a container asks for.

use std::collections::BTreeSet;

use gpuctk_host::Capability;

/// A set of driver capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CapabilitySet(BTreeSet<Capability>);

/// A bad `NVIDIA_DRIVER_CAPABILITIES` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NVIDIA_DRIVER_CAPABILITIES: unknown capability {0:?} (known: all, compute, compat32, graphics, utility, video, display, ngx)")]
pub struct CapabilityError(pub String);

impl CapabilitySet {
    /// What a container gets when it names none: `utility,compute`, as NVIDIA's default.
    pub fn default_set() -> Self {
        CapabilitySet(
            [Capability::Utility, Capability::Compute]
                .into_iter()
                .collect(),
        )
    }

    /// Every capability (`all`).
    pub fn all() -> Self {
        CapabilitySet(Capability::ALL.into_iter().collect())
    }

    /// Parse a comma list such as `compute,utility` or `all`. Empty items are ignored; an empty
    /// value means the default set, as NVIDIA does.
    pub fn parse(value: &str) -> Result<Self, CapabilityError> {
        let mut set = BTreeSet::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                return Ok(Self::all());
            }
            set.insert(
                item.parse::<Capability>()
                    .map_err(|_| CapabilityError(item.to_string()))?,
            );
        }
        if set.is_empty() {
            return Ok(Self::default_set());
        }
        Ok(CapabilitySet(set))
    }

    /// Whether `c` is in the set.
    pub fn contains(&self, c: Capability) -> bool {
        self.0.contains(&c)
    }

    /// The capabilities in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(
            CapabilitySet::parse("").unwrap(),
            CapabilitySet::default_set()
        );
        assert_eq!(CapabilitySet::parse("all").unwrap(), CapabilitySet::all());
        let s = CapabilitySet::parse("utility, video").unwrap();
        assert!(s.contains(Capability::Video) && !s.contains(Capability::Compute));
        let e = CapabilitySet::parse("compute,gaming").unwrap_err();
        assert!(e.to_string().contains("\"gaming\""));
    }
}
