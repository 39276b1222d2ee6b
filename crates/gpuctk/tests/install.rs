//! `gpuctk install` / `uninstall` against temp host roots (a mock GPU host with an engine
//! config): what lands where, a second install that writes nothing and reloads nothing, an
//! uninstall that gives back the tree it found (every path, type, mode, content and link
//! target), the reload modes; then the installer image, built offline and run with podman, whose
//! work real containerd loads, restarts on and runs a GPU pod from through the CRI.

use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cri::{containerd_config, workload, Node};
use crate::engines::{gpus_seen, wait_for, Bed, SYSTEM_PATH};
use crate::util::*;

const TOOLKIT: &str = "/usr/local/nvidia/toolkit";

/// Everything under `root` except the `skip` subtrees: relative path to type, mode, and a hash
/// of the content (files) or the link target; with `identity`, also the inode and mtime, which
/// change whenever a file is rewritten, even with the same bytes.
fn listing(root: &Path, skip: &[&str], identity: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if skip
                .iter()
                .any(|s| rel == *s || rel.starts_with(&format!("{s}/")))
            {
                continue;
            }
            let md = fs::symlink_metadata(&p).unwrap();
            let what = if md.file_type().is_symlink() {
                format!("link {}", fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if md.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                fs::read(&p).unwrap().hash(&mut h);
                format!("file {:016x} {}", h.finish(), md.len())
            } else {
                format!("special {:o} {}", md.mode() & 0o170000, md.rdev())
            };
            let id = if identity {
                format!(" ino {} mtime {}.{}", md.ino(), md.mtime(), md.mtime_nsec())
            } else {
                String::new()
            };
            out.insert(rel, format!("{what} mode {:o}{id}", md.mode() & 0o7777));
        }
    }
    out
}

/// The differences between two listings, for a readable failure.
fn diff(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in a {
        match b.get(k) {
            None => d.push(format!("- {k}: {v}")),
            Some(w) if w != v => d.push(format!("~ {k}: {v} -> {w}")),
            _ => {}
        }
    }
    for (k, v) in b {
        if !a.contains_key(k) {
            d.push(format!("+ {k}: {v}"));
        }
    }
    d
}

/// `c` with SIGHUP back to its default action: a test run under `nohup` hands its children
/// SIGHUP ignored, which a shell's `trap` and containerd keep, and the reload tests would wait
/// forever.
fn sighup_default(c: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe, and this runs in the child before exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// A process of the test's, killed and reaped if the test fails before it ends.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A containerd config as an admin writes it: version 2, runc with SystemdCgroup, comments.
const CONTAINERD: &str = r#"# the node's containerd
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
"#;

/// A mock GPU host at `<t>/host` that is the host root: the driver at `/`, `/var/run` a link
/// to `/run` as on a real host, and an engine config.
fn host_root(t: &TestDir) -> (PathBuf, Host) {
    let host = mock_host(t, "host", 2, "570.124.06", "debian");
    let h = t.join("host");
    fs::create_dir_all(h.join("run")).unwrap();
    if fs::symlink_metadata(h.join("var/run")).is_err() {
        fs::create_dir_all(h.join("var")).unwrap();
        symlink("/run", h.join("var/run")).unwrap();
    }
    (h, host)
}

fn install_args<'a>(h: &'a str, proc_root: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["install", "--host-root", h, "--proc-root", proc_root];
    a.extend_from_slice(extra);
    a
}

