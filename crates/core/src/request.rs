//! The `Request`: what a container asks for, read from its OCI `config.json` (env, annotations,
//! mounts, capabilities) under the configured policy, as NVIDIA's toolkit reads it.
//!
//! Pure: a JSON value in, a typed request or an error that names the variable out.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use gpuctk_cdi::names::QualifiedName;
use serde_json::Value;

use gpuctk_host::caps::MAX_IMEX_CHANNEL;
use gpuctk_host::MigCapability;

use crate::capabilities::{CapabilityError, CapabilitySet};

/// The directory under which device requests arrive as volume mounts.
pub const DEVICE_MOUNT_DIR: &str = "/var/run/nvidia-container-devices";

/// Which requests are honoured (NVIDIA's config keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `accept-nvidia-visible-devices-envvar-when-unprivileged` (default true).
    pub accept_envvar_unprivileged: bool,
    /// `accept-nvidia-visible-devices-as-volume-mounts` (default false).
    pub accept_volume_mounts: bool,
    /// `swarm-resource`: env names that take precedence over `NVIDIA_VISIBLE_DEVICES`.
    pub swarm_resource: Vec<String>,
    /// `modes.cdi.annotation-prefixes` (default `cdi.k8s.io/`).
    pub annotation_prefixes: Vec<String>,
    /// `disable-require`.
    pub disable_require: bool,
    /// `[gpuctk] accept-cdi-annotations-when-unprivileged` (default false): honour CDI
    /// annotations from unprivileged containers although env requests from them are refused,
    /// for engines where only the device plugin can set annotations.
    pub accept_annotations_unprivileged: bool,
    /// `supported-driver-capabilities` (default all seven): the capabilities a container may
    /// get. What it asks for (or the default, or a legacy image's everything) is intersected
    /// with this set; a requested one outside it is dropped with a remark in
    /// [`Request::ignored`] (NVIDIA's hook refuses the container instead).
    pub supported_driver_capabilities: CapabilitySet,
    /// `features.ignore-imex-channel-requests`: the container's IMEX channel requests
    /// (`NVIDIA_IMEX_CHANNELS`, `imex/<id>` mounts) are dropped with a remark.
    pub ignore_imex_channel_requests: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            accept_envvar_unprivileged: true,
            accept_volume_mounts: false,
            swarm_resource: Vec::new(),
            annotation_prefixes: vec!["cdi.k8s.io/".to_string()],
            disable_require: false,
            accept_annotations_unprivileged: false,
            supported_driver_capabilities: CapabilitySet::all(),
            ignore_imex_channel_requests: false,
        }
    }
}

/// One requested device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceId {
    /// `all`.
    All,
    /// A GPU index, `0`.
    Index(u32),
    /// A GPU UUID or a unique prefix of one, `GPU-...`.
    Uuid(String),
    /// A MIG device by index, `gpu:gi`.
    Mig(u32, u32),
    /// A MIG device by UUID, `MIG-...`.
    MigUuid(String),
    /// A fully-qualified CDI name, `nvidia.com/gpu=0`.
    Cdi(QualifiedName),
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceId::All => f.write_str("all"),
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::Uuid(u) | DeviceId::MigUuid(u) => f.write_str(u),
            DeviceId::Cdi(q) => write!(f, "{q}"),
            DeviceId::Mig(g, i) => write!(f, "{g}:{i}"),
        }
    }
}

/// What devices the container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// Nothing (`void`, empty or unset): the container is left exactly as it is.
    Unrequested,
    /// `none`: no GPU, but the driver libraries and control nodes.
    NoGpus,
    /// These devices.
    Ids(Vec<DeviceId>),
}

/// Where the device request came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An env var (its name).
    Env(String),
    /// A CDI annotation (its key).
    Annotation(String),
    /// Volume mounts under `/var/run/nvidia-container-devices`.
    Mounts,
    /// Nothing asked.
    Nothing,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Env(n) | Source::Annotation(n) => f.write_str(n),
            Source::Mounts => write!(f, "mounts under {DEVICE_MOUNT_DIR}"),
            Source::Nothing => f.write_str("nothing"),
        }
    }
}

/// A container's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The devices.
    pub devices: Devices,
    /// Where they came from.
    pub source: Source,
    /// `NVIDIA_DRIVER_CAPABILITIES` (unset or empty: `utility,compute`; unset on a legacy
    /// image: all), within `supported-driver-capabilities`.
    pub capabilities: CapabilitySet,
    /// `NVIDIA_REQUIRE_*` constraints (name, expression), plus `cuda>=X.Y` for legacy images.
    pub requirements: Vec<(String, String)>,
    /// `NVIDIA_DISABLE_REQUIRE` or the `disable-require` key.
    pub disable_require: bool,
    /// A CUDA image from before `NVIDIA_REQUIRE_CUDA` (`CUDA_VERSION` only).
    pub legacy_image: bool,
    /// The container has `CAP_SYS_ADMIN` in its bounding set, NVIDIA's test for privileged.
    pub privileged: bool,
    /// The global MIG capabilities granted (`NVIDIA_MIG_CONFIG_DEVICES=all`,
    /// `NVIDIA_MIG_MONITOR_DEVICES=all`, `--mig-config=all`, `--mig-monitor=all`): privileged
    /// containers only.
    pub mig: Vec<MigCapability>,
    /// The IMEX channels granted (`NVIDIA_IMEX_CHANNELS`, `imex/<id>` device mounts,
    /// `--imex-channel`), in request order without repeats.
    pub imex_channels: Vec<u32>,
    /// NVIDIA's gated modes asked by `NVIDIA_GDS`, `NVIDIA_MOFED`, `NVIDIA_GDRCOPY`,
    /// `NVIDIA_NVSWITCH` `=enabled`, in NVIDIA's order; given with a device request only.
    pub gated: Vec<gpuctk_host::GatedMode>,
    /// Requests dropped by policy, and unknown or unsupported capabilities dropped, as
    /// warnings to log.
    pub ignored: Vec<String>,
}

impl Request {
    /// Whether the container asked for anything at all.
    pub fn wants_gpus(&self) -> bool {
        self.devices != Devices::Unrequested
    }

    /// The requirements to check with [`crate::require::check`]: none when
    /// `NVIDIA_DISABLE_REQUIRE` or the `disable-require` key turned checking off.
    pub fn active_requirements(&self) -> &[(String, String)] {
        if self.disable_require {
            &[]
        } else {
            &self.requirements
        }
    }

