//! A direct YAML writer for specs: the same bytes serde_norway (libyaml's emitter) writes, at a
//! fraction of the cost, for the specs `cdi generate` makes.
//!
//! libyaml analyses every scalar for its style; this writer takes only the scalars whose style is
//! certain (plain, or a run of digits single-quoted, as serde_norway quotes what would read back
//! as a number) and answers `None` for anything else, so [`crate::Spec::to_yaml`] falls back to
//! serde_norway for the whole document. The unit tests and the `cdi_yaml` fuzz target hold the
//! two writers to the same bytes.

use std::fmt::Write as _;

use crate::spec::{ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec};

/// `spec` as YAML, without the `---` marker, or `None` where a value needs libyaml's analysis.
pub(crate) fn spec(spec: &Spec) -> Option<String> {
    let mut w = Writer {
        out: String::with_capacity(256 + spec.devices.len() * 1024),
        item: false,
    };
    w.str_field(0, "cdiVersion", &spec.cdi_version)?;
    w.str_field(0, "kind", &spec.kind)?;
    w.map_field(0, "annotations", &spec.annotations)?;
    // Always written, as serde_norway does; an empty one would be `[]`.
    if spec.devices.is_empty() {
        return None;
    }
    w.seq(0, "devices", &spec.devices, |w, indent, d| {
        w.str_field(indent, "name", &d.name)?;
        w.map_field(indent, "annotations", &d.annotations)?;
        // Always written too; empty edits would be `{}`.
        if d.container_edits.is_empty() {
            return None;
        }
        w.block(indent, "containerEdits");
        w.edits(indent + 2, &d.container_edits)
    })?;
    if !spec.container_edits.is_empty() {
        w.block(0, "containerEdits");
        w.edits(2, &spec.container_edits)?;
    }
    Some(w.out)
}

struct Writer {
    out: String,
    /// The next key opens an item of a sequence: `- ` in place of its last two spaces.
    item: bool,
}

impl Writer {
    fn pad(&mut self, n: usize) {
        self.out.extend(std::iter::repeat_n(' ', n));
    }

    fn key(&mut self, indent: usize, key: &str) {
        if std::mem::take(&mut self.item) {
            self.pad(indent.saturating_sub(2));
            self.out.push_str("- ");
        } else {
            self.pad(indent);
        }
        self.out.push_str(key);
        self.out.push(':');
    }

    /// `key:` opening a block (a mapping or a sequence) on the lines below.
    fn block(&mut self, indent: usize, key: &str) {
        self.key(indent, key);
        self.out.push('\n');
    }

    fn str_field(&mut self, indent: usize, key: &str, value: &str) -> Option<()> {
        self.key(indent, key);
        self.out.push(' ');
        scalar(&mut self.out, value)?;
        self.out.push('\n');
        Some(())
    }

    fn opt_str(&mut self, indent: usize, key: &str, value: &Option<String>) -> Option<()> {
        match value {
            Some(v) => self.str_field(indent, key, v),
            None => Some(()),
        }
    }

    fn opt_num(&mut self, indent: usize, key: &str, value: Option<impl std::fmt::Display>) {
        if let Some(v) = value {
            self.key(indent, key);
            // Writing to a String cannot fail.
            let _ = writeln!(self.out, " {v}");
        }
    }

    fn map_field(
        &mut self,
        indent: usize,
        key: &str,
        map: &std::collections::BTreeMap<String, String>,
    ) -> Option<()> {
        if map.is_empty() {
            return Some(());
        }
        self.block(indent, key);
        for (k, v) in map {
            // libyaml writes a key longer than 128 as a complex key (`? k`).
            if k.len() > 128 {
                return None;
            }
            self.pad(indent + 2);
            scalar(&mut self.out, k)?;
            self.out.push_str(": ");
            scalar(&mut self.out, v)?;
            self.out.push('\n');
        }
        Some(())
    }

