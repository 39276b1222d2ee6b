//! Jetson (Tegra) CSV mode's edits, from what the CSV files name on the host
//! ([`gpuctk_host::csv::CsvHost`]): pure, so `cdi generate --mode csv` and the shim's
//! `mode = "csv"` cannot disagree.
//!
//! As NVIDIA's `pkg/nvcdi/lib-csv.go` builds them: the device (`0`, and `all`) holds the `dev`
//! nodes; the common edits mount the `dir` entries, the `lib` files and the files `sym` chains
//! end at, then `create-symlinks` recreates each chain's links (and `libcuda.so`, which CUDA
//! tools dlopen), and `update-ldcache` adds the libraries' folders.
//!
//! Also what the one-device platform modes (CSV, WSL2) share: their edits' layout, the ids
//! they serve and their spec.

use std::collections::BTreeMap;
use std::path::Path;

use gpuctk_cdi::spec::{ContainerEdits, Device, Spec};
use gpuctk_host::csv::CsvHost;
use gpuctk_host::DeviceNode;

use crate::ops::{InRootOp, Link};
use crate::plan::{cdi_node, mount, FILE_MOUNT_OPTIONS};
use crate::request::DeviceId;
use crate::route::Mode;
use crate::spec::{finish_spec, spec_kind, SpecError};

/// The edits of a platform mode (CSV here, WSL2 in [`crate::wsl`]): its one device's (its
/// nodes) and the common ones, with the common hooks' typed operations in order.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformEdits {
    /// The device nodes.
    pub device: ContainerEdits,
    /// Mounts and hooks every container of the device gets.
    pub common: ContainerEdits,
    /// `common.hooks`, typed.
    pub ops: Vec<InRootOp>,
}

/// A platform mode's edits, laid out as NVIDIA's platform modes lay them out: `nodes` for the
/// device; the common edits mount each of `mounts` (host path, container path) in order, then
/// `create-symlinks` makes `links` and `update-ldcache` adds `folders`, each hook only when it
/// has something to do; `hook_path` is the hook binary written into hooks.
pub(crate) fn platform_edits<'a>(
    nodes: impl IntoIterator<Item = &'a DeviceNode>,
    mounts: impl IntoIterator<Item = (&'a Path, &'a str)>,
    links: Vec<Link>,
    folders: Vec<String>,
    hook_path: &str,
) -> PlatformEdits {
    let device = ContainerEdits {
        device_nodes: nodes.into_iter().map(cdi_node).collect(),
        ..Default::default()
    };
    let mut common = ContainerEdits {
        mounts: mounts
            .into_iter()
            .map(|(host, path)| mount(host, path, FILE_MOUNT_OPTIONS))
            .collect(),
        ..Default::default()
    };
    let mut ops = Vec::new();
    if !links.is_empty() {
        ops.push(InRootOp::CreateSymlinks { links });
    }
    if !folders.is_empty() {
        ops.push(InRootOp::UpdateLdcache { folders });
    }
    common.hooks = ops.iter().map(|o| o.to_hook(hook_path)).collect();
    PlatformEdits {
        device,
        common,
        ops,
    }
}

/// The folders of the files among `paths` (container paths) that [`is_library`] takes for
/// libraries, in order, each once: what `update-ldcache` adds.
pub(crate) fn library_folders<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut folders: Vec<String> = Vec::new();
    for path in paths {
        let name = path.rsplit('/').next().unwrap_or("");
        let dir = dir_of(path);
        if is_library(name) && !folders.iter().any(|f| f == dir) {
            folders.push(dir.to_string());
        }
    }
    folders
}

/// Whether a file name is a library's, as NVIDIA's `internal/discover/ldconfig.go`
/// `isLibName` tells for the `update-ldcache` hook of every platform mode (CSV and WSL2 alike):
/// it matches `lib?*.so*`, and the part after the last `.so` is empty or a version (`.1.1`).
pub(crate) fn is_library(name: &str) -> bool {
    if !name.starts_with("lib") || name.len() < 4 {
        return false;
    }
    match name.rfind(".so") {
        Some(i) if i > 3 => {
            let rest = &name[i + 3..];
            rest.is_empty() || rest.starts_with('.')
        }
        _ => false,
    }
}

/// The folder of a container path (`/` for a file at the top).
pub(crate) fn dir_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((d, _)) => d,
    }
}

