//! The `Request`: what a container asks for, read from its OCI `config.json` (env, annotations,
//! mounts, capabilities) under the configured policy, as NVIDIA's toolkit reads it.
//!
//! Pure: a JSON value in, a typed request or an error that names the variable out.

use serde_json::Value;

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
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            accept_envvar_unprivileged: true,
            accept_volume_mounts: false,
            swarm_resource: Vec::new(),
            annotation_prefixes: vec!["cdi.k8s.io/".to_string()],
            disable_require: false,
        }
    }
}

/// One requested device.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    Cdi(String),
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceId::All => f.write_str("all"),
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::Uuid(u) | DeviceId::MigUuid(u) | DeviceId::Cdi(u) => f.write_str(u),
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
    /// `NVIDIA_DRIVER_CAPABILITIES`.
    pub capabilities: CapabilitySet,
    /// `NVIDIA_REQUIRE_*` constraints (name, expression), plus `cuda>=X.Y` for legacy images.
    pub requirements: Vec<(String, String)>,
    /// `NVIDIA_DISABLE_REQUIRE` or the `disable-require` key.
    pub disable_require: bool,
    /// A CUDA image from before `NVIDIA_REQUIRE_CUDA` (`CUDA_VERSION` only).
    pub legacy_image: bool,
    /// The container has `CAP_SYS_ADMIN` in its bounding set, NVIDIA's test for privileged.
    pub privileged: bool,
    /// Requests dropped by policy, as warnings to log.
    pub ignored: Vec<String>,
}

