//! A cgroup v2-only `/sys/fs/cgroup`, as Debian 12, Ubuntu 22.04+ and RHEL 9 have by default,
//! on this hybrid (v1 + unified) host: each run is in a private mount namespace where cgroup2 is
//! mounted over `/sys/fs/cgroup`, so runc and crun make the container's cgroup there and attach
//! their device BPF program to it. Every delivery under both runtimes: the shim (just in time and
//! from a CDI spec), the legacy prestart hook (which extends the runtime's program on the
//! container's own cgroup) and `nvidia-container-cli configure --pid` called from a prestart hook
//! as NVIDIA's hook calls it. Each container gets exactly its GPUs: an allowed mock node opens
//! with `ENXIO` (no driver behind it), another GPU's node, bound into the container, with
//! `EPERM` (the device program said no).
//!
//! crun raises `RLIMIT_MEMLOCK` before loading its program, which root here may not do (no
//! `CAP_SYS_RESOURCE`); since Linux 5.11 BPF memory is charged to the memory cgroup instead,
//! so the crun tests run it with a tiny `LD_PRELOAD` built here that turns only that refused
//! raise into success. It is test scaffolding for this host, never shipped.
//!
//! The systemd cgroup driver (`--systemd-cgroup`) needs a running systemd reachable over D-Bus,
//! which these machines lack: `*_systemd_cgroup_driver` boot one as PID 1 of namespaces of its
//! own, on a root of its own, starting nothing but D-Bus, and run the deliveries through it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::runtime::{Bed, Ran};
use crate::util::*;

/// Mounts cgroup2 over `/sys/fs/cgroup` (in the private mount namespace `unshare` made; `/` made
/// private again first, so nothing reaches the host's mounts), runs `"$@"`, then checks that the
/// runtime removed the container's cgroup `$1` (removing it, and failing, when not) and removes
/// `$2`, the parent the test laid out, when one is named.
const IN_CGROUP2: &str = r#"mount --make-rprivate / || exit 97
mount -t cgroup2 none /sys/fs/cgroup || exit 98
[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || exit 96
cg=$1; parent=$2; shift 2
"$@"; rc=$?
if [ -d "/sys/fs/cgroup/$cg" ]; then
    rmdir "/sys/fs/cgroup/$cg"; echo "test: the runtime left cgroup $cg behind" >&2; rc=99
fi
if [ -n "$parent" ]; then rmdir "/sys/fs/cgroup/$parent" || rc=95; fi
exit $rc"#;

/// `c` run by [`IN_CGROUP2`]: `cg` is the container's cgroup (its `cgroupsPath` without the
/// leading `/`), `parent` one to remove afterwards ("" for none).
fn in_cgroup2(cg: &str, parent: &str, c: Command) -> Command {
    let mut u = Command::new("unshare");
    u.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        IN_CGROUP2,
    ])
    .args(["sh", cg, parent])
    .arg(c.get_program())
    .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => u.env(k, v),
            None => u.env_remove(k),
        };
    }
    u
}

/// The preload that lets crun's refused `setrlimit(RLIMIT_MEMLOCK)` succeed (see the module
/// documentation); every other call, and every other failure, is the real one.
const MEMLOCK_SHIM: &str = r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <sys/resource.h>

int setrlimit(__rlimit_resource_t resource, const struct rlimit *rlim)
{
    int (*real)(__rlimit_resource_t, const struct rlimit *) = dlsym(RTLD_NEXT, "setrlimit");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    int rc = real(resource, rlim);
    if (rc != 0 && errno == EPERM && resource == RLIMIT_MEMLOCK)
        return 0;
    return rc;
}
"#;

/// The low-level runtime to run: `runc`, or for crun a wrapper in `t` that preloads the
/// memlock shim (compiled there with gcc) into crun alone.
fn runtime_path(t: &TestDir, runtime: &str) -> String {
    if runtime != "crun" {
        return runtime.to_string();
    }
    let dir = t.join("memlock");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("memlock.c"), MEMLOCK_SHIM).unwrap();
    let so = dir.join("memlock.so");
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&so)
        .arg(dir.join("memlock.c"))
        .arg("-ldl")
        .output()
        .expect("gcc (install gcc)");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wrapper = dir.join("crun");
    fs::write(
        &wrapper,
        format!("#!/bin/sh\nLD_PRELOAD={} exec crun \"$@\"\n", so.display()),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    wrapper.to_str().unwrap().to_string()
}

