//! Legacy injection against the real kernel and real runc: device cgroup
//! v1 rules, cgroup v2 BPF programs, and mounts, nodes and hooks realized
//! in a created container. Needs root, runc, busybox and gcc; a missing
//! one fails the test.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gpuctk_cdi::spec::{ContainerEdits, DeviceNode, Hook, Mount};
use gpuctk_container::legacy::bpf::{self, BPF_F_ALLOW_MULTI};
use gpuctk_container::legacy::cgroup::{self, DeviceRule, DeviceType, ACCESS_ALL};
use gpuctk_container::legacy::{inject, Target};
use gpuctk_core::ops::{InRootOp, Link};
use gpuctk_mockhost::{create_host, create_rootfs, HostConfig, ProbeReport, RootfsConfig};

const DRIVER: &str = "570.124.06";

fn require_root() {
    // SAFETY: trivial syscall.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests need root");
}

static SERIAL: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    )
}

/// A cgroup directory removed on drop (its members have exited by then).
struct CgroupDir(PathBuf);

impl CgroupDir {
    fn create(parent: &str, name: &str) -> CgroupDir {
        let p = Path::new(parent).join(name);
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        CgroupDir(p)
    }
}

impl Drop for CgroupDir {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Forks a child that joins each cgroup (`cgroup.procs` files), opens each
/// node and reports 0 or the errno. The child makes only raw syscalls on
/// memory prepared before the fork.
fn open_errnos_in(procs: &[&Path], nodes: &[&Path]) -> Vec<i32> {
    let procs: Vec<CString> = procs
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()).unwrap())
        .collect();
    let nodes: Vec<CString> = nodes
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()).unwrap())
        .collect();
    let mut results = vec![0i32; nodes.len()];
    let mut fds = [0; 2];
    // SAFETY: valid array for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only makes async-signal-safe syscalls and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: raw syscalls on prepared buffers; the child never returns.
        unsafe {
            libc::close(fds[0]);
            for p in &procs {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    libc::_exit(3);
                }
                libc::close(fd);
            }
            for n in &nodes {
                let fd = libc::open(n.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK);
                let r: i32 = if fd >= 0 {
                    libc::close(fd);
                    0
                } else {
                    *libc::__errno_location()
                };
                libc::write(fds[1], (&r as *const i32).cast(), 4);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: our end of the pipe; reading into a buffer of the given size.
    unsafe {
        libc::close(fds[1]);
        let want = results.len() * 4;
        let mut got = 0;
        while got < want {
            let n = libc::read(
                fds[0],
                results.as_mut_ptr().cast::<u8>().add(got).cast(),
                want - got,
            );
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        libc::close(fds[0]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "probe child failed (status {status:#x}): could it join the cgroup?"
        );
        assert_eq!(got, want, "probe child reported {got} of {want} bytes");
    }
    results
}

fn name(e: i32) -> &'static str {
    match e {
        0 => "ok",
        libc::ENXIO => "ENXIO",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        _ => "other",
    }
}

fn names(v: &[i32]) -> Vec<&'static str> {
    v.iter().map(|&e| name(e)).collect()
}

#[test]
fn cgroup_v1_allow_turns_eperm_into_enxio() {
    require_root();
    let dir = CgroupDir::create("/sys/fs/cgroup/devices", &unique("gpuctk-test"));
    std::fs::write(dir.0.join("devices.deny"), "a").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let gpu0 = tmp.path().join("nvidia0");
    let gpu1 = tmp.path().join("nvidia1");
    common::mknod(&gpu0, 195, 0, 0o666);
    common::mknod(&gpu1, 195, 1, 0o666);
    let procs = dir.0.join("cgroup.procs");

    let before = open_errnos_in(&[&procs], &[&gpu0, &gpu1]);
    assert_eq!(names(&before), ["EPERM", "EPERM"]);

    cgroup::allow_v1(&dir.0, &[DeviceRule::allow_char(195, 0, 6)]).unwrap();
    let list = std::fs::read_to_string(dir.0.join("devices.list")).unwrap();
    assert_eq!(list.trim(), "c 195:0 rw");
    let after = open_errnos_in(&[&procs], &[&gpu0, &gpu1]);
    assert_eq!(names(&after), ["ENXIO", "EPERM"]);

    // Errors name the cgroup file.
    let e = cgroup::allow_v1(Path::new("/sys/fs/cgroup/devices/gpuctk-no-such"), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("gpuctk-no-such/devices.allow"), "{e}");
}