#[test]
fn install_twice_changes_nothing_and_uninstall_gives_the_host_back() {
    let t = TestDir::new();
    let (h, host) = host_root(&t);
    fs::create_dir_all(h.join("etc/containerd")).unwrap();
    fs::write(h.join("etc/containerd/config.toml"), CONTAINERD).unwrap();
    let before = listing(&h, &[], false);
    let hs = h.to_str().unwrap();
    let proc_root = host.proc_root();
    let args = install_args(
        hs,
        &proc_root,
        &["--runtime", "containerd", "--restart-mode", "none"],
    );

    let r = ok(&args);
    assert!(r.stdout.contains("--restart-mode none"), "{}", r.stdout);
    let tk = h.join(TOOLKIT.trim_start_matches('/'));
    // The running binary, byte for byte, and its names as links to it.
    let installed = fs::read(tk.join("gpuctk")).unwrap();
    assert!(installed == fs::read(GPUCTK).unwrap(), "the copy differs");
    assert_eq!(
        fs::metadata(tk.join("gpuctk")).unwrap().mode() & 0o7777,
        0o755
    );
    for name in [
        "nvidia-container-runtime",
        "nvidia-container-runtime.cdi",
        "nvidia-container-runtime.legacy",
        "nvidia-container-runtime-hook",
        "nvidia-container-cli",
        "nvidia-cdi-hook",
        "nvidia-ctk",
    ] {
        assert_eq!(fs::read_link(tk.join(name)).unwrap(), Path::new("gpuctk"));
    }
    // The installed binary finds the config next to it, and it names the toolkit's hook.
    let mut c = Command::new(tk.join("nvidia-ctk"));
    c.arg("config");
    for k in [
        "GPUCTK_CONFIG",
        "NVIDIA_CTK_CONFIG_FILE_PATH",
        "XDG_CONFIG_HOME",
    ] {
        c.env_remove(k);
    }
    let cfg = Run::from(c.output().unwrap());
    assert_eq!(cfg.code, 0, "{}", cfg.stderr);
    assert!(
        cfg.stdout
            .contains("hook-path = \"/usr/local/nvidia/toolkit/nvidia-cdi-hook\""),
        "{}",
        cfg.stdout
    );
    // The spec went through the host's /var/run link, with paths as the host sees them.
    let spec_text = fs::read_to_string(h.join("run/cdi/nvidia.yaml")).unwrap();
    assert!(!spec_text.contains(hs), "{spec_text}");
    assert!(
        spec_text.contains("/usr/local/nvidia/toolkit/nvidia-cdi-hook"),
        "{spec_text}"
    );
    let spec = yaml(&spec_text);
    assert_cdi_schema(&spec);
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    for n in ["0", "1", "all"] {
        assert!(names.contains(&n), "{names:?}");
    }
    assert!(spec_text.contains("/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06"));
    // The management spec beside it, as NVIDIA's installer writes it: one `all` device.
    let management_text =
        fs::read_to_string(h.join("run/cdi/management.nvidia.com-gpu.yaml")).unwrap();
    assert!(!management_text.contains(hs), "{management_text}");
    let management = yaml(&management_text);
    assert_cdi_schema(&management);
    assert_eq!(management["kind"], "management.nvidia.com/gpu");
    assert_eq!(management["devices"][0]["name"], "all");
    assert!(
        management_text.contains("path: /dev/nvidia1")
            && management_text.contains("/usr/local/nvidia/toolkit/nvidia-cdi-hook"),
        "{management_text}"
    );
    // The runtimes in a drop-in the main config imports; real containerd sees all three.
    let main = fs::read_to_string(h.join("etc/containerd/config.toml")).unwrap();
    assert!(
        main.contains("imports = [\"conf.d/99-nvidia.toml\"]"),
        "{main}"
    );
    let drop_in = fs::read_to_string(h.join("etc/containerd/conf.d/99-nvidia.toml")).unwrap();
    assert!(drop_in.contains("SystemdCgroup = true"), "{drop_in}");
    let dump = Command::new("containerd")
        .arg("--config")
        .arg(h.join("etc/containerd/config.toml"))
        .args(["config", "dump"])
        .output()
        .expect("containerd (apt-get install containerd)");
    let dump = String::from_utf8_lossy(&dump.stdout);
    for (name, bin) in [
        ("nvidia", "nvidia-container-runtime"),
        ("nvidia-cdi", "nvidia-container-runtime.cdi"),
        ("nvidia-legacy", "nvidia-container-runtime.legacy"),
    ] {
        assert!(
            dump.contains(&format!(
                "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{name}]"
            )),
            "{dump}"
        );
        assert!(
            dump.contains(&format!("BinaryName = \"{TOOLKIT}/{bin}\"")),
            "{dump}"
        );
    }
    // The main file's own settings survive the import (the drop-in repeats the CRI table).
    assert!(dump.contains("registry.k8s.io/pause:3.9"), "{dump}");

    // Again: every file as it was (same inode, same mtime), and no reload.
    let after = listing(&h, &[], true);
    let r = ok(&args);
    assert!(
        r.stdout
            .contains("nothing changed for containerd: not reloaded"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("created ") && !r.stdout.contains("updated "));
    let again = listing(&h, &[], true);
    assert!(after == again, "{:#?}", diff(&after, &again));

    let r = ok(&["uninstall", "--host-root", hs, "--restart-mode", "none"]);
    assert!(r.stdout.contains("unregistered nvidia-cdi"), "{}", r.stdout);
    let back = listing(&h, &[], false);
    assert!(before == back, "{:#?}", diff(&before, &back));
    let r = ok(&["uninstall", "--host-root", hs, "--restart-mode", "none"]);
    assert!(r.stdout.contains("nothing installed"), "{}", r.stdout);
}

/// Regression: install wrote its manifest only at the end, so one that failed part way left the
/// files it had written unrecorded; the retry found them unchanged and never recorded them, and
/// uninstall left them on the host. Each path is now recorded before it is written.
#[test]
fn install_failing_part_way_then_retried_is_uninstalled_whole() {
    let t = TestDir::new();
    let (h, host) = host_root(&t);
    fs::create_dir_all(h.join("etc/containerd")).unwrap();
    fs::write(h.join("etc/containerd/config.toml"), CONTAINERD).unwrap();
    let before = listing(&h, &[], false);
    let hs = h.to_str().unwrap();
    let proc_root = host.proc_root();
    let args = install_args(
        hs,
        &proc_root,
        &["--runtime", "containerd", "--restart-mode", "none"],
    );
    // A file where the CDI spec dir goes: the toolkit is written, then install fails.
    fs::write(h.join("run/cdi"), "in the way\n").unwrap();
    fails(&args, &["/run/cdi", "cannot create directory"]);
    assert!(h.join("usr/local/nvidia/toolkit/gpuctk").exists());
    fs::remove_file(h.join("run/cdi")).unwrap();
    // Then one where the drop-in's dir goes: the specs are written too, the engine not yet.
    fs::write(h.join("etc/containerd/conf.d"), "in the way\n").unwrap();
    fails(&args, &["conf.d", "cannot create directory"]);
    assert!(h.join("run/cdi/nvidia.yaml").exists());
    fs::remove_file(h.join("etc/containerd/conf.d")).unwrap();
    let r = ok(&args);
    assert!(r.stdout.contains("registered nvidia"), "{}", r.stdout);

    ok(&["uninstall", "--host-root", hs, "--restart-mode", "none"]);
    let back = listing(&h, &[], false);
    assert!(before == back, "{:#?}", diff(&before, &back));
}

/// What real containerd (1.x: an imported plugin section replaces the main file's whole) makes
/// of the config install leaves: `config dump`.
fn containerd_dump(config: &Path) -> String {
    let o = Command::new("containerd")
        .arg("--config")
        .arg(config)
        .args(["config", "dump"])
        .output()
        .expect("containerd (apt-get install containerd)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Regression: the drop-in's copy of the main config's CRI table was taken once; an edit of
/// that table in the main config afterwards never reached containerd (the drop-in's stale copy
/// replaced it), and install said "already registered". It is refreshed on every install.
#[test]
fn install_again_carries_an_edit_of_the_main_cri_table_to_containerd() {
    let t = TestDir::new();
    let (h, host) = host_root(&t);
    let config = h.join("etc/containerd/config.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, CONTAINERD).unwrap();
    let hs = h.to_str().unwrap();
    let proc_root = host.proc_root();
    let args = install_args(
        hs,
        &proc_root,
        &["--runtime", "containerd", "--restart-mode", "none"],
    );
    ok(&args);
    assert!(containerd_dump(&config).contains("registry.k8s.io/pause:3.9"));
    // The admin moves to another pause image, in the main config.
    let main = fs::read_to_string(&config).unwrap();
    fs::write(
        &config,
        main.replace("registry.k8s.io/pause:3.9", "registry.example/pause:3.10"),
    )
    .unwrap();
    let r = ok(&args);
    assert!(
        r.stdout
            .contains("registered nvidia in /etc/containerd/conf.d/99-nvidia.toml")
            && !r.stdout.contains("already registered"),
        "{}",
        r.stdout
    );
    let dump = containerd_dump(&config);
    assert!(
        dump.contains("sandbox_image = \"registry.example/pause:3.10\""),
        "{dump}"
    );
    assert!(dump.contains("SystemdCgroup = true"), "{dump}");
    assert!(
        dump.contains(&format!(
            "BinaryName = \"{TOOLKIT}/nvidia-container-runtime\""
        )),
        "{dump}"
    );
    // And once more: nothing changed, nothing written.
    let r = ok(&args);
    assert!(r.stdout.contains("already registered"), "{}", r.stdout);
}

/// A `systemctl` for the host root: a static program that records its arguments and root.
fn fake_systemctl(t: &TestDir, h: &Path) {
    let src = t.join("systemctl.c");
    fs::write(
        &src,
        r#"#include <stdio.h>
int main(int argc, char **argv) {
    /* Written at / as this process sees it: the host root when it was chrooted there. */
    FILE *f = fopen("/systemctl.log", "a");
    if (!f) return 1;
    for (int i = 1; i < argc; i++) fprintf(f, "%s%s", argv[i], i + 1 < argc ? " " : "\n");
    return fclose(f) != 0;
}
"#,
    )
    .unwrap();
    fs::create_dir_all(h.join("usr/bin")).unwrap();
    let o = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(h.join("usr/bin/systemctl"))
        .arg(&src)
        .output()
        .expect("gcc");
    assert!(
        o.status.success(),
        "gcc -static: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn crio_and_docker_files_replaced_and_restored_and_reload_modes() {
    let t = TestDir::new();
    let (h, host) = host_root(&t);
    let hs = h.to_str().unwrap().to_string();
    let proc_root = host.proc_root();
    // The host's own CDI spec and crio.conf, which install must keep and give back.
    fs::create_dir_all(h.join("run/cdi")).unwrap();
    fs::write(
        h.join("run/cdi/nvidia.yaml"),
        "cdiVersion: 0.5.0\n# the host's own\n",
    )
    .unwrap();
    fs::create_dir_all(h.join("etc/crio")).unwrap();
    fs::write(
        h.join("etc/crio/crio.conf"),
        "[crio.runtime]\ndefault_runtime = \"crun\"\n\n[crio.runtime.runtimes.crun]\nruntime_path = \"/usr/bin/crun\"\nmonitor_path = \"/usr/libexec/crio/conmon\"\n",
    )
    .unwrap();
    fake_systemctl(&t, &h);
    let before = listing(&h, &[], false);

    // CRI-O, reloaded through systemd in the host root.
    let r = ok(&install_args(
        &hs,
        &proc_root,
        &["--runtime", "crio", "--restart-mode", "systemd"],
    ));
    assert!(r.stdout.contains("restarted crio"), "{}", r.stdout);
    assert_eq!(
        fs::read_to_string(h.join("systemctl.log")).unwrap(),
        "restart crio\n"
    );
    let d = fs::read_to_string(h.join("etc/crio/crio.conf.d/99-nvidia.toml")).unwrap();
    assert!(d.contains("[crio.runtime.runtimes.nvidia-legacy]"), "{d}");
    assert!(
        d.contains("runtime_path = \"/usr/local/nvidia/toolkit/nvidia-container-runtime\""),
        "{d}"
    );
    assert!(
        d.contains("monitor_path = \"/usr/libexec/crio/conmon\""),
        "{d}"
    );
    assert!(!h.join("etc/crio/crio.conf.bak").exists());
    // The host's spec was kept aside, ours is in place.
    assert!(fs::read_to_string(h.join("run/cdi/nvidia.yaml.bak"))
        .unwrap()
        .contains("the host's own"));
    // A second run: nothing to restart.
    let r = ok(&install_args(
        &hs,
        &proc_root,
        &["--runtime", "crio", "--restart-mode", "systemd"],
    ));
    assert!(r.stdout.contains("not reloaded"), "{}", r.stdout);
    assert_eq!(
        fs::read_to_string(h.join("systemctl.log")).unwrap(),
        "restart crio\n"
    );
    // Another engine while installed: refused, nothing written.
    fails(
        &install_args(&hs, &proc_root, &["--runtime", "docker"]),
        &["uninstall"],
    );
    let r = ok(&["uninstall", "--host-root", &hs, "--restart-mode", "systemd"]);
    assert!(
        r.stdout.contains("restored /var/run/cdi/nvidia.yaml"),
        "{}",
        r.stdout
    );
    assert_eq!(
        fs::read_to_string(h.join("systemctl.log")).unwrap(),
        "restart crio\nrestart crio\n"
    );
    fs::remove_file(h.join("systemctl.log")).unwrap();
    let back = listing(&h, &[], false);
    assert!(before == back, "{:#?}", diff(&before, &back));

    // docker: daemon.json edited in place, SIGHUP to the pid in a pid file.
    fs::create_dir_all(h.join("etc/docker")).unwrap();
    // A 2-space layout: install rewrites it with NVIDIA's 4 spaces, uninstall gives these bytes
    // back.
    let daemon_json = "{\n  \"log-driver\": \"journald\"\n}\n";
    fs::write(h.join("etc/docker/daemon.json"), daemon_json).unwrap();
    let before = listing(&h, &[], false);
    // A process that waits for SIGHUP, as dockerd reloads on it; killed if the test fails.
    let mut waiter = KillOnDrop(Some(
        sighup_default(&mut Command::new("sh"))
            .args([
                "-c",
                "trap 'echo reloaded; exit 0' HUP; while :; do sleep 0.1; done",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let waiter_pid = waiter.0.as_ref().unwrap().id();
    let pid_file = t.join("docker.pid");
    fs::write(&pid_file, format!("{waiter_pid}\n")).unwrap();
    // The pid file as the host sees it: under the host root.
    fs::rename(&pid_file, h.join("run/docker.pid")).unwrap();
    // No dockerd socket: everything is written, the reload fails, and is owed.
    fails(
        &install_args(
            &hs,
            &proc_root,
            &["--runtime", "docker", "--restart-mode", "signal"],
        ),
        &["--socket /var/run/docker.sock", "cannot connect"],
    );
    let pending =
        fs::read_to_string(h.join("usr/local/nvidia/toolkit/.gpuctk-install.json")).unwrap();
    assert!(pending.contains("\"reload_pending\": true"), "{pending}");
    // The next run changes nothing but pays the reload.
    let r = ok(&install_args(
        &hs,
        &proc_root,
        &[
            "--runtime",
            "docker",
            "--restart-mode",
            "signal",
            "--pid-file",
            "/var/run/docker.pid",
        ],
    ));
    assert!(r.stdout.contains("sent SIGHUP to docker"), "{}", r.stdout);
    assert!(!r.stdout.contains("created ") && !r.stdout.contains("updated "));
    let out = waiter.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "reloaded\n");
    // Paid: no debt left, and the next run signals nothing.
    let r = ok(&install_args(&hs, &proc_root, &["--runtime", "docker"]));
    assert!(r.stdout.contains("not reloaded"), "{}", r.stdout);
    let j: serde_json::Value =
        serde_json::from_slice(&fs::read(h.join("etc/docker/daemon.json")).unwrap()).unwrap();
    assert_eq!(
        j["runtimes"]["nvidia-cdi"]["path"],
        "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi"
    );
    assert_eq!(j["log-driver"], "journald");
    ok(&["uninstall", "--host-root", &hs, "--restart-mode", "none"]);
    fs::remove_file(h.join("run/docker.pid")).unwrap();
    let back = listing(&h, &[], false);
    assert!(before == back, "{:#?}", diff(&before, &back));

    // docker with CDI on and nvidia as the default: uninstall turns both back off (the ledger
    // `runtime configure` keeps says they were ours), and daemon.json is the user's again.
    ok(&install_args(
        &hs,
        &proc_root,
        &[
            "--runtime",
            "docker",
            "--restart-mode",
            "none",
            "--cdi.enabled",
            "--set-as-default",
        ],
    ));
    let j: serde_json::Value =
        serde_json::from_slice(&fs::read(h.join("etc/docker/daemon.json")).unwrap()).unwrap();
    assert_eq!(j["features"]["cdi"], true, "{j}");
    assert_eq!(j["default-runtime"], "nvidia", "{j}");
    ok(&["uninstall", "--host-root", &hs, "--restart-mode", "none"]);
    let back = listing(&h, &[], false);
    assert!(before == back, "{:#?}", diff(&before, &back));
}

#[test]
fn install_refuses_bad_input_and_writes_nothing() {
    let t = TestDir::new();
    let (h, host) = host_root(&t);
    let hs = h.to_str().unwrap();
    let proc_root = host.proc_root();
    let before = listing(&h, &[], false);
    fails(
        &install_args(
            hs,
            &proc_root,
            &["--runtime", "docker", "--drop-in-config", "/etc/x.json"],
        ),
        &["--drop-in-config", "docker"],
    );
    fails(
        &install_args(hs, &proc_root, &["--toolkit-dir", "usr/local/x"]),
        &["--toolkit-dir", "absolute"],
    );
    // No driver where the flag says: found before anything is written.
    fails(
        &install_args(hs, &proc_root, &["--driver-root", "/run/nvidia/driver"]),
        &["--driver-root /run/nvidia/driver", "nothing was written"],
    );
    fails(
        &["install", "--host-root", t.join("nope").to_str().unwrap()],
        &["--host-root", "not a directory"],
    );
    let after = listing(&h, &[], false);
    assert!(before == after, "{:#?}", diff(&before, &after));

    // A manifest too big to be ours is refused by size, before it is parsed.
    let m = h.join("usr/local/nvidia/toolkit/.gpuctk-install.json");
    fs::create_dir_all(m.parent().unwrap()).unwrap();
    fs::File::create(&m).unwrap().set_len(5 << 20).unwrap();
    fails(
        &["uninstall", "--host-root", hs, "--restart-mode", "none"],
        &[".gpuctk-install.json", "more than the 4194304 allowed"],
    );
}

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// podman with its storage in `dir`, never the host's.
fn podman_argv(dir: &Path) -> Vec<String> {
    let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
    vec![
        "podman".into(),
        "--root".into(),
        p("storage"),
        "--runroot".into(),
        p("run"),
        "--tmpdir".into(),
        p("tmp"),
        "--storage-driver".into(),
        "vfs".into(),
        "--cgroup-manager".into(),
        "cgroupfs".into(),
        "--events-backend".into(),
        "none".into(),
    ]
}

/// The driver's place on the test host, as the host root sees it: under `/usr/local`, which
/// containerd's namespace replaces with a tmpfs holding just this and the toolkit dir.
const DRIVER: &str = "/usr/local/gpuctk-mock";

#[test]
fn installer_image_with_podman_then_containerd_runs_a_gpu_pod_through_cri() {
    // The bed (images, pod logs) goes with the node; the host root and the podman store are this
    // test's, for the uninstall after it.
    let bed = Bed::new(1);
    let t = TestDir::new();
    // The image, built offline by the project's script, in a podman store of this test.
    let store = t.join("podman");
    let podman = podman_argv(&store);
    let tag = format!("localhost/gpuctk-installer-test:{}", std::process::id());
    let o = Command::new(repo().join("scripts/image.sh"))
        .arg(&tag)
        .env("PODMAN", podman.join(" "))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "scripts/image.sh: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = Run::from(
        Command::new(&podman[0])
            .args(&podman[1..])
            .args([
                "image",
                "inspect",
                "--format",
                "{{len .RootFS.Layers}} {{.Config.Entrypoint}}",
                &tag,
            ])
            .output()
            .unwrap(),
    );
    assert_eq!(r.stdout.trim(), "1 [/gpuctk]", "{}", r.stderr);

    // The host root: a mock GPU host at DRIVER, containerd's config, /var/run -> /run.
    let h = t.join("hostroot");
    let mock = mock_host(&t, &format!("hostroot{DRIVER}"), 2, "570.124.06", "debian");
    fs::create_dir_all(h.join("var")).unwrap();
    symlink("/run", h.join("var/run")).unwrap();
    fs::create_dir_all(h.join("run/containerd")).unwrap();
    fs::create_dir_all(h.join("etc/containerd")).unwrap();
    let cdir = t.join("containerd");
    fs::create_dir_all(&cdir).unwrap();
    let sock = h.join("run/containerd/containerd.sock");
    let mut doc: toml_edit::DocumentMut = containerd_config(&cdir).parse().unwrap();
    doc["grpc"]["address"] = toml_edit::value(sock.to_string_lossy().as_ref());
    fs::write(h.join("etc/containerd/config.toml"), doc.to_string()).unwrap();
    // The mount point of the toolkit's parent in containerd's namespace (below).
    fs::create_dir_all(h.join("usr/local/nvidia")).unwrap();
    // containerd's socket is its own, not the installer's.
    let skip = ["run/containerd"];
    let before = listing(&h, &skip, false);

    // containerd in a namespace where the host root's toolkit and driver are at their host
    // paths, and (once install wrote it) its CDI spec dir at /var/run/cdi (a link to /run).
    let containerd_cmd = |cdi: bool| {
        let cdi = if cdi {
            r#"mkdir -p /run/cdi && mount --bind "$0/run/cdi" /run/cdi && "#
        } else {
            ""
        };
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                r#"{cdi}mount -t tmpfs tmpfs /usr/local && mkdir -p /usr/local/nvidia {DRIVER} && mount --bind "$0/usr/local/nvidia" /usr/local/nvidia && mount --bind "$0{DRIVER}" {DRIVER} && exec "$@""#
            ))
            .arg(&h)
            .args(["containerd", "--config"])
            .arg(h.join("etc/containerd/config.toml"))
            .env("PATH", SYSTEM_PATH);
        sighup_default(&mut c);
        c
    };
    let mut first = KillOnDrop(Some(
        containerd_cmd(false)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(cdir.join("first.log")).unwrap())
            .spawn()
            .expect("containerd"),
    ));
    let first_pid = first.0.as_ref().unwrap().id();
    wait_for("containerd", Duration::from_secs(60), || sock.exists());

    let podman_run = |args: &[&str]| {
        let mut c = Command::new(&podman[0]);
        c.args(&podman[1..])
            .args([
                "run",
                "--rm",
                "--pull=never",
                "--network=none",
                "--pid=host",
            ])
            // Podman's default limits exceed what this (containerized) test host allows.
            .args([
                "--ulimit",
                "nofile=20000:20000",
                "--ulimit",
                "nproc=32768:32768",
                "-v",
            ])
            .arg(format!("{}:/host", h.display()))
            .arg(&tag)
            .args(args);
        Run::from(c.output().unwrap())
    };
    // The image's binary has no mock host: a test fake, not for nodes.
    let r = podman_run(&["--help"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("install") && !r.stdout.contains("mock-host"),
        "{}",
        r.stdout
    );
    let proc_in_image = format!("/host{DRIVER}/proc");
    let r = podman_run(&[
        "install",
        "--host-root",
        "/host",
        "--runtime",
        "containerd",
        "--driver-root",
        DRIVER,
        "--proc-root",
        &proc_in_image,
        "--restart-mode",
        "signal",
    ]);
    assert_eq!(r.code, 0, "install in the image: {}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains(&format!("sent SIGHUP to containerd (pid {})", first_pid)),
        "{}",
        r.stdout
    );
    // containerd does not handle SIGHUP: it exits, for its service manager to start it again.
    let st = first.0.take().unwrap().wait().unwrap();
    assert!(!st.success(), "containerd after SIGHUP: {st}");
    // The image's binary went in: the static one, not this test's.
    let tk = h.join(TOOLKIT.trim_start_matches('/'));
    let f = Run::from(
        Command::new("file")
            .arg(tk.join("gpuctk"))
            .output()
            .unwrap(),
    );
    assert!(
        f.stdout.contains("statically linked") || f.stdout.contains("static-pie linked"),
        "{}",
        f.stdout
    );
    let spec = fs::read_to_string(h.join("run/cdi/nvidia.yaml")).unwrap();
    assert!(
        spec.contains(&format!(
            "{DRIVER}/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06"
        )),
        "{spec}"
    );
    // The installed config names the driver root; the mock's procfs is a directory of files,
    // which a real host does not need.
    let config = tk.join(".config/nvidia-container-runtime/config.toml");
    assert!(fs::read_to_string(&config)
        .unwrap()
        .contains(&format!("root = \"{DRIVER}\"")));
    ok(&[
        "config",
        "--config-file",
        config.to_str().unwrap(),
        "--set",
        &format!("gpuctk.proc-root={DRIVER}/proc"),
        "--in-place",
    ]);

    // The service manager's part: containerd again, from the same config, now with our
    // runtimes; a GPU pod on the `nvidia` RuntimeClass gets the GPUs.
    let node = Node::launch(
        bed,
        cdir.clone(),
        sock.clone(),
        containerd_cmd(true),
        &["/run/cdi", "/usr/local", "/usr/local/nvidia", DRIVER],
    );
    let pod = node.pod("gpu", "nvidia");
    let r = node.run(&pod, workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "all")]));
    assert_eq!(gpus_seen(&r), mock.uuids(), "{}{}", r.stderr, node.log());
    let pod = node.pod("legacy", "nvidia-legacy");
    let r = node.run(&pod, workload("smi", &[("NVIDIA_VISIBLE_DEVICES", "1")]));
    assert_eq!(
        gpus_seen(&r),
        vec![mock.uuids()[1].clone()],
        "{}",
        node.log()
    );
    // The device plugin's cdi-annotations on `nvidia-cdi`: resolved from the spec install
    // wrote, its hook the toolkit's.
    let mut c = workload("smi", &[]);
    c.annotations.insert(
        "cdi.k8s.io/nvidia-device-plugin_0d1c4f6b-3a0e-4c55-9d1c-8a3e2f0c7b6d".into(),
        format!("nvidia.com/gpu={}", mock.uuids()[0]),
    );
    let pod = node.pod("cdi", "nvidia-cdi");
    let r = node.run(&pod, c);
    assert_eq!(
        gpus_seen(&r),
        vec![mock.uuids()[0].clone()],
        "{}{}",
        r.stderr,
        node.log()
    );
    node.shutdown();

    // Uninstall through the image: the host root is what it was.
    let r = podman_run(&[
        "uninstall",
        "--host-root",
        "/host",
        "--restart-mode",
        "none",
    ]);
    assert_eq!(
        r.code, 0,
        "uninstall in the image: {}{}",
        r.stdout, r.stderr
    );
    let back = listing(&h, &skip, false);
    assert!(before == back, "{:#?}", diff(&before, &back));
    let r = Run::from(
        Command::new(&podman[0])
            .args(&podman[1..])
            .args(["rmi", &tag])
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Regression: uninstall removed the runtime that running GPU pods' shims run for kill and
/// delete, and containerd could no longer stop or remove them ("fork/exec
/// .../nvidia-container-runtime: no such file or directory"), the container running on. Now
/// uninstall unregisters the runtimes, finds the containers containerd still runs through them
/// (the runc shim's `runtime` file in each task bundle), keeps the runtime's entry point while
/// any is left and says so, failing; the pods stop and go through the CRI; uninstall again
/// gives the host root back.
#[test]
fn uninstall_keeps_the_runtime_for_running_pods_until_they_are_gone() {
    let bed = Bed::new(1);
    let t = TestDir::new();
    let h = t.join("hostroot");
    let mock = mock_host(&t, &format!("hostroot{DRIVER}"), 1, "570.124.06", "debian");
    fs::create_dir_all(h.join("var")).unwrap();
    symlink("/run", h.join("var/run")).unwrap();
    fs::create_dir_all(h.join("run/containerd")).unwrap();
    fs::create_dir_all(h.join("etc/containerd")).unwrap();
    fs::create_dir_all(h.join("usr/local/nvidia")).unwrap();
    let cdir = t.join("containerd");
    fs::create_dir_all(&cdir).unwrap();
    let sock = h.join("run/containerd/containerd.sock");
    let mut doc: toml_edit::DocumentMut = containerd_config(&cdir).parse().unwrap();
    doc["grpc"]["address"] = toml_edit::value(sock.to_string_lossy().as_ref());
    // Its task bundles where the host has them, at the host's /run (the namespace below).
    doc["state"] = toml_edit::value("/run/containerd");
    fs::write(h.join("etc/containerd/config.toml"), doc.to_string()).unwrap();
    // containerd's own, and util-linux's (`mount` in containerd's namespace, at /run).
    let skip = ["run/containerd", "run/mount"];
    let before = listing(&h, &skip, false);

    let hs = h.to_str().unwrap();
    let proc_root = mock.proc_root();
    ok(&install_args(
        hs,
        &proc_root,
        &[
            "--runtime",
            "containerd",
            "--driver-root",
            DRIVER,
            "--restart-mode",
            "none",
        ],
    ));
    let tk = h.join(TOOLKIT.trim_start_matches('/'));
    let config = tk.join(".config/nvidia-container-runtime/config.toml");
    ok(&[
        "config",
        "--config-file",
        config.to_str().unwrap(),
        "--set",
        &format!("gpuctk.proc-root={DRIVER}/proc"),
        "--in-place",
    ]);

    // containerd where the host root's /run, toolkit and driver are at their host paths.
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            r#"mount --bind "$0/run" /run && mount -t tmpfs tmpfs /usr/local && mkdir -p /usr/local/nvidia {DRIVER} && mount --bind "$0/usr/local/nvidia" /usr/local/nvidia && mount --bind "$0{DRIVER}" {DRIVER} && exec "$@""#
        ))
        .arg(&h)
        .args(["containerd", "--config"])
        .arg(h.join("etc/containerd/config.toml"))
        .env("PATH", SYSTEM_PATH);
    sighup_default(&mut c);
    let node = Node::launch(
        bed,
        cdir.clone(),
        sock.clone(),
        c,
        &["/run", "/usr/local", "/usr/local/nvidia", DRIVER],
    );
    let cri = node.cri();
    let pod = node.pod("busy", "nvidia");
    let pod_id = cri
        .run_pod_sandbox(&pod)
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", node.log()));
    let mut spec = workload("sleeper", &[("NVIDIA_VISIBLE_DEVICES", "all")]);
    spec.command = vec!["/bin/sh".into(), "-c".into(), "sleep 600".into()];
    let id = cri
        .create_container(&pod_id, &pod, &spec)
        .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", node.log()));
    cri.start_container(&id)
        .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", node.log()));

    let first = run(&["uninstall", "--host-root", hs, "--restart-mode", "none"]);
    // The pod stops and goes, through the runtime it was started with.
    let stopped = cri
        .stop_container(&id, 0)
        .and_then(|()| cri.stop_pod_sandbox(&pod_id));
    assert!(
        stopped.is_ok(),
        "stopping the pod after uninstall: {stopped:?}\nuninstall: {}{}\n{}",
        first.stdout,
        first.stderr,
        node.log()
    );
    cri.remove_container(&id).unwrap();
    cri.remove_pod_sandbox(&pod_id).unwrap();
    assert_ne!(first.code, 0, "{}{}", first.stdout, first.stderr);
    assert!(
        first.stderr.contains("still run on gpuctk's runtime")
            && first.stderr.contains(&format!("k8s.io/{id}"))
            && first.stderr.contains(&format!("k8s.io/{pod_id}")),
        "{}",
        first.stderr
    );
    assert!(
        first.stdout.contains("unregistered nvidia"),
        "{}",
        first.stdout
    );
    assert!(
        first.stdout.contains(&format!("kept {TOOLKIT}/gpuctk")),
        "{}",
        first.stdout
    );
    assert!(!h.join("run/cdi/nvidia.yaml").exists());
    node.shutdown();

    let r = ok(&["uninstall", "--host-root", hs, "--restart-mode", "none"]);
    assert!(
        r.stdout.contains(&format!("removed {TOOLKIT}/gpuctk")),
        "{}",
        r.stdout
    );
    let back = listing(&h, &skip, false);
    assert!(before == back, "{:#?}", diff(&before, &back));
}

/// `runtime configure --drop-in-config` as NVIDIA defines it: containerd's main config gets an
/// import of the drop-in, which containerd 1.6 loads (`config dump`); CRI-O's goes where asked;
/// docker refuses; unconfigure gives back the files it found.
#[test]
fn runtime_configure_drop_in_config() {
    let t = TestDir::new();
    let main = t.join("etc/containerd/config.toml");
    fs::create_dir_all(main.parent().unwrap()).unwrap();
    fs::write(&main, CONTAINERD).unwrap();
    let drop_in = t.join("etc/containerd/conf.d/99-nvidia.toml");
    let (m, d) = (main.to_str().unwrap(), drop_in.to_str().unwrap());
    let configure = |verb: &str, extra: &[&str]| {
        let mut a = vec![
            "runtime",
            verb,
            "--runtime=containerd",
            "--config",
            m,
            "--drop-in-config",
            d,
            "--nvidia-runtime-path",
            "/opt/gpu/nvidia-container-runtime",
        ];
        a.extend_from_slice(extra);
        ok(&a)
    };
    configure("configure", &["--set-as-default"]);
    configure("configure", &["--nvidia-runtime-name", "nvidia-cdi"]);
    let text = fs::read_to_string(&main).unwrap();
    assert!(
        text.contains("imports = [\"conf.d/99-nvidia.toml\"]"),
        "{text}"
    );
    let dump = Run::from(
        Command::new("containerd")
            .args(["--config", m, "config", "dump"])
            .output()
            .expect("containerd (apt-get install containerd)"),
    );
    assert_eq!(dump.code, 0, "{}", dump.stderr);
    for name in ["nvidia", "nvidia-cdi"] {
        assert!(
            dump.stdout.contains(&format!(
                "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{name}]"
            )),
            "{}",
            dump.stdout
        );
    }
    assert!(
        dump.stdout.contains("default_runtime_name = \"nvidia\""),
        "{}",
        dump.stdout
    );
    assert!(
        dump.stdout.contains("SystemdCgroup = true"),
        "{}",
        dump.stdout
    );
    // Again: nothing to write.
    let r = configure("configure", &["--set-as-default"]);
    assert!(r.stdout.contains("already configured"), "{}", r.stdout);
    configure("unconfigure", &[]);
    configure("unconfigure", &["--nvidia-runtime-name", "nvidia-cdi"]);
    assert!(!drop_in.exists());
    assert_eq!(fs::read_to_string(&main).unwrap(), CONTAINERD);
    let dump = Command::new("containerd")
        .args(["--config", m, "config", "dump"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&dump.stdout).contains("runtimes.nvidia"));

    // CRI-O: the drop-in where asked, the main file never written.
    let crio = t.join("etc/crio/crio.conf");
    fs::create_dir_all(crio.parent().unwrap()).unwrap();
    fs::write(&crio, "[crio.runtime]\n").unwrap();
    let cd = t.join("etc/crio/crio.conf.d/50-gpu.toml");
    let (c, cds) = (crio.to_str().unwrap(), cd.to_str().unwrap());
    ok(&[
        "runtime",
        "configure",
        "--runtime=crio",
        "--config",
        c,
        "--drop-in-config",
        cds,
    ]);
    assert!(fs::read_to_string(&cd)
        .unwrap()
        .contains("[crio.runtime.runtimes.nvidia]"));
    ok(&[
        "runtime",
        "unconfigure",
        "--runtime=crio",
        "--config",
        c,
        "--drop-in-config",
        cds,
    ]);
    assert!(!cd.exists());
    assert_eq!(fs::read_to_string(&crio).unwrap(), "[crio.runtime]\n");

    fails(
        &[
            "runtime",
            "configure",
            "--runtime=docker",
            "--config",
            t.join("daemon.json").to_str().unwrap(),
            "--drop-in-config",
            d,
        ],
        &["--drop-in-config", "docker"],
    );
    assert!(!t.join("daemon.json").exists());
}

/// The DaemonSet's container: `install --wait` stays up after installing; SIGTERM ends it with
/// 0, and with `--uninstall-on-exit` the host is given back first.
#[test]
fn install_wait_until_sigterm_then_uninstall() {
    use std::io::{BufRead, BufReader};
    let t = TestDir::new();
    let (h, host) = host_root(&t);
    fs::create_dir_all(h.join("etc/containerd")).unwrap();
    fs::write(h.join("etc/containerd/config.toml"), CONTAINERD).unwrap();
    let before = listing(&h, &[], false);
    let hs = h.to_str().unwrap();
    let proc_root = host.proc_root();
    let mut child = gpuctk(&install_args(
        hs,
        &proc_root,
        &["--restart-mode", "none", "--wait", "--uninstall-on-exit"],
    ))
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let done = l == "installed; waiting for SIGTERM";
        seen.push(l);
        if done {
            break;
        }
    }
    assert_eq!(
        seen.last().map(String::as_str),
        Some("installed; waiting for SIGTERM"),
        "{seen:#?}"
    );
    assert!(h.join("etc/containerd/conf.d/99-nvidia.toml").exists());
    // Still there after the install: it waits.
    assert!(child.try_wait().unwrap().is_none());
    // SAFETY: kill(2) on the child we started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let st = child.wait().unwrap();
    assert!(st.success(), "{st} {rest:#?}");
    assert!(
        rest.iter().any(|l| l.starts_with("unregistered nvidia")),
        "{rest:#?}"
    );
    let back = listing(&h, &[], false);
    assert!(before == back, "{:#?}", diff(&before, &back));
}

/// Every document of the YAML files in deploy/kubernetes, by file.
fn deploy_docs() -> Vec<(String, serde_json::Value)> {
    use serde::Deserialize;
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).unwrap();
        for d in serde_norway::Deserializer::from_str(&text) {
            let v = serde_json::Value::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            docs.push((f.file_name().unwrap().to_string_lossy().into_owned(), v));
        }
    }
    docs
}

