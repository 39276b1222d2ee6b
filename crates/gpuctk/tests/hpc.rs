//! enroot (Slurm + pyxis) and Apptainer `--nvccli` reach the GPUs through
//! `nvidia-container-cli configure` without `--pid`, in the container's mount (and user)
//! namespace. Neither client is packaged here, so these tests run enroot's own invocation
//! (`98-nvidia.sh`: `--user configure --no-cgroups --ldconfig=@... [--device=LIST] --CAPS...
//! [--require=EXPR]... ROOTFS`) the three ways enroot does: as root in a user namespace
//! (its default), as an unprivileged user in its own user namespace (the Slurm case), and as
//! root without one (`ENROOT_ALLOW_SUPERUSER`); with the host's `/dev` bound in (enroot's
//! default), a restricted `/dev` (`ENROOT_RESTRICT_DEV`) or the rootfs's own (the user's, root's,
//! read-only), each giving mknod another errno. Then the probe and `nvidia-smi` run
//! chrooted in that rootfs. Every mount lives in a private mount namespace.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuctk_mockhost::ProbeReport;

use crate::util::*;

/// Who runs the hook.
#[derive(Clone, Copy, Debug)]
enum As {
    /// Root in a user namespace (enroot's default).
    RootInUserns,
    /// An unprivileged user in a user namespace of its own (Slurm).
    User,
    /// Root, no user namespace (`ENROOT_ALLOW_SUPERUSER`).
    Root,
}

const NOBODY: u32 = 65534;

/// The container's `/dev` while the hook runs.
#[derive(Clone, Copy, Debug)]
enum Dev {
    /// enroot's `ENROOT_RESTRICT_DEV`: a tmpfs with the basic nodes.
    Restricted,
    /// enroot's default: the host's `/dev` bound in.
    Host,
    /// Nothing mounted: the rootfs's own `/dev` directory.
    Own,
    /// The rootfs's own `/dev`, read-only.
    ReadOnly,
}

struct Site {
    t: TestDir,
    host: Host,
    cli: PathBuf,
    config: PathBuf,
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    probe: ProbeReport,
    smi: String,
    /// What the `after` commands printed in the container.
    after: String,
}

impl Ran {
    fn gpus(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .probe
            .devices
            .iter()
            .filter_map(|(p, _)| p.strip_prefix("/dev/nvidia")?.parse().ok())
            .collect();
        v.sort();
        v
    }
}

impl Site {
    fn new() -> Site {
        Site::with_imex(0)
    }

    /// A site whose host has `imex` IMEX channels.
    fn with_imex(imex: u32) -> Site {
        if imex == 0 {
            Site::with_host_args(&[])
        } else {
            Site::with_host_args(&["--gpus", "4", "--imex-channels", &imex.to_string()])
        }
    }