/// A bed for `runtime` on a 4-GPU mock host whose shim runs [`runtime_path`].
fn bed(runtime: &str) -> Bed {
    let bed = Bed::new(runtime, "debian", 4);
    let path = runtime_path(&bed.t, runtime);
    let cfg = fs::read_to_string(&bed.config).unwrap().replace(
        &format!("runtimes = [\"{runtime}\"]"),
        &format!("runtimes = [\"{path}\"]"),
    );
    fs::write(&bed.config, cfg).unwrap();
    bed
}

/// The GPU the containers are not given, whose node each gets bound in anyway.
const OTHER: u32 = 2;

/// Starts again from the pristine config.json with `env`, `cgroups_path` and the host's node
/// of GPU [`OTHER`] bound to `/dev/nvidia2`.
fn prepare(bed: &Bed, env: &[&str], cgroups_path: &str) {
    bed.set_env(env);
    let other = format!("{}/dev/nvidia{OTHER}", bed.host.dev_root());
    bed.edit(|s| {
        s["linux"]["cgroupsPath"] = json!(cgroups_path);
        s["mounts"].as_array_mut().unwrap().push(json!({
            "destination": format!("/dev/nvidia{OTHER}"),
            "type": "bind",
            "source": other,
            "options": ["bind"]
        }));
    });
}

/// A cgroup name no other test running at the same time uses.
fn cgroup_name(bed: &Bed, id: &str) -> String {
    format!(
        "{}-{id}",
        bed.t.path().file_name().unwrap().to_string_lossy()
    )
}

/// The shim runs the bundle with `env` in a cgroup v2-only namespace.
fn shim_run(bed: &Bed, id: &str, env: &[&str]) -> Ran {
    let cg = cgroup_name(bed, id);
    prepare(bed, env, &format!("/{cg}"));
    bed.run_in(id, &|_| {}, &|c| in_cgroup2(&cg, "", c))
}

