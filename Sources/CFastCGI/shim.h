#ifndef SIWA_CFASTCGI_SHIM_H
#define SIWA_CFASTCGI_SHIM_H
#include <fcgiapp.h>
#endif