/// runc's default policy in spirit: deny all, allow /dev/null and /dev/zero.
fn runc_like_rules() -> Vec<DeviceRule> {
    vec![
        DeviceRule::allow_char(1, 3, ACCESS_ALL),
        DeviceRule::allow_char(1, 5, ACCESS_ALL),
        DeviceRule {
            allow: false,
            kind: DeviceType::All,
            major: None,
            minor: None,
            access: ACCESS_ALL,
        },
    ]
}

fn v2_case(flags: u32) {
    require_root();
    let dir = CgroupDir::create("/sys/fs/cgroup/unified", &unique("gpuctk-test"));
    let old = bpf::device_program(&runc_like_rules(), false).unwrap();
    bpf::attach_device_program(&dir.0, &old, flags).unwrap();
    let (_, ids_before) = bpf::attached_programs(&dir.0).unwrap();
    assert_eq!(ids_before.len(), 1);

    let tmp = tempfile::tempdir().unwrap();
    let gpu0 = tmp.path().join("nvidia0");
    let gpu1 = tmp.path().join("nvidia1");
    let null = tmp.path().join("null");
    let full = tmp.path().join("full");
    common::mknod(&gpu0, 195, 0, 0o666);
    common::mknod(&gpu1, 195, 1, 0o666);
    common::mknod(&null, 1, 3, 0o666);
    common::mknod(&full, 1, 7, 0o666);
    let procs = dir.0.join("cgroup.procs");
    let nodes: [&Path; 4] = [&gpu0, &gpu1, &null, &full];

    let before = open_errnos_in(&[&procs], &nodes);
    assert_eq!(names(&before), ["EPERM", "EPERM", "ok", "EPERM"]);

    let out = bpf::allow_v2(&dir.0, &[DeviceRule::allow_char(195, 0, 6)]).unwrap();
    assert_eq!(out.replaced.len(), 1);
    let (after_flags, ids_after) = bpf::attached_programs(&dir.0).unwrap();
    assert_eq!(after_flags, flags);
    assert_eq!(
        ids_after.len(),
        1,
        "the old program was replaced, not added to"
    );
    assert_ne!(ids_after, ids_before);

    let after = open_errnos_in(&[&procs], &nodes);
    assert_eq!(names(&after), ["ENXIO", "EPERM", "ok", "EPERM"]);

    // Extending again (a second injection) keeps everything.
    bpf::allow_v2(&dir.0, &[DeviceRule::allow_char(195, 1, 6)]).unwrap();
    let again = open_errnos_in(&[&procs], &nodes);
    assert_eq!(names(&again), ["ENXIO", "ENXIO", "ok", "EPERM"]);
}

#[test]
fn cgroup_v2_bpf_replace_with_allow_multi() {
    v2_case(BPF_F_ALLOW_MULTI);
}

#[test]
fn cgroup_v2_bpf_replace_single_program() {
    v2_case(0);
}

