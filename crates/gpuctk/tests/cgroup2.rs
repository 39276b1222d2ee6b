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

/// Starts again from the pristine config.json with `env`, the container's cgroup at `/cg` and
/// the host's node of GPU [`OTHER`] bound to `/dev/nvidia2`.
fn prepare(bed: &Bed, env: &[&str], cg: &str) {
    bed.set_env(env);
    let other = format!("{}/dev/nvidia{OTHER}", bed.host.dev_root());
    bed.edit(|s| {
        s["linux"]["cgroupsPath"] = json!(format!("/{cg}"));
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
    prepare(bed, env, &cg);
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
    ok(&with(
        &[
            "cdi",
            "generate",
            "--output",
            spec.to_str().unwrap(),
            "--nvidia-cdi-hook-path",
            GPUCTK,
        ],
        &bed.host.roots(),
    ));
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

/// `mode = "legacy"`: the shim adds the prestart hook, which extends the device program the
/// runtime attached to the container's cgroup v2 (the spec allows no GPU, so without that every
/// node would be `EPERM`).
fn legacy_hook(runtime: &str) {
    let bed = bed(runtime);
    let cfg = fs::read_to_string(&bed.config).unwrap().replace(
        "[nvidia-container-runtime]\n",
        "[nvidia-container-runtime]\nmode = \"legacy\"\n",
    );
    fs::write(&bed.config, cfg).unwrap();
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
/// state on stdin, then `nvidia-container-cli configure --pid` with its cgroup handling on.
fn cli_hook(cli: &Path, config: &Path, rootfs: &Path) -> Value {
    let script = format!(
        "pid=$(tr -d '\\n' | sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p'); \
         [ -n \"$pid\" ] || {{ echo 'no pid in the state' >&2; exit 1; }}; \
         exec {} --load-kmods configure --ldconfig=@/sbin/ldconfig --device=1,3 --compute --utility --pid=\"$pid\" {}",
        cli.display(),
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

/// `nvidia-container-cli configure --pid` from a prestart hook, the runtime run bare (no shim),
/// with the container's cgroup where a systemd cgroup driver would put it
/// (`<slice>/<prefix>-<id>.scope`): the cli finds it from `/proc/<pid>/cgroup`, never from the
/// driver or `cgroupsPath`.
fn nvidia_container_cli(runtime: &str) {
    let bed = bed(runtime);
    let cli = bed.t.join("bin/nvidia-container-cli");
    std::os::unix::fs::symlink(GPUCTK, &cli).unwrap();
    let name = cgroup_name(&bed, "cli");
    let slice = format!("{name}.slice");
    let cg = format!("{slice}/gpuctk-{name}.scope");
    prepare(&bed, &[], &cg);
    let rootfs = bed.bundle.join("rootfs");
    let hook = cli_hook(&cli, &bed.config, &rootfs);
    bed.edit(|s| s["hooks"] = json!({ "prestart": [hook] }));
    fs::remove_dir_all(&rootfs).unwrap();
    gpuctk_mockhost::create_rootfs(&rootfs, &gpuctk_mockhost::RootfsConfig::default()).unwrap();
    let mut c = Command::new(runtime_path(&bed.t, runtime));
    c.arg("--root")
        .arg(&bed.state_root)
        .args(["run", "--bundle"])
        .arg(&bed.bundle)
        .arg(&name);
    let out = in_cgroup2(&cg, &slice, c)
        .output()
        .unwrap_or_else(|e| panic!("unshare {runtime}: {e} (install util-linux, {runtime})"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (probe, smi) = stdout.split_once("---smi---\n").unwrap_or((&stdout, ""));
    let r = Ran {
        code: out.status.code().unwrap_or(-1),
        probe: gpuctk_mockhost::ProbeReport::parse(probe),
        smi: smi.to_string(),
        stdout: stdout.clone(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    exactly(&r, &[1, 3], &format!("{runtime}, nvidia-container-cli"));
}

#[test]
fn runc_nvidia_container_cli() {
    nvidia_container_cli("runc");
}

#[test]
fn crun_nvidia_container_cli() {
    nvidia_container_cli("crun");
}
