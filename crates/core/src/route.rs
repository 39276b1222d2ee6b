//! Which way a gated [`Request`] is served under the configured mode, and whether a static CDI
//! spec still fits the host: the decisions every delivery (shim, legacy hook,
//! `nvidia-container-cli`) shares, so none of them chooses on its own.
//!
//! Pure: the caller gives the running driver version and the host paths a spec names that are
//! gone; nothing here reads procfs or stats a file.

use gpuctk_cdi::names::{parse_kind, NameError, QualifiedName};

use crate::request::{DeviceId, Devices, Request};
use crate::select::cdi_name_to_device;

/// `[nvidia-container-runtime] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// CDI names through the registry, everything else just in time.
    Auto,
    /// Everything through the CDI registry; bare ids qualified with `default-kind`.
    Cdi,
    /// Just-in-time edits only (NVIDIA's `jit-cdi`): our own kind's CDI names are planned too.
    JitCdi,
    /// The legacy prestart hook does the work; the shim only adds it.
    Legacy,
    /// Jetson (Tegra): the shim plans from the CSV mount specs (NVIDIA's `csv`); other
    /// deliveries plan just in time.
    Csv,
}

/// How a request is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Nothing was asked: the container is left exactly as it is.
    Untouched,
    /// Edits planned from discovery for these devices (empty: `none`, the driver only).
    JustInTime(Vec<DeviceId>),
    /// These CDI names resolved through the spec dirs. `fallback` (auto mode, our own kind
    /// only) is what to plan just in time when the static spec no longer fits the host.
    Registry {
        /// Fully-qualified names.
        names: Vec<QualifiedName>,
        /// The same devices as ids, when a stale spec may be replaced by just-in-time edits.
        fallback: Option<Vec<DeviceId>>,
    },
    /// Legacy mode: add the prestart hook and let it inject into the live container.
    PrestartHook,
}

/// A request that no route can serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// GPU ids and CDI names of other kinds in one request.
    #[error("{from}: mixes CDI names of another kind with GPU ids; use one form")]
    Mixed {
        /// Where the request came from.
        from: String,
    },
    /// A GPU id under `default-kind` that is no CDI name (the kind itself is malformed).
    #[error("{from}: {name} is no CDI device name: {reason}; fix [nvidia-container-runtime.modes.cdi] default-kind in config.toml")]
    Name {
        /// Where the request came from.
        from: String,
        /// `default-kind=id`, as it would be looked up.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
}

/// The kind NVIDIA's runtime (1.17 and later) plans just in time whatever the mode: there is
/// no static spec for it.
pub const RUNTIME_KIND: &str = "runtime.nvidia.com/gpu";

/// Picks the route for `request` under `mode`; `default_kind` is `modes.cdi.default-kind`.
pub fn route(request: &Request, mode: Mode, default_kind: &str) -> Result<Route, RouteError> {
    let ids: Vec<DeviceId> = match &request.devices {
        Devices::Unrequested => return Ok(Route::Untouched),
        Devices::NoGpus => Vec::new(),
        Devices::Ids(ids) => ids.clone(),
    };
    if mode == Mode::Legacy {
        return Ok(Route::PrestartHook);
    }
    let source = request.source.to_string();
    let as_ids = |ids: &[DeviceId]| -> Option<Vec<DeviceId>> {
        ids.iter()
            .map(|d| match d {
                DeviceId::Cdi(n) => cdi_name_to_device(n, default_kind)
                    .or_else(|| cdi_name_to_device(n, RUNTIME_KIND)),
                other => Some(other.clone()),
            })
            .collect()
    };
    let runtime_kind_only = !ids.is_empty()
        && ids
            .iter()
            .all(|d| matches!(d, DeviceId::Cdi(n) if n.kind() == RUNTIME_KIND));
    if runtime_kind_only {
        return match as_ids(&ids) {
            Some(mapped) => Ok(Route::JustInTime(mapped)),
            None => Err(RouteError::Mixed { from: source }),
        };
    }
    match mode {
        // `none` needs no spec: the driver only.
        Mode::Cdi if ids.is_empty() => Ok(Route::JustInTime(ids)),
        Mode::Cdi => Ok(Route::Registry {
            names: ids
                .iter()
                .map(|d| match d {
                    DeviceId::Cdi(n) => Ok(n.clone()),
                    other => {
                        let id = other.to_string();
                        parse_kind(default_kind)
                            .and_then(|(vendor, class)| QualifiedName::new(vendor, class, &id))
                            .map_err(|reason| RouteError::Name {
                                from: source.clone(),
                                name: format!("{default_kind}={id}"),
                                reason,
                            })
                    }
                })
                .collect::<Result<_, _>>()?,
            fallback: None,
        }),
        Mode::Auto if request.all_cdi() => Ok(Route::Registry {
            names: ids
                .iter()
                .filter_map(|d| match d {
                    DeviceId::Cdi(n) => Some(n.clone()),
                    _ => None,
                })
                .collect(),
            fallback: as_ids(&ids),
        }),
        Mode::Auto | Mode::JitCdi | Mode::Csv => match as_ids(&ids) {
            Some(mapped) => Ok(Route::JustInTime(mapped)),
            None => Err(RouteError::Mixed { from: source }),
        },
        Mode::Legacy => Ok(Route::PrestartHook),
    }
}

