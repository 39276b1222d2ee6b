//! The image (with `--rootfs`, `--bundle` or `--image-env`): its CUDA, its requirements, the
//! compat decision, and the verdict: will CUDA start in it on this host. With a root
//! filesystem also what in it gets in the way: driver files of its own (shadowed by the
//! host's), a musl C library (the driver's libraries need glibc), no loader cache.

use std::path::PathBuf;

use gpuctk_container::hooks::{judge_cuda_compat, CompatJudgement};
use gpuctk_container::Root;
use gpuctk_core::request::Delivery;
use gpuctk_core::{judge_cuda_start, parse_request, CompatLibrary, Request};
use gpuctk_host::{cuda_version_for_branch, CudaVersion, DriverVersion};

use super::driver::HostFacts;
use super::report::{Checks, Status, Verdict};
use crate::cli::DoctorArgs;
use crate::config::Config;

/// The image as given: its root filesystem (if any) and environment.
pub(super) struct Image {
    rootfs: Option<PathBuf>,
    env: Vec<String>,
}

pub(super) fn load_image(a: &DoctorArgs) -> Result<Image, String> {
    if let Some(bundle) = &a.bundle {
        let file = bundle.join("config.json");
        let bytes = crate::capped::read_capped(&file, 64 << 20, "OCI config")
            .map_err(|e| format!("{e:#}"))?;
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: invalid JSON: {e}", file.display()))?;
        let rootfs = v
            .pointer("/root/path")
            .and_then(|p| p.as_str())
            .map(|p| bundle.join(p));
        let env = v
            .pointer("/process/env")
            .and_then(|e| e.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        return Ok(Image { rootfs, env });
    }
    let env = match &a.image_env {
        None => Vec::new(),
        Some(f) => {
            let bytes = crate::capped::read_capped(f, 16 << 20, "image env")
                .map_err(|e| format!("{e:#}"))?;
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#') && l.contains('='))
                .map(str::to_string)
                .collect()
        }
    };
    Ok(Image {
        rootfs: a.rootfs.clone(),
        env,
    })
}

/// The library directories of an image where a driver file of its own would be.
const IMAGE_LIB_DIRS: [&str; 7] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
];

/// glibc's dynamic loaders, by architecture and layout.
const GLIBC_LOADERS: [&str; 5] = [
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
    "/usr/lib64/ld-linux-x86-64.so.2",
];

/// Whether `path` is in the image (links followed inside it); an I/O error other than "not
/// there" counts as there, so nothing is claimed missing that could not be read.
fn in_image(root: &Root, path: &str) -> bool {
    match root.try_symlink_metadata(path) {
        Ok(m) => m.is_some(),
        Err(e) => !e.is_not_found(),
    }
}

/// What in the image gets in the way of the host's driver.
fn check_rootfs(root: &Root, c: &mut Checks) {
    const G: &str = "image";
    // Driver files of its own: the host's are mounted over them or ahead of them.
    let mut own: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let candidates = IMAGE_LIB_DIRS
        .iter()
        .flat_map(|d| {
            ["libcuda.so.1", "libnvidia-ml.so.1"]
                .into_iter()
                .map(move |n| format!("{d}/{n}"))
        })
        .chain(
            [
                "/usr/bin/nvidia-smi",
                "/bin/nvidia-smi",
                "/usr/local/bin/nvidia-smi",
            ]
            .into_iter()
            .map(String::from),
        );
    for p in candidates {
        if !in_image(root, &p) {
            continue;
        }
        // /lib and /usr/lib are one on a merged-/usr image: one file, said once.
        let real = root.canonicalize(&p).unwrap_or_else(|_| p.clone());
        if !seen.contains(&real) {
            seen.push(real);
            own.push(p);
        }
    }
    if !own.is_empty() {
        c.ok(
            G,
            "own-driver-files",
            format!(
                "info: the image ships {}: the host driver's files are mounted over them (or found first), so the image's are not used; not an error here",
                own.join(", ")
            ),
        );
    }

    // The C library: the driver's libraries are linked against glibc.
    let musl: Vec<String> = root
        .read_dir_names_limited("/lib", 4096)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with("ld-musl-") && n.ends_with(".so.1"))
        .collect();
    let glibc = GLIBC_LOADERS.iter().any(|l| in_image(root, l));
    if !musl.is_empty() && !glibc {
        c.warn(
            G,
            "libc",
            format!(
                "a musl image (/lib/{}, no glibc loader): the driver's libraries are built for glibc, so libcuda.so.1 and libnvidia-ml.so.1 do not load in it and CUDA reports no device",
                musl.join(", /lib/")
            ),
            "use a glibc-based image (Debian, Ubuntu, UBI, the nvidia/cuda images) for GPU work",
        );
    }

    // The loader cache the injected libraries are added to.
    if !in_image(root, "/etc/ld.so.cache") && (glibc || musl.is_empty()) {
        c.warn(
            G,
            "ld-cache",
            "the image has no /etc/ld.so.cache (built without running ldconfig): the runtime writes one holding the driver's libraries only, so the image's own libraries in the directories of its /etc/ld.so.conf.d are then not found",
            "run ldconfig as the image's last build step (RUN ldconfig), or set LD_LIBRARY_PATH to its library directories",
        );
    }
}

