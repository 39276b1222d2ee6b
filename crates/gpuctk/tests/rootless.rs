//! Rootless podman as a real unprivileged user, created by the test: the CDI spec
//! (`--device nvidia.com/gpu=N`) and our shim as podman's runtime with the user's own
//! config.toml, each under crun and runc; and `cdi generate`'s default hook path, which a user's
//! runtime must be able to run.
//!
//! The host's /etc/passwd, /etc/group, /etc/subuid and /etc/subgid are never written: each
//! podman call runs in a private mount namespace where copies holding the test's user are
//! bind-mounted over them (newuidmap and newgidmap, setuid, read them there). /dev is a tmpfs
//! there holding the host's entries (bind-mounted) plus the mock host's nodes, since a rootless
//! runtime cannot mknod and bind-mounts each device from the host's /dev instead; /var/run/cdi
//! is the test's spec directory. Then `setpriv` drops to the user, with a HOME and
//! XDG_RUNTIME_DIR of its own, where podman keeps its rootless storage (vfs).

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::*;

const IMAGE: &str = "gpuctk-rootless:latest";
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

/// Every tool the test needs, or a failure naming the missing one.
fn require_tools() {
    for tool in [
        "podman",
        "newuidmap",
        "newgidmap",
        "setpriv",
        "unshare",
        "crun",
        "runc",
    ] {
        let found = std::env::split_paths(SYSTEM_PATH).any(|d| d.join(tool).is_file());
        assert!(
            found,
            "{tool} is missing: rootless podman needs it (scripts/setup.sh installs podman, uidmap, crun and runc)"
        );
    }
    for f in ["/etc/subuid", "/etc/subgid"] {
        assert!(
            Path::new(f).is_file(),
            "{f} is missing: the test bind-mounts its copy over it (the uidmap package creates it)"
        );
    }
}

/// A user made up for one test, and what it runs podman with.
struct User {
    t: TestDir,
    uid: u32,
    /// The first of its subordinate ids.
    sub: u32,
    name: String,
    host: Host,
    bin: PathBuf,
    home: PathBuf,
    enter: PathBuf,
}

impl User {
    fn new() -> User {
        require_tools();
        let t = TestDir::new();
        // The user must reach everything under the test dir.
        chmod(t.path(), 0o755);
        let pid = std::process::id();
        let uid = 60_000 + pid % 5_000;
        let name = format!("gpuctkrl{uid}");
        let host = mock_host(&t, "host", 2, "570.124.06", "debian");
        ok(&["mock-host", "rootfs", t.join("rootfs").to_str().unwrap()]);
        let st = Command::new("tar")
            .arg("-C")
            .arg(t.join("rootfs"))
            .arg("-cf")
            .arg(t.join("rootfs.tar"))
            .arg(".")
            .status()
            .unwrap();
        assert!(st.success());

        // Our binary where any user may run it, under the NVIDIA names.
        let bin = t.join("bin");
        fs::create_dir_all(&bin).unwrap();
        chmod(&bin, 0o755);
        fs::copy(GPUCTK, bin.join("gpuctk")).unwrap();
        chmod(&bin.join("gpuctk"), 0o755);
        for n in ["nvidia-container-runtime", "nvidia-cdi-hook"] {
            symlink("gpuctk", bin.join(n)).unwrap();
        }
        // Traced low-level runtimes: the real crun and runc, after noting that they ran (in a
        // directory the user's namespace root may write).
        let trace = t.join("trace");
        fs::create_dir_all(&trace).unwrap();
        chmod(&trace, 0o777);
        for rt in ["crun", "runc"] {
            let w = bin.join(format!("{rt}-traced"));
            fs::write(
                &w,
                format!(
                    "#!/bin/sh\necho \"$*\" >> {}/ran-{rt}\nexec {rt} \"$@\"\n",
                    trace.display()
                ),
            )
            .unwrap();
            chmod(&w, 0o755);
        }

        // passwd, group, subuid and subgid with the user, for the namespace.
        let etc = t.join("etc");
        fs::create_dir_all(&etc).unwrap();
        let home = t.join("home");
        let add = |file: &str, line: String| {
            let mut text = fs::read_to_string(Path::new("/etc").join(file)).unwrap_or_default();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&line);
            fs::write(etc.join(file), text).unwrap();
            chmod(&etc.join(file), 0o644);
        };
        add(
            "passwd",
            format!("{name}:x:{uid}:{uid}::{}:/bin/sh\n", home.display()),
        );
        add("group", format!("{name}:x:{uid}:\n"));
        // A range of 65536 ids of its own, far above the users'.
        let sub = 1_000_000 + (pid % 5_000) * 65_536;
        add("subuid", format!("{name}:{sub}:65536\n"));
        add("subgid", format!("{name}:{sub}:65536\n"));

