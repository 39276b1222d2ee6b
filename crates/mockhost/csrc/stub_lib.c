/*
 * Generic stand-in for the driver libraries gpuctk only has to find and
 * inject (ptxjitcompiler, nvvm, opencl, GL/EGL vendor libraries, ...).
 * Compiled once per library with its own soname; GM_STUB_NAME names it.
 */
#include "mock_common.h"

GM_DEFINE_CONFIG_BLOCK

#ifndef GM_STUB_NAME
#error "GM_STUB_NAME must be defined"
#endif

/* Lets a test dlopen the library and see which one it got and at what version. */
__attribute__((visibility("default"))) const char *gpuctk_mock_library(void)
{
    static char buf[128];
    char version[64];
    gm_config_get(gpuctk_mock_config, "driver", "0.0", version, sizeof version);
    snprintf(buf, sizeof buf, "%s %s", GM_STUB_NAME, version);
    return buf;
}
