/*
 * Shared helpers for the gpuctk fake driver: the per-host config block,
 * deterministic GPU identities and the device-node probing that stands in
 * for talking to a kernel driver.
 *
 * Everything is `static inline` so each artifact carries its own copy and
 * no extra shared object is needed at run time.
 */
#ifndef GPUCTK_MOCK_COMMON_H
#define GPUCTK_MOCK_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Must match CONFIG_BLOCK_SIZE / CONFIG_MARKER in src/patch.rs. */
#define GM_CONFIG_SIZE 2048
#define GM_MARKER_LEN 22 /* "GPUCTK_MOCK_CONFIG_V1" plus its NUL */

/*
 * The block the Rust side patches after compilation.  `used` keeps it in
 * the output even though nothing references it symbolically; `volatile`
 * forces every read to go to memory so the compiler cannot fold the
 * placeholder contents into the code.
 */
#define GM_DEFINE_CONFIG_BLOCK                                                 \
    __attribute__((used)) static volatile const char                          \
        gpuctk_mock_config[GM_CONFIG_SIZE] = "GPUCTK_MOCK_CONFIG_V1";

/* Copy the block's payload (after the marker) into a NUL-terminated buffer. */
static inline void gm_config_payload(const volatile char *block, char *out)
{
    size_t i;
    for (i = 0; i + GM_MARKER_LEN < GM_CONFIG_SIZE; i++)
        out[i] = block[GM_MARKER_LEN + i];
    out[GM_CONFIG_SIZE - GM_MARKER_LEN - 1] = '\0';
}

/*
 * Look up `key` in a "k=v;k=v;" payload.  Returns 1 and fills `out` when
 * found, 0 (and `out` = def) otherwise.
 */
static inline int gm_config_get(const volatile char *block, const char *key,
                                const char *def, char *out, size_t outlen)
{
    char payload[GM_CONFIG_SIZE];
    size_t klen = strlen(key);
    const char *p;

    gm_config_payload(block, payload);
    p = payload;
    while (*p) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t vlen = len - klen - 1;
            if (vlen >= outlen)
                vlen = outlen - 1;
            memcpy(out, p + klen + 1, vlen);
            out[vlen] = '\0';
            return 1;
        }
        if (!end)
            break;
        p = end + 1;
    }
    snprintf(out, outlen, "%s", def);
    return 0;
}

static inline uint64_t gm_fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/*
 * Same derivation as uuid_of() in src/ids.rs: PREFIX, "-" and the 16 bytes of
 * fnv1a64("{key}/a") ++ fnv1a64("{key}/b") (both big-endian) in 8-4-4-4-12 form;
 * out must hold 41 bytes.
 */
static inline void gm_uuid_of(const char *prefix, const char *key, char *out)
{
    char buf[GM_CONFIG_SIZE + 96];
    unsigned char u[16];
    uint64_t a, b;
    int i;

    snprintf(buf, sizeof buf, "%s/a", key);
    a = gm_fnv1a64(buf);
    snprintf(buf, sizeof buf, "%s/b", key);
    b = gm_fnv1a64(buf);
    for (i = 0; i < 8; i++) {
        u[i] = (unsigned char)(a >> (56 - 8 * i));
        u[8 + i] = (unsigned char)(b >> (56 - 8 * i));
    }
    snprintf(out, 41,
             "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             prefix, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
             u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Same derivation as gpu_uuid() in src/ids.rs: key "{seed}/{minor}"; out must hold 41 bytes. */
static inline void gm_gpu_uuid(const char *seed, unsigned minor, char *out)
{
    char key[GM_CONFIG_SIZE + 64];

    snprintf(key, sizeof key, "%s/%u", seed, minor);
    gm_uuid_of("GPU", key, out);
}

/*
 * Same derivation as mig_uuid() in src/ids.rs: key "{seed}/{minor}/gi{gi}/ci{ci}";
 * out must hold 41 bytes.
 */
static inline void gm_mig_uuid(const char *seed, unsigned minor, unsigned gi, unsigned ci,
                               char *out)
{
    char key[GM_CONFIG_SIZE + 64];

    snprintf(key, sizeof key, "%s/%u/gi%u/ci%u", seed, minor, gi, ci);
    gm_uuid_of("MIG", key, out);
}

/* On the host GPU minor m is GPU index m, so the bus id follows the minor. */
static inline void gm_bus_id(unsigned minor, char *out, size_t outlen)
{
    snprintf(out, outlen, "0000:%02x:00.0", 0x17 + 3 * minor);
}

/*
 * 0 when open(O_RDWR) succeeds, else its errno.  A char node whose major
 * has no driver behind it yields ENXIO: that is what "GPU present and
 * allowed" looks like on a machine without the real kernel module.
 */
static inline int gm_open_errno(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return errno;
}

static inline int gm_is_denied(int err)
{
    return err == EPERM || err == EACCES;
}

struct gm_scan {
    int ctl_err;          /* errno of /dev/nvidiactl */
    int denied;           /* some node exists but the cgroup/mode denies it */
    unsigned count;       /* usable GPUs */
    unsigned minors[256]; /* their minors, ascending */
    int dxg;              /* the one GPU is WSL2's /dev/dxg: no minor */
};

/*
 * Scan the nodes under `root` ("" is "/"): the fake NVML passes the mock host
 * directory it was installed in, so it also answers on the host side.
 */
static inline void gm_scan_devices_in(struct gm_scan *s, const char *root)
{
    char path[4096 + 32];
    unsigned n;
    int err;

    memset(s, 0, sizeof *s);
    snprintf(path, sizeof path, "%s/dev/nvidiactl", root);
    s->ctl_err = gm_open_errno(path);
    if (gm_is_denied(s->ctl_err))
        s->denied = 1;
    snprintf(path, sizeof path, "%s/dev/nvidia-uvm", root);
    err = gm_open_errno(path);
    if (gm_is_denied(err))
        s->denied = 1;
    for (n = 0; n <= 255; n++) {
        snprintf(path, sizeof path, "%s/dev/nvidia%u", root, n);
        err = gm_open_errno(path);
        if (err == ENXIO)
            s->minors[s->count++] = n;
        else if (gm_is_denied(err))
            s->denied = 1;
    }
    /* WSL2 has no NVIDIA nodes: its one GPU is reached through /dev/dxg. */
    if (s->ctl_err == ENOENT && s->count == 0) {
        snprintf(path, sizeof path, "%s/dev/dxg", root);
        err = gm_open_errno(path);
        if (err == ENXIO) {
            s->ctl_err = ENXIO;
            s->dxg = 1;
            s->minors[s->count++] = 0;
        } else if (gm_is_denied(err)) {
            s->denied = 1;
        }
    }
}

static inline void gm_scan_devices(struct gm_scan *s)
{
    gm_scan_devices_in(s, "");
}

#endif