/// Several programs on the container's cgroup (`BPF_F_ALLOW_MULTI`: a runtime's and another
/// manager's) each decide, and a device opens only where all allow it: every one is extended,
/// each keeps what it denied. A program on an ancestor cgroup (shared with other containers) is
/// left alone, so a GPU it denies stays denied.
#[test]
fn cgroup_v2_every_program_is_extended_and_an_ancestors_still_applies() {
    require_root();
    let parent = CgroupDir::create("/sys/fs/cgroup/unified", &unique("gpuctk-test"));
    let child = CgroupDir::create(parent.0.to_str().unwrap(), "ctr");
    let runtime = bpf::device_program(&runc_like_rules(), false).unwrap();
    let mut other_rules = runc_like_rules();
    other_rules[1] = DeviceRule::allow_char(1, 7, ACCESS_ALL);
    let other = bpf::device_program(&other_rules, false).unwrap();
    bpf::attach_device_program(&child.0, &runtime, BPF_F_ALLOW_MULTI).unwrap();
    bpf::attach_device_program(&child.0, &other, BPF_F_ALLOW_MULTI).unwrap();
    let (_, before_ids) = bpf::attached_programs(&child.0).unwrap();
    assert_eq!(before_ids.len(), 2);

    let tmp = tempfile::tempdir().unwrap();
    let gpu0 = tmp.path().join("nvidia0");
    let gpu1 = tmp.path().join("nvidia1");
    let null = tmp.path().join("null");
    let zero = tmp.path().join("zero");
    let full = tmp.path().join("full");
    common::mknod(&gpu0, 195, 0, 0o666);
    common::mknod(&gpu1, 195, 1, 0o666);
    common::mknod(&null, 1, 3, 0o666);
    common::mknod(&zero, 1, 5, 0o666);
    common::mknod(&full, 1, 7, 0o666);
    let procs = child.0.join("cgroup.procs");
    let nodes: [&Path; 5] = [&gpu0, &gpu1, &null, &zero, &full];
    let before = open_errnos_in(&[&procs], &nodes);
    assert_eq!(names(&before), ["EPERM", "EPERM", "ok", "EPERM", "EPERM"]);

    let out = bpf::allow_v2(&child.0, &[DeviceRule::allow_char(195, 0, 6)]).unwrap();
    assert_eq!(out.replaced.len(), 2, "{out:?}");
    let (flags, ids) = bpf::attached_programs(&child.0).unwrap();
    assert_eq!(flags, BPF_F_ALLOW_MULTI);
    assert_eq!(ids.len(), 2, "each replaced in place, none added");
    assert!(ids.iter().all(|id| !before_ids.contains(id)), "{ids:?}");
    let after = open_errnos_in(&[&procs], &nodes);
    assert_eq!(names(&after), ["ENXIO", "EPERM", "ok", "EPERM", "EPERM"]);

    // An ancestor's program also decides for the child; the hook never widens it.
    let deny_gpus = bpf::device_program(&runc_like_rules(), false).unwrap();
    bpf::attach_device_program(&parent.0, &deny_gpus, BPF_F_ALLOW_MULTI).unwrap();
    let under_parent = open_errnos_in(&[&procs], &nodes);
    assert_eq!(
        names(&under_parent),
        ["EPERM", "EPERM", "ok", "EPERM", "EPERM"]
    );
    bpf::allow_v2(&child.0, &[DeviceRule::allow_char(195, 0, 6)]).unwrap();
    assert_eq!(bpf::attached_programs(&parent.0).unwrap().1.len(), 1);
    let still = open_errnos_in(&[&procs], &nodes);
    assert_eq!(names(&still)[0], "EPERM");
}

#[test]
fn cgroup_v2_without_programs_is_a_no_op() {
    require_root();
    let dir = CgroupDir::create("/sys/fs/cgroup/unified", &unique("gpuctk-test"));
    let out = bpf::allow_v2(&dir.0, &[DeviceRule::allow_char(195, 0, 6)]).unwrap();
    assert!(out.replaced.is_empty());
    assert!(bpf::attached_programs(&dir.0).unwrap().1.is_empty());
}

// ---------------------------------------------------------------- runc

fn runc() -> &'static str {
    for p in ["/usr/sbin/runc", "/usr/bin/runc", "/usr/local/bin/runc"] {
        if Path::new(p).exists() {
            return p;
        }
    }
    panic!("runc not found: apt-get install runc");
}

/// A runc container in its own state dir, deleted on drop.
struct Container {
    state: PathBuf,
    id: String,
}

impl Container {
    fn runc(&self, args: &[&str]) -> std::process::Output {
        let mut a = vec!["--root", self.state.to_str().unwrap()];
        a.extend_from_slice(args);
        common::run(runc(), &a)
    }

    /// `runc create` with the container's stdio going to files.
    fn create(tmp: &Path, bundle: &Path) -> Container {
        let c = Container {
            state: tmp.join("runc-state"),
            id: unique("gpuctk-legacy"),
        };
        let out = std::fs::File::create(tmp.join("runc.out")).unwrap();
        let err = std::fs::File::create(tmp.join("runc.err")).unwrap();
        let status = Command::new(runc())
            .args(["--root", c.state.to_str().unwrap(), "create", "--bundle"])
            .arg(bundle)
            .arg(&c.id)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .expect("run runc");
        assert!(
            status.success(),
            "runc create: {status}: {}",
            std::fs::read_to_string(tmp.join("runc.err")).unwrap_or_default()
        );
        c
    }

