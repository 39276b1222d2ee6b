//! `cargo bench -p gpuctk --bench runtime`: create + start + delete of a `/bin/true` container
//! through our `nvidia-container-runtime` vs plain runc on the same bundle, interleaved, for 0,
//! 1 and 8 GPUs injected just in time and 8 GPUs from a static CDI spec. The runc baseline runs
//! the config.json our shim produced (hooks included), so the ratio is the shim's own cost.
//! Also a pass-through call (`state`), shim vs runc. Needs root, runc, busybox-static.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ITERS: usize = 30;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Run to completion. stdio goes nowhere: a detached container inherits `create`'s stdio, so a
/// captured pipe would never reach EOF.
fn run(cmd: &mut Command) {
    let st = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    assert!(
        st.success(),
        "{cmd:?} failed ({st}); rerun it by hand to see why"
    );
}

struct Case {
    name: &'static str,
    env: &'static str,
    gpus: usize,
}

/// create, start and delete of one container; the time of each.
fn lifecycle(
    bin: &Path,
    extra_env: &[(&str, &Path)],
    state: &Path,
    bundle: &Path,
    id: &str,
) -> [Duration; 3] {
    let step = |args: &[&OsStr]| {
        let t = Instant::now();
        let mut c = Command::new(bin);
        for (k, v) in extra_env {
            c.env(k, v);
        }
        run(c.arg("--root").arg(state).args(args));
        t.elapsed()
    };
    let create = step(&[
        OsStr::new("create"),
        OsStr::new("--bundle"),
        bundle.as_os_str(),
        OsStr::new(id),
    ]);
    let start = step(&[OsStr::new("start"), OsStr::new(id)]);
    let delete = step(&[OsStr::new("delete"), OsStr::new("--force"), OsStr::new(id)]);
    [create, start, delete]
}

fn total(d: &[Duration; 3]) -> Duration {
    d.iter().sum()
}

