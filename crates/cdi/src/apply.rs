//! Applying CDI container edits to an OCI `config.json`, edited as generic JSON so that key order
//! and every field we do not touch survive (runc and crun accept fields newer than our types).
//!
//! Semantics follow CDI's `ContainerEdits.Apply`, with these decisions where it is loose:
//! - env: an existing `KEY=` entry is replaced in place (the first one; later duplicates already
//!   in the config are left alone), others are appended.
//! - device nodes: missing `type`/`major`/`minor`/`fileMode` come from `stat` of `hostPath` (or
//!   `path`), following symlinks; a node with a `type` and a non-zero `major` (or type `p`) is
//!   taken as complete and the host is not touched, an absent `minor` meaning 0 (Go's `omitempty`
//!   drops `minor: 0`, NVIDIA's specs rely on it). An existing `linux.devices` entry with the same
//!   path is replaced. `b` and `c` nodes get a `linux.resources.devices` allow rule with access
//!   from `permissions` (default `rwm`); `u` nodes get a `c` rule (the cgroup knows only b/c, and
//!   without a rule a `u` node would stay behind the usual deny-all); `permissions: none` adds no
//!   rule. An identical allow rule already present is not added twice (the same GPU node often
//!   comes from both `gpu=0` and `gpu=all`).
//! - uid/gid of a node default to `process.user.uid/gid` when those are > 0 (CDI behaviour).
//! - mounts: an existing mount at the same destination is removed, the new one appended, and the
//!   list then stably sorted by the number of components of the destination, so a parent is
//!   mounted before its children (the CDI library NVIDIA's runtime vendors sorts with
//!   `sort.Stable` by depth alone; equal depths keep their order). Destinations are compared
//!   cleaned (`/x/` is `/x`) and every mount at one goes, where the CDI library removes the first
//!   byte-equal one only. A mount without `type` whose options hold `bind`/`rbind` gets
//!   `type: bind`.
//! - hooks are appended to `hooks.<hookName>`; entries already there (docker's
//!   `libnetwork-setkey`) are never touched.
//! - `additionalGids` go to `process.user.additionalGids`, skipping 0 and duplicates; `intelRdt`
//!   replaces `linux.intelRdt`; `netDevices` set `linux.netDevices[hostInterfaceName]`.
//! - Either every edit is applied or, on error, the config is left unchanged.

use foldhash::{HashSet, HashSetExt};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::spec::{ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice};
use crate::validate::HOOK_NAMES;

/// Why edits could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A field that must be an object is something else.
    #[error("config.json: {field} is not an object")]
    NotAnObject {
        /// Dotted path of the field, e.g. `linux.resources`.
        field: String,
    },
    /// A field that must be an array is something else.
    #[error("config.json: {field} is not an array")]
    NotAnArray {
        /// Dotted path of the field, e.g. `process.env`.
        field: String,
    },
    /// The host device could not be examined.
    #[error("cannot stat CDI host device {}: {source}", path.display())]
    HostDevice {
        /// The host path.
        path: PathBuf,
        /// The IO error.
        source: io::Error,
    },
    /// The host path exists but is no device node.
    #[error("CDI host device {} is not a device node (want a block or character device or a fifo)", path.display())]
    NotADevice {
        /// The host path.
        path: PathBuf,
    },
    /// The spec's `type` disagrees with the host.
    #[error("CDI device {path}: the spec says type {spec_type:?} but {} on the host is {host_type:?}; fix or drop the type", host_path.display())]
    TypeMismatch {
        /// The container path.
        path: String,
        /// The host path.
        host_path: PathBuf,
        /// Type in the spec.
        spec_type: String,
        /// Type on the host.
        host_type: String,
    },
    /// A hook name CDI does not know.
    #[error("unknown CDI hook name {name:?}; want one of {}", HOOK_NAMES.join(", "))]
    UnknownHook {
        /// The name given.
        name: String,
    },
}

fn needs_host_info(n: &DeviceNode) -> bool {
    let t = n.r#type.as_deref().unwrap_or("");
    !(!t.is_empty() && (t == "p" || n.major.unwrap_or(0) != 0))
}

/// Linux `dev_t` split (libc's `major`/`minor`, the one place the workspace does it).
fn split_dev(dev: u64) -> (i64, i64) {
    (i64::from(libc::major(dev)), i64::from(libc::minor(dev)))
}