    fn state(&self) -> serde_json::Value {
        let out = self.runc(&["state", &self.id]);
        assert!(out.status.success(), "runc state: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn pid(&self) -> i32 {
        self.state()["pid"].as_i64().unwrap() as i32
    }

    fn start_and_wait(&self) {
        let out = self.runc(&["start", &self.id]);
        assert!(out.status.success(), "runc start: {out:?}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.state()["status"] != "stopped" {
            assert!(Instant::now() < deadline, "container did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.runc(&["delete", "--force", &self.id]);
    }
}

/// A bundle whose process writes the probe's report and a `cat` of
/// /dev/nvidia0 into the rootfs.
fn make_bundle(dir: &Path) -> PathBuf {
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    create_rootfs(&bundle.join("rootfs"), &RootfsConfig::default()).unwrap();
    common::run_ok(runc(), &["spec", "--bundle", bundle.to_str().unwrap()]);
    let path = bundle.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    cfg["process"]["terminal"] = false.into();
    cfg["root"]["readonly"] = false.into();
    cfg["process"]["args"] = serde_json::json!([
        "/bin/sh",
        "-c",
        "/usr/bin/gpuctk-probe > /probe.out 2>&1; cat /dev/nvidia0 > /cat.out 2>&1; true"
    ]);
    std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    bundle
}

fn opts(list: &str) -> Vec<String> {
    list.split(',').map(str::to_string).collect()
}

fn node(path: &str, host: &Path, major: u32, minor: u32) -> DeviceNode {
    DeviceNode {
        path: path.to_string(),
        host_path: Some(host.display().to_string()),
        r#type: Some("c".into()),
        major: Some(major.into()),
        minor: Some(minor.into()),
        file_mode: Some(0o666),
        permissions: Some("rwm".into()),
        uid: None,
        gid: None,
    }
}

fn hook(args: &[&str]) -> Hook {
    let mut a = vec!["nvidia-cdi-hook".to_string()];
    a.extend(args.iter().map(|s| s.to_string()));
    Hook {
        hook_name: "createContainer".into(),
        path: "/usr/bin/nvidia-cdi-hook".into(),
        args: a,
        env: vec!["NVIDIA_CTK_DEBUG=false".into()],
        timeout: None,
    }
}

fn statvfs_flags(p: &Path) -> u64 {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs is plain old data; valid path and pointer.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::statvfs(c.as_ptr(), &mut st) },
        0,
        "statvfs {}",
        p.display()
    );
    st.f_flag
}

const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

fn gpu_edits(host: &gpuctk_mockhost::MockHost) -> ContainerEdits {
    let dev = host.dev_root.join("dev");
    let lib = |n: &str| host.lib_path().join(format!("{n}.so.{DRIVER}"));
    let mount = |n: &str| Mount {
        host_path: lib(n).display().to_string(),
        container_path: format!("{LIBDIR}/{n}.so.{DRIVER}"),
        options: opts("ro,nosuid,nodev,rbind,rprivate"),
        r#type: None,
    };
    ContainerEdits {
        env: vec!["NVIDIA_VISIBLE_DEVICES=void".into()],
        device_nodes: vec![
            node("/dev/nvidia0", &dev.join("nvidia0"), 195, 0),
            node("/dev/nvidia1", &dev.join("nvidia1"), 195, 1),
            node("/dev/nvidiactl", &dev.join("nvidiactl"), 195, 255),
            node(
                "/dev/nvidia-uvm",
                &dev.join("nvidia-uvm"),
                host.uvm_major,
                0,
            ),
        ],
        hooks: gpu_ops()
            .iter()
            .map(|(_, op)| op.to_hook("/usr/bin/nvidia-cdi-hook"))
            .chain([hook(&["frobnicate", "--x"])])
            .collect(),
        mounts: vec![mount("libcuda"), mount("libnvidia-ml")],
        ..ContainerEdits::default()
    }
}

/// The typed operations [`gpu_edits`] carries as its first hooks (the last one is not ours).
fn gpu_ops() -> Vec<(usize, InRootOp)> {
    vec![
        (
            0,
            InRootOp::CreateSymlinks {
                links: vec![Link::parse(&format!("libcuda.so.1::{LIBDIR}/libcuda.so")).unwrap()],
            },
        ),
        (
            1,
            InRootOp::EnableCudaCompat {
                host_driver_version: Some(DRIVER.into()),
                host_cuda_version: None,
                compat_root: gpuctk_core::ops::DEFAULT_COMPAT_ROOT.into(),
            },
        ),
        (
            2,
            InRootOp::UpdateLdcache {
                folders: vec![LIBDIR.into()],
            },
        ),
    ]
}

fn mock_host(dir: &Path) -> gpuctk_mockhost::MockHost {
    let mut cfg = HostConfig::new(DRIVER, (12, 8));
    cfg.gpus = 2;
    cfg.ldconfig = PathBuf::from(common::ldconfig());
    create_host(&dir.join("host"), &cfg).unwrap()
}

#[test]
fn runc_container_gets_gpus_libraries_and_cache() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let host = mock_host(tmp.path());
    let bundle = make_bundle(tmp.path());
    let rootfs = bundle.join("rootfs");
    let c = Container::create(tmp.path(), &bundle);
    let pid = c.pid();
    let ns_before = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    // A directory mount too (firmware-like, IPC-style options).
    let fw = tmp.path().join("fw");
    std::fs::create_dir_all(&fw).unwrap();
    std::fs::write(fw.join("gsp.bin"), "firmware").unwrap();
    let mut edits = gpu_edits(&host);
    edits.mounts.push(Mount {
        host_path: fw.display().to_string(),
        container_path: format!("/lib/firmware/nvidia/{DRIVER}"),
        options: opts("nosuid,nodev,rbind,rprivate,noexec"),
        r#type: None,
    });

