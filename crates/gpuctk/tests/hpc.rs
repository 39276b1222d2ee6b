//! enroot (Slurm + pyxis) and Apptainer `--nvccli` reach the GPUs through
//! `nvidia-container-cli configure` without `--pid`, in the container's mount (and user)
//! namespace. Neither client is packaged here, so these tests run enroot's own invocation
//! (`98-nvidia.sh`: `--user configure --no-cgroups --ldconfig=@... [--device=LIST] --CAPS...
//! [--require=EXPR]... ROOTFS`) the three ways enroot does: as root in a user namespace
//! (its default), as an unprivileged user in its own user namespace (the Slurm case), and as
//! root without one (`ENROOT_ALLOW_SUPERUSER`); with the host's `/dev` bound in (enroot's
//! default) or a restricted `/dev` (`ENROOT_RESTRICT_DEV`). Then the probe and `nvidia-smi` run
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
        let t = TestDir::new();
        // The unprivileged user must reach the mock host and its rootfs.
        std::fs::set_permissions(
            t.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let host = mock_host(&t, "host", 4, "570.124.06", "debian");
        let cli = t.join("bin/nvidia-container-cli");
        std::fs::create_dir_all(cli.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
        let config = t.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[nvidia-container-cli]\nroot = \"{}\"\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\n",
                host.driver_root(),
                host.dev_root(),
                host.proc_root()
            ),
        )
        .unwrap();
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
        let root = rootfs.to_str().unwrap();
        let dev = if restrict_dev {
            // 10-devices.sh: a tmpfs /dev with the basic nodes bound in.
            format!(
                "mount -t tmpfs -o nosuid,noexec,mode=755 tmpfs {root}/dev && \
                 for d in null zero urandom; do touch {root}/dev/$d && mount --bind /dev/$d {root}/dev/$d; done"
            )
        } else {
            // The host's /dev (here the mock host's) bound into the container.
            format!("mount --rbind {}/dev {root}/dev", self.host.dev_root())
        };
        let quoted: Vec<String> = cli_args
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let script = format!(
            "set -e; {dev}; {cli} --user {global} configure --no-cgroups --ldconfig=@/sbin/ldconfig {args} {root}; \
             chroot {root} /bin/sh -c '/usr/bin/gpuctk-probe; echo ---smi---; nvidia-smi -L 2>&1 || true'",
            cli = self.cli.display(),
            global = global.join(" "),
            args = quoted.join(" "),
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
            .env_remove("NVIDIA_VISIBLE_DEVICES");
        let out = c.output().expect("unshare and setpriv (util-linux)");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let (probe, smi) = stdout.split_once("---smi---").unwrap_or((&stdout, ""));
        Ran {
            code: out.status.code().unwrap_or(-1),
            probe: ProbeReport::parse(probe),
            smi: smi.to_string(),
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
