/* passes.c - STUB */
#include "sgc.h"
int passes_run(Module *m, const PassOptions *po) { (void)m; (void)po; return 1; }
int passes_known(const char *name) { (void)name; return 1; }
