#ifndef LARDER_CARCHIVE_SHIM_H
#define LARDER_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>
#include <locale.h>
#if defined(__APPLE__)
#include <xlocale.h>
#endif

/// A UTF-8 LC_CTYPE locale for libarchive's name conversions, used per thread with uselocale()
/// so that the host process's global locale is never changed. NULL when none is installed.
static inline locale_t larder_new_utf8_locale(void) {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (l == (locale_t)0) l = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", (locale_t)0);
    return l;
}
#endif