/// Fill a node's missing `type`, `major`/`minor` and `fileMode` from the host device at
/// `hostPath` (or `path`). Does nothing when the node is already complete (see the module
/// docs), so callers can pre-fill specs and later apply them without touching the host.
pub fn fill_from_host(node: &mut DeviceNode) -> Result<(), ApplyError> {
    if !needs_host_info(node) {
        return Ok(());
    }
    let host = PathBuf::from(
        node.host_path
            .as_deref()
            .filter(|h| !h.is_empty())
            .unwrap_or(&node.path),
    );
    let md = std::fs::metadata(&host).map_err(|source| ApplyError::HostDevice {
        path: host.clone(),
        source,
    })?;
    let ft = md.file_type();
    let host_type = if ft.is_block_device() {
        "b"
    } else if ft.is_char_device() {
        "c"
    } else if ft.is_fifo() {
        "p"
    } else {
        return Err(ApplyError::NotADevice { path: host });
    };
    match node.r#type.as_deref().filter(|t| !t.is_empty()) {
        None => node.r#type = Some(host_type.to_string()),
        Some(t) => {
            let same = t == host_type || (t == "u" && host_type == "c");
            if !same {
                return Err(ApplyError::TypeMismatch {
                    path: node.path.clone(),
                    host_path: host,
                    spec_type: t.to_string(),
                    host_type: host_type.to_string(),
                });
            }
        }
    }
    if node.major.unwrap_or(0) == 0 && host_type != "p" {
        let (major, minor) = split_dev(md.rdev());
        node.major = Some(major);
        node.minor = Some(minor);
    }
    if node.file_mode.is_none() {
        node.file_mode = Some(md.mode() & 0o777);
    }
    Ok(())
}

fn child_obj<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a mut Map<String, Value>, ApplyError> {
    let v = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if v.is_null() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut().ok_or_else(|| ApplyError::NotAnObject {
        field: field.to_string(),
    })
}

fn child_arr<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a mut Vec<Value>, ApplyError> {
    let v = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if v.is_null() {
        *v = Value::Array(Vec::new());
    }
    v.as_array_mut().ok_or_else(|| ApplyError::NotAnArray {
        field: field.to_string(),
    })
}

fn env_key(e: &str) -> &str {
    e.split_once('=').map(|(k, _)| k).unwrap_or(e)
}

fn depth(dest: &str) -> usize {
    dest.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .count()
}

fn clean(dest: &str) -> String {
    let parts: Vec<&str> = dest
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let mut s = String::new();
    if dest.starts_with('/') {
        s.push('/');
    }
    s.push_str(&parts.join("/"));
    s
}

fn process_id(root: &Map<String, Value>, key: &str) -> Option<u32> {
    root.get("process")?
        .get("user")?
        .get(key)?
        .as_u64()
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| *v > 0)
}

fn strings(v: &[String]) -> Value {
    Value::Array(v.iter().cloned().map(Value::String).collect())
}

fn intel_rdt_value(r: &IntelRdt) -> Value {
    let mut m = Map::new();
    if let Some(v) = &r.clos_id {
        m.insert("closID".into(), Value::String(v.clone()));
    }
    if let Some(v) = &r.schemata {
        m.insert("schemata".into(), strings(v));
    }
    if let Some(v) = &r.l3_cache_schema {
        m.insert("l3CacheSchema".into(), Value::String(v.clone()));
    }
    if let Some(v) = &r.mem_bw_schema {
        m.insert("memBwSchema".into(), Value::String(v.clone()));
    }
    // OCI 1.3 folded CMT and MBM monitoring into one switch.
    let monitoring = r.enable_monitoring.or(match (r.enable_cmt, r.enable_mbm) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
    });
    if let Some(v) = monitoring {
        m.insert("enableMonitoring".into(), Value::Bool(v));
    }
    Value::Object(m)
}

/// Apply `edits` to an OCI config. On error the config is unchanged.
pub fn apply_edits(config: &mut Value, edits: &ContainerEdits) -> Result<(), ApplyError> {
    let mut work = config.clone();
    apply_edits_in_place(&mut work, edits)?;
    *config = work;
    Ok(())
}