    let report = inject(&Target::new(pid, &rootfs), &edits, &gpu_ops()).unwrap();

    assert_eq!(std::fs::read_link("/proc/self/ns/mnt").unwrap(), ns_before);
    assert!(report.entered_namespace);
    assert_eq!(
        report.root,
        Path::new("/"),
        "after create the runtime has pivoted"
    );
    assert!(
        report.cgroup.starts_with("v1 /sys/fs/cgroup/devices/"),
        "{report:?}"
    );
    assert_eq!(report.device_nodes.len(), 4);
    assert_eq!(report.mounts.len(), 3);
    assert_eq!(report.links, 1);
    assert!(report.ldcache.as_ref().unwrap().total_entries > 0);
    assert!(
        report.notes.iter().any(|n| n.contains("frobnicate")),
        "{:?}",
        report.notes
    );
    // On the host the target is only the empty file made as a mount point:
    // the mount lives in the container's namespace.
    let host_view = rootfs
        .join(&LIBDIR[1..])
        .join(format!("libcuda.so.{DRIVER}"));
    assert_eq!(std::fs::metadata(&host_view).unwrap().len(), 0);
    let inside = PathBuf::from(format!("/proc/{pid}/root{LIBDIR}/libcuda.so.{DRIVER}"));
    assert!(std::fs::metadata(&inside).unwrap().len() > 0);
    let lib_flags = statvfs_flags(&inside);
    let want = libc::ST_RDONLY | libc::ST_NOSUID | libc::ST_NODEV;
    assert_eq!(lib_flags & want, want, "library mount flags {lib_flags:#x}");
    assert_eq!(
        lib_flags & libc::ST_NOEXEC,
        0,
        "libraries must stay executable"
    );
    let fw_inside = PathBuf::from(format!("/proc/{pid}/root/lib/firmware/nvidia/{DRIVER}"));
    assert_eq!(
        std::fs::read_to_string(fw_inside.join("gsp.bin")).unwrap(),
        "firmware"
    );
    let fw_flags = statvfs_flags(&fw_inside);
    let want = libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOEXEC;
    assert_eq!(fw_flags & want, want, "dir mount flags {fw_flags:#x}");
    assert_eq!(fw_flags & libc::ST_RDONLY, 0, "rw dir mount");
    let node = std::fs::metadata(format!("/proc/{pid}/root/dev/nvidia1")).unwrap();
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    assert!(node.file_type().is_char_device());
    assert_eq!(node.rdev(), libc::makedev(195, 1));
    assert_eq!(node.mode() & 0o7777, 0o666);