    /// A site whose host is `mock-host create` with `args` (none: 4 GPUs).
    fn with_host_args(args: &[&str]) -> Site {
        let t = TestDir::new();
        // The unprivileged user must reach the mock host and its rootfs.
        std::fs::set_permissions(
            t.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let host = if args.is_empty() {
            mock_host(&t, "host", 4, "570.124.06", "debian")
        } else {
            let dir = t.join("host");
            let mut argv = vec!["mock-host", "create", dir.to_str().unwrap()];
            argv.extend_from_slice(args);
            ok(&argv);
            Host::at(&dir)
        };
        let cli = t.join("bin/nvidia-container-cli");
        std::fs::create_dir_all(cli.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
        let config = t.join("config.toml");
        host.write_cli_config(&config, "");
        Site {
            t,
            host,
            cli,
            config,
        }
    }

    /// A fresh rootfs, owned by the user who will run the hook.
    fn rootfs(&self, name: &str, who: As) -> PathBuf {
        let r = self.t.join(name);
        ok(&["mock-host", "rootfs", r.to_str().unwrap()]);
        if let As::User = who {
            let st = Command::new("chown")
                .arg("-R")
                .arg(format!("{NOBODY}:{NOBODY}"))
                .arg(&r)
                .status()
                .unwrap();
            assert!(st.success());
        }
        r
    }

    /// enroot's hook on `rootfs`, then the probe and nvidia-smi in it.
    fn run(&self, who: As, restrict_dev: bool, rootfs: &Path, cli_args: &[&str]) -> Ran {
        self.run_with(who, restrict_dev, rootfs, &[], cli_args)
    }

    /// [`Site::run`] with options before `configure` (enroot's `--debug=/dev/stderr`).
    fn run_with(
        &self,
        who: As,
        restrict_dev: bool,
        rootfs: &Path,
        global: &[&str],
        cli_args: &[&str],
    ) -> Ran {
        // enroot's 98-nvidia.sh.
        let mut argv = vec!["--user"];
        argv.extend_from_slice(global);
        argv.extend(["configure", "--no-cgroups", "--ldconfig=@/sbin/ldconfig"]);
        argv.extend_from_slice(cli_args);
        self.run_argv(who, restrict_dev, rootfs, &argv, "", &[])
    }

    /// `nvidia-container-cli ARGV ROOTFS` with `env` added, then the probe, nvidia-smi and the
    /// shell commands `after` chrooted in the rootfs.
    fn run_argv(
        &self,
        who: As,
        restrict_dev: bool,
        rootfs: &Path,
        argv: &[&str],
        after: &str,
        env: &[(&str, &str)],
    ) -> Ran {
        let dev = if restrict_dev {
            Dev::Restricted
        } else {
            Dev::Host
        };
        self.run_dev(who, dev, rootfs, argv, after, env)
    }

    /// [`Site::run_argv`] with the container's `/dev` set up as `dev` says.
    fn run_dev(
        &self,
        who: As,
        dev: Dev,
        rootfs: &Path,
        argv: &[&str],
        after: &str,
        env: &[(&str, &str)],
    ) -> Ran {
        let root = rootfs.to_str().unwrap();
        let dev = match dev {
            // 10-devices.sh: a tmpfs /dev with the basic nodes bound in.
            Dev::Restricted => format!(
                "mount -t tmpfs -o nosuid,noexec,mode=755 tmpfs {root}/dev && \
                 for d in null zero urandom; do touch {root}/dev/$d && mount --bind /dev/$d {root}/dev/$d; done"
            ),
            // The host's /dev (here the mock host's) bound into the container.
            Dev::Host => format!("mount --rbind {}/dev {root}/dev", self.host.dev_root()),
            Dev::Own => "true".to_string(),
            Dev::ReadOnly => {
                format!("mount --bind {root}/dev {root}/dev && mount -o remount,bind,ro {root}/dev")
            }
        };
        let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
        let quoted: Vec<String> = argv.iter().map(|a| quote(a)).collect();
        let inside = format!(
            "/usr/bin/gpuctk-probe; echo ---smi---; nvidia-smi -L 2>&1 || true; echo ---after---; {after}"
        );
        let script = format!(
            "set -e; {dev}; {cli} {args} {root}; chroot {root} /bin/sh -c {inside}",
            cli = self.cli.display(),
            args = quoted.join(" "),
            inside = quote(&inside),
        );
        let mut c = match who {
            As::RootInUserns => {
                let mut c = Command::new("unshare");
                c.args(["--user", "--map-root-user", "--mount"]);
                c
            }
            As::User => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={NOBODY}"))
                    .arg(format!("--regid={NOBODY}"))
                    .arg("--clear-groups")
                    .args(["unshare", "--user", "--map-root-user", "--mount"]);
                c
            }
            As::Root => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private"]);
                c
            }
        };
        c.args(["sh", "-c", &script])
            .env("GPUCTK_CONFIG", &self.config)
            .env_remove("NVIDIA_VISIBLE_DEVICES")
            .envs(env.iter().copied());
        let out = c.output().expect("unshare and setpriv (util-linux)");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let (probe, smi) = stdout.split_once("---smi---").unwrap_or((&stdout, ""));
        let (smi, after) = smi.split_once("---after---").unwrap_or((smi, ""));
        Ran {
            code: out.status.code().unwrap_or(-1),
            probe: ProbeReport::parse(probe),
            smi: smi.to_string(),
            after: after.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            stdout: stdout.clone(),
        }
    }
}

fn ok_run(r: &Ran, what: &str) {
    assert_eq!(r.code, 0, "{what}:\n{}\n{}", r.stdout, r.stderr);
    assert!(
        matches!(
            r.probe.libcuda,
            Some(gpuctk_mockhost::LibraryLoad::Loaded { .. })
        ),
        "{what}: libcuda did not load:\n{}",
        r.stdout
    );
}

#[test]
fn enroot_as_root_in_a_user_namespace() {
    let s = Site::new();
    // enroot's default /dev: the host's, so every node is there; the driver comes in.
    let r = s.run(
        As::RootInUserns,
        false,
        &s.rootfs("r1", As::RootInUserns),
        &["--device=all", "--compute", "--utility"],
    );
    ok_run(&r, "all");
    assert_eq!(r.probe.cu_device_count, Some((0, 4)), "{}", r.stdout);
    assert_eq!(r.smi.matches("GPU ").count(), 4, "{}", r.smi);
    // A restricted /dev: only the GPUs asked for, the list escaped as enroot passes it.
    let r = s.run(
        As::RootInUserns,
        true,
        &s.rootfs("r2", As::RootInUserns),
        &["--device=1\\,3", "--compute", "--utility"],
    );
    ok_run(&r, "1,3");
    assert_eq!(r.gpus(), [1, 3], "{}", r.stdout);
    assert_eq!(r.smi.matches("GPU ").count(), 2, "{}", r.smi);
}

