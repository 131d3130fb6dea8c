#ifndef SIWA_CHIREDIS_SHIM_H
#define SIWA_CHIREDIS_SHIM_H
// No pkgConfig: hiredis.pc adds -D_FILE_OFFSET_BITS=64, which SwiftPM refuses.
#include <hiredis/hiredis.h>
#endif