    /// Whether every requested device is a CDI name.
    pub fn all_cdi(&self) -> bool {
        matches!(&self.devices, Devices::Ids(ids) if !ids.is_empty() && ids.iter().all(|d| matches!(d, DeviceId::Cdi(_))))
    }
}

/// A request that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A device list item is malformed.
    #[error("{var}: bad device {item:?}: expected all, none, void, a GPU index, a GPU-/MIG- UUID, a MIG index like 0:1, or a CDI name like nvidia.com/gpu=0")]
    BadDevice {
        /// The variable or annotation.
        var: String,
        /// The item.
        item: String,
    },
    /// A CDI annotation value is not a list of qualified names.
    #[error(
        "annotation {key}: {value:?} is not a comma list of CDI device names like nvidia.com/gpu=0"
    )]
    BadAnnotation {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// A capability list is malformed. [`parse_request`] never returns it: an unknown
    /// capability in `NVIDIA_DRIVER_CAPABILITIES` is a remark in [`Request::ignored`].
    #[error(transparent)]
    Capabilities(#[from] CapabilityError),
    /// A device list longer than we read.
    #[error("{var}: {len} bytes, more than the {cap} allowed; name fewer devices (or `all`)")]
    TooLong {
        /// The variable or annotation.
        var: String,
        /// Its length.
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// A device list with more distinct items than we accept.
    #[error("{var}: more than {cap} distinct devices; name fewer devices (or `all`)")]
    TooMany {
        /// The variable or annotation.
        var: String,
        /// The cap.
        cap: usize,
    },
    /// A field of config.json has the wrong type.
    #[error("config.json: {0}")]
    Spec(String),
    /// A MIG capability request other than `all`.
    #[error("{var}={value:?}: only `all` is accepted (the MIG capabilities are global)")]
    BadMig {
        /// The variable or flag.
        var: String,
        /// Its value.
        value: String,
    },
    /// An IMEX channel that is not a number in the driver's range.
    #[error("{var}: bad IMEX channel {item:?}: expected channel numbers 0 to {MAX_IMEX_CHANNEL}, comma separated")]
    BadChannel {
        /// The variable, flag or mount.
        var: String,
        /// The item.
        item: String,
    },
    /// A MIG capability asked by an unprivileged container, which NVIDIA's hook refuses too.
    #[error("{var}: MIG {what} needs a privileged container (CAP_SYS_ADMIN in its bounding set); run it privileged or unset {var}")]
    MigUnprivileged {
        /// The variable.
        var: String,
        /// `config` or `monitor`.
        what: &'static str,
    },
}

/// Longest `NVIDIA_VISIBLE_DEVICES`-style value we read (a host has at most a few hundred GPUs
/// and MIG devices; 64 KiB holds more than a thousand UUIDs).
pub const MAX_DEVICE_VALUE: usize = 64 << 10;
/// Most items in one device list.
pub const MAX_DEVICE_ITEMS: usize = 4096;

/// Which program delivers the request: it decides which request sources are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The runtime shim (`nvidia-container-runtime`): every source, CDI annotations included.
    Shim,
    /// The legacy prestart hook (`nvidia-container-runtime-hook`): like NVIDIA's hook, it never
    /// reads annotations.
    PrestartHook,
}

/// The container's env as (name, value), later entries overriding earlier ones in place of the
/// first. Linear in the number of entries.
fn env_of(config: &Value) -> Result<Vec<(&str, &str)>, RequestError> {
    let Some(env) = config.pointer("/process/env") else {
        return Ok(Vec::new());
    };
    let arr = env
        .as_array()
        .ok_or_else(|| RequestError::Spec("process.env is not an array".into()))?;
    let mut out: Vec<(&str, &str)> = Vec::with_capacity(arr.len());
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(arr.len());
    for e in arr {
        let s = e
            .as_str()
            .ok_or_else(|| RequestError::Spec("process.env holds a non-string".into()))?;
        let (k, v) = s.split_once('=').unwrap_or((s, ""));
        match index.get(k) {
            Some(&i) => out[i].1 = v,
            None => {
                index.insert(k, out.len());
                out.push((k, v));
            }
        }
    }
    Ok(out)
}

fn get<'a>(env: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

fn is_privileged(config: &Value) -> bool {
    let caps = config
        .pointer("/process/capabilities/bounding")
        // OCI before 1.0.0-rc5 had a flat list.
        .or_else(|| config.pointer("/process/capabilities"));
    caps.and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|c| c == "CAP_SYS_ADMIN"))
}

/// Parse one device list item.
pub fn parse_device_id(item: &str, source: &str) -> Result<DeviceId, RequestError> {
    let bad = || RequestError::BadDevice {
        var: source.to_string(),
        item: item.chars().take(80).collect(),
    };
    if item == "all" {
        return Ok(DeviceId::All);
    }
    if !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit()) {
        return item.parse().map(DeviceId::Index).map_err(|_| bad());
    }
    let uuidish = crate::mig::is_uuid_body;
    if let Some(rest) = item.strip_prefix("GPU-") {
        return if uuidish(rest) {
            Ok(DeviceId::Uuid(item.to_string()))
        } else {
            Err(bad())
        };
    }
    if let Some(rest) = item.strip_prefix("MIG-") {
        // `MIG-GPU-<uuid>/<gi>/<ci>`, the form of drivers before R470.
        if crate::mig::parse_old_mig_uuid(item).is_some() {
            return Ok(DeviceId::MigUuid(item.to_string()));
        }
        return if uuidish(rest) {
            Ok(DeviceId::MigUuid(item.to_string()))
        } else {
            Err(bad())
        };
    }
    // `0:1`; a CDI name may hold a `:` too (`nvidia.com/gpu=0:1`, a MIG device's name).
    if item.contains(':') && !item.contains('=') {
        return crate::mig::parse_mig_index(item)
            .map(|(g, i)| DeviceId::Mig(g, i))
            .ok_or_else(bad);
    }
    gpuctk_cdi::names::parse_qualified_name(item)
        .map(DeviceId::Cdi)
        .map_err(|_| bad())
}

/// Collects device ids in order without repeats, in linear time, refusing more than
/// [`MAX_DEVICE_ITEMS`].
#[derive(Default)]
struct IdList {
    ids: Vec<DeviceId>,
    seen: HashSet<DeviceId>,
}

impl IdList {
    fn push(&mut self, id: DeviceId, source: &str) -> Result<(), RequestError> {
        if self.seen.contains(&id) {
            return Ok(());
        }
        if self.ids.len() >= MAX_DEVICE_ITEMS {
            return Err(RequestError::TooMany {
                var: source.to_string(),
                cap: MAX_DEVICE_ITEMS,
            });
        }
        self.seen.insert(id.clone());
        self.ids.push(id);
        Ok(())
    }
}