#[test]
fn enroot_as_an_unprivileged_user() {
    let s = Site::new();
    let uuid = s.host.uuids()[2].clone();
    let r = s.run(
        As::User,
        true,
        &s.rootfs("u1", As::User),
        &[&format!("--device={uuid}"), "--compute", "--utility"],
    );
    ok_run(&r, "uuid");
    assert_eq!(r.gpus(), [2], "{}", r.stdout);
    assert!(r.smi.contains(&uuid), "{}", r.smi);
    // The host's /dev bound in: its nodes are used as they are (no chmod as this user).
    let r = s.run(
        As::User,
        false,
        &s.rootfs("u2", As::User),
        &["--device=0", "--utility"],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.smi.contains("GPU 0"), "{}", r.smi);
}

#[test]
fn enroot_without_a_user_namespace() {
    let s = Site::new();
    // No --device: NVIDIA_VISIBLE_DEVICES=none, the driver without a GPU.
    let r = s.run_with(
        As::Root,
        true,
        &s.rootfs("n1", As::Root),
        &["--debug=/dev/stderr"],
        &["--compute", "--utility"],
    );
    ok_run(&r, "none");
    assert!(r.gpus().is_empty(), "{}", r.stdout);
    // --debug=/dev/stderr: the log goes there.
    assert!(r.stderr.contains("injected"), "{}", r.stderr);
}

