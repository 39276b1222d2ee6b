/*
 * Image-side code for the malicious-image suite: a shared object that, when loaded, writes a
 * marker file. MARKER_DIR is a directory that exists only on the host, so a marker there means a
 * host process loaded image code. IN_ROOT_DIR (/evil-ran) exists only in the image, so a marker
 * there proves the attack was armed: the container's own processes loaded it.
 * It is also a valid LD_AUDIT module (la_version) and a gconv module stub.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#ifndef MARKER_DIR
#error "compile with -DMARKER_DIR=\"...\""
#endif

extern char *program_invocation_short_name;

static void mark(const char *dir)
{
    char path[4096];
    int fd;

    snprintf(path, sizeof path, "%s/%s-%d", dir, program_invocation_short_name, (int)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        (void)!write(fd, "image code ran here\n", 20);
        close(fd);
    }
}

__attribute__((constructor)) static void evil_init(void)
{
    int saved = errno;
    mark(MARKER_DIR);
    mark("/evil-ran");
    errno = saved;
}

/* LD_AUDIT: accept any interface version so the module stays loaded. */
unsigned int la_version(unsigned int version)
{
    return version;
}

/* gconv module entry points, never meant to work. */
int gconv_init(void *step)
{
    (void)step;
    return 1;
}

int gconv(void *a, void *b, const unsigned char **c, const unsigned char *d, unsigned char **e,
          size_t *f, int g, int h)
{
    (void)a; (void)b; (void)c; (void)d; (void)e; (void)f; (void)g; (void)h;
    return 1;
}