/// Parse a `NVIDIA_VISIBLE_DEVICES`-style value. Linear in its length, which is capped at
/// [`MAX_DEVICE_VALUE`] bytes and [`MAX_DEVICE_ITEMS`] distinct items.
pub fn parse_devices(value: &str, source: &str) -> Result<Devices, RequestError> {
    if value.len() > MAX_DEVICE_VALUE {
        return Err(RequestError::TooLong {
            var: source.to_string(),
            len: value.len(),
            cap: MAX_DEVICE_VALUE,
        });
    }
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() || items.contains(&"void") {
        return Ok(Devices::Unrequested);
    }
    // `none` (once or repeated, as the fuzzer tried) means no GPU but the driver.
    if items.iter().all(|i| *i == "none") {
        return Ok(Devices::NoGpus);
    }
    let mut ids = IdList::default();
    for item in items.iter().filter(|i| **i != "none") {
        ids.push(parse_device_id(item, source)?, source)?;
    }
    Ok(Devices::Ids(ids.ids))
}

/// Device requests in `cdi.k8s.io/*`-style annotations: the ids and the first key.
fn from_annotations(
    config: &Value,
    policy: &Policy,
) -> Result<Option<(Vec<DeviceId>, String)>, RequestError> {
    let Some(ann) = config.get("annotations").and_then(Value::as_object) else {
        return Ok(None);
    };
    let mut keys: Vec<&String> = ann
        .keys()
        .filter(|k| {
            policy
                .annotation_prefixes
                .iter()
                .any(|p| !p.is_empty() && k.starts_with(p.as_str()))
        })
        .collect();
    keys.sort();
    let mut ids = IdList::default();
    for k in &keys {
        let v = ann[k.as_str()].as_str().unwrap_or_default();
        if v.len() > MAX_DEVICE_VALUE {
            return Err(RequestError::TooLong {
                var: format!("annotation {k}"),
                len: v.len(),
                cap: MAX_DEVICE_VALUE,
            });
        }
        for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Ok(name) = gpuctk_cdi::names::parse_qualified_name(name) else {
                return Err(RequestError::BadAnnotation {
                    key: k.to_string(),
                    value: v.chars().take(200).collect(),
                });
            };
            ids.push(DeviceId::Cdi(name), k)?;
        }
    }
    if ids.ids.is_empty() {
        return Ok(None);
    }
    Ok(Some((ids.ids, keys[0].to_string())))
}

/// The IMEX channel ids of a `NVIDIA_IMEX_CHANNELS`-style value (or `--imex-channel`), in order
/// without repeats: `all` is not honoured (NVIDIA's env path ignores it too; a remark in
/// `remarks`). Capped as device lists are.
pub fn parse_imex_channels(
    value: &str,
    var: &str,
    remarks: &mut Vec<String>,
) -> Result<Vec<u32>, RequestError> {
    if value.len() > MAX_DEVICE_VALUE {
        return Err(RequestError::TooLong {
            var: var.to_string(),
            len: value.len(),
            cap: MAX_DEVICE_VALUE,
        });
    }
    let mut out: Vec<u32> = Vec::new();
    let mut seen = HashSet::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item == "all" {
            remarks.push(format!(
                "{var}: `all` ignored: name the IMEX channels (as NVIDIA's toolkit, which ignores it too)"
            ));
            continue;
        }
        let id = (item.bytes().all(|b| b.is_ascii_digit()))
            .then(|| item.parse::<u32>().ok())
            .flatten()
            .filter(|id| *id <= MAX_IMEX_CHANNEL)
            .ok_or_else(|| RequestError::BadChannel {
                var: var.to_string(),
                item: item.chars().take(80).collect(),
            })?;
        if seen.insert(id) {
            if out.len() >= MAX_DEVICE_ITEMS {
                return Err(RequestError::TooMany {
                    var: var.to_string(),
                    cap: MAX_DEVICE_ITEMS,
                });
            }
            out.push(id);
        }
    }
    Ok(out)
}

/// A `NVIDIA_MIG_*_DEVICES`-style value (or `--mig-config`, `--mig-monitor`): set to `all`,
/// unset or empty; anything else is refused, as the capabilities are global.
pub fn parse_mig(value: &str, var: &str) -> Result<bool, RequestError> {
    match value.trim() {
        "" => Ok(false),
        "all" => Ok(true),
        _ => Err(RequestError::BadMig {
            var: var.to_string(),
            value: value.chars().take(80).collect(),
        }),
    }
}

/// The IMEX channels asked by `/dev/null` mounts under `<DEVICE_MOUNT_DIR>/imex/`.
fn imex_from_mounts(config: &Value) -> Result<Option<Vec<u32>>, RequestError> {
    let Some(mounts) = config.get("mounts").and_then(Value::as_array) else {
        return Ok(None);
    };
    let prefix = format!("{DEVICE_MOUNT_DIR}/imex/");
    let mut ids: Vec<u32> = Vec::new();
    for m in mounts {
        let (Some(dst), Some(src)) = (
            m.get("destination").and_then(Value::as_str),
            m.get("source").and_then(Value::as_str),
        ) else {
            continue;
        };
        let Some(id) = dst.strip_prefix(&prefix).filter(|_| src == "/dev/null") else {
            continue;
        };
        for id in parse_imex_channels(id, "an IMEX device mount", &mut Vec::new())? {
            if !ids.contains(&id) {
                if ids.len() >= MAX_DEVICE_ITEMS {
                    return Err(RequestError::TooMany {
                        var: "IMEX device mounts".into(),
                        cap: MAX_DEVICE_ITEMS,
                    });
                }
                ids.push(id);
            }
        }
    }
    Ok((!ids.is_empty()).then_some(ids))
}

fn from_mounts(config: &Value) -> Result<Option<Vec<DeviceId>>, RequestError> {
    let Some(mounts) = config.get("mounts").and_then(Value::as_array) else {
        return Ok(None);
    };
    let prefix = format!("{DEVICE_MOUNT_DIR}/");
    let mut ids = IdList::default();
    for m in mounts {
        let (Some(dst), Some(src)) = (
            m.get("destination").and_then(Value::as_str),
            m.get("source").and_then(Value::as_str),
        ) else {
            continue;
        };
        if src != "/dev/null" {
            continue;
        }
        let Some(rest) = dst.strip_prefix(&prefix) else {
            continue;
        };
        let id = if let Some(cdi) = rest.strip_prefix("cdi/") {
            // cdi/<vendor>/<class>/<name> or cdi/<vendor>/<class>=<name>
            let name = match cdi.matches('/').count() {
                2 => {
                    let (kind, name) = cdi.rsplit_once('/').unwrap_or((cdi, ""));
                    format!("{kind}={name}")
                }
                _ => cdi.to_string(),
            };
            parse_device_id(&name, "a device mount")?
        } else if rest.starts_with("imex/") {
            continue;
        } else {
            parse_device_id(rest, "a device mount")?
        };
        ids.push(id, "device mounts")?;
    }
    Ok((!ids.ids.is_empty()).then_some(ids.ids))
}