/// [`apply_edits`] with no copy of the config: on error it may hold some of the edits, so it is
/// for a caller that drops the config then (the runtime shim, which writes nothing on an
/// error), and spares the copy of a whole spec on every create.
pub fn apply_edits_in_place(config: &mut Value, edits: &ContainerEdits) -> Result<(), ApplyError> {
    // Fill device nodes first: this is the only step that can fail for reasons outside the config.
    let mut nodes = edits.device_nodes.clone();
    for n in &mut nodes {
        fill_from_host(n)?;
    }
    if let Some(h) = edits
        .hooks
        .iter()
        .find(|h| !HOOK_NAMES.contains(&h.hook_name.as_str()))
    {
        return Err(ApplyError::UnknownHook {
            name: h.hook_name.clone(),
        });
    }
    let root = config
        .as_object_mut()
        .ok_or_else(|| ApplyError::NotAnObject {
            field: "the top level".into(),
        })?;
    if !edits.env.is_empty() {
        apply_env(root, &edits.env)?;
    }
    if !nodes.is_empty() {
        apply_device_nodes(root, &nodes)?;
    }
    if !edits.mounts.is_empty() {
        apply_mounts(root, &edits.mounts)?;
    }
    if !edits.hooks.is_empty() {
        apply_hooks(root, &edits.hooks)?;
    }
    if let Some(rdt) = &edits.intel_rdt {
        let linux = child_obj(root, "linux", "linux")?;
        linux.insert("intelRdt".into(), intel_rdt_value(rdt));
    }
    if !edits.net_devices.is_empty() {
        apply_net_devices(root, &edits.net_devices)?;
    }
    if edits.additional_gids.iter().any(|g| *g != 0) {
        apply_additional_gids(root, &edits.additional_gids)?;
    }
    Ok(())
}

/// `process.env`: an existing `KEY=` entry replaced in place, others appended.
fn apply_env(root: &mut Map<String, Value>, env_edits: &[String]) -> Result<(), ApplyError> {
    let process = child_obj(root, "process", "process")?;
    let env = child_arr(process, "env", "process.env")?;
    for e in env_edits {
        let key = env_key(e);
        let existing = env
            .iter()
            .position(|v| v.as_str().is_some_and(|s| env_key(s) == key));
        match existing {
            Some(i) => env[i] = Value::String(e.clone()),
            None => env.push(Value::String(e.clone())),
        }
    }
    Ok(())
}

/// `linux.devices` (an entry at the same path replaced) and each node's cgroup allow rule.
///
/// As if each node removed the entries at its path and appended itself, and then appended its
/// rule unless an equal one is there, in order: the config's entries at any node's path go, of
/// nodes with one path the last stays, and each distinct rule is appended once. In one pass
/// over each list, with sets of the paths and of the rules' canonical forms, where a scan per
/// node was quadratic (64 GPUs from a static spec: 195 nodes, about 1 ms of comparisons).
fn apply_device_nodes(
    root: &mut Map<String, Value>,
    nodes: &[DeviceNode],
) -> Result<(), ApplyError> {
    let default_uid = process_id(root, "uid");
    let default_gid = process_id(root, "gid");
    let linux = child_obj(root, "linux", "linux")?;
    // From the end, so the first seen of a path is the node that stays.
    let mut paths = HashSet::with_capacity(nodes.len());
    let mut added: Vec<Value> = nodes
        .iter()
        .rev()
        .filter(|n| paths.insert(n.path.as_str()))
        .map(|n| {
            Value::Object(device_entry(
                n,
                n.uid.or(default_uid),
                n.gid.or(default_gid),
            ))
        })
        .collect();
    added.reverse();
    let devices = child_arr(linux, "devices", "linux.devices")?;
    devices.retain(|d| {
        d.get("path")
            .and_then(Value::as_str)
            .is_none_or(|p| !paths.contains(p))
    });
    devices.extend(added);
    if nodes.iter().any(|n| rule_parts(n).is_some()) {
        let resources = child_obj(linux, "resources", "linux.resources")?;
        let rules = child_arr(resources, "devices", "linux.resources.devices")?;
        let mut seen: HashSet<Vec<u8>> = rules.iter().map(canonical).collect();
        for n in nodes {
            if rule_canonical(n).is_some_and(|key| seen.insert(key)) {
                rules.extend(cgroup_rule(n));
            }
        }
    }
    Ok(())
}

/// A JSON value as text with every object's keys in order: two values are equal
/// (`serde_json`'s `==`, which ignores key order) exactly when these are. Keys and scalars are
/// written by serde_json straight into the buffer (a copy and a formatter for each cost a
/// create of 64 GPUs a tenth of its instructions).
fn canonical(v: &Value) -> Vec<u8> {
    fn write(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Object(m) => {
                let mut entries: Vec<(&String, &Value)> = m.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    scalar(k, out);
                    out.push(b':');
                    write(v, out);
                }
                out.push(b'}');
            }
            Value::Array(a) => {
                out.push(b'[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(v, out);
                }
                out.push(b']');
            }
            other => scalar(other, out),
        }
    }
    fn scalar<T: serde::Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
        // Writing a string or a JSON scalar into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, v);
    }
    let mut out = Vec::with_capacity(64);
    write(v, &mut out);
    out
}

