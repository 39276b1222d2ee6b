/*
 * gpuctk-probe: runs inside a container and reports, one fact per line,
 * what the container can see of the GPU stack.  It never judges: it
 * always exits 0 and leaves the verdict to the test that reads it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *errno_name(int e)
{
    static char buf[32];
    switch (e) {
    case 0: return "ok";
    case ENXIO: return "ENXIO";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case ENODEV: return "ENODEV";
    case EISDIR: return "EISDIR";
    case EROFS: return "EROFS";
    case EBUSY: return "EBUSY";
    case EINVAL: return "EINVAL";
    case ENOTDIR: return "ENOTDIR";
    case ELOOP: return "ELOOP";
    case ETXTBSY: return "ETXTBSY";
    case EIO: return "EIO";
    }
    snprintf(buf, sizeof buf, "E%d", e);
    return buf;
}

static int open_errno_flags(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return errno;
}

static int open_errno(const char *path)
{
    return open_errno_flags(path, O_RDWR);
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names in `dir`, filtered by `prefix` (NULL: all but dot entries). */
static int list_dir(const char *dir, const char *prefix, char ***out)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    int n = 0, cap = 0;

    *out = NULL;
    if (!d)
        return 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (prefix && strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        if (n == cap) {
            char **grown;
            cap = cap ? cap * 2 : 16;
            grown = realloc(names, (size_t)cap * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp);
    *out = names;
    return n;
}

static void report_devices(void)
{
    char **names, **sub;
    int n, m, i, j;
    char path[PATH_MAX], subpath[2 * PATH_MAX + 2];
    struct stat st;

    n = list_dir("/dev", "nvidia", &names);
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/dev/%s", names[i]);
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            /*
             * /dev/nvidia-caps holds the MIG capability nodes: mode 0444, opened
             * read-only, as NVML does.
             */
            m = list_dir(path, NULL, &sub);
            for (j = 0; j < m; j++) {
                snprintf(subpath, sizeof subpath, "%s/%s", path, sub[j]);
                printf("dev %s %s\n", subpath,
                       errno_name(open_errno_flags(subpath, O_RDONLY)));
                free(sub[j]);
            }
            free(sub);
        } else {
            printf("dev %s %s\n", path, errno_name(open_errno(path)));
        }
        free(names[i]);
    }
    free(names);
    /* WSL2's GPU node. */
    if (lstat("/dev/dxg", &st) == 0)
        printf("dev /dev/dxg %s\n", errno_name(open_errno("/dev/dxg")));
}

static void report_loaded(const char *label, void *h)
{
    struct link_map *lm = NULL;
    char real[PATH_MAX];

    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm) {
        printf("%s ok ? ?\n", label);
        return;
    }
    if (!realpath(lm->l_name, real))
        snprintf(real, sizeof real, "?");
    printf("%s ok %s %s\n", label, lm->l_name, real);
}

typedef int (*cu_u_fn)(unsigned);
typedef int (*cu_ip_fn)(int *);
typedef int (*cu_name_fn)(char *, int, int);

static void report_cuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    cu_u_fn init;
    cu_ip_fn version, count;
    cu_name_fn name;
    int rc, v = 0, n = 0, i;
    char buf[256];

    if (!h) {
        printf("libcuda error %s\n", dlerror());
        return;
    }
    report_loaded("libcuda", h);
    init = (cu_u_fn)dlsym(h, "cuInit");
    version = (cu_ip_fn)dlsym(h, "cuDriverGetVersion");
    count = (cu_ip_fn)dlsym(h, "cuDeviceGetCount");
    name = (cu_name_fn)dlsym(h, "cuDeviceGetName");
    if (!init || !version || !count) {
        printf("libcuda missing-symbols\n");
        return;
    }
    printf("cuInit %d\n", init(0));
    rc = version(&v);
    printf("cuDriverGetVersion %d %d\n", rc, v);
    rc = count(&n);
    printf("cuDeviceGetCount %d %d\n", rc, rc == 0 ? n : 0);
    for (i = 0; rc == 0 && name && i < n; i++) {
        buf[0] = '\0';
        printf("cuDeviceGetName %d %d %s\n", i, name(buf, sizeof buf, i), buf);
    }
}

typedef int (*nv_v_fn)(void);
typedef int (*nv_up_fn)(unsigned *);
typedef int (*nv_handle_fn)(unsigned, void **);
typedef int (*nv_str_fn)(void *, char *, unsigned);

static void report_nvml(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    nv_v_fn init;
    nv_up_fn count;
    nv_handle_fn handle;
    nv_str_fn uuid;
    unsigned n = 0, i;
    int rc;
    char buf[96];

    if (!h) {
        printf("libnvidia-ml error %s\n", dlerror());
        return;
    }
    report_loaded("libnvidia-ml", h);
    init = (nv_v_fn)dlsym(h, "nvmlInit_v2");
    count = (nv_up_fn)dlsym(h, "nvmlDeviceGetCount_v2");
    handle = (nv_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    uuid = (nv_str_fn)dlsym(h, "nvmlDeviceGetUUID");
    if (!init || !count || !handle || !uuid) {
        printf("libnvidia-ml missing-symbols\n");
        return;
    }
    rc = init();
    printf("nvmlInit %d\n", rc);
    if (rc != 0)
        return;
    rc = count(&n);
    printf("nvmlDeviceGetCount %d %u\n", rc, rc == 0 ? n : 0);
    for (i = 0; rc == 0 && i < n; i++) {
        void *d = NULL;
        int r = handle(i, &d);
        buf[0] = '\0';
        if (r == 0)
            r = uuid(d, buf, sizeof buf);
        printf("nvmlDeviceGetUUID %u %d %s\n", i, r, buf);
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    report_devices();
    report_cuda();
    report_nvml();
    return 0;
}