impl Request {
    /// Whether the container asked for anything at all.
    pub fn wants_gpus(&self) -> bool {
        self.devices != Devices::Unrequested
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
    /// `NVIDIA_DRIVER_CAPABILITIES` is malformed.
    #[error(transparent)]
    Capabilities(#[from] CapabilityError),
    /// A field of config.json has the wrong type.
    #[error("config.json: {0}")]
    Spec(String),
}

/// The container's env as (name, value), later entries overriding earlier ones.
fn env_of(config: &Value) -> Result<Vec<(String, String)>, RequestError> {
    let Some(env) = config.pointer("/process/env") else {
        return Ok(Vec::new());
    };
    let arr = env
        .as_array()
        .ok_or_else(|| RequestError::Spec("process.env is not an array".into()))?;
    let mut out: Vec<(String, String)> = Vec::new();
    for e in arr {
        let s = e
            .as_str()
            .ok_or_else(|| RequestError::Spec("process.env holds a non-string".into()))?;
        let (k, v) = s.split_once('=').unwrap_or((s, ""));
        out.retain(|(ek, _)| ek != k);
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
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
        item: item.to_string(),
    };
    if item == "all" {
        return Ok(DeviceId::All);
    }
    if !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit()) {
        return item.parse().map(DeviceId::Index).map_err(|_| bad());
    }
    let uuidish =
        |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if let Some(rest) = item.strip_prefix("GPU-") {
        return if uuidish(rest) {
            Ok(DeviceId::Uuid(item.to_string()))
        } else {
            Err(bad())
        };
    }
    if let Some(rest) = item.strip_prefix("MIG-") {
        return if uuidish(rest) {
            Ok(DeviceId::MigUuid(item.to_string()))
        } else {
            Err(bad())
        };
    }
    if let Some((g, i)) = item.split_once(':') {
        if let (Ok(g), Ok(i)) = (g.parse(), i.parse()) {
            return Ok(DeviceId::Mig(g, i));
        }
        return Err(bad());
    }
    if gpuctk_cdi::names::parse_qualified_name(item).is_ok() {
        return Ok(DeviceId::Cdi(item.to_string()));
    }
    Err(bad())
}

/// Parse a `NVIDIA_VISIBLE_DEVICES`-style value.
pub fn parse_devices(value: &str, source: &str) -> Result<Devices, RequestError> {
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() || items.contains(&"void") {
        return Ok(Devices::Unrequested);
    }
    if items == ["none"] {
        return Ok(Devices::NoGpus);
    }
    let mut ids = Vec::new();
    for item in items.iter().filter(|i| **i != "none") {
        let id = parse_device_id(item, source)?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(Devices::Ids(ids))
}

fn from_annotations(
    config: &Value,
    policy: &Policy,
) -> Result<Option<(Devices, Source)>, RequestError> {
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
    let mut ids = Vec::new();
    for k in &keys {
        let v = ann[k.as_str()].as_str().unwrap_or_default();
        for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if gpuctk_cdi::names::parse_qualified_name(name).is_err() {
                return Err(RequestError::BadAnnotation {
                    key: k.to_string(),
                    value: v.to_string(),
                });
            }
            let id = DeviceId::Cdi(name.to_string());
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    if ids.is_empty() {
        return Ok(None);
    }
    Ok(Some((
        Devices::Ids(ids),
        Source::Annotation(keys[0].to_string()),
    )))
}

fn from_mounts(config: &Value) -> Result<Option<Devices>, RequestError> {
    let Some(mounts) = config.get("mounts").and_then(Value::as_array) else {
        return Ok(None);
    };
    let prefix = format!("{DEVICE_MOUNT_DIR}/");
    let mut ids = Vec::new();
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
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok((!ids.is_empty()).then_some(Devices::Ids(ids)))
}

/// Read the request of the container whose `config.json` is `config`.
pub fn parse_request(config: &Value, policy: &Policy) -> Result<Request, RequestError> {
    let env = env_of(config)?;
    let privileged = is_privileged(config);
    let legacy_image =
        get(&env, "CUDA_VERSION").is_some() && get(&env, "NVIDIA_REQUIRE_CUDA").is_none();
    let mut ignored = Vec::new();

    let mut found = from_annotations(config, policy)?;
    if found.is_none() {
        match from_mounts(config)? {
            Some(d) if policy.accept_volume_mounts => found = Some((d, Source::Mounts)),
            Some(_) => ignored.push(format!(
                "device requests as mounts under {DEVICE_MOUNT_DIR} ignored: accept-nvidia-visible-devices-as-volume-mounts is false"
            )),
            None => {}
        }
    }
    if found.is_none() {
        let names: Vec<&str> = policy
            .swarm_resource
            .iter()
            .map(String::as_str)
            .chain(std::iter::once("NVIDIA_VISIBLE_DEVICES"))
            .collect();
        let var = names.iter().find_map(|n| get(&env, n).map(|v| (*n, v)));
        let (devices, source) = match var {
            Some((name, value)) => (parse_devices(value, name)?, Source::Env(name.to_string())),
            // A legacy CUDA image that says nothing gets every GPU, as NVIDIA's toolkit does.
            None if legacy_image => (
                Devices::Ids(vec![DeviceId::All]),
                Source::Env("CUDA_VERSION".into()),
            ),
            None => (Devices::Unrequested, Source::Nothing),
        };
        if devices != Devices::Unrequested && !privileged && !policy.accept_envvar_unprivileged {
            ignored.push(format!(
                "{source}={} ignored: the container is unprivileged and accept-nvidia-visible-devices-envvar-when-unprivileged is false",
                var.map(|(_, v)| v).unwrap_or("all")
            ));
            found = Some((Devices::Unrequested, Source::Nothing));
        } else {
            found = Some((devices, source));
        }
    }
    let (devices, source) = found.unwrap_or((Devices::Unrequested, Source::Nothing));

    let capabilities = match get(&env, "NVIDIA_DRIVER_CAPABILITIES") {
        Some(v) => CapabilitySet::parse(v)?,
        None if legacy_image => CapabilitySet::all(),
        None => CapabilitySet::default_set(),
    };
    let mut requirements: Vec<(String, String)> = env
        .iter()
        .filter(|(k, v)| {
            k.starts_with("NVIDIA_REQUIRE_") && k != "NVIDIA_REQUIRE_JETPACK" && !v.is_empty()
        })
        .map(|(k, v)| (k.clone(), v.clone()))
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
        devices,
        source,
        capabilities,
        requirements,
        disable_require,
        legacy_image,
        privileged,
        ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(env: &[&str]) -> Value {
        json!({"process": {"env": env, "capabilities": {"bounding": ["CAP_CHOWN"]}}})
    }

    fn req(env: &[&str]) -> Request {
        parse_request(&cfg(env), &Policy::default()).unwrap()
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
                DeviceId::Cdi("nvidia.com/gpu=2".into()),
            ])
        );
        // The last definition wins, as for any env var.
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"]).devices,
            Devices::Unrequested
        );
    }

    #[test]
    fn garbage_names_the_variable_and_item() {
        let e = parse_request(
            &cfg(&["NVIDIA_VISIBLE_DEVICES=0,banana"]),
            &Policy::default(),
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("NVIDIA_VISIBLE_DEVICES: bad device \"banana\""),
            "{m}"
        );
        assert!(parse_request(
            &cfg(&["NVIDIA_VISIBLE_DEVICES=GPU-xyz"]),
            &Policy::default()
        )
        .is_err());
        assert!(parse_request(&cfg(&["NVIDIA_VISIBLE_DEVICES=1:x"]), &Policy::default()).is_err());
        let e = parse_request(
            &cfg(&["NVIDIA_DRIVER_CAPABILITIES=compute,warp"]),
            &Policy::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("NVIDIA_DRIVER_CAPABILITIES"));
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
        let r = parse_request(&cfg(&["NVIDIA_VISIBLE_DEVICES=all"]), &policy).unwrap();
        assert_eq!(r.devices, Devices::Unrequested);
        assert_eq!(r.ignored.len(), 1);
        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=all"]);
        c["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN"]);
        let r = parse_request(&c, &policy).unwrap();
        assert!(r.privileged);
        assert_eq!(r.devices, Devices::Ids(vec![DeviceId::All]));
    }

    #[test]
    fn annotations_and_mounts() {
        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=0"]);
        c["annotations"] =
            json!({"cdi.k8s.io/gpu": "nvidia.com/gpu=1,nvidia.com/gpu=GPU-x", "other": "x"});
        let r = parse_request(&c, &Policy::default()).unwrap();
        assert!(r.all_cdi());
        assert_eq!(r.source, Source::Annotation("cdi.k8s.io/gpu".into()));
        c["annotations"] = json!({"cdi.k8s.io/gpu": "notqualified"});
        assert!(matches!(
            parse_request(&c, &Policy::default()),
            Err(RequestError::BadAnnotation { .. })
        ));

        let mut c = cfg(&["NVIDIA_VISIBLE_DEVICES=all"]);
        c["mounts"] = json!([
            {"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null"},
            {"destination": "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/2", "source": "/dev/null"},
            {"destination": "/proc", "source": "proc"}
        ]);
        let r = parse_request(&c, &Policy::default()).unwrap();
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
        let r = parse_request(&c, &p).unwrap();
        assert_eq!(
            r.devices,
            Devices::Ids(vec![
                DeviceId::Index(1),
                DeviceId::Cdi("nvidia.com/gpu=2".into())
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
}