/// A node's `linux.devices` entry (its host facts already filled).
fn device_entry(n: &DeviceNode, uid: Option<u32>, gid: Option<u32>) -> Map<String, Value> {
    let t = n.r#type.clone().unwrap_or_default();
    // Sized for every key up front: each map is built once, and growing one rehashes it.
    let mut dev = Map::with_capacity(7);
    dev.insert("path".into(), Value::String(n.path.clone()));
    dev.insert("type".into(), Value::String(t.clone()));
    if t != "p" {
        dev.insert("major".into(), Value::from(n.major.unwrap_or(0)));
        dev.insert("minor".into(), Value::from(n.minor.unwrap_or(0)));
    }
    if let Some(m) = n.file_mode {
        dev.insert("fileMode".into(), Value::from(m));
    }
    if let Some(uid) = uid {
        dev.insert("uid".into(), Value::from(uid));
    }
    if let Some(gid) = gid {
        dev.insert("gid".into(), Value::from(gid));
    }
    dev
}

/// A node's `linux.resources.devices` allow rule: none for a FIFO or `permissions: none`; a `u`
/// node gets a `c` rule; access from `permissions`, `rwm` by default.
fn cgroup_rule(n: &DeviceNode) -> Option<Value> {
    let (cgroup_type, access) = rule_parts(n)?;
    let mut rule = Map::with_capacity(5);
    rule.insert("allow".into(), Value::Bool(true));
    rule.insert("type".into(), Value::String(cgroup_type.into()));
    rule.insert("major".into(), Value::from(n.major.unwrap_or(0)));
    rule.insert("minor".into(), Value::from(n.minor.unwrap_or(0)));
    rule.insert("access".into(), Value::String(access.into()));
    Some(Value::Object(rule))
}

/// The cgroup type and access of a node's rule ([`cgroup_rule`]), `None` where it has none.
fn rule_parts(n: &DeviceNode) -> Option<(&'static str, &str)> {
    let cgroup_type = match n.r#type.as_deref().unwrap_or_default() {
        "b" => "b",
        "c" | "u" => "c",
        _ => return None,
    };
    let access = match n.permissions.as_deref() {
        None | Some("") => "rwm",
        Some("none") => return None,
        Some(p) => p,
    };
    Some((cgroup_type, access))
}