/// `X.Y` at the start of `s` (`12.9.1` → 12.9).
pub(super) fn major_minor(s: &str) -> Option<CudaVersion> {
    let mut it = s.trim().split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some(CudaVersion { major, minor })
}

/// The newest `libcudart.so.X.Y*` in the image's library directories, with its path.
pub(super) fn find_cudart(root: &Root) -> Option<(CudaVersion, String)> {
    let mut dirs: Vec<String> = [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/cuda/targets/sbsa-linux/lib",
        "/usr/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
        "/lib64",
        "/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(names) = root.read_dir_names_limited("/usr/local", 4096) {
        let mut cudas: Vec<String> = names
            .into_iter()
            .filter(|n| n.starts_with("cuda-") || n == "cuda")
            .collect();
        cudas.sort();
        for d in cudas {
            dirs.push(format!("/usr/local/{d}/lib64"));
            dirs.push(format!("/usr/local/{d}/targets/x86_64-linux/lib"));
        }
    }
    let mut best: Option<(CudaVersion, String)> = None;
    for d in dirs {
        let Ok(names) = root.read_dir_names_limited(&d, 100_000) else {
            continue;
        };
        for n in names {
            let Some(v) = n.strip_prefix("libcudart.so.").and_then(major_minor) else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| v > *b) {
                best = Some((v, format!("{d}/{n}")));
            }
        }
    }
    best
}