/// Plan CSV mode's edits for `host`; `hook_path` is the hook binary written into hooks.
pub fn csv_edits(host: &CsvHost, hook_path: &str) -> PlatformEdits {
    let mut links: Vec<Link> = host
        .links
        .iter()
        .map(|l| Link {
            target: l.target.clone(),
            link: l.link.clone(),
        })
        .collect();
    // CUDA's tools dlopen the unversioned name; NVIDIA adds it next to each libcuda.
    for f in &host.files {
        let name = f.path.rsplit('/').next().unwrap_or("");
        if name.starts_with("libcuda.so") && name != "libcuda.so" {
            let link = format!("{}/libcuda.so", dir_of(&f.path).trim_end_matches('/'));
            if !links.iter().any(|l| l.link == link) {
                links.push(Link {
                    target: "libcuda.so.1".to_string(),
                    link,
                });
            }
        }
    }
    let folders = library_folders(host.files.iter().map(|f| f.path.as_str()));
    let mounts = host
        .dirs
        .iter()
        .chain(&host.files)
        .map(|m| (m.host_path.as_path(), m.path.as_str()));
    platform_edits(&host.devices, mounts, links, folders, hook_path)
}

/// What kind of host a request routed just in time is on: [`gpuctk_host::platform::probe`]
/// tells it, in the one order every delivery and `cdi generate --mode auto` share.
pub use gpuctk_host::platform::Platform;

/// The platform mode whose edits serve a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlatformMode {
    /// The CSV mount specs ([`csv_edits`]).
    Csv,
    /// WSL2's driver store ([`crate::wsl::wsl_edits`]).
    Wsl,
}

/// Which platform mode's edits serve a request that is routed just in time under `mode`, the
/// same for every delivery (the shim, the legacy prestart hook): `mode = "csv"` is CSV whatever
/// the host (NVIDIA's runtime takes a set mode as it is), and `probe` is not called; under any
/// other mode the host's own, WSL2's on a WSL2 host and CSV on a Jetson (NVIDIA's `auto`
/// resolves to `csv` there, its jit-cdi's discovery and libnvidia-container's, behind the
/// legacy hook, find the platform themselves), `None` elsewhere (discovery). Which requests are
/// routed just in time is [`crate::route::route`]'s answer; `probe` tells the host.
pub fn platform_mode<E>(
    mode: Mode,
    probe: impl FnOnce() -> Result<Platform, E>,
) -> Result<Option<PlatformMode>, E> {
    if mode == Mode::Csv {
        return Ok(Some(PlatformMode::Csv));
    }
    Ok(match probe()? {
        Platform::Wsl => Some(PlatformMode::Wsl),
        Platform::Tegra => Some(PlatformMode::Csv),
        Platform::Other => None,
    })
}

/// Whether a platform mode (CSV, WSL2) serves `id`: its one device, as `0`, `all`, or a CDI
/// name of `kinds` for either.
pub fn serves_one_device(id: &DeviceId, kinds: &[&str]) -> bool {
    match id {
        DeviceId::All | DeviceId::Index(0) => true,
        DeviceId::Cdi(q) => {
            kinds.contains(&q.kind().as_str()) && (q.name == "0" || q.name == "all")
        }
        _ => false,
    }
}

/// A platform mode's spec of kind `kind`: a device of each of `names`, holding the device's
/// edits; the common edits at the top.
pub(crate) fn platform_spec(kind: String, edits: &PlatformEdits, names: &[&str]) -> Spec {
    let devices = names
        .iter()
        .map(|name| Device {
            name: name.to_string(),
            annotations: BTreeMap::new(),
            container_edits: edits.device.clone(),
        })
        .collect();
    finish_spec(kind, BTreeMap::new(), devices, edits.common.clone())
}

