/*
 * as_old_kernel COMMAND [ARG...]: runs COMMAND as on a Linux 4.18 kernel (RHEL 8's), where every
 * system call of the table shared by all architectures (numbered 424 and up: pidfd_send_signal,
 * io_uring, open_tree, move_mount, fsopen, clone3, close_range, openat2, pidfd_open,
 * faccessat2, mount_setattr, fchmodat2, ...) does not exist: a seccomp filter makes each fail
 * with ENOSYS. Filters are inherited across fork and exec, so the command, what it runs (a
 * runtime, its hooks) and what those run are all under it.
 *
 * as_old_kernel --check: installs the filter and exits 0 only if openat2, fchmodat2, open_tree,
 * move_mount, clone3, close_range and pidfd_open now fail with ENOSYS while openat still works.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define OUR_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define OUR_ARCH AUDIT_ARCH_AARCH64
#else
#error "x86_64 and aarch64 only"
#endif

/* pidfd_send_signal (Linux 5.1): the first number both architectures share; 4.18 had none. */
#define FIRST_NEW_SYSCALL 424

static int install(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        /* Another ABI (i386 on x86_64): its numbers differ; leave it alone. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OUR_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* Unsigned: x32's numbers (bit 30 set) count as new too. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FIRST_NEW_SYSCALL, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {
        .len = (unsigned short)(sizeof(code) / sizeof(code[0])),
        .filter = code,
    };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("as_old_kernel: PR_SET_NO_NEW_PRIVS");
        return -1;
    }
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
        perror("as_old_kernel: seccomp");
        return -1;
    }
    return 0;
}

static int check(void) {
    static const struct {
        const char *name;
        long nr;
    } calls[] = {
        {"open_tree", 428}, {"move_mount", 429}, {"pidfd_open", 434}, {"clone3", 435},
        {"close_range", 436}, {"openat2", 437}, {"mount_setattr", 442}, {"fchmodat2", 452},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        errno = 0;
        /* Arguments no call accepts (a bad descriptor), so nothing happens if one got through. */
        long rc = syscall(calls[i].nr, -1L, 0L, 0L, 0L, 0L);
        if (rc != -1 || errno != ENOSYS) {
            fprintf(stderr, "as_old_kernel: %s gave %ld (%s), not ENOSYS\n", calls[i].name, rc,
                    strerror(errno));
            bad = 1;
        }
    }
    int fd = openat(AT_FDCWD, "/", O_PATH | O_DIRECTORY);
    if (fd < 0) {
        perror("as_old_kernel: openat, which 4.18 has");
        bad = 1;
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: as_old_kernel --check | COMMAND [ARG...]\n");
        return 2;
    }
    if (install() != 0)
        return 1;
    if (strcmp(argv[1], "--check") == 0)
        return check();
    execvp(argv[1], argv + 1);
    fprintf(stderr, "as_old_kernel: exec %s: %s\n", argv[1], strerror(errno));
    return 127;
}
