#ifndef LARDER_CZLIB_SHIM_H
#define LARDER_CZLIB_SHIM_H
#include <zlib.h>
#endif