/// deploy/kubernetes parses, holds what the docs say, and agrees with the binary: the
/// RuntimeClass handlers are the runtimes install registers, and every variable the DaemonSet
/// sets is one `gpuctk install` reads.
#[test]
fn deploy_kubernetes_manifests() {
    let docs = deploy_docs();
    let kinds: Vec<&str> = docs
        .iter()
        .map(|(_, d)| d["kind"].as_str().unwrap())
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "DaemonSet",
            "Namespace",
            "RuntimeClass",
            "RuntimeClass",
            "RuntimeClass",
            "ServiceAccount"
        ]
    );
    let of = |kind: &'static str| {
        docs.iter()
            .filter(move |(_, d)| d["kind"] == kind)
            .map(|(_, d)| d)
    };
    let ns = of("Namespace").next().unwrap()["metadata"]["name"].clone();
    let handlers: Vec<&str> = of("RuntimeClass")
        .map(|d| {
            assert_eq!(d["apiVersion"], "node.k8s.io/v1");
            assert_eq!(d["metadata"]["name"], d["handler"]);
            d["handler"].as_str().unwrap()
        })
        .collect();
    assert_eq!(handlers, ["nvidia", "nvidia-cdi", "nvidia-legacy"]);

    let sa = of("ServiceAccount").next().unwrap();
    assert_eq!(sa["metadata"]["namespace"], ns);
    assert_eq!(sa["automountServiceAccountToken"], false);
    let ds = of("DaemonSet").next().unwrap();
    assert_eq!(ds["apiVersion"], "apps/v1");
    assert_eq!(ds["metadata"]["namespace"], ns);
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"],
        ds["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .map(|l| serde_json::json!({"app.kubernetes.io/name": l["app.kubernetes.io/name"]}))
            .unwrap()
    );
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(pod["hostPID"], true);
    assert!(pod["nodeSelector"]
        .as_object()
        .is_some_and(|s| !s.is_empty()));
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["privileged"], true);
    assert_eq!(c["args"][0], "install");
    let vol = &pod["volumes"][0];
    assert_eq!(vol["hostPath"]["path"], "/");
    assert_eq!(c["volumeMounts"][0]["name"], vol["name"]);
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let env: BTreeMap<&str, &str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
        .collect();
    assert_eq!(env["HOST_ROOT"], mount);
    // Each variable is one install reads (and each value one it takes: the run below).
    let help = ok(&["install", "--help"]).stdout;
    for k in env.keys() {
        assert!(
            help.contains(&format!("[env: {k}=")),
            "install does not read {k}:\n{help}"
        );
    }
    let t = TestDir::new();
    let (h, host) = host_root(&t);
    let mut c = gpuctk(&[
        "install",
        "--proc-root",
        &host.proc_root(),
        "--restart-mode",
        "none",
    ]);
    for (k, v) in &env {
        c.env(k, v);
    }
    // The DaemonSet's settings, on a mock host: runtimes named as the RuntimeClass handlers.
    c.env("HOST_ROOT", &h)
        .env("RESTART_MODE", "none")
        .env_remove("INSTALL_WAIT");
    let args: Vec<String> = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .filter(|a| a != "install" && a != "--wait")
        .collect();
    c.args(&args);
    let r = Run::from(c.output().unwrap());
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for hd in &handlers {
        assert!(
            r.stdout.contains(&format!("registered {hd} in ")),
            "{}",
            r.stdout
        );
    }
}
