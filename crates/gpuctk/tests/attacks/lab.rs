//! The bench the attacks run on: per delivery path one [`Lab`] (mock hosts for both library
//! layouts, a base rootfs, the image-side marker library, generated CDI specs), and per attack a
//! [`Case`]: a fresh copy of the rootfs in its own bundle, with sentinel trees around it that
//! image symlinks point at, which must never change.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};

use crate::util::*;

/// The GPUs every file attack asks for (of four), so a wrong selection shows.
pub const WANT: [u32; 2] = [0, 2];
/// The GPUs on each mock host.
pub const GPUS: u32 = 4;
/// The mock driver.
pub const DRIVER: &str = "570.124.06";
/// What the container runs: the probe, then nvidia-smi, then an end mark.
pub const SCRIPT: &str =
    "/usr/bin/gpuctk-probe; echo ---smi---; nvidia-smi -L 2>&1 || echo nvidia-smi exit $?; echo ---end---";

/// The directories (rootfs-relative) gpuctk touches in a container, mirrored in every sentinel
/// tree.
pub const TOUCHED: &[&str] = &[
    "etc",
    "etc/ld.so.conf.d",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/local/cuda/compat",
    "usr/bin",
    "usr/lib/firmware/nvidia",
    "dev",
    "dev/dri",
    "run/nvidia-persistenced",
    "var/run/nvidia-persistenced",
];

/// Library layout of the mock host an attack runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `/usr/lib/x86_64-linux-gnu`.
    Debian,
    /// `/usr/lib64`, which the Debian image's loader does not search.
    Rhel,
}

/// One per delivery-path test.
pub struct Lab {
    /// Everything but the sentinels: in memory where possible (cases are copied and deleted by
    /// the hundred).
    pub t: TestDir,
    /// The sentinel trees, on the default temp dir: not under /dev, which every runtime mounts
    /// over inside the container, so image symlinks into them resolve the same way in the root.
    pub s: TestDir,
    pub debian: Host,
    pub rhel: Host,
    pub base_rootfs: PathBuf,
    /// `runc spec` made runnable (no terminal, writable root, the probe script).
    pub pristine: Value,
    /// Our binary under its NVIDIA names.
    pub bin: PathBuf,
    /// Exists only on the host: image code that runs on the host writes here.
    pub markers: PathBuf,
    /// The marker library (soname libevil.so).
    pub evil: PathBuf,
    /// A valid forward-compat libcuda (copy of the mock one, version 575.51.03, with the
    /// `.note.cuda.fwd_compatibility` note naming branch 570): the raw material of compat attacks.
    pub compat_lib: PathBuf,
}

static CASES: AtomicU32 = AtomicU32::new(0);

impl Lab {
    pub fn new() -> Lab {
        let t = TestDir::in_memory();
        let debian = mock_host(&t, "host-debian", GPUS, DRIVER, "debian");
        let rhel = mock_host(&t, "host-rhel", GPUS, DRIVER, "rhel");
        let base_rootfs = t.join("base-rootfs");
        ok(&["mock-host", "rootfs", base_rootfs.to_str().unwrap()]);
        let template = t.join("spec-template");
        fs::create_dir_all(&template).unwrap();
        let st = Command::new("runc")
            .arg("spec")
            .arg("--bundle")
            .arg(&template)
            .status()
            .expect("runc spec (install runc)");
        assert!(st.success());
        let mut pristine: Value =
            serde_json::from_slice(&fs::read(template.join("config.json")).unwrap()).unwrap();
        pristine["process"]["terminal"] = json!(false);
        pristine["process"]["args"] = json!(["/bin/sh", "-c", SCRIPT]);
        pristine["root"]["readonly"] = json!(false);

        let bin = t.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for name in [
            "nvidia-container-runtime",
            "nvidia-container-runtime-hook",
            "nvidia-container-cli",
            "nvidia-ctk",
        ] {
            symlink(GPUCTK, bin.join(name)).unwrap();
        }
        let markers = t.join("markers");
        fs::create_dir_all(&markers).unwrap();

        let evil = t.join("evil/libevil.so");
        fs::create_dir_all(evil.parent().unwrap()).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks/evil.c");
        gcc(&[
            "-shared",
            "-fPIC",
            "-O1",
            &format!("-DMARKER_DIR=\"{}\"", markers.display()),
            "-Wl,-soname,libevil.so",
            "-o",
            evil.to_str().unwrap(),
            src.to_str().unwrap(),
        ]);

        // A compat libcuda newer than the driver, with the note real ones carry.
        let compat_lib = t.join("compat/libcuda.so.575.51.03");
        fs::create_dir_all(compat_lib.parent().unwrap()).unwrap();
        fs::write(
            &compat_lib,
            gpuctk_mockhost::compat_libcuda("575.51.03", (12, 9)).unwrap(),
        )
        .unwrap();

        for (host, name) in [(&debian, "cdi-debian"), (&rhel, "cdi-rhel")] {
            let dir = t.join(name);
            fs::create_dir_all(&dir).unwrap();
            host.write_spec(&dir.join("nvidia.yaml"));
        }
        Lab {
            t,
            s: TestDir::new(),
            debian,
            rhel,
            base_rootfs,
            pristine,
            bin,
            markers,
            evil,
            compat_lib,
        }
    }

