//! Text of the files the NVIDIA kernel module exposes under /proc, in the
//! formats nv-procfs.c and the kernel's /proc/devices use. Pure formatting.

use crate::{Arch, MockGpu};

/// `driver/nvidia/version`; the module names the CPU architecture as the kernel does.
pub(crate) fn version_file(arch: Arch, driver_version: &str) -> String {
    format!(
        "NVRM version: NVIDIA UNIX Open Kernel Module for {}  {driver_version}  Release Build  \
         (dvs-builder@U16-I3-B03-4-3)  Tue Feb 25 19:31:49 UTC 2025\n\
         GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n",
        arch.kernel_name()
    )
}

/// `driver/nvidia/gpus/<bus-id>/information`, field for field as
/// nv_procfs_read_gpu_info() prints it.
pub(crate) fn gpu_information(gpu: &MockGpu, driver_version: &str) -> String {
    format!(
        "Model: \t\t {}\n\
         IRQ:   \t\t {}\n\
         GPU UUID: \t {}\n\
         Video BIOS: \t 92.00.45.00.03\n\
         Bus Type: \t PCIe\n\
         DMA Size: \t 47 bits\n\
         DMA Mask: \t 0x7fffffffffff\n\
         Bus Location: \t {}\n\
         Device Minor: \t {}\n\
         GPU Firmware: \t {driver_version}\n\
         GPU Excluded:\t No\n",
        gpu.model,
        64 + gpu.index,
        gpu.uuid,
        gpu.bus_id,
        gpu.minor
    )
}

/// `driver/nvidia/params`: the numeric module parameters ("%s: %u") then
/// the string ones, as nv_procfs_read_params() prints them.
pub(crate) fn params_file() -> String {
    const NUMERIC: &[(&str, u32)] = &[
        ("ResmanDebugLevel", 4294967295),
        ("RmLogonRC", 1),
        ("ModifyDeviceFiles", 1),
        ("DeviceFileUID", 0),
        ("DeviceFileGID", 0),
        ("DeviceFileMode", 438),
        ("InitializeSystemMemoryAllocations", 1),
        ("UsePageAttributeTable", 4294967295),
        ("EnableMSI", 1),
        ("EnablePCIeGen3", 0),
        ("MemoryPoolSize", 0),
        ("KMallocHeapMaxSize", 0),
        ("VMallocHeapMaxSize", 0),
        ("IgnoreMMIOCheck", 0),
        ("EnableStreamMemOPs", 0),
        ("EnableUserNUMAManagement", 1),
        ("NvLinkDisable", 0),
        ("RmProfilingAdminOnly", 1),
        ("PreserveVideoMemoryAllocations", 0),
        ("EnableS0ixPowerManagement", 0),
        ("S0ixPowerManagementVideoMemoryThreshold", 256),
        ("DynamicPowerManagement", 3),
        ("DynamicPowerManagementVideoMemoryThreshold", 200),
        ("RegisterPCIDriver", 1),
        ("EnablePCIERelaxedOrderingMode", 0),
        ("EnableResizableBar", 0),
        ("EnableGpuFirmware", 18),
        ("EnableGpuFirmwareLogs", 2),
        ("EnableDbgBreakpoint", 0),
        ("OpenRmEnableUnsupportedGpus", 1),
        ("DmaRemapPeerMmio", 1),
        ("ImexChannelCount", 2048),
        ("CreateImexChannel0", 0),
    ];
    let mut out = String::new();
    for (name, value) in NUMERIC {
        out.push_str(&format!("{name}: {value}\n"));
    }
    for name in [
        "RegistryDwords",
        "RegistryDwordsPerDevice",
        "RmMsg",
        "GpuBlacklist",
        "TemporaryFilePath",
        "ExcludedGpus",
    ] {
        out.push_str(&format!("{name}: \"\"\n"));
    }
    out
}

/// Majors the kernel lists as registered in `/proc/devices` text
/// (character section only).
pub(crate) fn char_majors(proc_devices: &str) -> Vec<u32> {
    let mut majors = Vec::new();
    let mut in_char = false;
    for line in proc_devices.lines() {
        let line = line.trim();
        if line.starts_with("Character devices") {
            in_char = true;
        } else if line.starts_with("Block devices") {
            in_char = false;
        } else if in_char {
            if let Some(Ok(m)) = line.split_whitespace().next().map(str::parse::<u32>) {
                majors.push(m);
            }
        }
    }
    majors
}

