//! `cargo bench -p gpuctk --bench doctor`: a whole `gpuctk doctor --json` process on a mock host
//! of 8 GPUs with a CDI spec, every engine registered, the refresh units and the udev rule, and a
//! bundle to judge; prints the median and p90 next to the cost of spawning `/bin/true`. The
//! issue's target (under a second on 8 GPUs) is printed, never asserted. `GPUCTK_BENCH_BIN`
//! measures another gpuctk binary. Needs root (the mock host mknods its device nodes).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn samples<F: FnMut()>(iters: usize, mut f: F) -> Vec<Duration> {
    f();
    let mut v: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort();
    v
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn run(exe: &str, args: &[&str]) -> std::process::Output {
    Command::new(exe)
        .args(args)
        .env_remove("NVIDIA_CTK_DRIVER_ROOT")
        .env_remove("NVIDIA_CTK_DEV_ROOT")
        .env_remove("GPUCTK_PROC_ROOT")
        .output()
        .expect("run gpuctk")
}

fn main() {
    let exe = std::env::var("GPUCTK_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_gpuctk").to_string());
    let tmp = tempfile::tempdir().expect("temp dir");
    let t = tmp.path();
    let p = |s: &str| t.join(s).display().to_string();
    let mut cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
    cfg.gpus = 8;
    let host =
        gpuctk_mockhost::create_host(&t.join("host"), &cfg).expect("mock host (run as root)");
    let roots = [
        "--driver-root".to_string(),
        host.driver_root.display().to_string(),
        "--dev-root".to_string(),
        host.dev_root.display().to_string(),
        "--proc-root".to_string(),
        host.proc_root.display().to_string(),
    ];
    let roots: Vec<&str> = roots.iter().map(String::as_str).collect();

    // The host's files as a package and `runtime configure` leave them.
    let runtime = p("bin/nvidia-container-runtime");
    write(Path::new(&runtime), "#!/bin/sh\nexit 0\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    write(
        &t.join("config.toml"),
        &format!(
            "accept-nvidia-visible-devices-envvar-when-unprivileged = false\naccept-nvidia-visible-devices-as-volume-mounts = true\n[gpuctk]\nnvml-cache = \"{}\"\n",
            p("nvml-cache.json")
        ),
    );
    // The /dev/char links udev makes (relative, as it makes them).
    let links = host.dev_root.join("dev/char");
    std::fs::create_dir_all(&links).expect("dev/char");
    let nodes = (0..8u32).map(|i| (format!("nvidia{i}"), 195, i)).chain([
        ("nvidiactl".to_string(), 195, 255),
        ("nvidia-modeset".to_string(), 195, 254),
        ("nvidia-uvm".to_string(), host.uvm_major, 0),
        ("nvidia-uvm-tools".to_string(), host.uvm_major, 1),
    ]);
    for (node, major, minor) in nodes {
        std::os::unix::fs::symlink(format!("../{node}"), links.join(format!("{major}:{minor}")))
            .expect("link");
    }
    let spec = p("cdi/nvidia.yaml");
    let mut gen = vec![
        "cdi",
        "generate",
        "--output",
        &spec,
        "--nvidia-cdi-hook-path",
        &exe,
    ];
    gen.extend(&roots);
    assert!(run(&exe, &gen).status.success(), "cdi generate");
    for (engine, config) in [
        ("docker", "docker/daemon.json"),
        ("containerd", "containerd/config.toml"),
        ("crio", "crio/crio.conf"),
    ] {
        std::fs::create_dir_all(t.join(config).parent().expect("dir")).expect("mkdir");
        let c = p(config);
        let args = [
            "runtime",
            "configure",
            "--runtime",
            engine,
            "--config",
            &c,
            "--nvidia-runtime-path",
            &runtime,
        ];
        assert!(
            run(&exe, &args).status.success(),
            "runtime configure {engine}"
        );
    }
    // Every engine reads the spec dir.
    let daemon = t.join("docker/daemon.json");
    let mut d: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&daemon).expect("daemon.json")).expect("json");
    d["cdi-spec-dirs"] = serde_json::json!([p("cdi")]);
    write(&daemon, &d.to_string());
    let ctrd = t.join("containerd/config.toml");
    let text = std::fs::read_to_string(&ctrd).expect("containerd config");
    write(
        &ctrd,
        &format!(
            "{text}\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncdi_spec_dirs = [\"{}\"]\n",
            p("cdi")
        ),
    );
    write(
        &t.join("crio/crio.conf.d/10-cdi.conf"),
        &format!("[crio.runtime]\ncdi_spec_dirs = [\"{}\"]\n", p("cdi")),
    );
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging");
    for (from, to) in [
        (
            "systemd/gpuctk-cdi-refresh.service",
            "usr/lib/systemd/system/gpuctk-cdi-refresh.service",
        ),
        (
            "systemd/gpuctk-cdi-refresh.path",
            "usr/lib/systemd/system/gpuctk-cdi-refresh.path",
        ),
        (
            "udev/99-gpuctk-nvidia.rules",
            "usr/lib/udev/rules.d/99-gpuctk-nvidia.rules",
        ),
    ] {
        let text = std::fs::read_to_string(units.join(from)).expect("packaging file");
        write(&t.join("hostroot").join(to), &text);
    }
    let rootfs = t.join("bundle/rootfs");
    std::fs::create_dir_all(rootfs.join("etc")).expect("rootfs");
    let ldconfig = Command::new("ldconfig").arg("-r").arg(&rootfs).status();
    assert!(ldconfig.is_ok_and(|s| s.success()), "ldconfig -r");
    write(
        &t.join("bundle/config.json"),
        r#"{"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["sh"], "env": ["CUDA_VERSION=12.8.0"]}}"#,
    );

    let (config, cdi, docker, containerd, crio, hostroot, systemctl, bundle) = (
        p("config.toml"),
        p("cdi"),
        p("docker/daemon.json"),
        p("containerd/config.toml"),
        p("crio/crio.conf"),
        p("hostroot"),
        p("bin/no-systemctl"),
        p("bundle"),
    );
    let mut args = vec![
        "doctor",
        "--json",
        "--config",
        &config,
        "--spec-dir",
        &cdi,
        "--docker-config",
        &docker,
        "--containerd-config",
        &containerd,
        "--crio-config",
        &crio,
        "--host-root",
        &hostroot,
        "--systemctl",
        &systemctl,
        "--bundle",
        &bundle,
    ];
    args.extend(&roots);
    let out = run(&exe, &args);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
    let checks = report["checks"].as_array().map(Vec::len).unwrap_or(0);
    if std::env::var_os("GPUCTK_BENCH_SHOW").is_some() {
        println!("{}", String::from_utf8_lossy(&out.stdout));
    }

    let baseline = samples(50, || {
        Command::new("/bin/true").status().expect("/bin/true");
    });
    let doctor = samples(30, || {
        std::hint::black_box(run(&exe, &args));
    });
    println!(
        "baseline: spawn /bin/true            {:8.3} ms",
        ms(baseline[baseline.len() / 2])
    );
    println!(
        "doctor --json, 8 GPUs ({checks} checks, {}): median {:8.3} ms, p90 {:8.3} ms (target: under 1000 ms)",
        report["status"].as_str().unwrap_or("?"),
        ms(doctor[doctor.len() / 2]),
        ms(doctor[(doctor.len() * 9).div_ceil(10) - 1]),
    );
}