/// CSV mode's spec: device `0` and, with `all_device`, `all`, each holding the `dev` nodes;
/// the rest as common edits.
pub fn build_csv_spec(
    edits: &PlatformEdits,
    vendor: &str,
    class: &str,
    all_device: bool,
) -> Result<Spec, SpecError> {
    let kind = spec_kind(vendor, class)?;
    if edits.device.device_nodes.is_empty() {
        return Err(SpecError::Empty(
            "none of the CSV files' `dev` entries exists under the dev root (check --dev-root and --csv.file)".to_string(),
        ));
    }
    let names: &[&str] = if all_device { &["0", "all"] } else { &["0"] };
    Ok(platform_spec(kind, edits, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuctk_host::csv::{CsvLink, CsvMount};
    use gpuctk_host::DeviceNode;

    fn host() -> CsvHost {
        CsvHost {
            devices: vec![DeviceNode {
                path: "/dev/nvmap".into(),
                host_path: "/h/dev/nvmap".into(),
                major: 10,
                minor: 120,
                mode: 0o666,
                gid: 0,
            }],
            dirs: vec![CsvMount {
                host_path: "/h/usr/local/cuda".into(),
                path: "/usr/local/cuda".into(),
            }],
            files: vec![
                CsvMount {
                    host_path: "/h/usr/lib/t/libcuda.so.1.1".into(),
                    path: "/usr/lib/t/libcuda.so.1.1".into(),
                },
                CsvMount {
                    host_path: "/h/etc/x.json".into(),
                    path: "/etc/x.json".into(),
                },
            ],
            links: vec![CsvLink {
                target: "t/libcuda.so".into(),
                link: "/usr/lib/libcuda.so".into(),
            }],
        }
    }

    #[test]
    fn edits_as_nvidia_lays_them_out() {
        let e = csv_edits(&host(), "/usr/bin/nvidia-cdi-hook");
        assert_eq!(e.device.device_nodes.len(), 1);
        assert_eq!(e.device.device_nodes[0].major, Some(10));
        let mounts: Vec<&str> = e
            .common
            .mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            [
                "/usr/local/cuda",
                "/usr/lib/t/libcuda.so.1.1",
                "/etc/x.json"
            ]
        );
        assert_eq!(
            e.ops,
            vec![
                InRootOp::CreateSymlinks {
                    links: vec![
                        Link {
                            target: "t/libcuda.so".into(),
                            link: "/usr/lib/libcuda.so".into()
                        },
                        Link {
                            target: "libcuda.so.1".into(),
                            link: "/usr/lib/t/libcuda.so".into()
                        },
                    ]
                },
                InRootOp::UpdateLdcache {
                    folders: vec!["/usr/lib/t".into()]
                },
            ]
        );
        assert_eq!(e.common.hooks.len(), 2);
        let spec = build_csv_spec(&e, "nvidia.com", "gpu", true).unwrap();
        let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["0", "all"]);
        assert!(gpuctk_cdi::validate::validate(&spec).is_empty());
        let none = csv_edits(&CsvHost::default(), "/h");
        assert!(build_csv_spec(&none, "nvidia.com", "gpu", true).is_err());
    }

    #[test]
    fn library_names_as_nvidia_tells_them() {
        for (name, want) in [
            ("libcuda.so.1.1", true),
            ("libdxcore.so", true),
            ("libcuda_loader.so", true),
            ("libx.so.so", true),
            ("nvcubins.bin", false),
            ("nvidia-smi", false),
            ("lib.so", false),
            ("libx.sox", false),
            ("libx.so.1.sock", false),
        ] {
            assert_eq!(is_library(name), want, "{name}");
        }
    }

    /// Review finding (session 8): CSV mode took any `lib*` name holding `.so` for a library
    /// (`lib.so`, `libnv.sock`), WSL2 NVIDIA's `isLibName`; both now use the latter, so a CSV
    /// file's socket or `lib.so` adds no folder to `update-ldcache`.
    #[test]
    fn csv_ldcache_folders_are_those_of_nvidia_libraries() {
        let mut h = host();
        for path in ["/run/nv/libnv.sock", "/opt/x/lib.so", "/opt/y/libz.sox"] {
            h.files.push(CsvMount {
                host_path: format!("/h{path}").into(),
                path: path.into(),
            });
        }
        let e = csv_edits(&h, "/usr/bin/nvidia-cdi-hook");
        assert_eq!(
            e.ops.last(),
            Some(&InRootOp::UpdateLdcache {
                folders: vec!["/usr/lib/t".into()]
            })
        );
    }

    /// Review finding (session 8): the shim planned WSL2's edits only under `auto` and
    /// `jit-cdi` and CSV's only under `csv`, the legacy hook WSL2's under every mode (`csv`
    /// too) and CSV's never; one decision now serves both, for every mode and host.
    #[test]
    fn platform_mode_for_every_mode_and_host() {
        use Platform::*;
        use PlatformMode as P;
        let modes = [Mode::Auto, Mode::Cdi, Mode::JitCdi, Mode::Legacy, Mode::Csv];
        for mode in modes {
            for (host, want) in [(Wsl, Some(P::Wsl)), (Tegra, Some(P::Csv)), (Other, None)] {
                let want = if mode == Mode::Csv {
                    Some(P::Csv)
                } else {
                    want
                };
                let got = platform_mode(mode, || Ok::<_, ()>(host)).unwrap();
                assert_eq!(got, want, "{mode:?} on {host:?}");
            }
        }
        // A set `csv` does not probe; the others pass the probe's error on.
        assert_eq!(platform_mode(Mode::Csv, || Err("probed")), Ok(Some(P::Csv)));
        assert_eq!(platform_mode(Mode::Auto, || Err("probed")), Err("probed"));
    }

    #[test]
    fn serves_its_one_device() {
        let k = ["nvidia.com/gpu"];
        assert!(serves_one_device(&DeviceId::All, &k));
        assert!(serves_one_device(&DeviceId::Index(0), &k));
        assert!(!serves_one_device(&DeviceId::Index(1), &k));
        assert!(serves_one_device(
            &DeviceId::Cdi("nvidia.com/gpu=all".parse().unwrap()),
            &k
        ));
        assert!(!serves_one_device(
            &DeviceId::Cdi("other.com/gpu=all".parse().unwrap()),
            &k
        ));
        assert!(!serves_one_device(&DeviceId::Uuid("GPU-1".into()), &k));
    }
}