    /// A sequence of strings under `key`, its dashes at the key's indent (libyaml's indentless
    /// sequence in a mapping). Empty ones are skipped by the caller's `skip_serializing_if`.
    fn str_seq(&mut self, indent: usize, key: &str, items: &[String]) -> Option<()> {
        if items.is_empty() {
            return Some(());
        }
        self.block(indent, key);
        for s in items {
            self.pad(indent);
            self.out.push_str("- ");
            scalar(&mut self.out, s)?;
            self.out.push('\n');
        }
        Some(())
    }

    /// A sequence of mappings under `key`, skipped when empty (the callers'
    /// `skip_serializing_if`): each item's keys two deeper, its first key after the dash.
    fn seq<T>(
        &mut self,
        indent: usize,
        key: &str,
        items: &[T],
        item: impl Fn(&mut Self, usize, &T) -> Option<()>,
    ) -> Option<()> {
        if items.is_empty() {
            return Some(());
        }
        self.block(indent, key);
        for t in items {
            self.item = true;
            item(self, indent + 2, t)?;
        }
        Some(())
    }

    fn edits(&mut self, indent: usize, e: &ContainerEdits) -> Option<()> {
        self.str_seq(indent, "env", &e.env)?;
        self.seq(indent, "deviceNodes", &e.device_nodes, Self::device_node)?;
        self.seq(indent, "netDevices", &e.net_devices, Self::net_device)?;
        self.seq(indent, "hooks", &e.hooks, Self::hook)?;
        self.seq(indent, "mounts", &e.mounts, Self::mount)?;
        if let Some(rdt) = &e.intel_rdt {
            self.intel_rdt(indent, rdt)?;
        }
        if !e.additional_gids.is_empty() {
            self.block(indent, "additionalGids");
            for g in &e.additional_gids {
                self.pad(indent);
                let _ = writeln!(self.out, "- {g}");
            }
        }
        Some(())
    }