/// The container ran, the GPUs in `want` and the control nodes open with `ENXIO`, and
/// [`OTHER`]'s node, present, with `EPERM`.
fn exactly(r: &Ran, want: &[u32], what: &str) {
    assert_eq!(
        r.code, 0,
        "{what}: container failed:\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    let mut gpus = Vec::new();
    for (path, result) in &r.probe.devices {
        let Some(n) = path
            .strip_prefix("/dev/nvidia")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if n == OTHER {
            assert_eq!(
                result, "EPERM",
                "{what}: {path} must be denied: {}",
                r.stdout
            );
        } else {
            assert_eq!(
                result, "ENXIO",
                "{what}: {path} must be allowed: {}",
                r.stdout
            );
            gpus.push(n);
        }
    }
    gpus.sort();
    assert_eq!(gpus, want, "{what}: GPU nodes: {}", r.stdout);
    assert!(
        r.probe.device(&format!("/dev/nvidia{OTHER}")).is_some(),
        "{what}: the other GPU's node was not bound in: {}",
        r.stdout
    );
    for n in ["/dev/nvidiactl", "/dev/nvidia-uvm"] {
        assert_eq!(
            r.probe.device(n),
            Some("ENXIO"),
            "{what}: {n}: {}",
            r.stdout
        );
    }
    assert!(r.libcuda().is_some(), "{what}: libcuda: {}", r.stdout);
}

fn shim_just_in_time(runtime: &str) {
    let bed = bed(runtime);
    let r = shim_run(&bed, "jit", &["NVIDIA_VISIBLE_DEVICES=1,3"]);
    exactly(&r, &[1, 3], &format!("{runtime}, shim just in time"));
}

#[test]
fn runc_shim_just_in_time() {
    shim_just_in_time("runc");
}

#[test]
fn crun_shim_just_in_time() {
    shim_just_in_time("crun");
}

fn shim_from_a_cdi_spec(runtime: &str) {
    let bed = bed(runtime);
    let spec = bed.cdi_dir().join("nvidia.yaml");
    bed.host.write_spec(&spec);
    let r = shim_run(
        &bed,
        "cdi",
        &["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1,nvidia.com/gpu=3"],
    );
    exactly(&r, &[1, 3], &format!("{runtime}, shim from a CDI spec"));
}

#[test]
fn runc_shim_from_a_cdi_spec() {
    shim_from_a_cdi_spec("runc");
}

#[test]
fn crun_shim_from_a_cdi_spec() {
    shim_from_a_cdi_spec("crun");
}

/// `mode = "legacy"` in the bed's config: the shim adds our prestart hook and nothing else.
fn legacy_mode(bed: &Bed) {
    let cfg = fs::read_to_string(&bed.config).unwrap().replace(
        "[nvidia-container-runtime]\n",
        "[nvidia-container-runtime]\nmode = \"legacy\"\n",
    );
    fs::write(&bed.config, cfg).unwrap();
}

/// `mode = "legacy"`: the shim adds the prestart hook, which extends the device program the
/// runtime attached to the container's cgroup v2 (the spec allows no GPU, so without that every
/// node would be `EPERM`).
fn legacy_hook(runtime: &str) {
    let bed = bed(runtime);
    legacy_mode(&bed);
    let r = shim_run(&bed, "legacy", &["NVIDIA_VISIBLE_DEVICES=1,3"]);
    exactly(&r, &[1, 3], &format!("{runtime}, legacy hook"));
    let pre = &bed.spec()["hooks"]["prestart"];
    assert_eq!(
        pre[0]["args"][0],
        json!("nvidia-container-runtime-hook"),
        "{pre}"
    );
}

#[test]
fn runc_legacy_hook() {
    legacy_hook("runc");
}

#[test]
fn crun_legacy_hook() {
    legacy_hook("crun");
}

/// The prestart hook NVIDIA's `nvidia-container-runtime-hook` is: the container's pid from the
/// state on stdin, then `nvidia-container-cli configure --pid` with its cgroup handling on, its
/// log appended to `log`.
fn cli_hook(cli: &Path, config: &Path, rootfs: &Path, log: &Path) -> Value {
    let script = format!(
        "pid=$(tr -d '\\n' | sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p'); \
         [ -n \"$pid\" ] || {{ echo 'no pid in the state' >&2; exit 1; }}; \
         exec {} --load-kmods --debug={} configure --ldconfig=@/sbin/ldconfig --device=1,3 --compute --utility --pid=\"$pid\" {}",
        cli.display(),
        log.display(),
        rootfs.display()
    );
    json!({
        "path": "/bin/sh",
        "args": ["sh", "-c", script],
        "env": [
            format!("GPUCTK_CONFIG={}", config.display()),
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
        ]
    })
}

/// The bare runtime (no shim, `runtime_args` before its command) runs the bundle as container
/// `name` in `cgroups_path`, with [`cli_hook`] as its prestart hook (its log in `cli.log`) and
/// config.json changed by `edit`, the command turned by `wrap`.
fn cli_run(
    bed: &Bed,
    runtime: &str,
    name: &str,
    cgroups_path: &str,
    runtime_args: &[&str],
    edit: &dyn Fn(&Bed),
    wrap: &dyn Fn(Command) -> Command,
) -> Ran {
    let cli = bed.t.join("bin/nvidia-container-cli");
    if !cli.exists() {
        std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
    }
    prepare(bed, &[], cgroups_path);
    let rootfs = bed.bundle.join("rootfs");
    let hook = cli_hook(&cli, &bed.config, &rootfs, &bed.t.join("cli.log"));
    bed.edit(|s| s["hooks"] = json!({ "prestart": [hook] }));
    edit(bed);
    fs::remove_dir_all(&rootfs).unwrap();
    gpuctk_mockhost::create_rootfs(&rootfs, &gpuctk_mockhost::RootfsConfig::default()).unwrap();
    let mut c = Command::new(runtime_path(&bed.t, runtime));
    c.args(runtime_args)
        .arg("--root")
        .arg(&bed.state_root)
        .args(["run", "--bundle"])
        .arg(&bed.bundle)
        .arg(name);
    wrap(c)
        .output()
        .unwrap_or_else(|e| panic!("{runtime}: {e} (install util-linux, {runtime})"))
        .into()
}

/// `nvidia-container-cli configure --pid` from a prestart hook, the runtime run bare (no shim),
/// with the container's cgroup where a systemd cgroup driver would put it
/// (`<slice>/<prefix>-<id>.scope`): the cli finds it from `/proc/<pid>/cgroup`, never from the
/// driver or `cgroupsPath`.
fn nvidia_container_cli(runtime: &str) {
    let bed = bed(runtime);
    let name = cgroup_name(&bed, "cli");
    let slice = format!("{name}.slice");
    let cg = format!("{slice}/gpuctk-{name}.scope");
    let r = cli_run(
        &bed,
        runtime,
        &name,
        &format!("/{cg}"),
        &[],
        &|_| {},
        &|c| in_cgroup2(&cg, &slice, c),
    );
    exactly(&r, &[1, 3], &format!("{runtime}, nvidia-container-cli"));
    cli_extended(&bed, &format!("v2 /sys/fs/cgroup/{cg}"));
}

/// The cli's log says it extended a device program on the cgroup v2 `cgroup` names.
fn cli_extended(bed: &Bed, cgroup: &str) {
    let log = fs::read_to_string(bed.t.join("cli.log")).unwrap();
    assert!(
        log.contains("cgroup v2: device program") && log.contains("replaced by"),
        "no device program extended: {log}"
    );
    assert!(log.contains(cgroup), "not {cgroup}: {log}");
}

#[test]
fn runc_nvidia_container_cli() {
    nvidia_container_cli("runc");
}

#[test]
fn crun_nvidia_container_cli() {
    nvidia_container_cli("crun");
}

// ---------------------------------------------------------------- the systemd cgroup driver

/// Boots systemd as PID 1 of its own pid, mount, uts, ipc, net and cgroup namespaces, on a root
/// of its own (`$1`, an empty folder): a tmpfs with the machine's `/usr` read-only, a copy of
/// `/etc`, fresh `/run` and `/tmp`, `/proc/sys` and `/sys` read-only (so nothing it starts
/// touches the machine's kernel settings or devices), cgroup2 at `/sys/fs/cgroup` (the cgroup
/// namespace's root is the folder the test made), and the folders `$2...` bound at their own
/// paths. It starts only `gpuctk-test.target`, which pulls in the D-Bus socket and nothing of
/// the machine's boot (no tmpfiles, no udev).
const BOOT_SYSTEMD: &str = r#"set -e
root=$1; shift
mount --make-rprivate /
mount -t tmpfs -o mode=755 tmpfs "$root"
cd "$root"
mkdir -p usr etc proc sys dev run tmp var root
mount --bind /usr usr
mount -o remount,bind,ro usr
for d in bin sbin lib lib64; do
    if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$d"
    elif [ -d "/$d" ]; then mkdir "$d"; mount --bind "/$d" "$d"; mount -o remount,bind,ro "$d"
    fi
done
cp -a /etc/. etc/
: > etc/fstab
units=etc/systemd/system
mkdir -p "$units/dbus.socket.d" "$units/dbus.service.d"
printf '[Unit]\nDescription=gpuctk test\nDefaultDependencies=no\nWants=dbus.socket\n' > "$units/gpuctk-test.target"
printf '[Unit]\nDefaultDependencies=no\n' > "$units/dbus.socket.d/gpuctk-test.conf"
printf '[Unit]\nDefaultDependencies=no\n' > "$units/dbus.service.d/gpuctk-test.conf"
mount -t proc proc proc
mount --bind proc/sys proc/sys
mount -o remount,bind,ro proc/sys
mount -t sysfs -o ro sysfs sys
mount -t cgroup2 none sys/fs/cgroup
mount -t tmpfs -o mode=755 tmpfs dev
for n in null zero full random urandom tty; do : > "dev/$n"; mount --bind "/dev/$n" "dev/$n"; done
mkdir -p dev/pts dev/shm
mount -t tmpfs -o mode=755 tmpfs run
mount -t tmpfs -o mode=1777 tmpfs tmp
for d in "$@"; do mkdir -p ".$d"; mount --bind "$d" ".$d"; done
mkdir old
pivot_root . old
umount -l /old
rmdir /old
export container=gpuctk-test
exec /lib/systemd/systemd --unit=gpuctk-test.target --log-target=console
"#;

/// Runs [`BOOT_SYSTEMD`] (`$2`) with `$3...` in a cgroup `$1` it makes at the top of the
/// cgroup2 hierarchy, seen through a cgroup2 mount of its own in a private mount namespace (the
/// machine's `/sys/fs/cgroup` is never touched), which becomes the root of systemd's cgroup
/// namespace.
const ENTER_CGROUP: &str = r#"set -e
mount --make-rprivate /
mount -t cgroup2 none /sys/fs/cgroup
mkdir "/sys/fs/cgroup/$1"
echo $$ > "/sys/fs/cgroup/$1/cgroup.procs"
boot=$2
shift 2
exec unshare --pid --fork --kill-child --uts --ipc --net --cgroup sh -c "$boot" sh "$@"
"#;

/// Removes the cgroup `$1` and those below it, deepest first, through a cgroup2 mount of its own
/// in a private mount namespace; fails when one is left (after waiting for its processes, which
/// a `SIGKILL` ends asynchronously, to be gone).
const REMOVE_CGROUP: &str = r#"mount --make-rprivate / || exit 97
mount -t cgroup2 none /sys/fs/cgroup || exit 98
cd /sys/fs/cgroup || exit 96
for i in $(seq 200); do
    [ -e "$1" ] || exit 0
    find "$1" -depth -type d -exec rmdir {} + 2>/dev/null
    sleep 0.05
done
echo "cgroup $1 is still there" >&2
exit 1
"#;

/// A systemd booted by [`BOOT_SYSTEMD`]; killed (by its pid) and its cgroup removed on drop.
struct Systemd {
    unshare: std::process::Child,
    pid1: i32,
    /// Its cgroup, relative to the top of the cgroup2 hierarchy.
    cgroup: String,
    log: std::path::PathBuf,
    stopped: bool,
}

impl Systemd {
    /// Boots one in `t`, with `binds` reachable at their paths, and waits until it runs.
    fn boot(t: &TestDir, binds: &[&Path]) -> Systemd {
        let cgroup = format!(
            "{}-systemd",
            t.path().file_name().unwrap().to_string_lossy()
        );
        let root = t.join("systemd-root");
        fs::create_dir(&root).unwrap();
        let log = t.join("systemd.log");
        let out = fs::File::create(&log).unwrap();
        let unshare = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                ENTER_CGROUP,
            ])
            .args(["sh", &cgroup, BOOT_SYSTEMD])
            .arg(&root)
            .args(binds)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("sh, unshare (util-linux)");
        let mut sd = Systemd {
            pid1: 0,
            unshare,
            cgroup,
            log,
            stopped: false,
        };
        let children = format!("/proc/{0}/task/{0}/children", sd.unshare.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            if let Ok(Some(st)) = sd.unshare.try_wait() {
                panic!("systemd did not start ({st}): {}", sd.log_text());
            }
            if sd.pid1 == 0 {
                // The forked child, PID 1 of the new namespace (not a command the script runs
                // before it).
                sd.pid1 = fs::read_to_string(&children)
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .find(|p| {
                        fs::read_to_string(format!("/proc/{p}/status")).is_ok_and(|st| {
                            st.lines().any(|l| {
                                l.starts_with("NSpid:")
                                    && l.split_whitespace().count() == 3
                                    && l.ends_with("\t1")
                            })
                        })
                    })
                    .unwrap_or(0);
            }
            if sd.pid1 != 0 {
                let mut c = Command::new("systemctl");
                c.arg("is-system-running");
                let state = sd.enter(c).output().expect("nsenter (util-linux)");
                let state = String::from_utf8_lossy(&state.stdout).trim().to_string();
                if state == "running" || state == "degraded" {
                    return sd;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "systemd did not come up: {}",
                sd.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `c` run in all of systemd's namespaces.
    fn enter(&self, c: Command) -> Command {
        let mut n = Command::new("nsenter");
        n.args(["--target", &self.pid1.to_string(), "--all"])
            .arg(c.get_program())
            .args(c.get_args());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => n.env(k, v),
                None => n.env_remove(k),
            };
        }
        n
    }

    /// Kills systemd (and with it its pid namespace) and removes its cgroup; `false` when
    /// one could not be removed.
    fn stop(&mut self) -> bool {
        if self.stopped {
            return true;
        }
        self.stopped = true;
        // unshare's --kill-child takes systemd, and with it its pid namespace, along.
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                REMOVE_CGROUP,
            ])
            .args(["sh", &self.cgroup])
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Systemd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `c` with `flag` before its arguments (a runtime's global flag).
fn with_global(c: Command, flag: &str) -> Command {
    let mut n = Command::new(c.get_program());
    n.arg(flag).args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => n.env(k, v),
            None => n.env_remove(k),
        };
    }
    n
}