/// The major nvidia-uvm gets: 508 unless the real machine already has a
/// driver there, then the highest free one in 511..=234 (the kernel's
/// dynamic range, allocated top down). Opening a node whose major has no
/// driver gives ENXIO, which is the whole point; a major a real driver owns
/// would make the node reach that driver instead.
pub(crate) fn pick_uvm_major(proc_devices: &str) -> Option<u32> {
    let taken = char_majors(proc_devices);
    let free = |m: &u32| *m != 195 && !taken.contains(m);
    std::iter::once(508)
        .chain((234..=511).rev())
        .find(|m| free(m))
}

/// The highest free major in the kernel's dynamic range (511 down to 234) that is neither
/// taken on the real machine nor in `used`.
pub(crate) fn pick_free_major(proc_devices: &str, used: &[u32]) -> Option<u32> {
    let taken = char_majors(proc_devices);
    (234..=511)
        .rev()
        .find(|m| *m != 195 && !taken.contains(m) && !used.contains(m))
}

/// The mode the driver gives the MIG capability nodes: `DeviceFileMode: 292`, 0444.
pub(crate) const CAP_FILE_MODE: u32 = 0o444;

/// `driver/nvidia/capabilities/mig/{config,monitor}`: the node's minor, its mode in decimal and
/// whether the driver may modify it, as nv-caps.c prints them.
pub(crate) fn cap_file(minor: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: {CAP_FILE_MODE}\nDeviceFileModify: 1\n")
}

/// `/proc/devices` for the mock host: ordinary entries plus the driver's.
pub(crate) fn devices_file(
    uvm_major: u32,
    caps_major: u32,
    imex_major: u32,
    extra: &[(u32, &'static str)],
) -> String {
    let mut chars: Vec<(u32, &str)> = vec![
        (1, "mem"),
        (4, "/dev/vc/0"),
        (4, "tty"),
        (4, "ttyS"),
        (5, "/dev/tty"),
        (5, "/dev/console"),
        (5, "/dev/ptmx"),
        (7, "vcs"),
        (10, "misc"),
        (13, "input"),
        (29, "fb"),
        (128, "ptm"),
        (136, "pts"),
        (180, "usb"),
        (189, "usb_device"),
        (195, "nvidia-frontend"),
        (226, "drm"),
        (uvm_major, "nvidia-uvm"),
        (caps_major, "nvidia-caps"),
        (imex_major, "nvidia-caps-imex-channels"),
    ];
    chars.extend_from_slice(extra);
    // The kernel lists by major; the sort is stable so equal majors keep order.
    chars.sort_by_key(|(m, _)| *m);
    let mut out = String::from("Character devices:\n");
    for (major, name) in chars {
        out.push_str(&format!("{major:3} {name}\n"));
    }
    out.push_str("\nBlock devices:\n  7 loop\n  8 sd\n  9 md\n259 blkext\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvm_major_avoids_taken() {
        assert_eq!(pick_uvm_major(""), Some(508));
        let host = "Character devices:\n508 trace\n511 nvidia-nvswitch\n510 x\n\nBlock devices:\n509 blk\n";
        // 509 is only a block major, so it is free for a char device.
        assert_eq!(pick_uvm_major(host), Some(509));
        let mut all = String::from("Character devices:\n");
        for m in 234..=511 {
            all.push_str(&format!("{m} d\n"));
        }
        assert_eq!(pick_uvm_major(&all), None);
    }

    #[test]
    fn devices_file_round_trips() {
        let text = devices_file(508, 507, 506, &[(505, "gdrdrv")]);
        assert!(text.contains("507 nvidia-caps\n"));
        assert!(text.contains("506 nvidia-caps-imex-channels\n"));
        assert!(text.contains("505 gdrdrv\n"));
        assert_eq!(
            cap_file(1),
            "DeviceFileMinor: 1\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
        );
        assert_eq!(pick_free_major("", &[508, 511]), Some(510));
        assert!(text.contains("195 nvidia-frontend\n"));
        assert!(text.contains("508 nvidia-uvm\n"));
        assert!(text.contains("  1 mem\n"));
        assert_eq!(char_majors(&text).iter().filter(|&&m| m == 508).count(), 1);
    }
}