/// Every place a container can ask for devices, before the policy has looked at them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    /// CDI annotations (ids, first key), as read by the shim only.
    pub annotations: Option<(Vec<DeviceId>, String)>,
    /// `/dev/null` mounts under [`DEVICE_MOUNT_DIR`].
    pub mounts: Option<Vec<DeviceId>>,
    /// The env var that asked (a `swarm-resource` name or `NVIDIA_VISIBLE_DEVICES`, or
    /// `CUDA_VERSION` for a legacy image that asks for every GPU by default), its value and
    /// what it asks.
    pub env: Option<(String, String, Devices)>,
    /// IMEX channels asked by `/dev/null` mounts under `<DEVICE_MOUNT_DIR>/imex/`.
    pub imex_mounts: Option<Vec<u32>>,
    /// IMEX channels asked by an env var or flag (its name, the channels).
    pub imex_env: Option<(String, Vec<u32>)>,
    /// Global MIG capabilities asked, each with the variable or flag that asked.
    pub mig: Vec<(String, MigCapability)>,
}

/// What the gate let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The devices.
    pub devices: Devices,
    /// The source they came from.
    pub source: Source,
    /// Requests refused by the policy, as warnings to log.
    pub refused: Vec<String>,
    /// The IMEX channels granted.
    pub imex_channels: Vec<u32>,
    /// The MIG capabilities granted.
    pub mig: Vec<MigCapability>,
    /// The MIG capabilities refused (the container is unprivileged), each with its variable:
    /// the prestart hook fails the container on them, as NVIDIA's does.
    pub mig_refused: Vec<(String, MigCapability)>,
}

/// The privilege gate, the one place that decides which request source a container's devices
/// come from (docs/security.md). In NVIDIA's order the first source that is present **and
/// accepted** wins: CDI annotations, then device mounts, then the env. A source the policy
/// refuses is dropped with a warning and never replaces, widens or adds to another's grant:
/// - annotations: only through the shim; from an unprivileged container only while
///   `accept-nvidia-visible-devices-envvar-when-unprivileged` is true (the default, NVIDIA's
///   behaviour) or `[gpuctk] accept-cdi-annotations-when-unprivileged` is true (for engines
///   that let only the device plugin set annotations);
/// - device mounts: only with `accept-nvidia-visible-devices-as-volume-mounts`;
/// - env (and a legacy CUDA image's implicit `all`): from privileged containers, or with
///   `accept-nvidia-visible-devices-envvar-when-unprivileged`.
///
/// IMEX channels follow the same rules as devices, mounts before the env, the first accepted
/// source alone (the engine's `--imex-channel` flag arrives as a privileged env request). The
/// global MIG capabilities are granted to privileged containers only, as NVIDIA's hook does.
pub fn gate(sources: Sources, policy: &Policy, privileged: bool, delivery: Delivery) -> Grant {
    let mut refused = Vec::new();
    let imex_channels = match sources.imex_mounts {
        Some(ids) if policy.accept_volume_mounts => ids,
        from_mounts => {
            if from_mounts.is_some() {
                refused.push(format!(
                "IMEX channel requests as mounts under {DEVICE_MOUNT_DIR}/imex ignored: accept-nvidia-visible-devices-as-volume-mounts is false"
                ));
            }
            match sources.imex_env {
                Some((_, ids)) if privileged || policy.accept_envvar_unprivileged => ids,
                Some((name, _)) => {
                    refused.push(format!(
                        "{name} ignored: the container is unprivileged and accept-nvidia-visible-devices-envvar-when-unprivileged is false"
                    ));
                    Vec::new()
                }
                None => Vec::new(),
            }
        }
    };
    let (mig, mig_refused) = if privileged {
        (sources.mig.iter().map(|(_, c)| *c).collect(), Vec::new())
    } else {
        (Vec::new(), sources.mig)
    };
    let (devices, source) = gate_devices(
        sources.annotations,
        sources.mounts,
        sources.env,
        policy,
        privileged,
        delivery,
        &mut refused,
    );
    Grant {
        devices,
        source,
        refused,
        imex_channels,
        mig,
        mig_refused,
    }
}

/// The device part of [`gate`]: the first present and accepted source.
fn gate_devices(
    annotations: Option<(Vec<DeviceId>, String)>,
    mounts: Option<Vec<DeviceId>>,
    env: Option<(String, String, Devices)>,
    policy: &Policy,
    privileged: bool,
    delivery: Delivery,
    refused: &mut Vec<String>,
) -> (Devices, Source) {
    if let Some((ids, key)) = annotations {
        if delivery != Delivery::Shim {
            refused.push(format!(
                "annotation {key} ignored: CDI annotations are read only by nvidia-container-runtime, not by this hook"
            ));
        } else if privileged
            || policy.accept_envvar_unprivileged
            || policy.accept_annotations_unprivileged
        {
            return (Devices::Ids(ids), Source::Annotation(key));
        } else {
            refused.push(format!(
                "annotation {key} ignored: the container is unprivileged, accept-nvidia-visible-devices-envvar-when-unprivileged is false and [gpuctk] accept-cdi-annotations-when-unprivileged is not set"
            ));
        }
    }
    if let Some(ids) = mounts {
        if policy.accept_volume_mounts {
            return (Devices::Ids(ids), Source::Mounts);
        }
        refused.push(format!(
            "device requests as mounts under {DEVICE_MOUNT_DIR} ignored: accept-nvidia-visible-devices-as-volume-mounts is false"
        ));
    }
    if let Some((name, value, devices)) = env {
        if devices == Devices::Unrequested {
            // `void` or empty asks for nothing: nothing to refuse.
        } else if privileged || policy.accept_envvar_unprivileged {
            return (devices, Source::Env(name));
        } else {
            let shown: String = value.chars().take(80).collect();
            refused.push(format!(
                "{name}={shown} ignored: the container is unprivileged and accept-nvidia-visible-devices-envvar-when-unprivileged is false"
            ));
        }
    }
    (Devices::Unrequested, Source::Nothing)
}