    c.start_and_wait();
    let probe = std::fs::read_to_string(rootfs.join("probe.out")).unwrap();
    let r = ProbeReport::parse(&probe);
    assert_eq!(r.device("/dev/nvidia0"), Some("ENXIO"), "{probe}");
    assert_eq!(r.device("/dev/nvidia1"), Some("ENXIO"), "{probe}");
    assert_eq!(r.device("/dev/nvidiactl"), Some("ENXIO"), "{probe}");
    assert!(
        matches!(r.libcuda, Some(gpuctk_mockhost::LibraryLoad::Loaded { .. })),
        "{probe}"
    );
    assert_eq!(r.cu_device_count, Some((0, 2)), "{probe}");
    let cat = std::fs::read_to_string(rootfs.join("cat.out")).unwrap();
    assert!(cat.contains("No such device or address"), "{cat}");
}

#[test]
fn runc_container_without_injection_has_no_node() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let bundle = make_bundle(tmp.path());
    let c = Container::create(tmp.path(), &bundle);
    c.start_and_wait();
    let cat = std::fs::read_to_string(bundle.join("rootfs/cat.out")).unwrap();
    assert!(cat.contains("No such file or directory"), "{cat}");
    let probe = std::fs::read_to_string(bundle.join("rootfs/probe.out")).unwrap();
    assert_eq!(ProbeReport::parse(&probe).device("/dev/nvidia0"), None);
}

#[test]
fn runc_container_with_no_cgroups_sees_eperm() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let host = mock_host(tmp.path());
    let bundle = make_bundle(tmp.path());
    let c = Container::create(tmp.path(), &bundle);
    let mut t = Target::new(c.pid(), bundle.join("rootfs"));
    t.no_cgroups = true;
    let report = inject(&t, &gpu_edits(&host), &gpu_ops()).unwrap();
    assert_eq!(report.cgroup, "skipped");
    c.start_and_wait();
    let cat = std::fs::read_to_string(bundle.join("rootfs/cat.out")).unwrap();
    assert!(cat.contains("Operation not permitted"), "{cat}");
}

#[test]
fn malicious_symlinked_libdir_keeps_the_mount_inside_the_root() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let host = mock_host(tmp.path());
    let bundle = make_bundle(tmp.path());
    let rootfs = bundle.join("rootfs");
    // A host directory the image points at.
    let victim = tmp.path().join("victim-libdir");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), "host file").unwrap();
    let before = common::snapshot(&victim);
    let libdir = rootfs.join(&LIBDIR[1..]);
    std::fs::rename(&libdir, rootfs.join("usr/lib/real-libdir")).unwrap();
    std::os::unix::fs::symlink(&victim, &libdir).unwrap();

    let c = Container::create(tmp.path(), &bundle);
    let pid = c.pid();
    let mut edits = gpu_edits(&host);
    edits.hooks.clear();
    let report = inject(&Target::new(pid, &rootfs), &edits, &[]).unwrap();
    assert_eq!(report.mounts.len(), 2);

    assert_eq!(
        common::snapshot(&victim),
        before,
        "the host directory changed"
    );
    // The mount landed at the link's target resolved inside the root.
    let inside = common::rerooted(
        &PathBuf::from(format!("/proc/{pid}/root")),
        &victim.join(format!("libcuda.so.{DRIVER}")),
    );
    let want = std::fs::read(host.lib_path().join(format!("libcuda.so.{DRIVER}"))).unwrap();
    assert_eq!(
        std::fs::read(&inside).unwrap(),
        want,
        "{}",
        inside.display()
    );
    assert!(rootfs
        .join(victim.strip_prefix("/").unwrap())
        .join(format!("libcuda.so.{DRIVER}"))
        .exists());
}

#[test]
fn existing_foreign_file_at_a_node_path_is_refused() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let host = mock_host(tmp.path());
    let bundle = make_bundle(tmp.path());
    let c = Container::create(tmp.path(), &bundle);
    let pid = c.pid();
    let mut edits = gpu_edits(&host);
    edits.hooks.clear();
    // /dev/null is 1:3; asking for a GPU node there must not replace it.
    edits.device_nodes[0].path = "/dev/null".into();
    let mut t = Target::new(pid, bundle.join("rootfs"));
    t.no_cgroups = true;
    let e = inject(&t, &edits, &[]).unwrap_err().to_string();
    assert!(e.contains("/dev/null") && e.contains("refusing"), "{e}");
    // The mounts made before the failure were undone.
    let inside = PathBuf::from(format!("/proc/{pid}/root{LIBDIR}/libcuda.so.{DRIVER}"));
    assert!(!inside.exists(), "{} left behind", inside.display());
}