    pub fn host(&self, layout: Layout) -> &Host {
        match layout {
            Layout::Debian => &self.debian,
            Layout::Rhel => &self.rhel,
        }
    }

    pub fn cdi_spec(&self, layout: Layout) -> PathBuf {
        self.t.join(match layout {
            Layout::Debian => "cdi-debian/nvidia.yaml",
            Layout::Rhel => "cdi-rhel/nvidia.yaml",
        })
    }

    /// A fresh case for an attack: its own bundle with a copy of the base rootfs, sentinel
    /// trees, the default request (GPUs 0 and 2, every capability) and its own CDI spec dir.
    pub fn case(&self, name: &str, layout: Layout) -> Case<'_> {
        // Unique across the labs of this process: runc and crun name cgroups after the id, and
        // path tests run in parallel.
        let n = CASES.fetch_add(1, Ordering::Relaxed);
        let short: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let dir = self.t.join(&format!("case-{n:03}-{short}"));
        let bundle = dir.join("bundle");
        fs::create_dir_all(&bundle).unwrap();
        let rootfs = bundle.join("rootfs");
        let st = Command::new("cp")
            .arg("-a")
            .arg(&self.base_rootfs)
            .arg(&rootfs)
            .status()
            .unwrap();
        assert!(st.success(), "cp -a rootfs");
        let sentinel = self.s.join(&format!("case-{n:03}"));
        let sentinel_b = bundle.join("sentinel-b");
        make_sentinel(&sentinel);
        make_sentinel(&sentinel_b);
        let cdi_dir = dir.join("cdi");
        fs::create_dir_all(&cdi_dir).unwrap();
        fs::copy(self.cdi_spec(layout), cdi_dir.join("nvidia.yaml")).unwrap();
        let mut c = Case {
            lab: self,
            id: format!("gpuctk-atk-{}-{n}", std::process::id()),
            layout,
            dir,
            bundle,
            rootfs,
            sentinel,
            sentinel_b,
            cdi_dir,
            spec: self.pristine.clone(),
            extra_env: Vec::new(),
            config_top: String::new(),
            config_cli: String::new(),
            cli_devices: "0,2".into(),
            podman_devices: vec!["nvidia.com/gpu=0".into(), "nvidia.com/gpu=2".into()],
            fifos: Vec::new(),
            flip: None,
            in_root_marker: false,
            host_root: None,
        };
        // As in Debian images; without it podman creates one, through whatever /etc is.
        c.symlink("etc/mtab", "../proc/self/mounts");
        c.set_request("0,2");
        c.env("NVIDIA_DRIVER_CAPABILITIES=all");
        c
    }
}

/// A background flip: while the container is being created, `rel` (in the rootfs) is swapped
/// again and again with a symlink whose target is `target` (renameat2 RENAME_EXCHANGE).
#[derive(Clone, Debug)]
pub struct Flip {
    pub rel: String,
    pub target: PathBuf,
}