/// Read the request of the container whose `config.json` is `config`, as `delivery` sees it,
/// through the [`gate`]. Linear in the size of `config`.
pub fn parse_request(
    config: &Value,
    policy: &Policy,
    delivery: Delivery,
) -> Result<Request, RequestError> {
    let env = env_of(config)?;
    let privileged = is_privileged(config);
    let legacy_image =
        get(&env, "CUDA_VERSION").is_some() && get(&env, "NVIDIA_REQUIRE_CUDA").is_none();

    let annotations = match delivery {
        Delivery::Shim => from_annotations(config, policy)?,
        // Only to say it was ignored: a malformed one is not the hook's business.
        Delivery::PrestartHook => from_annotations(config, policy).ok().flatten(),
    };
    let names: Vec<&str> = policy
        .swarm_resource
        .iter()
        .map(String::as_str)
        .chain(std::iter::once("NVIDIA_VISIBLE_DEVICES"))
        .collect();
    let env_request = match names.iter().find_map(|n| get(&env, n).map(|v| (*n, v))) {
        Some((name, value)) => Some((
            name.to_string(),
            value.to_string(),
            parse_devices(value, name)?,
        )),
        // A legacy CUDA image that says nothing gets every GPU, as NVIDIA's toolkit does.
        None if legacy_image => Some((
            "CUDA_VERSION".to_string(),
            "all".to_string(),
            Devices::Ids(vec![DeviceId::All]),
        )),
        None => None,
    };
    let mut ignored = Vec::new();
    let imex_env = match get(&env, "NVIDIA_IMEX_CHANNELS") {
        Some(v) if policy.ignore_imex_channel_requests && !v.trim().is_empty() => {
            ignored.push(
                "NVIDIA_IMEX_CHANNELS ignored: features.ignore-imex-channel-requests is true"
                    .to_string(),
            );
            None
        }
        Some(v) => Some((
            "NVIDIA_IMEX_CHANNELS".to_string(),
            parse_imex_channels(v, "NVIDIA_IMEX_CHANNELS", &mut ignored)?,
        ))
        .filter(|(_, ids)| !ids.is_empty()),
        None => None,
    };
    let mut mig = Vec::new();
    for (var, cap) in [
        ("NVIDIA_MIG_CONFIG_DEVICES", MigCapability::Config),
        ("NVIDIA_MIG_MONITOR_DEVICES", MigCapability::Monitor),
    ] {
        if parse_mig(get(&env, var).unwrap_or(""), var)? {
            mig.push((var.to_string(), cap));
        }
    }
    let sources = Sources {
        annotations,
        mounts: from_mounts(config)?,
        env: env_request,
        imex_mounts: imex_from_mounts(config)?.filter(|_| !policy.ignore_imex_channel_requests),
        imex_env,
        mig,
    };
    let grant = gate(sources, policy, privileged, delivery);
    if let Some((var, cap)) = grant.mig_refused.first() {
        match delivery {
            // NVIDIA's hook refuses the container.
            Delivery::PrestartHook => {
                return Err(RequestError::MigUnprivileged {
                    var: var.clone(),
                    what: cap.name(),
                })
            }
            Delivery::Shim => {
                for (var, _) in &grant.mig_refused {
                    ignored.push(format!("{var} ignored: the container is unprivileged"));
                }
            }
        }
    }
    ignored.extend(grant.refused);
    let capabilities = capabilities_of(
        get(&env, "NVIDIA_DRIVER_CAPABILITIES"),
        legacy_image,
        &policy.supported_driver_capabilities,
        &mut ignored,
    );
    let mut requirements: Vec<(String, String)> = env
        .iter()
        .filter(|(k, v)| {
            k.starts_with("NVIDIA_REQUIRE_") && *k != "NVIDIA_REQUIRE_JETPACK" && !v.is_empty()
        })
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if legacy_image {
        if let Some(v) = get(&env, "CUDA_VERSION") {
            let mm: Vec<&str> = v.split('.').take(2).collect();
            if mm.len() == 2 && mm.iter().all(|p| p.parse::<u32>().is_ok()) {
                requirements.push(("CUDA_VERSION".into(), format!("cuda>={}.{}", mm[0], mm[1])));
            }
        }
    }
    let disable_require = policy.disable_require
        || get(&env, "NVIDIA_DISABLE_REQUIRE")
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "t" | "true"));
    Ok(Request {
        devices: grant.devices,
        source: grant.source,
        capabilities,
        requirements,
        disable_require,
        legacy_image,
        privileged,
        mig: grant.mig,
        imex_channels: grant.imex_channels,
        gated: gated_modes(&env),
        ignored,
    })
}

/// The gated modes `env` enables: `NVIDIA_<MODE>=enabled`, that exact value, as NVIDIA's
/// modifiers compare it.
fn gated_modes(env: &[(&str, &str)]) -> Vec<gpuctk_host::GatedMode> {
    gpuctk_host::GatedMode::ALL
        .into_iter()
        .filter(|m| get(env, m.env_var()) == Some("enabled"))
        .collect()
}