// ---------------------------------------------------------------- prestart

/// Entry point when this test binary runs as runc's prestart hook (the
/// production path: host namespaces, the container's mount namespace set
/// up, its rootfs not yet pivoted into). Does nothing unless runc called it.
#[test]
#[ignore = "run by runc as a prestart hook from runc_prestart_hook_injects_before_pivot_root"]
fn prestart_hook_entry() {
    let (Some(edits), Some(out)) = (
        std::env::var_os("GPUCTK_TEST_EDITS"),
        std::env::var_os("GPUCTK_TEST_REPORT"),
    ) else {
        return;
    };
    let result = (|| -> Result<String, String> {
        let state = gpuctk_container::State::from_reader(std::io::stdin().lock())
            .map_err(|e| e.to_string())?;
        let rootfs = gpuctk_container::container_root(&state).map_err(|e| e.to_string())?;
        let pid = state.pid.ok_or("no pid in the state")? as i32;
        let edits: ContainerEdits =
            serde_json::from_slice(&std::fs::read(&edits).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        let report =
            inject(&Target::new(pid, rootfs), &edits, &gpu_ops()).map_err(|e| e.to_string())?;
        Ok(format!(
            "root={}\nentered={}\ncgroup={}\nmounts={}\nnodes={}\n",
            report.root.display(),
            report.entered_namespace,
            report.cgroup,
            report.mounts.len(),
            report.device_nodes.len()
        ))
    })();
    let text = match &result {
        Ok(t) => format!("ok\n{t}"),
        Err(e) => format!("error\n{e}\n"),
    };
    std::fs::write(out, text).unwrap();
    assert!(result.is_ok(), "{result:?}");
}

#[test]
fn runc_prestart_hook_injects_before_pivot_root() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let host = mock_host(tmp.path());
    let bundle = make_bundle(tmp.path());
    let rootfs = bundle.join("rootfs");
    let edits_file = tmp.path().join("edits.json");
    std::fs::write(&edits_file, serde_json::to_vec(&gpu_edits(&host)).unwrap()).unwrap();
    let report_file = tmp.path().join("hook-report.txt");
    let exe = std::env::current_exe().unwrap();
    let cfg_path = bundle.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
    cfg["hooks"] = serde_json::json!({
        "prestart": [{
            "path": exe,
            "args": [exe, "--exact", "prestart_hook_entry", "--ignored", "--test-threads=1", "-q"],
            "env": [
                format!("GPUCTK_TEST_EDITS={}", edits_file.display()),
                format!("GPUCTK_TEST_REPORT={}", report_file.display()),
            ],
            "timeout": 60
        }]
    });
    std::fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();

    let id = unique("gpuctk-legacy-pre");
    let state = tmp.path().join("runc-state");
    let out = Command::new(runc())
        .args(["--root", state.to_str().unwrap(), "run", "--bundle"])
        .arg(&bundle)
        .arg(&id)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()
        .expect("run runc");
    let _ = common::run(
        runc(),
        &["--root", state.to_str().unwrap(), "delete", "--force", &id],
    );
    let hook = std::fs::read_to_string(&report_file).unwrap_or_default();
    assert!(
        out.status.success(),
        "runc run: {}\n{}\nhook: {hook}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(hook.starts_with("ok\n"), "{hook}");
    assert!(
        hook.contains(&format!("root={}\n", rootfs.display())),
        "the hook should find the rootfs not yet pivoted into: {hook}"
    );
    assert!(hook.contains("entered=true"), "{hook}");
    assert!(hook.contains("cgroup=v1 "), "{hook}");

    let probe = std::fs::read_to_string(rootfs.join("probe.out")).unwrap();
    let r = ProbeReport::parse(&probe);
    assert_eq!(r.device("/dev/nvidia0"), Some("ENXIO"), "{probe}");
    assert_eq!(r.device("/dev/nvidia1"), Some("ENXIO"), "{probe}");
    assert_eq!(r.cu_device_count, Some((0, 2)), "{probe}");
    let cat = std::fs::read_to_string(rootfs.join("cat.out")).unwrap();
    assert!(cat.contains("No such device or address"), "{cat}");
}
