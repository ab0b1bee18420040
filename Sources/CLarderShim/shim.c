// Everything in larder_shim.h is inline; SwiftPM needs one source file per C target.
#include "larder_shim.h"