    fn device_node(&mut self, indent: usize, n: &DeviceNode) -> Option<()> {
        self.str_field(indent, "path", &n.path)?;
        self.opt_str(indent, "hostPath", &n.host_path)?;
        self.opt_str(indent, "type", &n.r#type)?;
        self.opt_num(indent, "major", n.major);
        self.opt_num(indent, "minor", n.minor);
        self.opt_num(indent, "fileMode", n.file_mode);
        self.opt_str(indent, "permissions", &n.permissions)?;
        self.opt_num(indent, "uid", n.uid);
        self.opt_num(indent, "gid", n.gid);
        Some(())
    }

    fn net_device(&mut self, indent: usize, n: &NetDevice) -> Option<()> {
        self.str_field(indent, "hostInterfaceName", &n.host_interface_name)?;
        self.str_field(indent, "name", &n.name)
    }

    fn hook(&mut self, indent: usize, h: &Hook) -> Option<()> {
        self.str_field(indent, "hookName", &h.hook_name)?;
        self.str_field(indent, "path", &h.path)?;
        self.str_seq(indent, "args", &h.args)?;
        self.str_seq(indent, "env", &h.env)?;
        self.opt_num(indent, "timeout", h.timeout);
        Some(())
    }

    fn mount(&mut self, indent: usize, m: &Mount) -> Option<()> {
        self.str_field(indent, "hostPath", &m.host_path)?;
        self.str_field(indent, "containerPath", &m.container_path)?;
        self.str_seq(indent, "options", &m.options)?;
        self.opt_str(indent, "type", &m.r#type)
    }

    fn intel_rdt(&mut self, indent: usize, r: &IntelRdt) -> Option<()> {
        // An empty mapping or an empty `schemata` is written in flow style (`{}`, `[]`).
        if *r == IntelRdt::default() || r.schemata.as_ref().is_some_and(Vec::is_empty) {
            return None;
        }
        self.block(indent, "intelRdt");
        let inner = indent + 2;
        self.opt_str(inner, "closID", &r.clos_id)?;
        self.opt_str(inner, "l3CacheSchema", &r.l3_cache_schema)?;
        self.opt_str(inner, "memBwSchema", &r.mem_bw_schema)?;
        self.opt_num(inner, "enableCMT", r.enable_cmt);
        self.opt_num(inner, "enableMBM", r.enable_mbm);
        if let Some(s) = &r.schemata {
            self.str_seq(inner, "schemata", s)?;
        }
        self.opt_num(inner, "enableMonitoring", r.enable_monitoring);
        Some(())
    }
}

/// Append `s` as serde_norway would write it, or `None` where that takes libyaml's analysis.
///
/// A run of ASCII digits would read back as a number, so serde_norway single-quotes it. Anything
/// else is written plain only when it is made of characters that never change a plain scalar's
/// meaning in block context, cannot read back as null, a bool or a number, does not open with an
/// indicator or a document marker and does not end in `:`.
fn scalar(out: &mut String, s: &str) -> Option<()> {
    let b = s.as_bytes();
    if !b.is_empty() && b.iter().all(u8::is_ascii_digit) {
        out.push('\'');
        out.push_str(s);
        out.push('\'');
        return Some(());
    }
    let first = *b.first()?;
    let fits = |c: &u8| c.is_ascii_alphanumeric() || b"/._-=:,+@".contains(c);
    let opens_plain = first.is_ascii_alphanumeric()
        || matches!(first, b'/' | b'.' | b'_')
        || (first == b'-' && b.len() > 1);
    if !b.iter().all(fits)
        || !opens_plain
        || b.ends_with(b":")
        || b.starts_with(b"---")
        || b.starts_with(b"...")
        || may_read_as_other(s)
    {
        return None;
    }
    out.push_str(s);
    Some(())
}

/// Whether serde_norway might read `s` back as something other than a string (null, a bool, an
/// integer in any radix, a float or an infinity): a superset of what it checks.
fn may_read_as_other(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    ["null", "true", "false", ".inf", ".nan"]
        .iter()
        .any(|w| unsigned.eq_ignore_ascii_case(w))
        || ["0x", "0o", "0b"].iter().any(|p| unsigned.starts_with(p))
        || unsigned.parse::<f64>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Device;

    fn norway(spec: &Spec) -> String {
        serde_norway::to_string(spec).unwrap()
    }

    fn with_string(s: &str) -> Vec<Spec> {
        let edits = |e: ContainerEdits| Device {
            name: "gpu".into(),
            annotations: Default::default(),
            container_edits: e,
        };
        let base = Spec {
            cdi_version: "0.6.0".into(),
            kind: "nvidia.com/gpu".into(),
            ..Default::default()
        };
        let mut specs = Vec::new();
        let one = |f: &dyn Fn(&mut Spec)| {
            let mut sp = base.clone();
            sp.devices.push(edits(ContainerEdits {
                env: vec!["A=1".into()],
                ..Default::default()
            }));
            f(&mut sp);
            sp
        };
        specs.push(one(&|sp| sp.devices[0].name = s.into()));
        specs.push(one(&|sp| sp.kind = s.into()));
        specs.push(one(&|sp| {
            sp.annotations.insert(s.into(), s.into());
        }));
        specs.push(one(&|sp| sp.devices[0].container_edits.env.push(s.into())));
        specs.push(one(&|sp| {
            sp.devices[0].container_edits.hooks.push(Hook {
                hook_name: s.into(),
                path: s.into(),
                args: vec![s.into(), "--link".into()],
                env: vec![s.into()],
                timeout: Some(30),
            })
        }));
        specs.push(one(&|sp| {
            sp.container_edits.mounts.push(Mount {
                host_path: s.into(),
                container_path: "/x".into(),
                options: vec![s.into()],
                r#type: Some(s.into()),
            })
        }));
        specs
    }

    /// Random strings over the characters that decide a scalar's style; wherever the direct
    /// writer answers, its bytes are serde_norway's, and it answers for the common shapes.
    #[test]
    fn every_answer_is_serde_norways_bytes() {
        let alphabet: Vec<char> = "0123456789abefilnostruxEINTFL.-+:/_=,@ #'\"~!&*?|>%`[]{}é\t"
            .chars()
            .collect();
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut answered = 0;
        for _ in 0..20_000 {
            let len = (next() % 8) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            for sp in with_string(&s) {
                if let Some(ours) = spec(&sp) {
                    answered += 1;
                    assert_eq!(ours, norway(&sp), "string {s:?}");
                }
            }
        }
        assert!(answered > 10_000, "only {answered} answered");
        for s in [
            "0",
            "17",
            "0123",
            "all",
            "GPU-4b2d6f1e-0c3a-4f8e-9d17-2a6b3c4d5e6f",
            "0:1",
            "../card0::/dev/dri/by-path/pci-0000:17:00.0-card",
            "--link",
            "NVIDIA_CTK_DEBUG=false",
            "570.124.06",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06",
            // YAML 1.1's booleans and the like, which serde_norway (YAML 1.2) writes plain.
            "y",
            "Yes",
            "NO",
            "on",
            "Off",
            "1_000",
        ] {
            for sp in with_string(s) {
                assert_eq!(spec(&sp).as_deref(), Some(norway(&sp).as_str()), "{s:?}");
            }
        }
        for s in [
            "", "true", "Null", "1e5", "-", "a:", "- x", "0x1f", "a b", "é", "---x",
        ] {
            assert_eq!(spec(&with_string(s)[0]), None, "{s:?}");
        }
    }

    #[test]
    fn every_field_is_written_as_serde_norway_writes_it() {
        let node = DeviceNode {
            path: "/dev/nvidia0".into(),
            host_path: Some("/run/nvidia/driver/dev/nvidia0".into()),
            r#type: Some("c".into()),
            major: Some(195),
            minor: Some(0),
            file_mode: Some(438),
            permissions: Some("rwm".into()),
            uid: Some(0),
            gid: Some(44),
        };
        let edits = ContainerEdits {
            env: vec!["NVIDIA_VISIBLE_DEVICES=void".into()],
            device_nodes: vec![node.clone(), node],
            net_devices: vec![NetDevice {
                host_interface_name: "eth1".into(),
                name: "net0".into(),
            }],
            hooks: vec![Hook {
                hook_name: "createContainer".into(),
                path: "/usr/bin/nvidia-cdi-hook".into(),
                args: vec!["nvidia-cdi-hook".into(), "update-ldcache".into()],
                env: vec!["NVIDIA_CTK_DEBUG=false".into()],
                timeout: Some(-3),
            }],
            mounts: vec![Mount {
                host_path: "/usr/bin/nvidia-smi".into(),
                container_path: "/usr/bin/nvidia-smi".into(),
                options: vec!["ro".into(), "nosuid".into(), "bind".into()],
                r#type: Some("bind".into()),
            }],
            intel_rdt: Some(IntelRdt {
                clos_id: Some("gpu".into()),
                enable_cmt: Some(true),
                schemata: Some(vec!["MB=50".into()]),
                enable_monitoring: Some(false),
                ..Default::default()
            }),
            additional_gids: vec![44, 109],
        };
        let sp = Spec {
            cdi_version: "1.1.0".into(),
            kind: "nvidia.com/gpu".into(),
            annotations: [("a.b/c".into(), "d".into()), ("e".into(), "7".into())].into(),
            devices: vec![
                Device {
                    name: "0".into(),
                    annotations: [("x".into(), "y".into())].into(),
                    container_edits: edits.clone(),
                },
                Device {
                    name: "all".into(),
                    annotations: Default::default(),
                    container_edits: edits.clone(),
                },
            ],
            container_edits: edits,
        };
        assert_eq!(spec(&sp).as_deref(), Some(norway(&sp).as_str()));
        let mut empty_rdt = sp.clone();
        empty_rdt.container_edits.intel_rdt = Some(IntelRdt::default());
        assert_eq!(spec(&empty_rdt), None);
        let mut no_edits = sp;
        no_edits.devices[0].container_edits = ContainerEdits::default();
        assert_eq!(spec(&no_edits), None);
    }
}
