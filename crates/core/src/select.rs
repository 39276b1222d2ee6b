//! Resolving a [`Request`]'s device ids against the [`Inventory`], and the just-in-time edits a
//! container gets from them: the same [`plan`] as `cdi generate`, restricted to the selected
//! GPUs and the requested capabilities.

use gpuctk_cdi::names::QualifiedName;
use gpuctk_host::Inventory;

use crate::request::DeviceId;
use crate::spec::available_gpus;

/// A device id that names no GPU here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// No GPU with that index.
    #[error("{var}: no GPU with index {index} (this host has {available})")]
    UnknownIndex {
        /// The variable or annotation.
        var: String,
        /// The index.
        index: u32,
        /// What exists.
        available: String,
    },
    /// No GPU with that UUID (or prefix).
    #[error("{var}: no GPU with UUID {uuid} (this host has {available})")]
    UnknownUuid {
        /// The variable or annotation.
        var: String,
        /// The UUID given.
        uuid: String,
        /// The UUIDs that exist.
        available: String,
    },
    /// A UUID prefix matching several GPUs.
    #[error("{var}: {prefix} matches several GPUs ({matches}); give more of the UUID")]
    AmbiguousUuid {
        /// The variable or annotation.
        var: String,
        /// The prefix.
        prefix: String,
        /// The UUIDs it matches.
        matches: String,
    },
    /// A MIG device among whole GPUs: callers resolve those with [`crate::mig::select_mig`].
    #[error("{var}: {item} is a MIG device, not a whole GPU")]
    Mig {
        /// The variable or annotation.
        var: String,
        /// The MIG id.
        item: String,
    },
    /// A CDI name that is not of a kind we can inject just in time.
    #[error("{var}: {name} cannot be injected without a CDI spec that defines it (run `gpuctk cdi generate`)")]
    Cdi {
        /// The variable or annotation.
        var: String,
        /// The name.
        name: String,
    },
    /// The selected GPU has no device node on this host.
    #[error("{var}: GPU {index} has no device node under the dev root; create /dev/nvidia{minor}")]
    NoNode {
        /// The variable or annotation.
        var: String,
        /// Its index.
        index: u32,
        /// Its minor.
        minor: u32,
    },
}

/// Map a CDI name of our own kind (`nvidia.com/gpu=1`, `=GPU-...`, `=gpu1`, `=all`) to the GPU it
/// names, so a request for a static spec's device can fall back to just-in-time edits.
pub fn cdi_name_to_device(name: &QualifiedName, kind: &str) -> Option<DeviceId> {
    if name.kind() != kind {
        return None;
    }
    let dev = name.name.as_str();
    if dev == "all" {
        return Some(DeviceId::All);
    }
    if let Ok(i) = dev.parse::<u32>() {
        return Some(DeviceId::Index(i));
    }
    if let Some(i) = dev.strip_prefix("gpu").and_then(|i| i.parse::<u32>().ok()) {
        return Some(DeviceId::Index(i));
    }
    // A MIG device: `0:1` (index), `mig0:1` (type-index), `MIG-...` (uuid).
    let mig = dev.strip_prefix("mig").unwrap_or(dev);
    if mig.contains(':') {
        return crate::mig::parse_mig_index(mig).map(|(g, i)| DeviceId::Mig(g, i));
    }
    if dev.starts_with("MIG-") {
        return Some(DeviceId::MigUuid(dev.to_string()));
    }
    dev.starts_with("GPU-")
        .then(|| DeviceId::Uuid(dev.to_string()))
}

/// The indices of the GPUs `ids` select, in request order without duplicates.
pub fn select_gpus(
    inv: &Inventory,
    ids: &[DeviceId],
    source: &str,
) -> Result<Vec<u32>, SelectError> {
    let mut out: Vec<u32> = Vec::new();
    let push = |i: u32, out: &mut Vec<u32>| {
        if !out.contains(&i) {
            out.push(i);
        }
    };
    for id in ids {
        match id {
            DeviceId::All => {
                for g in &inv.gpus {
                    push(g.index, &mut out);
                }
            }
            DeviceId::Index(i) => {
                if !inv.gpus.iter().any(|g| g.index == *i) {
                    return Err(SelectError::UnknownIndex {
                        var: source.to_string(),
                        index: *i,
                        available: available_gpus(inv),
                    });
                }
                push(*i, &mut out);
            }
            DeviceId::Uuid(u) => {
                let want = u.to_ascii_lowercase();
                let exact = inv
                    .gpus
                    .iter()
                    .find(|g| g.uuid.to_ascii_lowercase() == want);
                let matches: Vec<_> = match exact {
                    Some(g) => vec![g],
                    // libnvidia-container accepts a unique, case-insensitive prefix.
                    None => inv
                        .gpus
                        .iter()
                        .filter(|g| g.uuid.to_ascii_lowercase().starts_with(&want))
                        .collect(),
                };
                match matches.as_slice() {
                    [g] => push(g.index, &mut out),
                    [] => {
                        return Err(SelectError::UnknownUuid {
                            var: source.to_string(),
                            uuid: u.clone(),
                            available: if inv.gpus.is_empty() {
                                "no GPUs".into()
                            } else {
                                inv.gpus
                                    .iter()
                                    .map(|g| g.uuid.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            },
                        })
                    }
                    many => {
                        return Err(SelectError::AmbiguousUuid {
                            var: source.to_string(),
                            prefix: u.clone(),
                            matches: many
                                .iter()
                                .map(|g| g.uuid.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                        })
                    }
                }
            }
            DeviceId::Mig(..) | DeviceId::MigUuid(_) => {
                return Err(SelectError::Mig {
                    var: source.to_string(),
                    item: id.to_string(),
                })
            }
            DeviceId::Cdi(name) => {
                return Err(SelectError::Cdi {
                    var: source.to_string(),
                    name: name.to_string(),
                })
            }
        }
    }
    for i in &out {
        let g = &inv.gpus[*i as usize];
        if g.node.is_none() {
            return Err(SelectError::NoNode {
                var: source.to_string(),
                index: g.index,
                minor: g.minor,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdi_names_of_mig_devices_map_to_them() {
        let k = "nvidia.com/gpu";
        assert_eq!(
            cdi_name_to_device(&"nvidia.com/gpu=0:1".parse().unwrap(), k),
            Some(DeviceId::Mig(0, 1))
        );
        assert_eq!(
            cdi_name_to_device(&"nvidia.com/gpu=mig2:0".parse().unwrap(), k),
            Some(DeviceId::Mig(2, 0))
        );
        assert_eq!(
            cdi_name_to_device(&"nvidia.com/gpu=MIG-abc".parse().unwrap(), k),
            Some(DeviceId::MigUuid("MIG-abc".into()))
        );
        assert_eq!(
            cdi_name_to_device(&"nvidia.com/gpu=0:x".parse().unwrap(), k),
            None
        );
        assert_eq!(
            cdi_name_to_device(&"nvidia.com/gpu=gpu3".parse().unwrap(), k),
            Some(DeviceId::Index(3))
        );
    }
}