/// One attack's container: bundle, rootfs, sentinels and the request, prepared by the attack.
pub struct Case<'a> {
    pub lab: &'a Lab,
    /// runc/crun container id, unique per process and case.
    pub id: String,
    pub layout: Layout,
    pub dir: PathBuf,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    /// Sentinel tree in the case dir (targets of absolute and `/proc/self/root` symlinks).
    pub sentinel: PathBuf,
    /// Sentinel tree next to the rootfs, in the bundle (targets of climbing symlinks).
    pub sentinel_b: PathBuf,
    pub cdi_dir: PathBuf,
    /// The `config.json` to run.
    pub spec: Value,
    /// Env entries the attack added (the podman path passes them with `-e`).
    pub extra_env: Vec<String>,
    /// Top-level config.toml lines (policy keys).
    pub config_top: String,
    /// Lines for `[nvidia-container-cli]`.
    pub config_cli: String,
    /// `nvidia-container-cli configure --device=`.
    pub cli_devices: String,
    /// `podman run --device` names.
    pub podman_devices: Vec<String>,
    /// FIFOs planted, opened for writing after a run to release a reader stuck on one.
    pub fifos: Vec<PathBuf>,
    pub flip: Option<Flip>,
    /// The attack arms image code the container itself loads: after a successful run
    /// `/evil-ran` in the rootfs must hold a marker.
    pub in_root_marker: bool,
    /// The container root is the host's `/`, named this way (`root.path`, or the CLI's ROOTFS):
    /// our programs run directly inside an overlay sandbox of the host's `/`.
    pub host_root: Option<String>,
}

