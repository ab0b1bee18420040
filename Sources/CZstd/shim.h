#ifndef LARDER_CZSTD_SHIM_H
#define LARDER_CZSTD_SHIM_H
#include <zstd.h>
#endif