pub(super) fn check_image(
    a: &DoctorArgs,
    cfg: &Config,
    host: &HostFacts,
    c: &mut Checks,
) -> Verdict {
    const G: &str = "image";
    let image = match load_image(a) {
        Ok(i) => i,
        Err(e) => {
            c.fail(G, "image", e.clone(), "check the path given");
            return Verdict {
                status: Status::Fail,
                cuda_starts: false,
                reason: format!("the image could not be read: {e}"),
                fix: Some("check the path given".into()),
            };
        }
    };
    let root = match &image.rootfs {
        None => None,
        Some(p) => match Root::open(p) {
            Ok(r) => Some(r),
            Err(e) => {
                c.fail(
                    G,
                    "rootfs",
                    format!("{}: {e}", p.display()),
                    "give the container's root filesystem (a directory)",
                );
                None
            }
        },
    };
    let env_value = |k: &str| {
        image
            .env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
    };

    if let Some(root) = &root {
        check_rootfs(root, c);
    }

    // Its CUDA runtime.
    let cudart = root.as_ref().and_then(find_cudart);
    let env_cuda = env_value("CUDA_VERSION").and_then(major_minor);
    let image_cuda = match (&cudart, env_cuda) {
        (Some((v, path)), _) => {
            c.ok(G, "cuda-runtime", format!("CUDA {v} ({path})"));
            Some(*v)
        }
        (None, Some(v)) => {
            c.ok(G, "cuda-runtime", format!("CUDA {v} (CUDA_VERSION)"));
            Some(v)
        }
        (None, None) => {
            c.ok(
                G,
                "cuda-runtime",
                "no libcudart.so.X.Y and no CUDA_VERSION: not a CUDA image, or CUDA linked statically",
            );
            None
        }
    };

    // Its requirements, as the runtime reads them.
    let config = serde_json::json!({"process": {"env": image.env}});
    let request = match parse_request(&config, &cfg.policy, Delivery::Shim) {
        Ok(r) => Some(r),
        Err(e) => {
            c.fail(
                G,
                "request",
                e.to_string(),
                "fix the image's NVIDIA_* variables: the runtime refuses the container",
            );
            None
        }
    };

    // The host's CUDA.
    match (&host.driver, host.cuda) {
        (Some(d), Some(v)) => c.ok(G, "host-cuda", format!("driver {d} supports CUDA {v}")),
        (Some(d), None) => c.warn(
            G,
            "host-cuda",
            format!("driver {d}: CUDA version unknown (branch before 418?)"),
            "upgrade the driver",
        ),
        (None, _) => {}
    }

    // The compat decision, judged without writing into the image.
    let mut compat = None;
    if let (Some(root), Some(driver)) = (&root, &host.driver) {
        if !cfg.cuda_compat() {
            c.ok(
                G,
                "compat",
                "disabled by config.toml (cuda-compat-mode / disable-cuda-compat-lib-hook)",
            );
        } else {
            match judge_cuda_compat(
                root,
                Some(driver.as_str()),
                None,
                gpuctk_container::hooks::DEFAULT_COMPAT_ROOT,
            ) {
                Ok(CompatJudgement::Use(u)) => {
                    let cuda = u
                        .note_cuda_version
                        .as_deref()
                        .and_then(major_minor)
                        .or_else(|| {
                            DriverVersion::parse(&u.compat_version)
                                .and_then(|v| cuda_version_for_branch(v.major()))
                        });
                    c.ok(
                        G,
                        "compat",
                        format!(
                            "{} ({}{}) is used: {}",
                            u.library,
                            u.compat_version,
                            cuda.map(|v| format!(", CUDA {v}")).unwrap_or_default(),
                            u.reason
                        ),
                    );
                    compat = Some(CompatLibrary {
                        library: u.library,
                        version: u.compat_version,
                        cuda,
                    });
                }
                Ok(CompatJudgement::Skip(o)) => c.ok(G, "compat", format!("not used: {o}")),
                Err(e) => c.warn(
                    G,
                    "compat",
                    format!("cannot judge: {e}"),
                    "check the image's /usr/local/cuda/compat",
                ),
            }
        }
    }

    judge_image(
        host.driver.as_ref().map(|d| d.as_str()),
        host.cuda,
        image_cuda,
        request.as_ref(),
        compat.as_ref(),
    )
}

// ---------------------------------------------------------------- judgements (pure)

/// The verdict of [`gpuctk_core::judge_cuda_start`] as doctor reports it.
pub(super) fn judge_image(
    driver: Option<&str>,
    host_cuda: Option<CudaVersion>,
    image_cuda: Option<CudaVersion>,
    request: Option<&Request>,
    compat: Option<&CompatLibrary>,
) -> Verdict {
    let v = judge_cuda_start(driver, host_cuda, image_cuda, request, compat);
    Verdict {
        status: if v.starts { Status::Ok } else { Status::Fail },
        cuda_starts: v.starts,
        reason: v.reason,
        fix: v.fix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> Option<CudaVersion> {
        Some(CudaVersion { major, minor })
    }

    #[test]
    fn verdict_status_follows_core() {
        let config = serde_json::json!({"process": {"env": ["CUDA_VERSION=12.9.1"]}});
        let legacy = parse_request(&config, &Default::default(), Delivery::Shim).unwrap();
        let r = judge_image(Some("570.124.06"), v(12, 8), v(12, 9), Some(&legacy), None);
        assert!(!r.cuda_starts && r.status == Status::Fail, "{}", r.reason);
        let r = judge_image(Some("570.124.06"), v(12, 9), v(12, 9), Some(&legacy), None);
        assert!(r.cuda_starts && r.status == Status::Ok, "{}", r.reason);
    }
}