/// enroot keeps the rootfs between runs: a later run asking for less (utility after compute)
/// must work; the cache of the first run is not carried into the second.
#[test]
fn a_second_run_on_the_same_root_with_fewer_capabilities() {
    let s = Site::new();
    let root = s.rootfs("p", As::RootInUserns);
    let first = s.run(
        As::RootInUserns,
        true,
        &root,
        &["--device=0", "--compute", "--utility"],
    );
    ok_run(&first, "compute");
    let second = s.run(As::RootInUserns, true, &root, &["--device=0", "--utility"]);
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    assert!(second.smi.contains("GPU 0"), "{}", second.smi);
    let cache = Command::new("ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(root.join("etc/ld.so.cache"))
        .output()
        .unwrap();
    let cache = String::from_utf8_lossy(&cache.stdout);
    assert!(!cache.contains("libcuda.so.1"), "a stale entry: {cache}");
    assert!(cache.contains("libnvidia-ml.so.1"), "{cache}");
}

#[test]
fn a_requirement_that_fails_stops_the_hook() {
    let s = Site::new();
    let r = s.run(
        As::RootInUserns,
        true,
        &s.rootfs("q", As::RootInUserns),
        &["--device=0", "--compute", "--require=cuda>=13.0"],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("--require: cuda>=13.0 not met"),
        "{}",
        r.stderr
    );
}

/// What the container must see for the MIG capabilities: the driver's capability files under
/// `/proc/driver/nvidia/capabilities`, read-only, and the `/dev/nvidia-caps` nodes they name.
const MIG_AFTER: &str = "cat /proc/driver/nvidia/capabilities/mig/config; \
     cat /proc/driver/nvidia/capabilities/mig/monitor; \
     touch /proc/driver/nvidia/capabilities/x 2>/dev/null && echo writable || echo read-only";

fn assert_mig_capabilities(r: &Ran, what: &str, open: &str) {
    ok_run(r, what);
    assert_eq!(
        r.after.trim(),
        "DeviceFileMinor: 1\nDeviceFileMode: 292\nDeviceFileModify: 1\n\
         DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\nread-only",
        "{what}: {}",
        r.stdout
    );
    for n in [
        "/dev/nvidia-caps/nvidia-cap1",
        "/dev/nvidia-caps/nvidia-cap2",
    ] {
        assert_eq!(r.probe.device(n), Some(open), "{what}: {n}: {}", r.stdout);
    }
}

/// Issue 12: enroot's `--mig-config=LIST --mig-monitor=LIST` (from `NVIDIA_MIG_CONFIG_DEVICES`
/// and `NVIDIA_MIG_MONITOR_DEVICES`) were refused as unknown options. Now the container gets
/// the capability files and nodes, as root in a user namespace (nodes bound from the host's),
/// as root without one (nodes made), and as an unprivileged user.
#[test]
fn enroot_mig_flags_accepted() {
    let s = Site::new();
    let mig = ["--mig-config=all", "--mig-monitor=all"];
    let r = s.run_argv(
        As::RootInUserns,
        true,
        &s.rootfs("m1", As::RootInUserns),
        &[
            "--user",
            "configure",
            "--no-cgroups",
            "--ldconfig=@/sbin/ldconfig",
            "--device=0",
            mig[0],
            mig[1],
            "--compute",
            "--utility",
        ],
        MIG_AFTER,
        &[],
    );
    assert_mig_capabilities(&r, "root in a user namespace", "ENXIO");
    assert_eq!(r.gpus(), [0], "{}", r.stdout);
    let r = s.run_argv(
        As::Root,
        true,
        &s.rootfs("m2", As::Root),
        &[
            "--user",
            "--debug=/dev/stderr",
            "configure",
            "--no-cgroups",
            "--ldconfig=@/sbin/ldconfig",
            "--device=1\\,2",
            mig[0],
            mig[1],
            "--compute",
            "--utility",
        ],
        MIG_AFTER,
        &[],
    );
    assert_mig_capabilities(&r, "root", "ENXIO");
    assert_eq!(r.gpus(), [1, 2], "{}", r.stdout);
    // The unprivileged user: the files, and the host's 0444 nodes, which it opens read-only as
    // NVML does.
    let r = s.run_argv(
        As::User,
        true,
        &s.rootfs("m3", As::User),
        &[
            "--user",
            "configure",
            "--no-cgroups",
            "--ldconfig=@/sbin/ldconfig",
            "--device=3",
            "--mig-monitor=all",
            "--compute",
            "--utility",
        ],
        "cat /proc/driver/nvidia/capabilities/mig/monitor",
        &[],
    );
    ok_run(&r, "user");
    assert!(
        r.after.contains("DeviceFileMinor: 2\n"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        r.probe.device("/dev/nvidia-caps/nvidia-cap2"),
        Some("ENXIO"),
        "{}",
        r.stdout
    );
    assert!(r.probe.device("/dev/nvidia-caps/nvidia-cap1").is_none());
}

/// libnvidia-container refuses the global MIG capabilities next to MIG devices; and a value
/// other than `all`, or a host without the capability files, is one line naming what is wrong.
#[test]
fn mig_flags_refused() {
    let s = Site::new();
    let argv = |extra: &[&'static str]| {
        let mut a = vec![
            "--user",
            "configure",
            "--no-cgroups",
            "--ldconfig=@/sbin/ldconfig",
        ];
        a.extend_from_slice(extra);
        a
    };
    let r = s.run_argv(
        As::RootInUserns,
        true,
        &s.rootfs("x1", As::RootInUserns),
        &argv(&["--device=0:1", "--mig-config=all", "--compute"]),
        "",
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr
            .contains("--device: 0:1 is a MIG device; the global MIG capabilities"),
        "{}",
        r.stderr
    );
    let r = s.run_argv(
        As::RootInUserns,
        true,
        &s.rootfs("x2", As::RootInUserns),
        &argv(&["--device=0", "--mig-config=0", "--compute"]),
        "",
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr
            .contains("--mig-config=\"0\": only `all` is accepted"),
        "{}",
        r.stderr
    );
    // A driver without MIG capabilities: the file is named, nothing is left mounted.
    std::fs::remove_file(
        PathBuf::from(s.host.proc_root()).join("driver/nvidia/capabilities/mig/monitor"),
    )
    .unwrap();
    let root = s.rootfs("x3", As::RootInUserns);
    let r = s.run_argv(
        As::RootInUserns,
        true,
        &root,
        &argv(&["--device=0", "--mig-monitor=all", "--compute"]),
        "",
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr
            .contains("driver/nvidia/capabilities/mig/monitor: No such file"),
        "{}",
        r.stderr
    );
    assert!(!root.join("proc/driver").exists());
}

/// `--imex-channel` (the legacy hook's flag for `NVIDIA_IMEX_CHANNELS`): the channels asked
/// for, and no other, in a restricted `/dev`; a channel the host lacks names its node.
#[test]
fn imex_channels_through_the_cli() {
    let s = Site::with_imex(4);
    let argv = |extra: &[&'static str]| {
        let mut a = vec![
            "--user",
            "configure",
            "--no-cgroups",
            "--ldconfig=@/sbin/ldconfig",
            "--device=0",
            "--compute",
            "--utility",
        ];
        a.extend_from_slice(extra);
        a
    };
    let r = s.run_argv(
        As::RootInUserns,
        true,
        &s.rootfs("i1", As::RootInUserns),
        &argv(&["--imex-channel=1\\,3"]),
        "",
        &[],
    );
    ok_run(&r, "imex");
    let channels: Vec<&str> = r
        .probe
        .devices
        .iter()
        .filter(|(p, _)| p.starts_with("/dev/nvidia-caps-imex-channels/"))
        .map(|(p, e)| {
            assert_eq!(e, "ENXIO", "{p}");
            p.as_str()
        })
        .collect();
    assert_eq!(
        channels,
        [
            "/dev/nvidia-caps-imex-channels/channel1",
            "/dev/nvidia-caps-imex-channels/channel3"
        ],
        "{}",
        r.stdout
    );
    let r = s.run_argv(
        As::RootInUserns,
        true,
        &s.rootfs("i2", As::RootInUserns),
        &argv(&["--imex-channel=7"]),
        "",
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("dev/nvidia-caps-imex-channels/channel7")
            && r.stderr.contains("mknod -m 666"),
        "{}",
        r.stderr
    );
    let r = s.run_argv(
        As::RootInUserns,
        true,
        &s.rootfs("i3", As::RootInUserns),
        &argv(&["--imex-channel=1048576"]),
        "",
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr
            .contains("--imex-channel: bad IMEX channel \"1048576\""),
        "{}",
        r.stderr
    );
}

/// Apptainer `--nvccli` (internal/pkg/util/gpu/nvidia.go, `NVCLIConfigure`): in a user namespace
/// `nvidia-container-cli --user configure FLAGS ROOTFS`, in setuid mode the same without
/// `--user`, as root; FLAGS are `--no-cgroups`, then `--device`, `--mig-config`, `--mig-monitor`
/// in the order of the container's env, the capabilities (`--compute --utility` by default),
/// each `--require`, and last `--ldconfig=@<host ldconfig>`; the environment is Apptainer's
/// own plus `PATH=` its default path.
#[test]
fn apptainer_nvccli() {
    let s = Site::new();
    let path = [(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    )];
    let r = s.run_argv(
        As::User,
        true,
        &s.rootfs("a1", As::User),
        &[
            "--user",
            "configure",
            "--no-cgroups",
            "--device=2",
            "--compute",
            "--utility",
            "--require=cuda>=12.0",
            "--ldconfig=@/usr/sbin/ldconfig",
        ],
        "",
        &path,
    );
    ok_run(&r, "user namespace");
    assert_eq!(r.gpus(), [2], "{}", r.stdout);
    assert!(r.smi.contains("GPU 0"), "{}", r.smi);
    // setuid mode: as root, no user namespace, MIG capabilities from the env.
    let r = s.run_argv(
        As::Root,
        true,
        &s.rootfs("a2", As::Root),
        &[
            "configure",
            "--no-cgroups",
            "--device=0,1",
            "--mig-config=all",
            "--mig-monitor=all",
            "--compute",
            "--utility",
            "--ldconfig=@/usr/sbin/ldconfig",
        ],
        MIG_AFTER,
        &path,
    );
    assert_mig_capabilities(&r, "setuid", "ENXIO");
    assert_eq!(r.gpus(), [0, 1], "{}", r.stdout);
}

/// `nvidia-container-cli list --imex-channel --mig-config --mig-monitor`: after the GPU nodes,
/// the channels' nodes, then each capability's node and file, as host paths.
#[test]
fn list_names_the_imex_channels_and_mig_capabilities() {
    let s = Site::with_imex(2);
    let out = Command::new(&s.cli)
        .args([
            "list",
            "--device=1",
            "--imex-channel=1",
            "--mig-config=all",
            "--mig-monitor=all",
            "--ipcs",
        ])
        .env("GPUCTK_CONFIG", &s.config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = s.host.dev_root();
    let proc = s.host.proc_root();
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == format!("{dev}/dev/nvidia1"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        lines[at + 1..at + 6],
        [
            format!("{dev}/dev/nvidia-caps-imex-channels/channel1"),
            format!("{dev}/dev/nvidia-caps/nvidia-cap1"),
            format!("{proc}/driver/nvidia/capabilities/mig/config"),
            format!("{dev}/dev/nvidia-caps/nvidia-cap2"),
            format!("{proc}/driver/nvidia/capabilities/mig/monitor"),
        ],
        "{stdout}"
    );
}

/// The device nodes `--device=0 --compute` gives, as the mock host has them.
const NODES: [&str; 4] = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0"];

fn configure_argv<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--user",
        "configure",
        "--no-cgroups",
        "--ldconfig=@/sbin/ldconfig",
    ];
    a.extend_from_slice(extra);
    a
}

fn sh(script: &str) {
    let st = Command::new("sh").args(["-c", script]).status().unwrap();
    assert!(st.success(), "{script}");
}

/// Issue 17: as the user (enroot under Slurm and pyxis) nothing is made with mknod, whatever the
/// kernel would answer: `EPERM` where the directory is the user's (the rootfs's own `/dev`),
/// `EACCES` where it is not (a `/dev` root made, the host's). Where no mount target can be made
/// either, one line names the node and the fix, and nothing is left behind; where the targets
/// are there (enroot's `x-create=file`, a previous start), the host's nodes are bound onto them.
#[test]
fn an_unprivileged_user_never_needs_mknod() {
    let s = Site::new();
    let argv = configure_argv(&["--device=0", "--compute", "--utility"]);
    // The user's own /dev: mknod would give EPERM.
    let r = s.run_dev(
        As::User,
        Dev::Own,
        &s.rootfs("e1", As::User),
        &argv,
        "",
        &[],
    );
    ok_run(&r, "own /dev");
    assert_eq!(r.gpus(), [0], "{}", r.stdout);
    assert_eq!(
        r.probe.device("/dev/nvidia-uvm"),
        Some("ENXIO"),
        "{}",
        r.stdout
    );
    // A /dev that root owns: mknod and creating a mount target both give EACCES.
    let root = s.rootfs("e2", As::User);
    sh(&format!("chown 0:0 {}/dev", root.display()));
    let r = s.run_dev(As::User, Dev::Own, &root, &argv, "", &[]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("device node /dev/nvidia"))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        line.contains("may not make device nodes")
            && line.contains("/dev is not writable")
            && line.contains("Permission denied")
            && line.contains("give the container a /dev it may write"),
        "{line}"
    );
    let left: Vec<_> = std::fs::read_dir(root.join("dev"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with("nvidia"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // The same /dev with the mount targets there, root's: the host's nodes are bound onto them.
    for n in NODES {
        std::fs::write(root.join("dev").join(n), b"").unwrap();
    }
    let r = s.run_dev(As::User, Dev::Own, &root, &argv, "", &[]);
    ok_run(&r, "root's /dev with targets");
    assert_eq!(r.gpus(), [0], "{}", r.stdout);
    assert_eq!(
        r.probe.device("/dev/nvidia-uvm"),
        Some("ENXIO"),
        "{}",
        r.stdout
    );
}

/// Issue 17: a node root made in the rootfs beforehand, right numbers, mode 0600: the user may
/// not chmod it (`EPERM`) nor open it; the host's node is bound over it, as libnvidia-container
/// binds over whatever is there.
#[test]
fn a_root_owned_node_in_the_rootfs_is_bound_over() {
    let s = Site::new();
    let root = s.rootfs("o1", As::User);
    let uvm = std::fs::metadata(format!("{}/dev/nvidia-uvm", s.host.dev_root())).unwrap();
    let uvm = std::os::unix::fs::MetadataExt::rdev(&uvm);
    sh(&format!(
        "mknod -m 600 {r}/dev/nvidia0 c 195 0 && mknod -m 600 {r}/dev/nvidia-uvm c {} {} && chown 0:0 {r}/dev/nvidia0 {r}/dev/nvidia-uvm",
        libc::major(uvm),
        libc::minor(uvm),
        r = root.display()
    ));
    let argv = configure_argv(&["--device=0", "--compute", "--utility"]);
    let r = s.run_dev(As::User, Dev::Own, &root, &argv, "", &[]);
    ok_run(&r, "root's nodes");
    for n in ["/dev/nvidia0", "/dev/nvidia-uvm"] {
        assert_eq!(r.probe.device(n), Some("ENXIO"), "{n}: {}", r.stdout);
    }
}

/// Issue 17: root without a user namespace on a read-only `/dev`: mknod gives `EROFS`; it falls
/// back to binding, which needs a mount target: without one, one line says so; with the targets
/// there, the host's nodes are bound onto them.
#[test]
fn a_read_only_dev_takes_bound_nodes_onto_its_targets() {
    let s = Site::new();
    let root = s.rootfs("ro", As::Root);
    let argv = configure_argv(&["--device=0", "--compute", "--utility"]);
    let r = s.run_dev(As::Root, Dev::ReadOnly, &root, &argv, "", &[]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("device node /dev/nvidia")
            && r.stderr.contains("Read-only file system")
            && r.stderr.contains("/dev is read-only"),
        "{}",
        r.stderr
    );
    for n in NODES {
        std::fs::write(root.join("dev").join(n), b"").unwrap();
    }
    let r = s.run_dev(As::Root, Dev::ReadOnly, &root, &argv, "", &[]);
    ok_run(&r, "read-only /dev with targets");
    assert_eq!(r.gpus(), [0], "{}", r.stdout);
}

/// Lists, in the container, every library file that is empty or a link to an empty file.
const EMPTY_LIBS: &str = "for f in /usr/lib/*/lib*.so* /usr/lib/lib*.so* /usr/lib64/lib*.so*; do \
     [ -e \"$f\" ] && [ ! -s \"$f\" ] && echo \"empty: $f\"; done; true";

/// Issue 17: pyxis `--container-name` reuses enroot's container root. A compute start leaves
/// its mount targets (empty files) and the links made to them; a later utility-only start must
/// not let anything find them: `dlopen("libcuda.so.1")` is "not found", not "file too short".
#[test]
fn a_reused_root_leaves_no_empty_library_to_a_later_start() {
    let s = Site::new();
    let root = s.rootfs("reuse", As::User);
    let first = s.run_dev(
        As::User,
        Dev::Restricted,
        &root,
        &configure_argv(&["--device=0", "--compute", "--utility"]),
        EMPTY_LIBS,
        &[],
    );
    ok_run(&first, "compute");
    assert_eq!(first.after.trim(), "", "{}", first.stdout);
    let second = s.run_dev(
        As::User,
        Dev::Restricted,
        &root,
        &configure_argv(&["--device=0", "--utility"]),
        EMPTY_LIBS,
        &[],
    );
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    assert!(second.smi.contains("GPU 0"), "{}", second.smi);
    assert_eq!(second.after.trim(), "", "{}", second.stdout);
    match &second.probe.libcuda {
        Some(gpuctk_mockhost::LibraryLoad::Failed(e)) => assert!(
            e.contains("No such file") && !e.contains("too short"),
            "{e}"
        ),
        other => panic!("{other:?}: {}", second.stdout),
    }
    // And a compute start after that has libcuda again.
    let third = s.run_dev(
        As::User,
        Dev::Restricted,
        &root,
        &configure_argv(&["--device=0", "--compute", "--utility"]),
        EMPTY_LIBS,
        &[],
    );
    ok_run(&third, "compute again");
    assert_eq!(third.after.trim(), "", "{}", third.stdout);
}

/// `--device` takes MIG devices (`N:M`, `MIG-<uuid>`): the parent's node and exactly the
/// instance's capability nodes and files; nvidia-smi in the container lists that partition.
#[test]
fn mig_devices_by_device_flag() {
    let s = Site::with_host_args(&["--gpus", "2", "--mig", "0=1g.10gb,1g.10gb,2g.20gb"]);
    let m = &s.host.manifest["gpus"][0]["mig"][1];
    let uuid = m["uuid"].as_str().unwrap();
    let (gi_minor, ci_minor) = (
        m["gi_minor"].as_u64().unwrap(),
        m["ci_minor"].as_u64().unwrap(),
    );
    // MIG UUIDs come from NVML's recorded answers: `cdi generate` as root records them.
    let cache = s.t.join("nvml-cache.json");
    let cfg = std::fs::read_to_string(&s.config).unwrap().replace(
        "[gpuctk]\n",
        &format!("[gpuctk]\nnvml-cache = \"{}\"\n", cache.display()),
    );
    std::fs::write(&s.config, cfg).unwrap();
    let out = s.t.join("spec.json");
    let mut args = vec![
        "cdi".to_string(),
        "generate".into(),
        "--config".into(),
        s.config.display().to_string(),
        "--output".into(),
        out.display().to_string(),
    ];
    args.extend(s.host.roots());
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    for (i, dev) in ["0:1", uuid].iter().enumerate() {
        let root = s.rootfs(&format!("m{i}"), As::RootInUserns);
        let flag = format!("--device={dev}");
        let r = s.run_argv(
            As::RootInUserns,
            true,
            &root,
            &[
                "--user",
                "configure",
                "--no-cgroups",
                "--ldconfig=@/sbin/ldconfig",
                &flag,
                "--compute",
                "--utility",
            ],
            "find /proc/driver/nvidia/capabilities -type f | sort",
            &[],
        );
        ok_run(&r, dev);
        assert_eq!(r.gpus(), [0], "{dev}: {}", r.stdout);
        let mut caps: Vec<&str> = r
            .probe
            .devices
            .iter()
            .filter(|(p, _)| p.starts_with("/dev/nvidia-caps/"))
            .map(|(p, _)| p.as_str())
            .collect();
        caps.sort();
        let want = [
            format!("/dev/nvidia-caps/nvidia-cap{gi_minor}"),
            format!("/dev/nvidia-caps/nvidia-cap{ci_minor}"),
        ];
        assert_eq!(caps, want, "{dev}: {}", r.stdout);
        assert!(
            r.smi
                .contains(&format!("  MIG 1g.10gb     Device  0: (UUID: {uuid})\n")),
            "{dev}: {}",
            r.smi
        );
        assert_eq!(r.smi.matches("MIG ").count(), 1, "{dev}: {}", r.smi);
        let gi = m["gi"].as_u64().unwrap();
        assert_eq!(
            r.after.trim(),
            format!("/proc/driver/nvidia/capabilities/gpu0/mig/gi{gi}/access\n/proc/driver/nvidia/capabilities/gpu0/mig/gi{gi}/ci0/access"),
            "{dev}"
        );
    }
}

/// `nvidia-container-cli` on a WSL2 host (`mock-host create --layout wsl`), as
/// libnvidia-container serves one: `info` from NVML (the driver store's; procfs has no NVIDIA
/// driver), `list` with `/dev/dxg` and the driver store's files, and `configure` (enroot's
/// call) giving the container `/dev/dxg` and the driver, so CUDA and nvidia-smi find the GPU.
#[test]
fn wsl_info_list_and_configure() {
    let s = Site::with_host_args(&["--layout", "wsl"]);
    let store = format!(
        "{}{}",
        s.host.driver_root(),
        s.host.manifest["driver_store"].as_str().unwrap()
    );
    let cli = |args: &[&str]| {
        let out = Command::new(&s.cli)
            .args(args)
            .env("GPUCTK_CONFIG", &s.config)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, info, err) = cli(&["info"]);
    assert_eq!(code, 0, "{info}{err}");
    for line in [
        "NVRM version:   576.02\n",
        "CUDA version:   12.9\n",
        "Device Index:   0\n",
        "Device Minor:   0\n",
        "Model:          NVIDIA GeForce RTX 4090\n",
        "Brand:          GeForce\n",
        "Architecture:   8.9\n",
    ] {
        assert!(info.contains(line), "{line:?} in {info}");
    }
    assert!(info.contains("GPU UUID:       GPU-"), "{info}");
    let (code, csv, err) = cli(&["info", "--csv"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        csv.starts_with("NVRM version,CUDA version\n576.02,12.9\n\nDevice Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n0,0,NVIDIA GeForce RTX 4090,GeForce,GPU-"),
        "{csv}"
    );
    let (code, list, err) = cli(&["list"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines[0], format!("{}/dev/dxg", s.host.dev_root()), "{list}");
    assert_eq!(lines[1], format!("{store}/nvidia-smi"), "{list}");
    assert_eq!(
        lines[2],
        format!("{}/usr/lib/wsl/lib/libdxcore.so", s.host.driver_root()),
        "{list}"
    );
    for lib in [
        "libcuda.so.1.1",
        "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1",
    ] {
        assert!(lines.contains(&format!("{store}/{lib}").as_str()), "{list}");
    }
    // The node and the libraries (nodes are always listed, as for a dGPU host); a device
    // WSL2 does not have is refused in one line.
    let (code, libs, _) = cli(&["list", "--libraries"]);
    assert_eq!(code, 0);
    assert!(
        libs.starts_with(lines[0]) && !libs.contains("nvidia-smi"),
        "{libs}"
    );
    let (code, _, err) = cli(&["list", "--device=1"]);
    assert!(
        code != 0 && err.contains("a WSL2 host has one device"),
        "{err}"
    );

    // enroot's configure: a restricted /dev, so /dev/dxg is made by the hook.
    let r = s.run(
        As::Root,
        true,
        &s.rootfs("w1", As::Root),
        &["--device=all", "--compute", "--utility"],
    );
    ok_run(&r, "wsl");
    assert_eq!(r.probe.device("/dev/dxg"), Some("ENXIO"), "{}", r.stdout);
    match &r.probe.libcuda {
        Some(gpuctk_mockhost::LibraryLoad::Loaded { realpath, .. }) => assert_eq!(
            realpath,
            &format!(
                "{}/libcuda.so.1.1",
                s.host.manifest["driver_store"].as_str().unwrap()
            ),
            "{}",
            r.stdout
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.probe.cu_device_count, Some((0, 1)), "{}", r.stdout);
    assert!(
        r.smi.contains("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-"),
        "{}",
        r.smi
    );
}