impl Case<'_> {
    pub fn host(&self) -> &Host {
        self.lab.host(self.layout)
    }

    /// The host path of a rootfs-relative path.
    pub fn at(&self, rel: &str) -> PathBuf {
        self.rootfs.join(rel.trim_start_matches('/'))
    }

    /// The host path of the sentinel copy of `rel` (what an absolute image symlink names).
    pub fn sentinel_of(&self, rel: &str) -> PathBuf {
        self.sentinel.join(rel.trim_start_matches('/'))
    }

    fn env_array(&mut self) -> &mut Vec<Value> {
        if !self.spec["process"]["env"].is_array() {
            self.spec["process"]["env"] = json!([]);
        }
        self.spec["process"]["env"].as_array_mut().unwrap()
    }

    /// Set `K=V` in the container's env (replacing an earlier `K`).
    pub fn env(&mut self, kv: &str) {
        let key = format!("{}=", kv.split_once('=').map_or(kv, |(k, _)| k));
        let e = self.env_array();
        e.retain(|v| !v.as_str().unwrap_or("").starts_with(&key));
        e.push(json!(kv));
        if !kv.starts_with("NVIDIA_") {
            self.extra_env.retain(|v| !v.starts_with(&key));
            self.extra_env.push(kv.to_string());
        }
    }

    /// Drop `K` from the container's env.
    pub fn unenv(&mut self, k: &str) {
        let key = format!("{k}=");
        self.env_array()
            .retain(|v| !v.as_str().unwrap_or("").starts_with(&key));
    }

    /// `NVIDIA_VISIBLE_DEVICES` (the shim and the prestart hook read it).
    pub fn set_request(&mut self, value: &str) {
        self.env(&format!("NVIDIA_VISIBLE_DEVICES={value}"));
    }

    pub fn annotate(&mut self, k: &str, v: &str) {
        if !self.spec["annotations"].is_object() {
            self.spec["annotations"] = json!({});
        }
        self.spec["annotations"][k] = json!(v);
    }

    /// A device request as a volume mount, as the Kubernetes device plugin makes it.
    pub fn device_mount(&mut self, id: &str) {
        self.spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": format!("/var/run/nvidia-container-devices/{id}"),
            "type": "bind",
            "source": "/dev/null",
            "options": ["bind", "ro"]
        }));
    }

    /// CAP_SYS_ADMIN in every set: NVIDIA's test for a privileged container.
    pub fn privileged(&mut self) {
        for set in ["bounding", "effective", "permitted"] {
            let a = self.spec["process"]["capabilities"][set]
                .as_array_mut()
                .unwrap();
            if !a.iter().any(|c| c == "CAP_SYS_ADMIN") {
                a.push(json!("CAP_SYS_ADMIN"));
            }
        }
    }

    pub fn mkdir(&self, rel: &str) {
        fs::create_dir_all(self.at(rel)).unwrap();
    }

    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, bytes).unwrap();
    }

    /// Remove whatever is at `rel` (file, link, dir).
    pub fn remove(&self, rel: &str) {
        let p = self.at(rel);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&p).unwrap(),
            Ok(_) => fs::remove_file(&p).unwrap(),
            Err(_) => {}
        }
    }

    /// Replace `rel` with a symlink to `target`.
    pub fn symlink(&self, rel: &str, target: impl AsRef<Path>) {
        self.remove(rel);
        let p = self.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
    }

    pub fn mkfifo(&mut self, rel: &str) {
        self.remove(rel);
        let p = self.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
        self.fifos.push(p);
    }

    pub fn mksocket(&self, rel: &str) {
        self.remove(rel);
        let p = self.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        // Bound at a short path (a socket path has at most 107 bytes), then moved into place.
        // The socket file stays after the listener is dropped: nobody will ever answer.
        let short = self
            .lab
            .t
            .join(&format!("s{}", self.id.rsplit('-').next().unwrap()));
        drop(std::os::unix::net::UnixListener::bind(&short).unwrap());
        fs::rename(&short, &p).unwrap();
    }

    /// A character device node (1:5 is /dev/zero: endless bytes).
    pub fn mkchar(&self, rel: &str, major: u32, minor: u32) {
        self.remove(rel);
        let p = self.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string for the duration of the call.
        let rc = unsafe {
            libc::mknod(
                c.as_ptr(),
                libc::S_IFCHR | 0o644,
                libc::makedev(major, minor),
            )
        };
        assert_eq!(rc, 0, "mknod {}", p.display());
    }

    /// `head` (may be empty) followed by a hole up to `size` bytes.
    pub fn sparse(&self, rel: &str, head: &[u8], size: u64) {
        self.remove(rel);
        let p = self.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, head).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(size)
            .unwrap();
    }

    /// Install a file from the host at `rel` with mode 0755.
    pub fn install(&self, from: &Path, rel: &str) {
        let p = self.at(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        if fs::symlink_metadata(&p).is_ok() {
            fs::remove_file(&p).unwrap();
        }
        fs::copy(from, &p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Make `rel` a symlink of the given kind that, resolved on the host, lands in a sentinel
    /// tree, and resolved inside the root lands on a mirror holding what `rel` held, so the
    /// image still works when every path is resolved in its own root.
    pub fn redirect(&self, rel: &str, kind: Escape) {
        let rel = rel.trim_start_matches('/');
        let src = self.at(rel);
        if fs::symlink_metadata(&src).is_err() {
            fs::create_dir_all(&src).unwrap();
        }
        let (target, mirror): (PathBuf, PathBuf) = match kind {
            Escape::Absolute => {
                let abs = self.sentinel_of(rel);
                (abs.clone(), self.at(abs.to_str().unwrap()))
            }
            Escape::ProcSelfRoot => {
                let abs = self.sentinel_of(rel);
                (
                    Path::new("/proc/self/root").join(abs.strip_prefix("/").unwrap()),
                    self.at(abs.to_str().unwrap()),
                )
            }
            Escape::ClimbFar => {
                let abs = self.sentinel_of(rel);
                let depth = rel.matches('/').count() + 12;
                let mut t = PathBuf::new();
                for _ in 0..depth {
                    t.push("..");
                }
                (
                    t.join(abs.strip_prefix("/").unwrap()),
                    self.at(abs.to_str().unwrap()),
                )
            }
            Escape::ClimbToBundle => {
                // From the link's parent, exactly up to the bundle, then into sentinel-b.
                let ups = rel.matches('/').count() + 1;
                let mut t = PathBuf::new();
                for _ in 0..ups {
                    t.push("..");
                }
                let t = t.join("sentinel-b").join(rel);
                (t, self.rootfs.join("sentinel-b").join(rel))
            }
        };
        if mirror.starts_with(&src) {
            // The mirror would live below the link itself: no working copy possible.
            self.remove(rel);
            symlink(&target, &src).unwrap();
            return;
        }
        fs::create_dir_all(mirror.parent().unwrap()).unwrap();
        if fs::symlink_metadata(&mirror).is_ok() {
            if mirror.is_dir() {
                fs::remove_dir_all(&mirror).unwrap();
            } else {
                fs::remove_file(&mirror).unwrap();
            }
        }
        fs::rename(&src, &mirror).unwrap();
        symlink(&target, &src).unwrap();
    }

    /// The `config.toml` for a low-level runtime.
    pub fn write_config(&self, runtime: &str) -> PathBuf {
        let h = self.host();
        let p = self.dir.join("config.toml");
        fs::write(
            &p,
            format!(
                "{}\n[nvidia-container-cli]\nroot = \"{}\"\n{}\n\n[nvidia-container-runtime]\nruntimes = [\"{runtime}\"]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{}\"]\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\nhook-path = \"{GPUCTK}\"\n",
                self.config_top,
                h.driver_root(),
                self.config_cli,
                self.cdi_dir.display(),
                h.dev_root(),
                h.proc_root()
            ),
        )
        .unwrap();
        p
    }

    /// What the sentinel checks compare: both sentinel trees and the mock host.
    pub fn watched(&self) -> Vec<PathBuf> {
        vec![
            self.sentinel.clone(),
            self.sentinel_b.clone(),
            PathBuf::from(self.host().driver_root()),
        ]
    }
}

/// How an image symlink tries to leave its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Escape {
    /// `/tmp/.../sentinel/etc`: an absolute host path.
    Absolute,
    /// `../../../../(...)/tmp/.../sentinel/etc`: climbing past the root to an absolute path.
    ClimbFar,
    /// `../sentinel-b/etc`: climbing exactly out of the rootfs into the bundle.
    ClimbToBundle,
    /// `/proc/self/root/tmp/.../sentinel/etc`: the resolving process's own root.
    ProcSelfRoot,
}

impl Escape {
    pub fn tag(self) -> &'static str {
        match self {
            Escape::Absolute => "abs",
            Escape::ClimbFar => "climb-far",
            Escape::ClimbToBundle => "climb-bundle",
            Escape::ProcSelfRoot => "proc-self-root",
        }
    }
}

