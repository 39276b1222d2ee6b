//! NVML itself: `dlopen` of the driver root's `libnvidia-ml.so.1` in this process, one
//! initialisation, the questions, one shutdown. Only in builds with the `nvml` feature: a
//! statically linked program cannot `dlopen` (docs/architecture.md, "One static binary").

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{NvmlError, NvmlGpu, NvmlInfo, NvmlMig, MAX_GPUS, MAX_MIG};

type Device = *mut c_void;

/// An open library, closed on drop.
struct Lib {
    handle: *mut c_void,
    path: PathBuf,
}

impl Drop for Lib {
    fn drop(&mut self) {
        // SAFETY: `handle` came from a successful dlopen and is closed once.
        unsafe { libc::dlclose(self.handle) };
    }
}

impl Lib {
    fn open(path: &Path) -> Result<Lib, NvmlError> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| NvmlError::Open {
            path: path.to_path_buf(),
            reason: "path holds a NUL byte".into(),
        })?;
        // SAFETY: `c` is NUL-terminated; a NULL result is handled.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(NvmlError::Open {
                path: path.to_path_buf(),
                reason: dlerror(),
            });
        }
        Ok(Lib {
            handle,
            path: path.to_path_buf(),
        })
    }

    /// The address of `name`, `None` when the library has no such symbol.
    fn sym(&self, name: &'static str) -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: `handle` is open and `c` NUL-terminated.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    /// The function `name` as `F`, `None` when the library has no such symbol.
    ///
    /// # Safety
    /// `F` is the function-pointer type whose C signature nvml.h gives `name`.
    unsafe fn func<F: Copy>(&self, name: &'static str) -> Option<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        // SAFETY: a function pointer of the size of the symbol's address (checked above), and
        // the caller vouches for its type.
        self.sym(name)
            .map(|p| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// [`Lib::func`] of a function every NVML has: its absence is an error.
    ///
    /// # Safety
    /// As [`Lib::func`].
    unsafe fn need<F: Copy>(&self, name: &'static str) -> Result<F, NvmlError> {
        // SAFETY: passed on from the caller.
        unsafe { self.func(name) }.ok_or_else(|| NvmlError::Symbol {
            path: self.path.clone(),
            name,
        })
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "dlopen failed".into()
    } else {
        // SAFETY: checked non-NULL above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

type FnVoid = unsafe extern "C" fn() -> c_int;
type FnCount = unsafe extern "C" fn(*mut c_uint) -> c_int;
type FnHandle = unsafe extern "C" fn(c_uint, *mut Device) -> c_int;
type FnStr = unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int;
type FnUint = unsafe extern "C" fn(Device, *mut c_uint) -> c_int;
type FnInt = unsafe extern "C" fn(Device, *mut c_int) -> c_int;
type FnTwoInt = unsafe extern "C" fn(Device, *mut c_int, *mut c_int) -> c_int;
type FnTwoUint = unsafe extern "C" fn(Device, *mut c_uint, *mut c_uint) -> c_int;
type FnMigHandle = unsafe extern "C" fn(Device, c_uint, *mut Device) -> c_int;
type FnErr = unsafe extern "C" fn(c_int) -> *const c_char;
type FnGiById = unsafe extern "C" fn(Device, c_uint, *mut *mut c_void) -> c_int;
type FnGiInfo = unsafe extern "C" fn(*mut c_void, *mut GpuInstanceInfo) -> c_int;
type FnGiProfile = unsafe extern "C" fn(Device, c_uint, *mut GpuInstanceProfileInfo) -> c_int;

/// nvml.h's `nvmlGpuInstanceInfo_t`.
#[repr(C)]
struct GpuInstanceInfo {
    device: Device,
    id: c_uint,
    profile_id: c_uint,
    placement_start: c_uint,
    placement_size: c_uint,
}

/// nvml.h's `nvmlGpuInstanceProfileInfo_t`.
#[repr(C)]
#[derive(Default)]
struct GpuInstanceProfileInfo {
    id: c_uint,
    is_p2p_supported: c_uint,
    slice_count: c_uint,
    instance_count: c_uint,
    multiprocessor_count: c_uint,
    copy_engine_count: c_uint,
    decoder_count: c_uint,
    encoder_count: c_uint,
    jpeg_count: c_uint,
    ofa_count: c_uint,
    memory_size_mb: u64,
}

/// `NVML_GPU_INSTANCE_PROFILE_{1,2,4}_SLICE_GFX`: go-nvlib gives these the `gfx` attribute.
const GI_PROFILES_GFX: [c_uint; 3] = [0xA, 0xB, 0xC];
const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_INVALID_ARGUMENT: c_int = 2;
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const NVML_ERROR_NOT_FOUND: c_int = 6;
/// The buffer NVML's strings are asked into: the largest it writes (a v2 UUID or name, with
/// its NUL).
const TEXT_BUFFER: usize = super::MAX_UUID;
type FnSysStr = unsafe extern "C" fn(*mut c_char, c_uint) -> c_int;
type FnSysInt = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnPci = unsafe extern "C" fn(Device, *mut PciInfo) -> c_int;

/// nvml.h's `nvmlPciInfo_t`.
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// The NUL-terminated string in `buf` (its last byte made NUL first).
fn c_text(buf: &mut [c_char]) -> String {
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
    // SAFETY: NUL-terminated by the line above at the latest.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The string an NVML call writes into a buffer (`call` gets the buffer and its length, and
/// answers NVML's return code); the code when it is not success.
fn text(call: impl FnOnce(*mut c_char, c_uint) -> c_int) -> Result<String, c_int> {
    let mut buf = [0 as c_char; TEXT_BUFFER];
    match call(buf.as_mut_ptr(), buf.len() as c_uint) {
        NVML_SUCCESS => Ok(c_text(&mut buf)),
        rc => Err(rc),
    }
}

/// NVML's `nvmlBrandType_t` names, as `nvidia-smi -q` and libnvidia-container print them.
fn brand_name(v: c_int) -> &'static str {
    match v {
        1 => "Quadro",
        2 => "Tesla",
        3 => "NVS",
        4 => "Grid",
        5 => "GeForce",
        6 => "Titan",
        7 => "NvidiaVApps",
        8 => "NvidiaVPC",
        9 => "NvidiaVCS",
        10 => "NvidiaVWS",
        11 => "NvidiaCloudGaming",
        12 => "QuadroRTX",
        13 => "NvidiaRTX",
        14 => "Nvidia",
        15 => "GeForceRTX",
        16 => "TitanRTX",
        _ => "Unknown",
    }
}

/// NVML's `nvmlDeviceArchitecture_t` names.
fn arch_name(v: c_uint) -> &'static str {
    match v {
        2 => "Kepler",
        3 => "Maxwell",
        4 => "Pascal",
        5 => "Volta",
        6 => "Turing",
        7 => "Ampere",
        8 => "Ada",
        9 => "Hopper",
        10 => "Blackwell",
        _ => "Unknown",
    }
}

/// Ask the NVML at `path` about every GPU and MIG device. Initialises and shuts NVML down once.
pub fn query(path: &Path) -> Result<NvmlInfo, NvmlError> {
    let lib = Lib::open(path)?;
    // SAFETY (all `func` and `need` below): each symbol is NVML's exported function of that
    // name, whose C signature the function-pointer type spells out (nvml.h).
    let init: FnVoid = unsafe { lib.need("nvmlInit_v2")? };
    let shutdown: FnVoid = unsafe { lib.need("nvmlShutdown")? };
    let err_str: Option<FnErr> = unsafe { lib.func("nvmlErrorString") };
    let fail = |call: &'static str, code: c_int| NvmlError::Call {
        call,
        code,
        message: err_str
            .map(|f| {
                // SAFETY: nvmlErrorString returns a static NUL-terminated string or NULL.
                let p = unsafe { f(code) };
                if p.is_null() {
                    String::new()
                } else {
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            })
            .unwrap_or_default(),
    };
    // SAFETY: nvmlInit_v2 takes no arguments.
    let rc = unsafe { init() };
    if rc != NVML_SUCCESS {
        return Err(fail("nvmlInit_v2", rc));
    }
    let result = query_devices(&lib, &fail);
    // SAFETY: balanced with the successful nvmlInit_v2 above.
    unsafe { shutdown() };
    result
}

fn query_devices(
    lib: &Lib,
    fail: &dyn Fn(&'static str, c_int) -> NvmlError,
) -> Result<NvmlInfo, NvmlError> {
    // SAFETY (all `func` and `need` below): see `query`.
    let count: FnCount = unsafe { lib.need("nvmlDeviceGetCount_v2")? };
    let handle: FnHandle = unsafe { lib.need("nvmlDeviceGetHandleByIndex_v2")? };
    let uuid: FnStr = unsafe { lib.need("nvmlDeviceGetUUID")? };
    let minor: FnUint = unsafe { lib.need("nvmlDeviceGetMinorNumber")? };
    let cc: Option<FnTwoInt> = unsafe { lib.func("nvmlDeviceGetCudaComputeCapability") };
    let brand: Option<FnInt> = unsafe { lib.func("nvmlDeviceGetBrand") };
    let arch: Option<FnUint> = unsafe { lib.func("nvmlDeviceGetArchitecture") };
    let mig_mode: Option<FnTwoUint> = unsafe { lib.func("nvmlDeviceGetMigMode") };
    let max_mig: Option<FnUint> = unsafe { lib.func("nvmlDeviceGetMaxMigDeviceCount") };
    let mig_handle: Option<FnMigHandle> =
        unsafe { lib.func("nvmlDeviceGetMigDeviceHandleByIndex") };
    let gi_id: Option<FnUint> = unsafe { lib.func("nvmlDeviceGetGpuInstanceId") };
    let ci_id: Option<FnUint> = unsafe { lib.func("nvmlDeviceGetComputeInstanceId") };
    let gi_calls: Option<(FnGiById, FnGiInfo, FnGiProfile)> = unsafe {
        match (
            lib.func("nvmlDeviceGetGpuInstanceById"),
            lib.func("nvmlGpuInstanceGetInfo"),
            lib.func("nvmlDeviceGetGpuInstanceProfileInfo"),
        ) {
            (Some(a), Some(b), Some(c)) => Some((a, b, c)),
            _ => None,
        }
    };
    let sys_str: Option<FnSysStr> = unsafe { lib.func("nvmlSystemGetDriverVersion") };
    let sys_cuda: Option<FnSysInt> = unsafe { lib.func("nvmlSystemGetCudaDriverVersion_v2") };
    let name: Option<FnStr> = unsafe { lib.func("nvmlDeviceGetName") };
    let pci: Option<FnPci> = unsafe { lib.func("nvmlDeviceGetPciInfo_v3") };

    let get_uuid = |d: Device| -> Result<String, NvmlError> {
        // SAFETY: `d` is NVML's handle; `text` hands a buffer of the length it passes.
        text(|buf, len| unsafe { uuid(d, buf, len) }).map_err(|rc| fail("nvmlDeviceGetUUID", rc))
    };

    let mut n: c_uint = 0;
    // SAFETY: `n` is a valid out-pointer.
    let rc = unsafe { count(&mut n) };
    if rc != NVML_SUCCESS {
        return Err(fail("nvmlDeviceGetCount_v2", rc));
    }
    let mut info = NvmlInfo {
        gpus: Vec::new(),
        // SAFETY: `text` hands a buffer of the length it passes.
        driver_version: sys_str.and_then(|f| text(|buf, len| unsafe { f(buf, len) }).ok()),
        cuda_version: sys_cuda.and_then(|f| {
            let mut v: c_int = 0;
            // SAFETY: valid out-pointer.
            (unsafe { f(&mut v) } == NVML_SUCCESS)
                .then(|| format!("{}.{}", v / 1000, v % 1000 / 10))
        }),
    };
    for i in 0..n.min(MAX_GPUS) {
        let mut d: Device = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer.
        let rc = unsafe { handle(i, &mut d) };
        if rc != NVML_SUCCESS {
            return Err(fail("nvmlDeviceGetHandleByIndex_v2", rc));
        }
        let mut m: c_uint = 0;
        // SAFETY: `d` is NVML's handle, `m` a valid out-pointer.
        let rc = unsafe { minor(d, &mut m) };
        if rc == NVML_ERROR_NOT_SUPPORTED {
            // WSL2's GPUs have no /dev/nvidia<minor> (libnvidia-container takes 0 there).
            m = 0;
        } else if rc != NVML_SUCCESS {
            return Err(fail("nvmlDeviceGetMinorNumber", rc));
        }
        // SAFETY: valid handle; `text` hands a buffer of the length it passes.
        let gpu_name = name.and_then(|f| text(|buf, len| unsafe { f(d, buf, len) }).ok());
        let bus_id = pci.and_then(|f| {
            let mut p = PciInfo {
                bus_id_legacy: [0; 16],
                domain: 0,
                bus: 0,
                device: 0,
                pci_device_id: 0,
                pci_sub_system_id: 0,
                bus_id: [0; 32],
            };
            // SAFETY: valid handle, `p` is an nvmlPciInfo_t.
            (unsafe { f(d, &mut p) } == NVML_SUCCESS).then(|| c_text(&mut p.bus_id))
        });
        let compute_capability = cc.and_then(|f| {
            let (mut a, mut b) = (0, 0);
            // SAFETY: valid handle and out-pointers.
            (unsafe { f(d, &mut a, &mut b) } == NVML_SUCCESS).then(|| format!("{a}.{b}"))
        });
        let brand = brand.and_then(|f| {
            let mut v = 0;
            // SAFETY: valid handle and out-pointer.
            (unsafe { f(d, &mut v) } == NVML_SUCCESS).then(|| brand_name(v).to_string())
        });
        let architecture = arch.and_then(|f| {
            let mut v = 0;
            // SAFETY: valid handle and out-pointer.
            (unsafe { f(d, &mut v) } == NVML_SUCCESS).then(|| arch_name(v).to_string())
        });
        let mig_enabled = mig_mode.is_some_and(|f| {
            let (mut cur, mut pending) = (0, 0);
            // SAFETY: valid handle and out-pointers.
            let rc = unsafe { f(d, &mut cur, &mut pending) };
            rc == NVML_SUCCESS && cur == 1
        });
        let mut mig = Vec::new();
        if let (true, Some(max), Some(get), Some(gi_id), Some(ci_id)) =
            (mig_enabled, max_mig, mig_handle, gi_id, ci_id)
        {
            let mut slots: c_uint = 0;
            // SAFETY: valid handle and out-pointer.
            let rc = unsafe { max(d, &mut slots) };
            if rc != NVML_SUCCESS {
                return Err(fail("nvmlDeviceGetMaxMigDeviceCount", rc));
            }
            let gfx_ids = match gi_calls {
                Some((_, _, profile)) => gfx_profile_ids(d, profile, fail)?,
                None => Vec::new(),
            };
            for j in 0..slots.min(MAX_MIG) {
                let mut md: Device = std::ptr::null_mut();
                // SAFETY: valid handle and out-pointer.
                let rc = unsafe { get(d, j, &mut md) };
                if rc == NVML_ERROR_NOT_FOUND {
                    continue;
                }
                if rc != NVML_SUCCESS {
                    return Err(fail("nvmlDeviceGetMigDeviceHandleByIndex", rc));
                }
                let (mut g, mut c) = (0, 0);
                // SAFETY: `md` is NVML's MIG handle, out-pointers valid.
                let rc = unsafe { gi_id(md, &mut g) };
                if rc != NVML_SUCCESS {
                    return Err(fail("nvmlDeviceGetGpuInstanceId", rc));
                }
                // SAFETY: as above.
                let rc = unsafe { ci_id(md, &mut c) };
                if rc != NVML_SUCCESS {
                    return Err(fail("nvmlDeviceGetComputeInstanceId", rc));
                }
                let gfx = match gi_calls {
                    Some((by_id, info, _)) if !gfx_ids.is_empty() => {
                        gfx_ids.contains(&gi_profile_id(d, g, by_id, info, fail)?)
                    }
                    _ => false,
                };
                mig.push(NvmlMig {
                    // Numbered without the empty slots, as libnvidia-container numbers `N:M`.
                    index: mig.len() as u32,
                    gi: g,
                    ci: c,
                    uuid: get_uuid(md)?,
                    gfx,
                });
            }
        }
        info.gpus.push(NvmlGpu {
            index: i,
            minor: m,
            uuid: get_uuid(d)?,
            compute_capability,
            brand,
            architecture,
            name: gpu_name,
            bus_id,
            mig_enabled,
            mig,
        });
    }
    Ok(info)
}

/// The profile ids GPU `d` gives its graphics GPU instance profiles. Like go-nvlib's
/// `GetProfile`, profiles are known by index: each index's info names the id that GPU uses for it.
fn gfx_profile_ids(
    d: Device,
    profile: FnGiProfile,
    fail: &dyn Fn(&'static str, c_int) -> NvmlError,
) -> Result<Vec<c_uint>, NvmlError> {
    let mut ids = Vec::new();
    for index in GI_PROFILES_GFX {
        let mut p = GpuInstanceProfileInfo::default();
        // SAFETY: valid handle, `p` is an nvmlGpuInstanceProfileInfo_t.
        match unsafe { profile(d, index, &mut p) } {
            NVML_SUCCESS => ids.push(p.id),
            // This GPU (or this NVML) has no such profile.
            NVML_ERROR_NOT_SUPPORTED | NVML_ERROR_INVALID_ARGUMENT => {}
            rc => return Err(fail("nvmlDeviceGetGpuInstanceProfileInfo", rc)),
        }
    }
    Ok(ids)
}

/// The profile id of GPU `d`'s GPU instance `gi`.
fn gi_profile_id(
    d: Device,
    gi: c_uint,
    by_id: FnGiById,
    info: FnGiInfo,
    fail: &dyn Fn(&'static str, c_int) -> NvmlError,
) -> Result<c_uint, NvmlError> {
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid handle and out-pointer.
    let rc = unsafe { by_id(d, gi, &mut h) };
    if rc != NVML_SUCCESS {
        return Err(fail("nvmlDeviceGetGpuInstanceById", rc));
    }
    let mut i = GpuInstanceInfo {
        device: std::ptr::null_mut(),
        id: 0,
        profile_id: 0,
        placement_start: 0,
        placement_size: 0,
    };
    // SAFETY: `h` is NVML's GPU instance handle, `i` an nvmlGpuInstanceInfo_t.
    let rc = unsafe { info(h, &mut i) };
    if rc != NVML_SUCCESS {
        return Err(fail("nvmlGpuInstanceGetInfo", rc));
    }
    Ok(i.profile_id)
}