/// Why a static spec no longer fits this host, if it does not: made for another driver
/// (`made_for` per spec file used, from its hook arguments or annotation), or naming host files
/// that are gone (`missing`: the first one found, as "mount source /path" or "device node
/// /path"). A driver upgrade does both.
pub fn stale_reason(
    made_for: &[(String, Option<String>)],
    running: Option<&str>,
    missing: Option<&str>,
) -> Option<String> {
    if let Some(running) = running {
        for (spec, version) in made_for {
            if let Some(v) = version {
                if v != running {
                    return Some(format!(
                        "CDI spec {spec} was generated for driver {v}, but driver {running} is running"
                    ));
                }
            }
        }
    }
    missing.map(|p| format!("CDI spec {p} no longer exists"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Source;
    use crate::CapabilitySet;

    fn req(devices: Devices) -> Request {
        Request {
            devices,
            source: Source::Env("NVIDIA_VISIBLE_DEVICES".into()),
            capabilities: CapabilitySet::default_set(),
            requirements: Vec::new(),
            disable_require: false,
            legacy_image: false,
            privileged: false,
            mig: Vec::new(),
            imex_channels: Vec::new(),
            gated: Vec::new(),
            ignored: Vec::new(),
        }
    }

    fn cdi(n: &str) -> DeviceId {
        DeviceId::Cdi(qn(n))
    }

    fn qn(n: &str) -> QualifiedName {
        n.parse().unwrap()
    }

    const KIND: &str = "nvidia.com/gpu";

    #[test]
    fn mode_matrix() {
        use DeviceId::*;
        let ids = |v: Vec<DeviceId>| req(Devices::Ids(v));
        let cases: Vec<(Request, Mode, Result<Route, RouteError>)> = vec![
            (req(Devices::Unrequested), Mode::Auto, Ok(Route::Untouched)),
            (req(Devices::Unrequested), Mode::Cdi, Ok(Route::Untouched)),
            (
                req(Devices::Unrequested),
                Mode::Legacy,
                Ok(Route::Untouched),
            ),
            (
                req(Devices::NoGpus),
                Mode::Auto,
                Ok(Route::JustInTime(vec![])),
            ),
            (
                req(Devices::NoGpus),
                Mode::Cdi,
                Ok(Route::JustInTime(vec![])),
            ),
            (req(Devices::NoGpus), Mode::Legacy, Ok(Route::PrestartHook)),
            (
                ids(vec![Index(1), All]),
                Mode::Auto,
                Ok(Route::JustInTime(vec![Index(1), All])),
            ),
            (
                ids(vec![Index(1)]),
                Mode::JitCdi,
                Ok(Route::JustInTime(vec![Index(1)])),
            ),
            (
                ids(vec![Index(1), Uuid("GPU-1".into())]),
                Mode::Cdi,
                Ok(Route::Registry {
                    names: vec![qn("nvidia.com/gpu=1"), qn("nvidia.com/gpu=GPU-1")],
                    fallback: None,
                }),
            ),
            (
                ids(vec![cdi("nvidia.com/gpu=0"), cdi("nvidia.com/gpu=all")]),
                Mode::Auto,
                Ok(Route::Registry {
                    names: vec![qn("nvidia.com/gpu=0"), qn("nvidia.com/gpu=all")],
                    fallback: Some(vec![Index(0), All]),
                }),
            ),
            (
                ids(vec![cdi("vendor.com/x=a")]),
                Mode::Auto,
                Ok(Route::Registry {
                    names: vec![qn("vendor.com/x=a")],
                    fallback: None,
                }),
            ),
            (
                ids(vec![cdi("nvidia.com/gpu=2"), Index(1)]),
                Mode::Auto,
                Ok(Route::JustInTime(vec![Index(2), Index(1)])),
            ),
            (
                ids(vec![cdi("vendor.com/x=a"), Index(1)]),
                Mode::Auto,
                Err(RouteError::Mixed {
                    from: "NVIDIA_VISIBLE_DEVICES".into(),
                }),
            ),
            (
                ids(vec![cdi("nvidia.com/gpu=GPU-9")]),
                Mode::JitCdi,
                Ok(Route::JustInTime(vec![Uuid("GPU-9".into())])),
            ),
            (ids(vec![Index(0)]), Mode::Legacy, Ok(Route::PrestartHook)),
            (
                ids(vec![cdi("runtime.nvidia.com/gpu=3")]),
                Mode::Auto,
                Ok(Route::JustInTime(vec![Index(3)])),
            ),
            (
                ids(vec![cdi("runtime.nvidia.com/gpu=all")]),
                Mode::Cdi,
                Ok(Route::JustInTime(vec![All])),
            ),
        ];
        for (r, mode, want) in cases {
            assert_eq!(route(&r, mode, KIND), want, "{:?} in {mode:?}", r.devices);
        }
    }

    #[test]
    fn a_malformed_default_kind_names_the_key() {
        let r = req(Devices::Ids(vec![DeviceId::Index(0)]));
        let e = route(&r, Mode::Cdi, "nvidia.com").unwrap_err();
        assert!(
            matches!(&e, RouteError::Name { name, .. } if name == "nvidia.com=0"),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("default-kind") && !text.contains('\n'),
            "{text}"
        );
    }

    #[test]
    fn staleness() {
        let specs = vec![
            ("/etc/cdi/a.yaml".to_string(), None),
            (
                "/run/cdi/b.yaml".to_string(),
                Some("570.124.06".to_string()),
            ),
        ];
        assert_eq!(stale_reason(&specs, Some("570.124.06"), None), None);
        let why = stale_reason(&specs, Some("575.57.08"), None).unwrap();
        assert!(
            why.contains("b.yaml was generated for driver 570.124.06"),
            "{why}"
        );
        assert!(why.contains("driver 575.57.08 is running"), "{why}");
        // No running driver known: only missing files can tell.
        assert_eq!(stale_reason(&specs, None, None), None);
        let why = stale_reason(&specs, None, Some("mount source /usr/lib/libcuda.so.1")).unwrap();
        assert_eq!(
            why,
            "CDI spec mount source /usr/lib/libcuda.so.1 no longer exists"
        );
    }
}