/// A tree that mirrors the directories we touch, each with a file, distinctive modes and an old
/// mtime, so any write, chmod, chown or new entry shows.
pub fn make_sentinel(dir: &Path) {
    for d in TOUCHED {
        let p = dir.join(d);
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("sentinel.txt"), format!("sentinel {d}\n")).unwrap();
    }
    fs::write(dir.join("etc/ld.so.cache"), b"sentinel: not a cache\n").unwrap();
    fs::write(
        dir.join("etc/ld.so.conf"),
        b"include /etc/ld.so.conf.d/*.conf\n",
    )
    .unwrap();
    fs::write(
        dir.join("etc/ld.so.conf.d/sentinel.conf"),
        b"/sentinel/lib\n",
    )
    .unwrap();
    fs::write(dir.join("usr/lib64/libsentinel.so.1"), b"sentinel lib\n").unwrap();
    // podman creates /etc/mtab when it is missing, following a flipped /etc out of the root:
    // that is the engine's write, not ours, so the sentinel has one too (a file, not a link, so
    // the mode loop below cannot follow it).
    fs::write(dir.join("etc/mtab"), b"sentinel mtab\n").unwrap();
    fs::write(dir.join("secret"), b"secret\n").unwrap();
    fs::set_permissions(dir.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    // Modes and mtimes nobody would pick, bottom-up so setting a child's does not move its
    // parent's mtime afterwards.
    let mut all: Vec<PathBuf> = Vec::new();
    walk(dir, &mut |p, _| all.push(p.to_path_buf()));
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in all {
        let m = fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o751)).unwrap();
        } else if p.file_name().unwrap() != "secret" {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        }
        set_old_mtime(&p);
    }
}

fn set_old_mtime(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let t = libc::timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 123,
    };
    let times = [t, t];
    // SAFETY: valid path and times for the duration of the call.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "utimensat {}", p.display());
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &fs::Metadata)) {
    let Ok(m) = fs::symlink_metadata(dir) else {
        return;
    };
    f(dir, &m);
    if m.is_dir() {
        let Ok(rd) = fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            walk(&e.path(), f);
        }
    }
}

/// What we compare of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: (i64, i64),
    pub size: u64,
    pub rdev: u64,
    /// Content of a file, target of a link.
    pub data: Vec<u8>,
}

