//! Finding a container's device cgroup and, on cgroup v1, allowing device
//! nodes in it (`devices.allow`).
//!
//! The container's membership is read from `<proc>/<pid>/cgroup`; the
//! hierarchy's mount point from `<proc>/self/mountinfo`, that is, as *this*
//! process sees it. A prestart hook and `nvidia-container-cli configure`
//! run in the host's mount namespace, where the files written below are
//! looked up, so our own view is the one that matters (libnvidia-container
//! reads its parent's, which is the same namespace when run by a runtime).
//!
//! The hierarchy that holds the policy is the one the runtime could use: a
//! v1 `devices` hierarchy mounted where this mount namespace reaches it, else
//! the unified (v2) one. A process has a `devices` line in its cgroup file
//! whenever the controller is bound to v1 anywhere on the host, even where
//! this namespace shows only cgroup2 at `/sys/fs/cgroup` (the v1 mounts
//! covered by it, or not mounted here at all): runc and crun then use v2,
//! and so must we, which libnvidia-container does not (it takes the
//! `devices` line as proof of v1). Nothing here depends on the runtime's
//! cgroup driver (cgroupfs or systemd): only on where the kernel says the
//! process is.

use std::fs;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use super::LegacyError;

/// The type of device a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// Character device (`c`).
    Char,
    /// Block device (`b`).
    Block,
    /// Both (`a`).
    All,
}

/// Access bit: create the node (`m`).
pub const ACCESS_MKNOD: u8 = 1;
/// Access bit: read (`r`).
pub const ACCESS_READ: u8 = 2;
/// Access bit: write (`w`).
pub const ACCESS_WRITE: u8 = 4;
/// All access bits.
pub const ACCESS_ALL: u8 = ACCESS_MKNOD | ACCESS_READ | ACCESS_WRITE;

/// One device cgroup rule, as in the OCI `linux.resources.devices` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceRule {
    /// Allow (true) or deny.
    pub allow: bool,
    /// Device type.
    pub kind: DeviceType,
    /// Major number; `None` is any.
    pub major: Option<u32>,
    /// Minor number; `None` is any.
    pub minor: Option<u32>,
    /// Access bits ([`ACCESS_READ`] | ...).
    pub access: u8,
}

impl DeviceRule {
    /// An allow rule for one character device.
    pub fn allow_char(major: u32, minor: u32, access: u8) -> DeviceRule {
        DeviceRule {
            allow: true,
            kind: DeviceType::Char,
            major: Some(major),
            minor: Some(minor),
            access,
        }
    }

    /// Parses an access string (`rwm`, any subset, any order).
    pub fn parse_access(s: &str) -> Option<u8> {
        let mut bits = 0;
        for c in s.chars() {
            bits |= match c {
                'r' => ACCESS_READ,
                'w' => ACCESS_WRITE,
                'm' => ACCESS_MKNOD,
                _ => return None,
            };
        }
        Some(bits)
    }

    /// The access bits as `rwm` letters.
    pub fn access_string(&self) -> String {
        let mut s = String::new();
        if self.access & ACCESS_READ != 0 {
            s.push('r');
        }
        if self.access & ACCESS_WRITE != 0 {
            s.push('w');
        }
        if self.access & ACCESS_MKNOD != 0 {
            s.push('m');
        }
        s
    }

    /// The line cgroup v1 expects in `devices.allow` / `devices.deny`:
    /// `c 195:0 rw`.
    pub fn v1_line(&self) -> String {
        let kind = match self.kind {
            DeviceType::Char => 'c',
            DeviceType::Block => 'b',
            DeviceType::All => 'a',
        };
        let num = |n: Option<u32>| n.map_or_else(|| "*".to_string(), |n| n.to_string());
        format!(
            "{kind} {}:{} {}",
            num(self.major),
            num(self.minor),
            self.access_string()
        )
    }
}