/// For a run under systemd: no cgroup namespace in the container (its `/proc/self/cgroup`
/// shows the scope), and the container prints that file after the probe and nvidia-smi.
fn show_cgroup(bed: &Bed) {
    bed.edit(|s| {
        s["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .retain(|n| n["type"] != "cgroup");
        let cmd = s["process"]["args"][2].as_str().unwrap().to_string();
        s["process"]["args"][2] = json!(format!("{cmd}; cat /proc/self/cgroup"));
    });
}

/// `--systemd-cgroup` with a systemd running (booted by the test in namespaces of its own, as
/// the machines here have none): runc or crun ask systemd over D-Bus for a transient scope
/// `system.slice/gpuctk-<id>.scope` (the runtime's device rules as its `DeviceAllow=`), and
/// attach their device program there (runc) or to a `container` cgroup below it (crun). The
/// shim just in time, the legacy hook and `nvidia-container-cli configure --pid` from a
/// prestart hook: each container in its scope, with exactly its GPUs.
fn systemd_cgroup_driver(runtime: &str) {
    let bed = bed(runtime);
    let bin = Path::new(GPUCTK).parent().unwrap();
    let mut sd = Systemd::boot(&bed.t, &[bed.t.path(), bin]);
    let global = "--systemd-cgroup";
    let scope = |name: &str| format!("0::/system.slice/gpuctk-{name}.scope");

    let name = cgroup_name(&bed, "sd-jit");
    prepare(
        &bed,
        &["NVIDIA_VISIBLE_DEVICES=1,3"],
        &format!("system.slice:gpuctk:{name}"),
    );
    show_cgroup(&bed);
    let r = bed.run_in("sd-jit", &|_| {}, &|c| sd.enter(with_global(c, global)));
    exactly(
        &r,
        &[1, 3],
        &format!("{runtime}, systemd driver, shim just in time"),
    );
    assert!(r.smi.contains(&scope(&name)), "{}", r.stdout);

    legacy_mode(&bed);
    let name = cgroup_name(&bed, "sd-legacy");
    prepare(
        &bed,
        &["NVIDIA_VISIBLE_DEVICES=1,3"],
        &format!("system.slice:gpuctk:{name}"),
    );
    show_cgroup(&bed);
    let r = bed.run_in("sd-legacy", &|_| {}, &|c| sd.enter(with_global(c, global)));
    exactly(
        &r,
        &[1, 3],
        &format!("{runtime}, systemd driver, legacy hook"),
    );
    assert!(r.smi.contains(&scope(&name)), "{}", r.stdout);

    let name = cgroup_name(&bed, "sd-cli");
    let r = cli_run(
        &bed,
        runtime,
        &name,
        &format!("system.slice:gpuctk:{name}"),
        &[global],
        &show_cgroup,
        &|c| sd.enter(c),
    );
    exactly(
        &r,
        &[1, 3],
        &format!("{runtime}, systemd driver, nvidia-container-cli"),
    );
    assert!(r.smi.contains(&scope(&name)), "{}", r.stdout);
    cli_extended(
        &bed,
        &format!("v2 /sys/fs/cgroup/system.slice/gpuctk-{name}.scope"),
    );
    assert!(sd.stop(), "systemd's cgroup {} was left behind", sd.cgroup);
}

#[test]
fn runc_systemd_cgroup_driver() {
    systemd_cgroup_driver("runc");
}

#[test]
fn crun_systemd_cgroup_driver() {
    systemd_cgroup_driver("crun");
}
