//! Whether CUDA will start in an image on this host, and why: the judgement `gpuctk doctor`
//! prints. It uses the requirement engine the runtime uses, so doctor and the runtime cannot
//! disagree about a refusal; the CUDA minor/major compatibility rules are added on top.

use std::fmt::Write as _;

use gpuctk_host::CudaVersion;

use crate::request::Request;
use crate::require::{check as check_requirements, Facts, RequireError, Version};

/// The image's compat libcuda as the runtime would use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatLibrary {
    /// Its path in the image.
    pub library: String,
    /// Its driver version (`575.57.08`).
    pub version: String,
    /// The CUDA version it brings, when known.
    pub cuda: Option<CudaVersion>,
}

/// Will CUDA start, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaVerdict {
    /// Whether a CUDA program in the image is expected to start.
    pub starts: bool,
    /// Why, in one sentence.
    pub reason: String,
    /// What to do when it will not.
    pub fix: Option<String>,
}

/// Will CUDA start in an image needing `image_cuda`, on a host running `driver` (supporting
/// `host_cuda`), given its request (`None`: the runtime refuses it) and the compat library
/// the runtime would use.
pub fn judge_cuda_start(
    driver: Option<&str>,
    host_cuda: Option<CudaVersion>,
    image_cuda: Option<CudaVersion>,
    request: Option<&Request>,
    compat: Option<&CompatLibrary>,
) -> CudaVerdict {
    let fail = |reason: String, fix: String| CudaVerdict {
        starts: false,
        reason,
        fix: Some(fix),
    };
    let starts = |reason: String| CudaVerdict {
        starts: true,
        reason,
        fix: None,
    };
    let Some(driver) = driver else {
        return fail(
            "no NVIDIA driver is running on the host".into(),
            "load the driver (see driver/kernel-module)".into(),
        );
    };
    let Some(request) = request else {
        return fail(
            "the runtime refuses the image's request (see image/request)".into(),
            "fix the image's NVIDIA_* variables".into(),
        );
    };
    // What libcuda the container ends up with: the compat one when it is used and newer.
    let compat_cuda = compat.and_then(|c| c.cuda);
    let effective = match (host_cuda, compat_cuda) {
        (Some(h), Some(c)) => Some(h.max(c)),
        (h, c) => h.or(c),
    };
    let via = match compat {
        Some(c) if compat_cuda.is_some() && compat_cuda >= host_cuda => {
            format!(" through the image's compat {} ({})", c.library, c.version)
        }
        _ => String::new(),
    };
    let fix_for = |need: CudaVersion| {
        format!(
            "upgrade the host driver to a branch that supports CUDA {need}, add the CUDA forward-compat package (cuda-compat-{}-{}) to the image (datacenter GPUs), or use an image built for CUDA {} or older",
            need.major,
            need.minor,
            host_cuda.map(|v| v.to_string()).unwrap_or_else(|| "?".into())
        )
    };
    // The requirement engine the runtime uses, with the compat library's CUDA counted.
    let version = |v: Option<CudaVersion>| v.and_then(|v| v.to_string().parse::<Version>().ok());
    let facts = Facts {
        cuda: version(host_cuda),
        driver: driver.parse::<Version>().ok(),
        compat_cuda: version(compat_cuda),
        devices: Vec::new(),
    };
    let mut remarks = String::new();
    match check_requirements(request.active_requirements(), &facts) {
        Ok(warnings) => {
            for w in warnings {
                let _ = write!(remarks, "; {w}");
            }
        }
        Err(e) => {
            let need = image_cuda.unwrap_or(CudaVersion { major: 0, minor: 0 });
            let fix = match &e {
                RequireError::Unmet { .. } => format!(
                    "{}; or set NVIDIA_DISABLE_REQUIRE=1 in the container to skip the check",
                    fix_for(need)
                ),
                _ => "correct the image's NVIDIA_REQUIRE_* variables".to_string(),
            };
            return fail(format!("the runtime refuses to start it: {e}"), fix);
        }
    }
    if request.disable_require && !request.requirements.is_empty() {
        remarks.push_str(" (requirements not checked: NVIDIA_DISABLE_REQUIRE)");
    }
    let skipped = remarks;
    match (image_cuda, effective) {
        (Some(need), Some(have)) if need.major > have.major => fail(
            format!(
                "its CUDA {need} runtime needs a CUDA {}.x driver, the host's{via} supports CUDA {have}: cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version){skipped}",
                need.major
            ),
            fix_for(need),
        ),
        (Some(need), Some(have)) if need > have => starts(format!(
            "its CUDA {need} runtime runs on the host's CUDA {have}{via} by CUDA minor version compatibility (features of {need} and PTX newer than {have} are not available){skipped}"
        )),
        (Some(need), Some(have)) => starts(format!(
            "its CUDA {need} runtime is supported by CUDA {have}{via} (driver {driver}){skipped}"
        )),
        _ => starts(format!(
            "the driver {driver} is there and nothing in the image asks for more{via}{skipped}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{parse_request, Delivery};

    fn v(major: u32, minor: u32) -> Option<CudaVersion> {
        Some(CudaVersion { major, minor })
    }

    fn request(env: &[&str]) -> Request {
        let config = serde_json::json!({"process": {"env": env}});
        parse_request(&config, &Default::default(), Delivery::Shim).unwrap()
    }

    #[test]
    fn verdicts() {
        let legacy = request(&["CUDA_VERSION=12.9.1"]);
        let d = Some("570.124.06");
        // No driver: nothing starts.
        let r = judge_cuda_start(None, None, v(12, 9), Some(&legacy), None);
        assert!(!r.starts && r.fix.is_some());
        // The runtime refuses the request.
        let r = judge_cuda_start(d, v(12, 8), v(12, 9), None, None);
        assert!(!r.starts && r.reason.contains("refuses"), "{}", r.reason);
        // The legacy requirement cuda>=12.9 against CUDA 12.8.
        let r = judge_cuda_start(d, v(12, 8), v(12, 9), Some(&legacy), None);
        assert!(!r.starts && r.reason.contains("cuda>=12.9"), "{}", r.reason);
        assert!(r.fix.unwrap().contains("NVIDIA_DISABLE_REQUIRE"));
        // A compat library bringing CUDA 12.9 meets it.
        let compat = CompatLibrary {
            library: "/usr/local/cuda/compat/libcuda.so.575.57.08".into(),
            version: "575.57.08".into(),
            cuda: v(12, 9),
        };
        let r = judge_cuda_start(d, v(12, 8), v(12, 9), Some(&legacy), Some(&compat));
        assert!(r.starts && r.reason.contains("compat"), "{}", r.reason);
        // Requirements off: a newer minor runs, a newer major does not.
        let off = request(&["CUDA_VERSION=12.9.1", "NVIDIA_DISABLE_REQUIRE=true"]);
        let r = judge_cuda_start(d, v(12, 8), v(12, 9), Some(&off), None);
        assert!(
            r.starts && r.reason.contains("minor version"),
            "{}",
            r.reason
        );
        let r = judge_cuda_start(d, v(12, 8), v(13, 0), Some(&off), None);
        assert!(
            !r.starts && r.reason.contains("insufficient"),
            "{}",
            r.reason
        );
        // An image that asks for nothing.
        let r = judge_cuda_start(d, v(12, 8), None, Some(&request(&[])), None);
        assert!(r.starts, "{}", r.reason);
    }
}