/// Everything under `root` that an escape could change.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Facts> {
    let mut out = BTreeMap::new();
    walk(root, &mut |p, m| {
        let ft = m.file_type();
        use std::os::unix::fs::FileTypeExt;
        let (kind, data) = if ft.is_symlink() {
            (
                "symlink",
                fs::read_link(p)
                    .map(|t| t.into_os_string().into_vec())
                    .unwrap_or_default(),
            )
        } else if ft.is_file() {
            ("file", fs::read(p).unwrap_or_default())
        } else if ft.is_dir() {
            ("dir", Vec::new())
        } else if ft.is_char_device() {
            ("char", Vec::new())
        } else if ft.is_block_device() {
            ("block", Vec::new())
        } else if ft.is_fifo() {
            ("fifo", Vec::new())
        } else {
            ("socket", Vec::new())
        };
        out.insert(
            p.to_path_buf(),
            Facts {
                kind,
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
                mtime: (m.mtime(), m.mtime_nsec()),
                size: m.size(),
                rdev: m.rdev(),
                data,
            },
        );
    });
    out
}

use std::os::unix::ffi::OsStringExt;

/// One line per difference.
pub fn diff(before: &BTreeMap<PathBuf, Facts>, after: &BTreeMap<PathBuf, Facts>) -> Vec<String> {
    let mut out = Vec::new();
    for (p, b) in before {
        match after.get(p) {
            None => out.push(format!("{} was removed", p.display())),
            Some(a) if a != b => {
                let mut what = Vec::new();
                if a.kind != b.kind {
                    what.push(format!("{} became a {}", b.kind, a.kind));
                }
                if a.mode != b.mode {
                    what.push(format!("mode {:o} -> {:o}", b.mode, a.mode));
                }
                if (a.uid, a.gid) != (b.uid, b.gid) {
                    what.push(format!("owner {}:{} -> {}:{}", b.uid, b.gid, a.uid, a.gid));
                }
                if a.mtime != b.mtime {
                    what.push("mtime changed".into());
                }
                if a.data != b.data || a.size != b.size {
                    what.push("content changed".into());
                }
                out.push(format!("{} changed: {}", p.display(), what.join(", ")));
            }
            Some(_) => {}
        }
    }
    for (p, a) in after {
        if !before.contains_key(p) {
            out.push(format!(
                "{} appeared ({}, {} bytes)",
                p.display(),
                a.kind,
                a.size
            ));
        }
    }
    out
}

fn gcc(args: &[&str]) {
    let out = Command::new("gcc")
        .args(args)
        .output()
        .expect("gcc (apt-get install gcc)");
    assert!(
        out.status.success(),
        "gcc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// ELF64 little-endian section headers: `(name, type, offset, size, header offset)`.
pub fn sections(elf: &[u8]) -> Vec<(String, u32, u64, u64, usize)> {
    let u16at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap());
    let u32at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let shoff = u64at(0x28) as usize;
    let shentsize = usize::from(u16at(0x3a));
    let shnum = usize::from(u16at(0x3c));
    let shstrndx = usize::from(u16at(0x3e));
    let hdr = |i: usize| shoff + i * shentsize;
    let str_off = u64at(hdr(shstrndx) + 24) as usize;
    (0..shnum)
        .map(|i| {
            let h = hdr(i);
            let name_off = str_off + u32at(h) as usize;
            let end = elf[name_off..].iter().position(|&b| b == 0).unwrap();
            (
                String::from_utf8_lossy(&elf[name_off..name_off + end]).into_owned(),
                u32at(h + 4),
                u64at(h + 24),
                u64at(h + 32),
                h,
            )
        })
        .collect()
}

/// ELF64 little-endian program headers: `(type, header offset, p_offset)`.
pub fn program_headers(elf: &[u8]) -> Vec<(u32, usize, u64)> {
    let u16at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap());
    let u32at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let phoff = u64at(0x20) as usize;
    let phentsize = usize::from(u16at(0x36));
    (0..usize::from(u16at(0x38)))
        .map(|i| {
            let h = phoff + i * phentsize;
            (u32at(h), h, u64at(h + 8))
        })
        .collect()
}

/// Overwrite the value of every dynamic entry with tag `tag`.
pub fn patch_dynamic(elf: &mut [u8], tag: u64, value: u64) {
    let dynamic = program_headers(elf)
        .into_iter()
        .find(|p| p.0 == 2)
        .expect("PT_DYNAMIC");
    let mut at = dynamic.2 as usize;
    while at + 16 <= elf.len() {
        let t = u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
        if t == 0 {
            break;
        }
        if t == tag {
            elf[at + 8..at + 16].copy_from_slice(&value.to_le_bytes());
        }
        at += 16;
    }
}