fn main() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_gpuctk"));
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let runc = PathBuf::from("/usr/sbin/runc");
    let mut cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
    cfg.gpus = 8;
    let host =
        gpuctk_mockhost::create_host(&t.join("host"), &cfg).expect("mock host (run as root)");
    let shim = t.join("nvidia-container-runtime");
    symlink(&exe, &shim).unwrap();
    let cdi = t.join("cdi");
    fs::create_dir_all(&cdi).unwrap();
    let st = Command::new(&exe)
        .args(["cdi", "generate", "--output"])
        .arg(cdi.join("nvidia.yaml"))
        .arg("--driver-root")
        .arg(&host.driver_root)
        .arg("--proc-root")
        .arg(&host.proc_root)
        .status()
        .unwrap();
    assert!(st.success());
    let config = t.join("config.toml");
    fs::write(
        &config,
        format!(
            "[nvidia-container-cli]\nroot = \"{}\"\n[nvidia-container-runtime]\nruntimes = [\"{}\"]\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"{}\"]\n[gpuctk]\nproc-root = \"{}\"\nhook-path = \"{}\"\n",
            host.driver_root.display(),
            runc.display(),
            cdi.display(),
            host.proc_root.display(),
            exe.display()
        ),
    )
    .unwrap();
    let shim_env: [(&str, &Path); 1] = [("GPUCTK_CONFIG", &config)];
    let state = t.join("state");

    let cases = [
        Case {
            name: "0 GPUs (no request)",
            env: "",
            gpus: 0,
        },
        Case {
            name: "1 GPU, just in time",
            env: "NVIDIA_VISIBLE_DEVICES=0",
            gpus: 1,
        },
        Case {
            name: "8 GPUs, just in time",
            env: "NVIDIA_VISIBLE_DEVICES=all",
            gpus: 8,
        },
        Case {
            name: "8 GPUs, static CDI spec",
            env: "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all",
            gpus: 8,
        },
    ];
    println!("create+start+delete of /bin/true, median of {ITERS}, interleaved");
    for (ci, case) in cases.iter().enumerate() {
        let shim_bundle = t.join(format!("shim{ci}"));
        let runc_bundle = t.join(format!("runc{ci}"));
        for b in [&shim_bundle, &runc_bundle] {
            fs::create_dir_all(b).unwrap();
            gpuctk_mockhost::create_rootfs(
                &b.join("rootfs"),
                &gpuctk_mockhost::RootfsConfig::default(),
            )
            .unwrap();
            run(Command::new(&runc).arg("spec").arg("--bundle").arg(b));
        }
        let p = shim_bundle.join("config.json");
        let mut spec: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        spec["process"]["terminal"] = serde_json::json!(false);
        spec["process"]["args"] = serde_json::json!(["/bin/true"]);
        spec["root"]["readonly"] = serde_json::json!(false);
        if !case.env.is_empty() {
            spec["process"]["env"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!(case.env));
        }
        let pristine = serde_json::to_vec(&spec).unwrap();
        fs::write(&p, &pristine).unwrap();
        // The baseline gets exactly what the shim writes.
        lifecycle(&shim, &shim_env, &state, &shim_bundle, "warm");
        let edited = fs::read(&p).unwrap();
        let devices = serde_json::from_slice::<serde_json::Value>(&edited).unwrap()["linux"]
            ["devices"]
            .as_array()
            .map_or(0, |a| {
                a.iter()
                    .filter(|d| {
                        d["path"]
                            .as_str()
                            .unwrap_or("")
                            .trim_start_matches("/dev/nvidia")
                            .parse::<u32>()
                            .is_ok()
                    })
                    .count()
            });
        assert_eq!(devices, case.gpus, "{}", case.name);
        fs::write(runc_bundle.join("config.json"), &edited).unwrap();
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        for i in 0..ITERS {
            fs::write(&p, &pristine).unwrap();
            ours.push(lifecycle(
                &shim,
                &shim_env,
                &state,
                &shim_bundle,
                &format!("s{ci}-{i}"),
            ));
            base.push(lifecycle(
                &runc,
                &[],
                &state,
                &runc_bundle,
                &format!("r{ci}-{i}"),
            ));
        }
        let phase = |v: &[[Duration; 3]], k: usize| ms(median(v.iter().map(|d| d[k]).collect()));
        let o = median(ours.iter().map(total).collect());
        let b = median(base.iter().map(total).collect());
        println!(
            "  {:<26} shim {:6.2} ms  runc {:6.2} ms  ratio {:.3}  (+{:.2} ms; create +{:.2}, start +{:.2}, delete +{:.2})",
            case.name,
            ms(o),
            ms(b),
            ms(o) / ms(b),
            ms(o) - ms(b),
            phase(&ours, 0) - phase(&base, 0),
            phase(&ours, 1) - phase(&base, 1),
            phase(&ours, 2) - phase(&base, 2),
        );
    }

    // A pass-through call: the shim's fixed cost on every runtime call.
    let b = t.join("passthrough");
    fs::create_dir_all(&b).unwrap();
    gpuctk_mockhost::create_rootfs(&b.join("rootfs"), &gpuctk_mockhost::RootfsConfig::default())
        .unwrap();
    run(Command::new(&runc).arg("spec").arg("--bundle").arg(&b));
    let p = b.join("config.json");
    let mut spec: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    spec["process"]["terminal"] = serde_json::json!(false);
    spec["process"]["args"] = serde_json::json!(["/bin/sleep", "60"]);
    fs::write(&p, serde_json::to_vec(&spec).unwrap()).unwrap();
    run(Command::new(&runc)
        .arg("--root")
        .arg(&state)
        .args(["create", "--bundle"])
        .arg(&b)
        .arg("pt"));
    let time_state = |bin: &Path, env: &[(&str, &Path)]| {
        median(
            (0..100)
                .map(|_| {
                    let t0 = Instant::now();
                    let mut c = Command::new(bin);
                    for (k, v) in env {
                        c.env(k, v);
                    }
                    run(c.arg("--root").arg(&state).args(["state", "pt"]));
                    t0.elapsed()
                })
                .collect(),
        )
    };
    let (o, b) = (time_state(&shim, &shim_env), time_state(&runc, &[]));
    println!(
        "pass-through `state`: shim {:.2} ms, runc {:.2} ms: our own work per call {:.2} ms",
        ms(o),
        ms(b),
        ms(o) - ms(b)
    );
    run(Command::new(&runc)
        .arg("--root")
        .arg(&state)
        .args(["delete", "--force", "pt"]));
}