        let run = t.join("run");
        for d in [&home, &run] {
            fs::create_dir_all(d).unwrap();
            chown(d, uid);
            chmod(d, 0o700);
        }
        let cdi = t.join("cdi");
        fs::create_dir_all(&cdi).unwrap();
        chmod(&cdi, 0o755);

        let enter = t.join("enter.sh");
        fs::write(
            &enter,
            format!(
                r#"set -e
for f in passwd group subuid subgid; do mount --bind "{etc}/$f" "/etc/$f"; done
mkdir -p /var/run/cdi
mount --bind "{cdi}" /var/run/cdi
mkdir -p "{t}/hostdev"
mount --rbind /dev "{t}/hostdev"
mount -t tmpfs -o mode=755,nosuid tmpfs /dev
for n in $(ls -A "{t}/hostdev"); do
  e="{t}/hostdev/$n"
  if [ -L "$e" ]; then cp -P "$e" "/dev/$n"
  elif [ -d "$e" ]; then mkdir "/dev/$n" && mount --rbind "$e" "/dev/$n"
  else touch "/dev/$n" && mount --bind "$e" "/dev/$n"; fi
done
cp -a "{dev}/." /dev/
exec setpriv --reuid {uid} --regid {uid} --init-groups env -i HOME="{home}" USER={name} XDG_RUNTIME_DIR="{run}" PATH="{bin}:{SYSTEM_PATH}" "$@"
"#,
                etc = etc.display(),
                cdi = cdi.display(),
                t = t.path().display(),
                dev = Path::new(&host.dev_root()).join("dev").display(),
                home = home.display(),
                run = run.display(),
                bin = bin.display(),
            ),
        )
        .unwrap();
        User {
            t,
            uid,
            sub,
            name,
            host,
            bin,
            home,
            enter,
        }
    }

    /// `argv` as the user, in the namespace.
    fn cmd(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh"])
            .arg(&self.enter)
            .args(argv)
            .stdin(Stdio::null());
        c
    }

    fn podman(&self, args: &[&str]) -> std::process::Output {
        let mut argv = vec![
            "podman",
            "--storage-driver",
            "vfs",
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "none",
        ];
        argv.extend_from_slice(args);
        self.cmd(&argv).output().unwrap()
    }

    /// `podman run` of the probe with `args`; the GPUs it sees.
    fn gpus(&self, args: &[&str]) -> Vec<String> {
        let mut a = vec!["run", "--rm", "--network", "none"];
        a.extend_from_slice(args);
        a.extend_from_slice(&[
            IMAGE,
            "/bin/sh",
            "-c",
            "nvidia-smi -L; /usr/bin/gpuctk-probe",
        ]);
        let o = self.podman(&a);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "podman {args:?} as {}:\n{stdout}\n{stderr}",
            self.name
        );
        let probe = gpuctk_mockhost::ProbeReport::parse(&stdout);
        let nodes: Vec<_> = probe
            .devices
            .iter()
            .filter(|(p, _)| p.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok())
            .collect();
        for (p, res) in &nodes {
            assert_eq!(res, "ENXIO", "{p}: the mock node, reachable: {stdout}");
        }
        let uuids: Vec<String> = stdout
            .lines()
            .filter_map(|l| l.split("(UUID: ").nth(1))
            .map(|u| u.trim_end_matches(')').to_string())
            .collect();
        assert_eq!(nodes.len(), uuids.len(), "nodes vs nvidia-smi: {stdout}");
        if !nodes.is_empty() {
            assert!(
                matches!(
                    probe.libcuda,
                    Some(gpuctk_mockhost::LibraryLoad::Loaded { .. })
                ),
                "libcuda: {stdout}"
            );
        }
        assert_eq!(probe.nvml_uuids, uuids, "{stdout}");
        uuids
    }

    /// The user's config.toml for the shim under `dir`, with `runtime` as the low-level one.
    fn write_config(&self, dir: &Path, runtime: &str) {
        let d = dir.join("nvidia-container-runtime");
        fs::create_dir_all(&d).unwrap();
        let h = &self.host;
        fs::write(
            d.join("config.toml"),
            format!(
                "[nvidia-container-cli]\nroot = \"{}\"\n# A user cannot write the device cgroup.\nno-cgroups = true\n\n[nvidia-container-runtime]\nruntimes = [\"{}\"]\n\n[gpuctk]\ndev-root = \"{}\"\nproc-root = \"{}\"\nhook-path = \"{}\"\n",
                h.driver_root(),
                self.bin.join(format!("{runtime}-traced")).display(),
                h.dev_root(),
                h.proc_root(),
                self.bin.join("gpuctk").display(),
            ),
        )
        .unwrap();
        let mut p = d.as_path();
        while p != self.t.path() {
            chown(p, self.uid);
            p = p.parent().unwrap();
        }
        chown(&d.join("config.toml"), self.uid);
    }

    fn ran(&self, runtime: &str) -> String {
        fs::read_to_string(self.t.join(&format!("trace/ran-{runtime}"))).unwrap_or_default()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        // What this test's podman started runs as the user or as one of its subordinate ids,
        // which no one else has: podman's rootless pause process (it holds the user's
        // namespaces), and, after a failure, a conmon or a container left behind. Stop each by
        // its pid.
        let ours = |uid: u32| uid == self.uid || (self.sub..self.sub + 65_536).contains(&uid);
        for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let uid = fs::read_to_string(e.path().join("status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("Uid:"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|u| u.parse::<u32>().ok())
                });
            if uid.is_some_and(ours) {
                // SAFETY: kill(2) on a process of this test's user.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

#[test]
fn podman_as_an_unprivileged_user_cdi_and_shim_under_crun_and_runc() {
    let u = User::new();
    let h = &u.host;
    // The user is who it says, in podman's user namespace as root.
    let o = u.podman(&["unshare", "cat", "/proc/self/uid_map"]);
    let map = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "podman unshare: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["0", &u.uid.to_string(), "1"], "{map}");
    assert_eq!(lines.len(), 2, "the subuid range is mapped too: {map}");

    // The spec, with the default hook path: nvidia-cdi-hook found in PATH, which every user can
    // run (so no warning).
    let spec = u.t.join("cdi/nvidia.yaml");
    let r = gpuctk(&with(
        &["cdi", "generate", "--output", spec.to_str().unwrap()],
        &h.roots(),
    ))
    .env("PATH", format!("{}:{SYSTEM_PATH}", u.bin.display()))
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(!stderr.contains("hook path"), "{stderr}");
    let text = fs::read_to_string(&spec).unwrap();
    assert!(
        text.contains(&format!(
            "path: {}",
            u.bin.join("nvidia-cdi-hook").display()
        )),
        "{text}"
    );

    let o = u.podman(&["import", u.t.join("rootfs.tar").to_str().unwrap(), IMAGE]);
    assert!(
        o.status.success(),
        "podman import: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for rt in ["crun", "runc"] {
        assert_eq!(
            u.gpus(&["--runtime", rt, "--device", "nvidia.com/gpu=1"]),
            [h.uuids()[1].clone()],
            "CDI under {rt}"
        );
    }

    // The shim as podman's runtime, with the user's own config. podman gives the runtime's
    // create HOME but not XDG_CONFIG_HOME: the config is found in $HOME/.config (XDG's
    // default) ...
    let shim = u.bin.join("nvidia-container-runtime");
    let shim = shim.to_str().unwrap();
    u.write_config(&u.home.join(".config"), "crun");
    assert_eq!(
        u.gpus(&["--runtime", shim, "-e", "NVIDIA_VISIBLE_DEVICES=0"]),
        [h.uuids()[0].clone()],
        "shim under crun"
    );
    assert!(u.ran("crun").contains("create"), "crun ran");
    assert!(u.ran("runc").is_empty(), "runc did not");
    // ... or in an XDG_CONFIG_HOME given to the runtime through containers.conf's
    // conmon_env_vars, which wins over $HOME/.config.
    let xdg = u.t.join("xdg");
    u.write_config(&xdg, "runc");
    let cc = u.home.join(".config/containers");
    fs::create_dir_all(&cc).unwrap();
    chown(&cc, u.uid);
    fs::write(
        cc.join("containers.conf"),
        format!(
            "[engine]\nconmon_env_vars = [\"PATH={SYSTEM_PATH}\", \"XDG_CONFIG_HOME={}\"]\n",
            xdg.display()
        ),
    )
    .unwrap();
    chown(&cc.join("containers.conf"), u.uid);
    assert_eq!(
        u.gpus(&["--runtime", shim, "-e", "NVIDIA_VISIBLE_DEVICES=1"]),
        [h.uuids()[1].clone()],
        "shim under runc"
    );
    assert!(u.ran("runc").contains("create"), "runc ran");
    // No GPU asked: nothing injected.
    assert!(u.gpus(&["--runtime", shim]).is_empty());
}

#[test]
fn cdi_generate_default_hook_path_and_warnings() {
    let t = TestDir::new();
    let h = mock_host(&t, "host", 1, "570.124.06", "debian");
    let hook_in = |v: &serde_json::Value| -> String {
        v["containerEdits"]["hooks"][0]["path"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let generate = |path_env: &str, extra: &[&str]| {
        let mut args = vec!["cdi", "generate", "--format", "json"];
        args.extend_from_slice(extra);
        let o = gpuctk(&with(&args, &h.roots()))
            .env("PATH", path_env)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    // Not in PATH: NVIDIA's fallback, with a warning that it is not there.
    let (v, err) = generate(SYSTEM_PATH, &[]);
    assert_eq!(hook_in(&v), "/usr/bin/nvidia-cdi-hook");
    assert!(
        Path::new("/usr/bin/nvidia-cdi-hook").exists()
            || err.contains("/usr/bin/nvidia-cdi-hook (the default")
                && err.contains("no executable"),
        "{err}"
    );
    // In PATH, but behind a directory only root may enter: found, and a warning that rootless
    // containers will fail.
    let private = t.join("private");
    fs::create_dir_all(&private).unwrap();
    chmod(t.path(), 0o755);
    chmod(&private, 0o700);
    fs::copy(GPUCTK, private.join("nvidia-cdi-hook")).unwrap();
    chmod(&private.join("nvidia-cdi-hook"), 0o755);
    let (v, err) = generate(&format!("{}:{SYSTEM_PATH}", private.display()), &[]);
    assert_eq!(
        hook_in(&v),
        private.join("nvidia-cdi-hook").to_str().unwrap()
    );
    assert!(
        err.contains("0700") && err.contains("rootless") && err.contains("--nvidia-cdi-hook-path"),
        "{err}"
    );
    // The same when given, and one line.
    let given = private.join("nvidia-cdi-hook");
    let (_, err) = generate(
        SYSTEM_PATH,
        &["--nvidia-cdi-hook-path", given.to_str().unwrap()],
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("others may not enter it"), "{err}");
    // With every hook disabled there is nothing to warn about.
    let (_, err) = generate(SYSTEM_PATH, &["--disable-hook", "all"]);
    assert!(!err.contains("hook path"), "{err}");
}
