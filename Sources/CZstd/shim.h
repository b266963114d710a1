#ifndef ROOST_CZSTD_SHIM_H
#define ROOST_CZSTD_SHIM_H
#include <zstd.h>
#endif