/// The capabilities a container gets, as NVIDIA's hook computes them: the env value (empty or
/// unset: `utility,compute`; unset on a legacy image: all), intersected with `supported`.
/// Unknown names and names outside `supported` are dropped with a remark in `remarks`.
fn capabilities_of(
    value: Option<&str>,
    legacy_image: bool,
    supported: &CapabilitySet,
    remarks: &mut Vec<String>,
) -> CapabilitySet {
    let asked = match value {
        Some(v) => {
            let (set, warnings) = CapabilitySet::parse_env(v);
            remarks.extend(warnings);
            set
        }
        None if legacy_image => CapabilitySet::all(),
        None => CapabilitySet::default_set(),
    };
    let granted = asked.intersection(supported);
    // Only what the container named itself is worth a remark; `all` and the defaults are
    // silently cut to the allowed set, as NVIDIA's.
    let named = value.is_some_and(|v| !v.is_empty() && !v.split(',').any(|i| i.trim() == "all"));
    if named {
        let dropped: Vec<&str> = asked
            .iter()
            .filter(|c| !granted.requested(*c))
            .map(|c| c.name())
            .collect();
        if !dropped.is_empty() {
            remarks.push(format!(
                "NVIDIA_DRIVER_CAPABILITIES: {} ignored: not in supported-driver-capabilities",
                dropped.join(",")
            ));
        }
    }
    granted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shim(config: &Value, policy: &Policy) -> Result<Request, RequestError> {
        parse_request(config, policy, Delivery::Shim)
    }

    fn cfg(env: &[&str]) -> Value {
        json!({"process": {"env": env, "capabilities": {"bounding": ["CAP_CHOWN"]}}})
    }

    fn req(env: &[&str]) -> Request {
        shim(&cfg(env), &Policy::default()).unwrap()
    }

    #[test]
    fn visible_devices_values() {
        assert_eq!(req(&[]).devices, Devices::Unrequested);
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES="]).devices,
            Devices::Unrequested
        );
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=void"]).devices,
            Devices::Unrequested
        );
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=0,void"]).devices,
            Devices::Unrequested
        );
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=none"]).devices,
            Devices::NoGpus
        );
        // Found by the visible_devices fuzzer: a repeated `none` was an empty device list.
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=none,, none"]).devices,
            Devices::NoGpus
        );
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=all"]).devices,
            Devices::Ids(vec![DeviceId::All])
        );
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=1, 3,GPU-abc,MIG-1f,0:1,nvidia.com/gpu=2,1"]).devices,
            Devices::Ids(vec![
                DeviceId::Index(1),
                DeviceId::Index(3),
                DeviceId::Uuid("GPU-abc".into()),
                DeviceId::MigUuid("MIG-1f".into()),
                DeviceId::Mig(0, 1),
                DeviceId::Cdi("nvidia.com/gpu=2".parse().unwrap()),
            ])
        );
        // The last definition wins, as for any env var.
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"]).devices,
            Devices::Unrequested
        );
    }

    #[test]
    fn mig_forms() {
        let id = |s: &str| parse_device_id(s, "X");
        assert_eq!(id("2:5").unwrap(), DeviceId::Mig(2, 5));
        assert_eq!(
            id("MIG-GPU-0986a80f-9ded-4980-0986-ab0f9ded4e99/7/0").unwrap(),
            DeviceId::MigUuid("MIG-GPU-0986a80f-9ded-4980-0986-ab0f9ded4e99/7/0".into())
        );
        // A MIG device's CDI name holds a colon.
        assert_eq!(
            id("nvidia.com/gpu=0:1").unwrap(),
            DeviceId::Cdi("nvidia.com/gpu=0:1".parse().unwrap())
        );
        for bad in [
            "MIG-GPU-abc/7",
            "MIG-GPU-abc/7/0/1",
            "MIG-GPU-abc/x/0",
            "MIG-a/b",
        ] {
            assert!(id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn garbage_names_the_variable_and_item() {
        let e = shim(
            &cfg(&["NVIDIA_VISIBLE_DEVICES=0,banana"]),
            &Policy::default(),
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("NVIDIA_VISIBLE_DEVICES: bad device \"banana\""),
            "{m}"
        );
        assert!(shim(
            &cfg(&["NVIDIA_VISIBLE_DEVICES=GPU-xyz"]),
            &Policy::default()
        )
        .is_err());
        assert!(shim(&cfg(&["NVIDIA_VISIBLE_DEVICES=1:x"]), &Policy::default()).is_err());
    }

    /// Issue 10: an unknown capability is a remark that names it, not a refusal.
    #[test]
    fn unknown_capability_is_a_remark() {
        let r = req(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=compute,warp",
        ]);
        assert_eq!(r.capabilities, CapabilitySet::parse("compute").unwrap());
        assert_eq!(r.ignored.len(), 1, "{:?}", r.ignored);
        assert!(
            r.ignored[0].contains("NVIDIA_DRIVER_CAPABILITIES: unknown capability \"warp\""),
            "{:?}",
            r.ignored
        );
        // A value with no item selects nothing, as NVIDIA's; an empty one the default.
        let r = req(&["NVIDIA_DRIVER_CAPABILITIES=,"]);
        assert!(r.capabilities.is_empty() && r.ignored.is_empty());
        let r = req(&["NVIDIA_DRIVER_CAPABILITIES="]);
        assert_eq!(r.capabilities, CapabilitySet::default_set());
    }

    #[test]
    fn supported_driver_capabilities_bound_every_request() {
        let p = Policy {
            supported_driver_capabilities: CapabilitySet::parse_supported("utility,video").unwrap(),
            ..Policy::default()
        };
        let get = |env: &[&str]| shim(&cfg(env), &p).unwrap();
        // The default (utility,compute) is cut silently.
        let r = get(&[]);
        assert_eq!(r.capabilities, CapabilitySet::parse("utility").unwrap());
        assert!(r.ignored.is_empty(), "{:?}", r.ignored);
        // `all`, and a legacy image's everything, mean everything allowed.
        let r = get(&["NVIDIA_DRIVER_CAPABILITIES=all"]);
        assert_eq!(
            r.capabilities,
            CapabilitySet::parse("utility,video").unwrap()
        );
        assert!(r.ignored.is_empty());
        let r = get(&["CUDA_VERSION=11.8.0"]);
        assert_eq!(
            r.capabilities,
            CapabilitySet::parse("utility,video").unwrap()
        );
        // Named ones outside the list are dropped with a remark naming them.
        let r = get(&["NVIDIA_DRIVER_CAPABILITIES=graphics,video,compute"]);
        assert_eq!(r.capabilities, CapabilitySet::parse("video").unwrap());
        assert_eq!(
            r.ignored,
            vec![
                "NVIDIA_DRIVER_CAPABILITIES: compute,graphics ignored: not in supported-driver-capabilities"
                    .to_string()
            ]
        );
        // video still brings the compute libraries, as libnvidia-container's --video does.
        assert!(r.capabilities.contains(gpuctk_host::Capability::Compute));
        // An empty allow-list gives nothing.
        let p = Policy {
            supported_driver_capabilities: CapabilitySet::empty(),
            ..Policy::default()
        };
        assert!(shim(&cfg(&[]), &p).unwrap().capabilities.is_empty());
    }

    #[test]
    fn disable_require_empties_the_active_requirements() {
        let r = req(&[
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
            "NVIDIA_REQUIRE_ARCH=arch>=8.0",
        ]);
        assert_eq!(r.active_requirements().len(), 2);
        let r = req(&["NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_DISABLE_REQUIRE=1"]);
        assert!(r.active_requirements().is_empty() && r.requirements.len() == 1);
        let p = Policy {
            disable_require: true,
            ..Policy::default()
        };
        let r = shim(&cfg(&["NVIDIA_REQUIRE_CUDA=cuda>=12.0"]), &p).unwrap();
        assert!(r.active_requirements().is_empty());
        // JETPACK is not a requirement for us either.
        assert!(req(&["NVIDIA_REQUIRE_JETPACK=csv-mounts=all"])
            .active_requirements()
            .is_empty());
    }

    #[test]
    fn legacy_cuda_image_gets_everything() {
        let r = req(&["CUDA_VERSION=11.8.0"]);
        assert!(r.legacy_image);
        assert_eq!(r.devices, Devices::Ids(vec![DeviceId::All]));
        assert_eq!(r.capabilities, CapabilitySet::all());
        assert_eq!(
            r.requirements,
            vec![("CUDA_VERSION".to_string(), "cuda>=11.8".to_string())]
        );
        let r = req(&["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
        assert!(!r.legacy_image);
        assert_eq!(r.devices, Devices::Unrequested);
        assert_eq!(
            r.requirements,
            vec![("NVIDIA_REQUIRE_CUDA".to_string(), "cuda>=12.4".to_string())]
        );
    }

    #[test]
    fn unprivileged_policy() {
        let policy = Policy {
            accept_envvar_unprivileged: false,
            ..Policy::default()
        };
        let r = shim(&cfg(&["NVIDIA_VISIBLE_DEVICES=all"]), &policy).unwrap();
        assert_eq!(r.devices, Devices::Unrequested);
        assert_eq!(r.ignored.len(), 1);
        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=all"]);
        c["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN"]);
        let r = shim(&c, &policy).unwrap();
        assert!(r.privileged);
        assert_eq!(r.devices, Devices::Ids(vec![DeviceId::All]));
    }

    #[test]
    fn annotations_and_mounts() {
        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=0"]);
        c["annotations"] =
            json!({"cdi.k8s.io/gpu": "nvidia.com/gpu=1,nvidia.com/gpu=GPU-x", "other": "x"});
        let r = shim(&c, &Policy::default()).unwrap();
        assert!(r.all_cdi());
        assert_eq!(r.source, Source::Annotation("cdi.k8s.io/gpu".into()));
        c["annotations"] = json!({"cdi.k8s.io/gpu": "notqualified"});
        assert!(matches!(
            shim(&c, &Policy::default()),
            Err(RequestError::BadAnnotation { .. })
        ));

        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=all"]);
        c["mounts"] = json!([
            {"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null"},
            {"destination": "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/2", "source": "/dev/null"},
            {"destination": "/proc", "source": "proc"}
        ]);
        let r = shim(&c, &Policy::default()).unwrap();
        assert_eq!(
            r.devices,
            Devices::Ids(vec![DeviceId::All]),
            "mounts ignored by default"
        );
        assert_eq!(r.ignored.len(), 1);
        let p = Policy {
            accept_volume_mounts: true,
            ..Policy::default()
        };
        let r = shim(&c, &p).unwrap();
        assert_eq!(
            r.devices,
            Devices::Ids(vec![
                DeviceId::Index(1),
                DeviceId::Cdi("nvidia.com/gpu=2".parse().unwrap())
            ])
        );
    }

    #[test]
    fn capabilities_and_require() {
        let r = req(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
            "NVIDIA_DISABLE_REQUIRE=true",
        ]);
        assert_eq!(r.capabilities, CapabilitySet::parse("utility").unwrap());
        assert!(r.disable_require);
        assert_eq!(req(&[]).capabilities, CapabilitySet::default_set());
    }

    fn restricted() -> Policy {
        Policy {
            accept_envvar_unprivileged: false,
            accept_volume_mounts: true,
            ..Policy::default()
        }
    }

    fn gpu1_mount(c: &mut Value) {
        c["mounts"] = json!([
            {"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null"}
        ]);
    }

    /// Regression (issue 8): a CDI annotation in an unprivileged container widened the device
    /// plugin's volume-mount grant to every GPU.
    #[test]
    fn annotation_cannot_widen_a_mount_grant() {
        let mut c = cfg(&[]);
        c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu=all"});
        gpu1_mount(&mut c);
        let r = shim(&c, &restricted()).unwrap();
        assert_eq!(r.devices, Devices::Ids(vec![DeviceId::Index(1)]));
        assert_eq!(r.source, Source::Mounts);
        assert!(
            r.ignored[0].contains("annotation cdi.k8s.io/x ignored"),
            "{:?}",
            r.ignored
        );
        // Without any mount, the annotation alone gets nothing either.
        let mut c = cfg(&[]);
        c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu=all"});
        assert_eq!(
            shim(&c, &restricted()).unwrap().devices,
            Devices::Unrequested
        );
        // An env request next to the grant does not widen it.
        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=all"]);
        gpu1_mount(&mut c);
        assert_eq!(
            shim(&c, &restricted()).unwrap().devices,
            Devices::Ids(vec![DeviceId::Index(1)])
        );
    }

    #[test]
    fn annotations_follow_privilege_and_opt_in() {
        let mut c = cfg(&[]);
        c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu=0"});
        c["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN"]);
        let r = shim(&c, &restricted()).unwrap();
        assert_eq!(
            r.devices,
            Devices::Ids(vec![DeviceId::Cdi("nvidia.com/gpu=0".parse().unwrap())])
        );
        let mut c = cfg(&[]);
        c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu=0"});
        let p = Policy {
            accept_annotations_unprivileged: true,
            ..restricted()
        };
        assert!(shim(&c, &p).unwrap().all_cdi());
        // The default policy accepts them, as NVIDIA's runtime does.
        assert!(shim(&c, &Policy::default()).unwrap().all_cdi());
    }

    /// Regression (issue 8): the legacy hook honoured annotations and widened `--gpus device=0`.
    #[test]
    fn prestart_hook_never_reads_annotations() {
        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=0"]);
        c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu=all"});
        let r = parse_request(&c, &Policy::default(), Delivery::PrestartHook).unwrap();
        assert_eq!(r.devices, Devices::Ids(vec![DeviceId::Index(0)]));
        assert_eq!(r.source, Source::Env("NVIDIA_VISIBLE_DEVICES".into()));
        // A malformed annotation is not the hook's business either.
        c["annotations"] = json!({"cdi.k8s.io/x": "garbage"});
        assert!(parse_request(&c, &Policy::default(), Delivery::PrestartHook).is_ok());
    }

    /// Every combination of source and policy: the grant is always one the policy accepts
    /// through the source it came from.
    #[test]
    fn no_source_widens_another() {
        for envvar in [false, true] {
            for mounts in [false, true] {
                for ann_opt in [false, true] {
                    for privileged in [false, true] {
                        for delivery in [Delivery::Shim, Delivery::PrestartHook] {
                            let p = Policy {
                                accept_envvar_unprivileged: envvar,
                                accept_volume_mounts: mounts,
                                accept_annotations_unprivileged: ann_opt,
                                ..Policy::default()
                            };
                            let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=2"]);
                            if privileged {
                                c["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN"]);
                            }
                            c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu=all"});
                            gpu1_mount(&mut c);
                            let r = parse_request(&c, &p, delivery).unwrap();
                            let ann_ok =
                                delivery == Delivery::Shim && (privileged || envvar || ann_opt);
                            let want = if ann_ok {
                                Source::Annotation("cdi.k8s.io/x".into())
                            } else if mounts {
                                Source::Mounts
                            } else if privileged || envvar {
                                Source::Env("NVIDIA_VISIBLE_DEVICES".into())
                            } else {
                                Source::Nothing
                            };
                            assert_eq!(
                                r.source, want,
                                "{p:?} privileged={privileged} {delivery:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// `NVIDIA_<MODE>=enabled`, that exact value, asks for a gated mode, in NVIDIA's order.
    #[test]
    fn gated_modes_from_the_env() {
        use gpuctk_host::GatedMode;
        let r = shim(
            &cfg(&[
                "NVIDIA_VISIBLE_DEVICES=0",
                "NVIDIA_GDRCOPY=enabled",
                "NVIDIA_GDS=enabled",
                "NVIDIA_MOFED=true",
                "NVIDIA_NVSWITCH=Enabled",
            ]),
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(r.gated, [GatedMode::Gds, GatedMode::Gdrcopy]);
    }

    /// `NVIDIA_MIG_*_DEVICES`: privileged containers only; the hook refuses an unprivileged one
    /// (as NVIDIA's), the shim drops it with a remark; only `all` is a value.
    #[test]
    fn mig_capabilities_are_for_privileged_containers() {
        let env = [
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_MIG_CONFIG_DEVICES=all",
            "NVIDIA_MIG_MONITOR_DEVICES=all",
        ];
        let mut c = cfg(&env);
        c["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN"]);
        for delivery in [Delivery::Shim, Delivery::PrestartHook] {
            let r = parse_request(&c, &Policy::default(), delivery).unwrap();
            assert_eq!(r.mig, [MigCapability::Config, MigCapability::Monitor]);
        }
        let c = cfg(&env);
        let e = parse_request(&c, &Policy::default(), Delivery::PrestartHook).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("NVIDIA_MIG_CONFIG_DEVICES: MIG config needs a privileged container"),
            "{e}"
        );
        let r = shim(&c, &Policy::default()).unwrap();
        assert!(r.mig.is_empty());
        assert!(r
            .ignored
            .iter()
            .any(|w| w == "NVIDIA_MIG_MONITOR_DEVICES ignored: the container is unprivileged"));
        // Empty is unset; anything but `all` is refused with the variable's name.
        assert!(req(&["NVIDIA_MIG_CONFIG_DEVICES="]).mig.is_empty());
        let e = shim(&cfg(&["NVIDIA_MIG_MONITOR_DEVICES=0"]), &Policy::default()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("NVIDIA_MIG_MONITOR_DEVICES=\"0\": only `all`"),
            "{e}"
        );
    }

    /// `NVIDIA_IMEX_CHANNELS` and `imex/<id>` mounts pass the gate as device requests do.
    #[test]
    fn imex_channels_follow_the_device_rules() {
        let r = req(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=3,1,3"]);
        assert_eq!(r.imex_channels, [3, 1]);
        // `all` is not honoured on the env path, as NVIDIA's.
        let r = req(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=all"]);
        assert!(r.imex_channels.is_empty());
        assert!(r.ignored[0].contains("`all` ignored"), "{:?}", r.ignored);
        for bad in ["x", "1048576", "-1", "1:2"] {
            let e = shim(
                &cfg(&[&format!("NVIDIA_IMEX_CHANNELS={bad}")]),
                &Policy::default(),
            )
            .unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("NVIDIA_IMEX_CHANNELS: bad IMEX channel"),
                "{e}"
            );
        }
        assert!(parse_imex_channels("1048575", "X", &mut Vec::new()).is_ok());
        // Unprivileged under a strict policy: only the accepted mounts count.
        let mut c = cfg(&["NVIDIA_IMEX_CHANNELS=5"]);
        c["mounts"] = json!([
            {"destination": "/var/run/nvidia-container-devices/imex/2", "source": "/dev/null"}
        ]);
        let r = shim(&c, &restricted()).unwrap();
        assert_eq!(r.imex_channels, [2]);
        let strict = Policy {
            accept_envvar_unprivileged: false,
            ..Policy::default()
        };
        let r = shim(&c, &strict).unwrap();
        assert!(r.imex_channels.is_empty());
        assert_eq!(r.ignored.len(), 2, "{:?}", r.ignored);
        // The default policy takes the env (mounts are not accepted).
        assert_eq!(shim(&c, &Policy::default()).unwrap().imex_channels, [5]);
        // features.ignore-imex-channel-requests drops both, with a remark.
        let ignore = Policy {
            ignore_imex_channel_requests: true,
            ..restricted()
        };
        let r = shim(&c, &ignore).unwrap();
        assert!(r.imex_channels.is_empty());
        assert!(
            r.ignored[0].contains("features.ignore-imex-channel-requests"),
            "{:?}",
            r.ignored
        );
    }

    /// Regression (issue 8): 150,000 distinct indices took 10 to 18 s (quadratic de-duplication).
    #[test]
    fn long_device_lists_are_linear_and_capped() {
        let many: Vec<String> = (0..150_000).map(|i| i.to_string()).collect();
        let value = many.join(",");
        let t = std::time::Instant::now();
        let e = parse_devices(&value, "NVIDIA_VISIBLE_DEVICES").unwrap_err();
        assert!(e.to_string().contains("bytes, more than"), "{e}");
        let value = many[..MAX_DEVICE_ITEMS + 10].join(",");
        let e = parse_devices(&value, "NVIDIA_VISIBLE_DEVICES").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("NVIDIA_VISIBLE_DEVICES: more than 4096"),
            "{e}"
        );
        let value = many[..MAX_DEVICE_ITEMS].join(",");
        assert!(parse_devices(&value, "NVIDIA_VISIBLE_DEVICES").is_ok());
        // Repeats cost nothing and count once.
        let value = vec!["0"; 10_000].join(",");
        assert_eq!(
            parse_devices(&value, "X").unwrap(),
            Devices::Ids(vec![DeviceId::Index(0)])
        );
        // Generous bound: the whole thing is a few milliseconds.
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        // 100,000 env entries with repeats are read in linear time.
        let env: Vec<String> = (0..100_000).map(|i| format!("V{}=x", i % 50_000)).collect();
        let c = json!({"process": {"env": env}});
        let t = std::time::Instant::now();
        shim(&c, &Policy::default()).unwrap();
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }
}
