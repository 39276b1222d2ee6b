//! `cargo bench -p gpuctk --bench generate`: discovery and `cdi generate` on mock hosts of 1, 8
//! and 64 GPUs. Prints medians (and, for the whole process, p90s), the 64/8 ratio (design
//! target: near flat), and, as a baseline measured in the same run, the cost of spawning
//! `/bin/true`, since a whole `gpuctk cdi generate` is a process. The target (8 GPUs in
//! at most 2 ms as a whole process) is printed, never asserted. `GPUCTK_BENCH_BIN` measures
//! another gpuctk binary (a static build, say). Needs root (mock hosts mknod their device
//! nodes).

use std::process::Command;
use std::time::{Duration, Instant};

use gpuctk_core::{build_spec, plan, CapabilitySet, PlanOptions, SpecOptions};
use gpuctk_host::{discover, DiscoverOptions, Roots};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn samples<F: FnMut()>(iters: usize, mut f: F) -> Vec<Duration> {
    f();
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

fn time<F: FnMut()>(iters: usize, f: F) -> Duration {
    median(samples(iters, f))
}

fn p90(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 9).div_ceil(10).max(1) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let exe = std::env::var("GPUCTK_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_gpuctk").to_string());
    let tmp = tempfile::tempdir().expect("temp dir");
    let baseline = time(50, || {
        Command::new("/bin/true").status().expect("/bin/true");
    });
    println!("baseline: spawn /bin/true          {:8.3} ms", ms(baseline));
    let mut results = Vec::new();
    for gpus in [1u32, 8, 64] {
        let dir = tmp.path().join(format!("host{gpus}"));
        let mut cfg = gpuctk_mockhost::HostConfig::new("570.124.06", (12, 8));
        cfg.gpus = gpus;
        let host = gpuctk_mockhost::create_host(&dir, &cfg).expect("mock host (run as root)");
        let roots = Roots {
            driver_root: host.driver_root.clone(),
            dev_root: host.dev_root.clone(),
            proc_root: host.proc_root.clone(),
        };
        let opts = DiscoverOptions::default();
        let disc = time(200, || {
            discover(&roots, &opts).expect("discover");
        });
        let inv = discover(&roots, &opts).unwrap();
        let popts = PlanOptions {
            hook_path: "/usr/bin/nvidia-cdi-hook".into(),
            capabilities: CapabilitySet::all(),
        };
        let spec_t = time(200, || {
            let p = plan(&inv, &popts);
            let s = build_spec(&inv, &p, &SpecOptions::default()).unwrap();
            std::hint::black_box(s.to_yaml());
        });
        let out = dir.join("spec.yaml");
        let args = [
            "cdi",
            "generate",
            "--driver-root",
            host.driver_root.to_str().unwrap(),
            "--dev-root",
            host.dev_root.to_str().unwrap(),
            "--proc-root",
            host.proc_root.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            // An executable hook path, so that no run prints the missing-hook warning.
            "--nvidia-cdi-hook-path",
            &exe,
        ];
        let all = samples(100, || {
            let st = Command::new(&exe).args(args).status().unwrap();
            assert!(st.success());
        });
        let whole = median(all.clone());
        println!(
            "{gpus:>2} GPUs: discovery {:7.3} ms   plan+spec+yaml {:7.3} ms   `gpuctk cdi generate` median {:7.3} ms, p90 {:7.3} ms ({:.2}x spawning /bin/true)",
            ms(disc),
            ms(spec_t),
            ms(whole),
            ms(p90(all)),
            ms(whole) / ms(baseline)
        );
        if gpus == 8 {
            println!(
                "   target: 8 GPUs <= 2 ms as a whole process: {:.3} ms ({})",
                ms(whole),
                if ms(whole) <= 2.0 { "met" } else { "missed" }
            );
        }
        results.push((gpus, disc, whole));
    }
    let (_, d8, w8) = results[1];
    let (_, d64, w64) = results[2];
    println!(
        "64/8 ratio: discovery {:.2}x, cdi generate {:.2}x",
        ms(d64) / ms(d8),
        ms(w64) / ms(w8)
    );
}