/// [`canonical`] of a node's [`cgroup_rule`], written from the node: the rule's value is built
/// only when it is new (the canonical form of each built rule cost a create of 64 GPUs from a
/// static spec 0.36 M instructions).
fn rule_canonical(n: &DeviceNode) -> Option<Vec<u8>> {
    let (cgroup_type, access) = rule_parts(n)?;
    let mut out = Vec::with_capacity(64);
    // Keys in order, as `canonical` sorts them; scalars as serde_json writes them (writing
    // into a Vec cannot fail).
    out.extend_from_slice(br#"{"access":"#);
    let _ = serde_json::to_writer(&mut out, access);
    out.extend_from_slice(br#","allow":true,"major":"#);
    let _ = serde_json::to_writer(&mut out, &n.major.unwrap_or(0));
    out.extend_from_slice(br#","minor":"#);
    let _ = serde_json::to_writer(&mut out, &n.minor.unwrap_or(0));
    out.extend_from_slice(br#","type":"#);
    let _ = serde_json::to_writer(&mut out, cgroup_type);
    out.push(b'}');
    Some(out)
}

/// `mounts`: one at the same destination removed, the new one appended, parents first.
///
/// As if each edit removed the mounts at its destination and then appended itself, in order:
/// the config's mounts at any edit's destination go, and of edits with one destination the
/// last stays. One pass over the config's mounts, each destination cleaned once (an edit each
/// over every mount cost a create of 8 GPUs several hundred small allocations), and a set of
/// the edits' destinations rather than a scan of them per mount, which would be quadratic in a
/// spec's mounts.
fn apply_mounts(root: &mut Map<String, Value>, edits: &[Mount]) -> Result<(), ApplyError> {
    let mounts = child_arr(root, "mounts", "mounts")?;
    // From the end, so the first seen of a destination is the edit that stays.
    let mut dests = HashSet::with_capacity(edits.len());
    let mut added: Vec<Value> = edits
        .iter()
        .rev()
        .filter(|m| dests.insert(clean(&m.container_path)))
        .map(mount_entry)
        .collect();
    added.reverse();
    mounts.retain(|x| {
        x.get("destination")
            .and_then(Value::as_str)
            .is_none_or(|d| !dests.contains(&clean(d)))
    });
    mounts.extend(added);
    // Stable, by depth alone: mounts of equal depth keep their relative order, as the CDI
    // library NVIDIA's runtime vendors sorts them (`sort.Stable` by the count of `/`). The key
    // is a JSON object lookup and a scan of the path: computed once per mount rather than twice
    // per comparison, for one allocation of a (key, index) pair per mount.
    mounts.sort_by_cached_key(|m| {
        m.get("destination")
            .and_then(Value::as_str)
            .map_or(0, depth)
    });
    Ok(())
}

/// A mount's OCI entry; without a `type`, `bind`/`rbind` in its options makes it `bind`.
fn mount_entry(m: &Mount) -> Value {
    let mut o = Map::with_capacity(4);
    o.insert(
        "destination".into(),
        Value::String(m.container_path.clone()),
    );
    let ty = m.r#type.clone().filter(|t| !t.is_empty()).or_else(|| {
        m.options
            .iter()
            .any(|o| o == "bind" || o == "rbind")
            .then(|| "bind".to_string())
    });
    if let Some(t) = ty {
        o.insert("type".into(), Value::String(t));
    }
    o.insert("source".into(), Value::String(m.host_path.clone()));
    if !m.options.is_empty() {
        o.insert("options".into(), strings(&m.options));
    }
    Value::Object(o)
}

/// `hooks.<hookName>`: each hook appended, the entries already there left alone.
fn apply_hooks(root: &mut Map<String, Value>, edits: &[Hook]) -> Result<(), ApplyError> {
    let hooks = child_obj(root, "hooks", "hooks")?;
    for h in edits {
        let list = child_arr(hooks, &h.hook_name, &format!("hooks.{}", h.hook_name))?;
        let mut o = Map::with_capacity(4);
        o.insert("path".into(), Value::String(h.path.clone()));
        if !h.args.is_empty() {
            o.insert("args".into(), strings(&h.args));
        }
        if !h.env.is_empty() {
            o.insert("env".into(), strings(&h.env));
        }
        if let Some(t) = h.timeout {
            o.insert("timeout".into(), Value::from(t));
        }
        list.push(Value::Object(o));
    }
    Ok(())
}

/// `linux.netDevices[hostInterfaceName]`.
fn apply_net_devices(root: &mut Map<String, Value>, edits: &[NetDevice]) -> Result<(), ApplyError> {
    let linux = child_obj(root, "linux", "linux")?;
    let net = child_obj(linux, "netDevices", "linux.netDevices")?;
    for d in edits {
        let mut o = Map::new();
        o.insert("name".into(), Value::String(d.name.clone()));
        net.insert(d.host_interface_name.clone(), Value::Object(o));
    }
    Ok(())
}

/// `process.user.additionalGids`, skipping 0 and those already there.
fn apply_additional_gids(root: &mut Map<String, Value>, edits: &[u32]) -> Result<(), ApplyError> {
    let process = child_obj(root, "process", "process")?;
    let user = child_obj(process, "user", "process.user")?;
    let gids = child_arr(user, "additionalGids", "process.user.additionalGids")?;
    for &g in edits {
        if g != 0 && !gids.iter().any(|v| v.as_u64() == Some(u64::from(g))) {
            gids.push(Value::from(g));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 21): [`apply_device_nodes`] in one pass gives what applying the nodes
    /// one at a time gives (each removing the entries at its path, appending itself, then its
    /// rule unless an equal one is there): nodes sharing a path, rules equal but for their key
    /// order or their number's type, entries with no path, a FIFO and `permissions: none`.
    #[test]
    fn device_nodes_in_one_pass_as_one_at_a_time() {
        fn one_at_a_time(root: &mut Map<String, Value>, nodes: &[DeviceNode]) {
            let linux = root.get_mut("linux").unwrap().as_object_mut().unwrap();
            for n in nodes {
                let devices = linux.get_mut("devices").unwrap().as_array_mut().unwrap();
                devices.retain(|d| d.get("path").and_then(Value::as_str) != Some(n.path.as_str()));
                devices.push(Value::Object(device_entry(n, n.uid, n.gid)));
                if let Some(rule) = cgroup_rule(n) {
                    let rules = linux["resources"]["devices"].as_array_mut().unwrap();
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                }
            }
        }
        let node = |path: &str, t: &str, minor: i64, perms: Option<&str>| DeviceNode {
            path: path.into(),
            r#type: Some(t.into()),
            major: Some(195),
            minor: Some(minor),
            permissions: perms.map(Into::into),
            file_mode: Some(0o666),
            ..Default::default()
        };
        let config: Value = serde_json::from_str(
            r#"{"linux": {"devices": [{"path": "/dev/nvidia1", "type": "c", "major": 1, "minor": 1},
                {"type": "c"}, {"path": "/dev/null", "type": "c", "major": 1, "minor": 3}],
              "resources": {"devices": [{"allow": false, "access": "rwm"},
                {"access": "rwm", "minor": 0, "major": 195, "type": "c", "allow": true},
                {"allow": true, "type": "c", "major": 195.0, "minor": 2, "access": "rwm"}]}}}"#,
        )
        .unwrap();
        let nodes = [
            node("/dev/nvidia0", "c", 0, None),
            node("/dev/nvidia1", "c", 1, Some("rw")),
            node("/dev/nvidia2", "c", 2, None),
            node("/dev/nvidia1", "c", 1, None),
            node("/dev/fifo", "p", 0, None),
            node("/dev/nvidia3", "c", 3, Some("none")),
            node("/dev/nvidia0", "c", 0, None),
            node("/dev/nvidia4", "u", 4, Some("")),
        ];
        for len in 0..=nodes.len() {
            let (mut want, mut got) = (config.clone(), config.clone());
            one_at_a_time(want.as_object_mut().unwrap(), &nodes[..len]);
            apply_device_nodes(got.as_object_mut().unwrap(), &nodes[..len]).unwrap();
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&want).unwrap(),
                "{len} nodes"
            );
        }
    }
    use crate::spec::{Hook, Mount, NetDevice};
    use serde_json::json;

    fn node(path: &str, major: i64, minor: Option<i64>) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            r#type: Some("c".into()),
            major: Some(major),
            minor,
            file_mode: Some(438),
            ..Default::default()
        }
    }

    #[test]
    fn env_replaced_in_place() {
        let mut c = json!({"process": {"env": ["A=1", "NVIDIA_VISIBLE_DEVICES=all", "B=2"]}});
        let e = ContainerEdits {
            env: vec!["NVIDIA_VISIBLE_DEVICES=void".into(), "C=3".into()],
            ..Default::default()
        };
        apply_edits(&mut c, &e).unwrap();
        assert_eq!(
            c["process"]["env"],
            json!(["A=1", "NVIDIA_VISIBLE_DEVICES=void", "B=2", "C=3"])
        );
    }

    /// A rule's canonical form written from its node is the one `canonical` gives the rule
    /// built: for every type, permissions (none, empty, odd, needing escapes) and number.
    #[test]
    fn a_rules_canonical_form_is_written_from_its_node() {
        for t in [None, Some("c"), Some("b"), Some("u"), Some("p"), Some("x")] {
            for p in [
                None,
                Some(""),
                Some("none"),
                Some("r"),
                Some("rwm"),
                Some("w\"\\\u{1}é"),
            ] {
                for (major, minor) in [
                    (None, None),
                    (Some(195), Some(0)),
                    (Some(-1), Some(i64::MAX)),
                ] {
                    let n = DeviceNode {
                        path: "/dev/x".into(),
                        r#type: t.map(Into::into),
                        permissions: p.map(Into::into),
                        major,
                        minor,
                        ..Default::default()
                    };
                    assert_eq!(
                        rule_canonical(&n),
                        cgroup_rule(&n).map(|r| canonical(&r)),
                        "{t:?} {p:?} {major:?} {minor:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn devices_and_rules() {
        let mut c = json!({"process": {"user": {"uid": 1000, "gid": 0}},
            "linux": {"devices": [{"path": "/dev/nvidia0", "type": "c", "major": 1, "minor": 1}]}});
        let mut none = node("/dev/x", 10, Some(2));
        none.permissions = Some("none".into());
        let mut ro = node("/dev/y", 10, Some(3));
        ro.permissions = Some("r".into());
        let e = ContainerEdits {
            device_nodes: vec![
                node("/dev/nvidia0", 195, None),
                none,
                ro,
                node("/dev/nvidia0", 195, None),
            ],
            ..Default::default()
        };
        apply_edits(&mut c, &e).unwrap();
        let devs = c["linux"]["devices"].as_array().unwrap();
        assert_eq!(devs.len(), 3);
        assert_eq!(
            devs[2],
            json!({"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 438, "uid": 1000})
        );
        let rules = c["linux"]["resources"]["devices"].as_array().unwrap();
        assert_eq!(
            rules,
            &vec![
                json!({"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"}),
                json!({"allow": true, "type": "c", "major": 10, "minor": 3, "access": "r"}),
            ]
        );
    }

    #[test]
    fn canonical_ignores_key_order_and_nothing_else() {
        let a = json!({"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm", "x": [1, {"b": "\"", "a": null}]});
        let b = json!({"x": [1, {"a": null, "b": "\""}], "access": "rwm", "minor": 0, "major": 195, "type": "c", "allow": true});
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(
            String::from_utf8(canonical(&a)).unwrap(),
            r#"{"access":"rwm","allow":true,"major":195,"minor":0,"type":"c","x":[1,{"a":null,"b":"\""}]}"#
        );
        for other in [
            json!({"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rwm"}),
            json!({"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rw"}),
            json!({"allow": "true", "type": "c", "major": 195, "minor": 0, "access": "rwm"}),
        ] {
            assert_ne!(canonical(&other), canonical(&a));
        }
    }

    #[test]
    fn fill_from_host_reads_dev_null() {
        let mut n = DeviceNode {
            path: "/dev/null".into(),
            ..Default::default()
        };
        fill_from_host(&mut n).unwrap();
        assert_eq!(n.r#type.as_deref(), Some("c"));
        assert_eq!((n.major, n.minor), (Some(1), Some(3)));
        assert!(n.file_mode.is_some());
        let mut wrong = DeviceNode {
            path: "/dev/null".into(),
            r#type: Some("b".into()),
            ..Default::default()
        };
        let msg = fill_from_host(&mut wrong).unwrap_err().to_string();
        assert!(msg.contains("type \"b\""), "{msg}");
        let mut missing = DeviceNode {
            path: "/dev/x".into(),
            host_path: Some("/nonexistent/dev/x".into()),
            ..Default::default()
        };
        let msg = fill_from_host(&mut missing).unwrap_err().to_string();
        assert!(msg.contains("/nonexistent/dev/x"), "{msg}");
        // Complete nodes never touch the host, so a bogus host path is fine.
        let mut complete = node("/dev/z", 5, None);
        complete.host_path = Some("/nonexistent".into());
        fill_from_host(&mut complete).unwrap();
        let mut file = DeviceNode {
            path: "/etc/hostname".into(),
            host_path: Some(env!("CARGO_MANIFEST_DIR").to_string() + "/Cargo.toml"),
            ..Default::default()
        };
        assert!(matches!(
            fill_from_host(&mut file),
            Err(ApplyError::NotADevice { .. })
        ));
    }

    #[test]
    fn mounts_replaced_and_sorted() {
        let mut c = json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
            {"destination": "/usr/lib/x", "source": "/old", "unknown": 1},
        ]});
        let e = ContainerEdits {
            mounts: vec![
                Mount {
                    host_path: "/h/x".into(),
                    container_path: "/usr/lib/x/".into(),
                    options: vec!["ro".into(), "rbind".into()],
                    r#type: None,
                },
                Mount {
                    host_path: "/h/sys".into(),
                    container_path: "/sys".into(),
                    options: vec![],
                    r#type: None,
                },
            ],
            ..Default::default()
        };
        apply_edits(&mut c, &e).unwrap();
        let dests: Vec<&str> = c["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap())
            .collect();
        assert_eq!(dests, ["/proc", "/sys", "/dev/pts", "/usr/lib/x/"]);
        assert_eq!(
            c["mounts"][3],
            json!({"destination": "/usr/lib/x/", "type": "bind", "source": "/h/x", "options": ["ro", "rbind"]})
        );
        assert!(c["mounts"][1].get("type").is_none());
    }

    /// Regression (issue 21): the mounts come out as applying each edit in turn gave them
    /// (its destination's mounts removed, itself appended), now done in one pass: with edits
    /// that share a destination (the last stays) and destinations written differently.
    #[test]
    fn mounts_as_each_edit_in_turn() {
        let dests = ["/x", "/x/", "/./x", "/y", "/a/b", "/a//b/", "/z", "/"];
        let mount = |i: usize, d: &str| Mount {
            host_path: format!("/h/{i}"),
            container_path: d.into(),
            options: vec![],
            r#type: None,
        };
        // Each edit in turn, as before.
        let in_turn = |config: &Value, edits: &[Mount]| {
            let mut mounts = config["mounts"].as_array().unwrap().clone();
            for m in edits {
                let dest = clean(&m.container_path);
                mounts.retain(|x| clean(x["destination"].as_str().unwrap()) != dest);
                mounts.push(mount_entry(m));
            }
            mounts.sort_by_key(|m| depth(m["destination"].as_str().unwrap()));
            mounts
        };
        for seed in 0..200usize {
            let pick = |k: usize| dests[(seed * 7 + k * 13 + seed / 3) % dests.len()];
            let config = json!({"mounts": (0..seed % 5)
                .map(|k| json!({"destination": pick(k + 11), "source": "old"}))
                .collect::<Vec<_>>()});
            let edits: Vec<Mount> = (0..1 + seed % 6).map(|k| mount(k, pick(k))).collect();
            let mut c = config.clone();
            apply_edits(
                &mut c,
                &ContainerEdits {
                    mounts: edits.clone(),
                    ..Default::default()
                },
            )
            .unwrap();
            assert_eq!(
                c["mounts"].as_array().unwrap(),
                &in_turn(&config, &edits),
                "{config} {edits:?}"
            );
        }
    }

    #[test]
    fn hooks_gids_rdt_netdevs() {
        let mut c = json!({"hooks": {"prestart": [{"path": "/usr/bin/docker", "args": ["libnetwork-setkey"]}]},
            "process": {"user": {"uid": 0, "gid": 0, "additionalGids": [5]}}});
        let e = ContainerEdits {
            hooks: vec![
                Hook {
                    hook_name: "prestart".into(),
                    path: "/bin/a".into(),
                    timeout: Some(5),
                    ..Default::default()
                },
                Hook {
                    hook_name: "createContainer".into(),
                    path: "/bin/b".into(),
                    args: vec!["b".into()],
                    env: vec!["X=1".into()],
                    ..Default::default()
                },
            ],
            additional_gids: vec![0, 5, 44, 44],
            intel_rdt: Some(IntelRdt {
                clos_id: Some("g".into()),
                enable_cmt: Some(true),
                ..Default::default()
            }),
            net_devices: vec![NetDevice {
                host_interface_name: "eth1".into(),
                name: "net1".into(),
            }],
            ..Default::default()
        };
        apply_edits(&mut c, &e).unwrap();
        assert_eq!(c["hooks"]["prestart"].as_array().unwrap().len(), 2);
        assert_eq!(
            c["hooks"]["prestart"][0]["args"],
            json!(["libnetwork-setkey"])
        );
        assert_eq!(
            c["hooks"]["prestart"][1],
            json!({"path": "/bin/a", "timeout": 5})
        );
        assert_eq!(
            c["hooks"]["createContainer"][0],
            json!({"path": "/bin/b", "args": ["b"], "env": ["X=1"]})
        );
        assert_eq!(c["process"]["user"]["additionalGids"], json!([5, 44]));
        assert_eq!(
            c["linux"]["intelRdt"],
            json!({"closID": "g", "enableMonitoring": true})
        );
        assert_eq!(c["linux"]["netDevices"], json!({"eth1": {"name": "net1"}}));
    }

    #[test]
    fn errors_name_the_field_and_leave_config_alone() {
        let mut c = json!({"process": {"env": "PATH=/bin"}, "x": 1});
        let before = c.clone();
        let e = ContainerEdits {
            env: vec!["A=1".into()],
            ..Default::default()
        };
        let msg = apply_edits(&mut c, &e).unwrap_err().to_string();
        assert_eq!(msg, "config.json: process.env is not an array");
        assert_eq!(c, before);
        let mut c = json!({"linux": {"resources": []}});
        let e = ContainerEdits {
            device_nodes: vec![node("/dev/a", 1, Some(1))],
            ..Default::default()
        };
        let msg = apply_edits(&mut c, &e).unwrap_err().to_string();
        assert_eq!(msg, "config.json: linux.resources is not an object");
        let mut c = json!([]);
        assert!(apply_edits(&mut c, &e).is_err());
        let bad_hook = ContainerEdits {
            hooks: vec![Hook {
                hook_name: "later".into(),
                path: "/x".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut c = json!({});
        assert!(matches!(
            apply_edits(&mut c, &bad_hook),
            Err(ApplyError::UnknownHook { .. })
        ));
        assert_eq!(c, json!({}));
    }

    #[test]
    fn creates_missing_objects() {
        let mut c = json!({"ociVersion": "1.0.2", "linux": null});
        let e = ContainerEdits {
            device_nodes: vec![node("/dev/a", 1, Some(1))],
            ..Default::default()
        };
        apply_edits(&mut c, &e).unwrap();
        assert_eq!(c["linux"]["resources"]["devices"][0]["major"], 1);
        let keys: Vec<&String> = c.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["ociVersion", "linux"]);
    }

    #[test]
    fn dev_split() {
        // makedev(195, 255) and a large minor from the extended encoding.
        assert_eq!(split_dev((195 << 8) | 255), (195, 255));
        let dev = (511u64 << 8) | ((0x12345u64 & !0xff) << 12) | (0x12345 & 0xff);
        assert_eq!(split_dev(dev), (511, 0x12345));
    }
}
