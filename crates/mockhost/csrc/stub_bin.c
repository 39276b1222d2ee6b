/*
 * Generic stand-in for driver executables gpuctk injects but never drives
 * (nvidia-debugdump, nvidia-persistenced, the MPS pair).  Prints its name
 * and the driver version from the config block.
 */
#include "mock_common.h"

GM_DEFINE_CONFIG_BLOCK

#ifndef GM_STUB_NAME
#error "GM_STUB_NAME must be defined"
#endif

int main(void)
{
    char version[64];
    gm_config_get(gpuctk_mock_config, "driver", "0.0", version, sizeof version);
    printf("%s: version %s\n", GM_STUB_NAME, version);
    return 0;
}
