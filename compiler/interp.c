/* interp.c - STUB */
#include "sgc.h"