/// Where a container's device policy lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceCgroup {
    /// The v1 `devices` controller directory of the container.
    V1(PathBuf),
    /// The cgroup v2 directory of the container (BPF device programs).
    V2(PathBuf),
}

/// One line of `mountinfo`, the fields we need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// The mount's id.
    pub id: u64,
    /// The id of the mount it is mounted on.
    pub parent: u64,
    /// Root of the mount within its file system (for cgroups: the cgroup
    /// path the mount shows).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// File system type.
    pub fstype: String,
    /// Super block options (for cgroup v1: the controllers).
    pub super_options: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                out.push((oct[0] - b'0') * 64 + (oct[1] - b'0') * 8 + (oct[2] - b'0'));
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/<pid>/mountinfo` text; malformed lines are skipped.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            if l.len() < 6 || r.len() < 3 {
                return None;
            }
            Some(MountEntry {
                id: l[0].parse().ok()?,
                parent: l[1].parse().ok()?,
                root: unescape(l[3]),
                mount_point: PathBuf::from(unescape(l[4])),
                fstype: r[0].to_string(),
                super_options: r[2].to_string(),
            })
        })
        .collect()
}

/// Most bytes of a `mountinfo` read: far more than any mount table has.
const MOUNTINFO_CAP: u64 = 16 << 20;

/// The mount table in `path` (a `mountinfo` file), read capped and parsed.
pub(crate) fn read_mountinfo(path: &Path) -> io::Result<Vec<MountEntry>> {
    super::read_proc(path, MOUNTINFO_CAP).map(|t| parse_mountinfo(&t))
}

/// One line of `/proc/<pid>/cgroup`: `(controllers, path)`.
pub(crate) fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(3, ':');
            let _id = it.next()?;
            let ctrls = it.next()?;
            let path = it.next()?;
            let ctrls = if ctrls.is_empty() {
                Vec::new()
            } else {
                ctrls.split(',').map(str::to_string).collect()
            };
            Some((ctrls, path.to_string()))
        })
        .collect()
}

/// `mount_point` + (`cg_path` relative to the mount's `root`), refusing
/// paths outside the mount or with `..`.
fn join_cgroup(
    file: &Path,
    mount_point: &Path,
    mount_root: &str,
    cg_path: &str,
) -> Result<PathBuf, LegacyError> {
    let bad = |reason: String| LegacyError::Cgroup {
        path: file.to_path_buf(),
        reason,
    };
    let root = mount_root.trim_end_matches('/');
    let rel = if root.is_empty() {
        cg_path
    } else if cg_path == root {
        ""
    } else if let Some(rest) = cg_path.strip_prefix(root).filter(|r| r.starts_with('/')) {
        rest
    } else {
        return Err(bad(format!(
            "cgroup {cg_path:?} is not below the root {mount_root:?} of its mount at {}",
            mount_point.display()
        )));
    };
    let rel = Path::new(rel.trim_start_matches('/'));
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(bad(format!(
            "cgroup {cg_path:?} leaves its hierarchy (a cgroup namespace?); refusing it"
        )));
    }
    Ok(mount_point.join(rel))
}

/// Whether `m` can be reached at its mount point in this mount namespace:
/// no other mount sits at that point or above it, except those `m` is
/// mounted on (its ancestors). A cgroup2 mounted over `/sys/fs/cgroup`
/// covers the v1 hierarchies below it, which mountinfo still lists.
fn reachable(mounts: &[MountEntry], m: &MountEntry) -> bool {
    let mut ancestors = foldhash::HashSet::default();
    let mut parent = m.parent;
    // At most one step per mount: a loop in the ids cannot keep us here.
    for _ in 0..mounts.len() {
        if !ancestors.insert(parent) {
            break;
        }
        match mounts.iter().find(|p| p.id == parent) {
            Some(p) if p.id != p.parent => parent = p.parent,
            _ => break,
        }
    }
    !mounts.iter().any(|n| {
        n.id != m.id && !ancestors.contains(&n.id) && m.mount_point.starts_with(&n.mount_point)
    })
}

/// Most bytes of `/proc/<pid>/cgroup` read: one line per hierarchy.
const PROC_CGROUP_CAP: u64 = 1 << 20;

/// Finds the device cgroup of process `pid`: v1 when it has a `devices`
/// controller line and that hierarchy is mounted where we reach it, else the
/// unified (v2) one (see the module documentation).
///
/// Mount points come from `<proc_root>/self/mountinfo`; when a hierarchy is
/// not listed there at all the conventional `<cgroup_root>/devices` (v1) or
/// `<cgroup_root>` (v2) is assumed.
pub fn find_device_cgroup(
    proc_root: &Path,
    pid: i32,
    cgroup_root: &Path,
) -> Result<DeviceCgroup, LegacyError> {
    let cg_file = proc_root.join(pid.to_string()).join("cgroup");
    let text =
        super::read_proc(&cg_file, PROC_CGROUP_CAP).map_err(|source| LegacyError::CgroupIo {
            path: cg_file.clone(),
            op: "read",
            source,
        })?;
    let lines = parse_proc_cgroup(&text);
    let mi_file = proc_root.join("self").join("mountinfo");
    let mounts = read_mountinfo(&mi_file).map_err(|source| LegacyError::CgroupIo {
        path: mi_file.clone(),
        op: "read",
        source,
    })?;
    let v1: Vec<&MountEntry> = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == "devices"))
        .collect();
    let v2: Vec<&MountEntry> = mounts.iter().filter(|m| m.fstype == "cgroup2").collect();
    let v1_reached = v1.iter().find(|m| reachable(&mounts, m));
    let v2_reached = v2.iter().find(|m| reachable(&mounts, m));

    if let Some((_, path)) = lines.iter().find(|(c, _)| c.iter().any(|c| c == "devices")) {
        match v1_reached {
            Some(m) => {
                return Ok(DeviceCgroup::V1(join_cgroup(
                    &cg_file,
                    &m.mount_point,
                    &m.root,
                    path,
                )?))
            }
            None if v1.is_empty() && v2_reached.is_none() => {
                return Ok(DeviceCgroup::V1(join_cgroup(
                    &cg_file,
                    &cgroup_root.join("devices"),
                    "/",
                    path,
                )?))
            }
            // Bound to v1 but out of this namespace's reach: the runtime used v2.
            None => {}
        }
    }
    if let Some((_, path)) = lines.iter().find(|(c, _)| c.is_empty()) {
        match v2_reached {
            Some(m) => {
                return Ok(DeviceCgroup::V2(join_cgroup(
                    &cg_file,
                    &m.mount_point,
                    &m.root,
                    path,
                )?))
            }
            None if v2.is_empty() => {
                return Ok(DeviceCgroup::V2(join_cgroup(
                    &cg_file,
                    cgroup_root,
                    "/",
                    path,
                )?))
            }
            None => {}
        }
    }
    let reason = if lines
        .iter()
        .any(|(c, _)| c.is_empty() || c.iter().any(|c| c == "devices"))
    {
        format!(
            "neither its v1 `devices` hierarchy nor its unified (v2) one is mounted where {} can reach it (covered by another mount?); mount one at {}",
            mi_file.display(),
            cgroup_root.display()
        )
    } else {
        "neither a v1 `devices` line nor a unified (`0::`) line".to_string()
    };
    Err(LegacyError::Cgroup {
        path: cg_file,
        reason,
    })
}

/// Appends one `devices.allow` line per allow rule to the v1 cgroup `dir`
/// (each line in a single write, as the kernel parses one rule per write).
pub fn allow_v1(dir: &Path, rules: &[DeviceRule]) -> Result<(), LegacyError> {
    let file = dir.join("devices.allow");
    let err = |op, source| LegacyError::CgroupIo {
        path: file.clone(),
        op,
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .map_err(|e| err("open", e))?;
    for r in rules.iter().filter(|r| r.allow) {
        let line = r.v1_line();
        let n = f.write(line.as_bytes()).map_err(|e| err("write", e))?;
        if n != line.len() {
            return Err(err(
                "write",
                io::Error::new(io::ErrorKind::WriteZero, format!("short write of {line:?}")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_lines() {
        assert_eq!(DeviceRule::allow_char(195, 0, 6).v1_line(), "c 195:0 rw");
        let all = DeviceRule {
            allow: false,
            kind: DeviceType::All,
            major: None,
            minor: None,
            access: ACCESS_ALL,
        };
        assert_eq!(all.v1_line(), "a *:* rwm");
        assert_eq!(DeviceRule::parse_access("mwr"), Some(7));
        assert_eq!(DeviceRule::parse_access("rx"), None);
        assert_eq!(DeviceRule::parse_access(""), Some(0));
    }

    #[test]
    fn mountinfo_fields_and_escapes() {
        let t = "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n\
                 41 31 0:38 /a\\040b /sys/fs/cgroup/uni\\040fied rw shared:9 - cgroup2 cgroup2 rw\n\
                 garbage\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point, Path::new("/sys/fs/cgroup/devices"));
        assert_eq!(m[0].super_options, "rw,devices");
        assert_eq!(m[1].root, "/a b");
        assert_eq!(m[1].mount_point, Path::new("/sys/fs/cgroup/uni fied"));
        assert_eq!(m[1].fstype, "cgroup2");
    }

    fn fake_proc(cgroup: &str, mountinfo: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("42")).unwrap();
        fs::create_dir_all(d.path().join("self")).unwrap();
        fs::write(d.path().join("42/cgroup"), cgroup).unwrap();
        fs::write(d.path().join("self/mountinfo"), mountinfo).unwrap();
        d
    }

    #[test]
    fn finds_v1_in_hybrid_mode() {
        let p = fake_proc(
            "5:devices:/t1\n4:memory:/x/t1\n0::/t1\n",
            "36 31 0:33 / /cg/devices rw - cgroup cgroup rw,devices\n\
             41 31 0:38 / /cg/unified rw - cgroup2 cgroup2 rw\n",
        );
        let r = find_device_cgroup(p.path(), 42, Path::new("/nowhere")).unwrap();
        assert_eq!(r, DeviceCgroup::V1(PathBuf::from("/cg/devices/t1")));
    }

    #[test]
    fn finds_v2_and_strips_the_mount_root() {
        let p = fake_proc(
            "0::/kubepods/pod1/c1\n",
            "41 31 0:38 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        let r = find_device_cgroup(p.path(), 42, Path::new("/nowhere")).unwrap();
        assert_eq!(r, DeviceCgroup::V2(PathBuf::from("/sys/fs/cgroup/pod1/c1")));
    }

    /// This host's private mount namespace with cgroup2 mounted over `/sys/fs/cgroup`: the v1
    /// hierarchies are still listed, under it, and the process still has a `devices` line (the
    /// controller is bound to v1), but runc and crun made and restrict its v2 cgroup. It was
    /// taken for v1 and `/sys/fs/cgroup/devices/devices.allow` (a path in cgroup2) opened.
    #[test]
    fn a_covered_v1_hierarchy_gives_way_to_v2() {
        let mi = "23 1 0:21 / /sys rw - sysfs sysfs rw\n\
                  31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n\
                  36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n\
                  41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                  900 31 0:38 / /sys/fs/cgroup rw - cgroup2 none rw\n";
        let p = fake_proc("5:devices:/\n4:memory:/x\n0::/ctr\n", mi);
        let r = find_device_cgroup(p.path(), 42, Path::new("/nowhere")).unwrap();
        assert_eq!(r, DeviceCgroup::V2(PathBuf::from("/sys/fs/cgroup/ctr")));
        // Without the cover, the same host is hybrid: v1 as before.
        let hybrid = mi.lines().take(4).collect::<Vec<_>>().join("\n");
        let p = fake_proc("5:devices:/a\n0::/ctr\n", &hybrid);
        let r = find_device_cgroup(p.path(), 42, Path::new("/nowhere")).unwrap();
        assert_eq!(
            r,
            DeviceCgroup::V1(PathBuf::from("/sys/fs/cgroup/devices/a"))
        );
        // The v1 hierarchy not mounted in this namespace at all: v2 too.
        let p = fake_proc(
            "5:devices:/\n0::/ctr\n",
            "31 23 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        let r = find_device_cgroup(p.path(), 42, Path::new("/nowhere")).unwrap();
        assert_eq!(r, DeviceCgroup::V2(PathBuf::from("/sys/fs/cgroup/ctr")));
        // Both covered: one line naming mountinfo, never a guess.
        let p = fake_proc(
            "5:devices:/\n0::/ctr\n",
            "36 31 0:33 / /c/devices rw - cgroup cgroup rw,devices\n\
             41 31 0:38 / /c/unified rw - cgroup2 cgroup2 rw\n\
             50 31 0:50 / /c rw - tmpfs tmpfs rw\n",
        );
        let e = find_device_cgroup(p.path(), 42, Path::new("/c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("self/mountinfo") && e.contains("covered"), "{e}");
    }

    /// The systemd cgroup driver puts a container in `<slice>/<prefix>-<id>.scope`, cgroupfs
    /// wherever `cgroupsPath` says: either way the kernel's line is what is used.
    #[test]
    fn systemd_driver_paths_are_read_from_the_kernel() {
        let p = fake_proc(
            "0::/system.slice/docker-abc.scope\n",
            "31 23 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        let r = find_device_cgroup(p.path(), 42, Path::new("/nowhere")).unwrap();
        assert_eq!(
            r,
            DeviceCgroup::V2(PathBuf::from(
                "/sys/fs/cgroup/system.slice/docker-abc.scope"
            ))
        );
        let p = fake_proc(
            "5:devices:/system.slice/docker-abc.scope\n1:name=systemd:/system.slice/docker-abc.scope\n0::/system.slice/docker-abc.scope\n",
            "36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n",
        );
        let r = find_device_cgroup(p.path(), 42, Path::new("/nowhere")).unwrap();
        assert_eq!(
            r,
            DeviceCgroup::V1(PathBuf::from(
                "/sys/fs/cgroup/devices/system.slice/docker-abc.scope"
            ))
        );
    }

    /// An unreadable mountinfo was taken for an empty one (and the conventional mount point
    /// guessed): an I/O error is an error.
    #[test]
    fn an_unreadable_mountinfo_is_an_error() {
        let p = fake_proc("0::/ctr\n", "");
        fs::remove_file(p.path().join("self/mountinfo")).unwrap();
        let e = find_device_cgroup(p.path(), 42, Path::new("/sys/fs/cgroup"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("self/mountinfo"), "{e}");
    }

    #[test]
    fn falls_back_to_cgroup_root_and_refuses_escapes() {
        let p = fake_proc("3:cpu,devices:/a/b\n", "");
        let r = find_device_cgroup(p.path(), 42, Path::new("/sys/fs/cgroup")).unwrap();
        assert_eq!(
            r,
            DeviceCgroup::V1(PathBuf::from("/sys/fs/cgroup/devices/a/b"))
        );
        let p = fake_proc("0::/../../etc\n", "");
        let e = find_device_cgroup(p.path(), 42, Path::new("/sys/fs/cgroup")).unwrap_err();
        assert!(e.to_string().contains("42/cgroup"), "{e}");
        let p = fake_proc(
            "0::/other\n",
            "41 31 0:38 /mine /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        let e = find_device_cgroup(p.path(), 42, Path::new("/sys/fs/cgroup")).unwrap_err();
        assert!(e.to_string().contains("not below"), "{e}");
        let p = fake_proc("1:name=systemd:/x\n", "");
        assert!(find_device_cgroup(p.path(), 42, Path::new("/c")).is_err());
    }
}
