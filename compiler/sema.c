/* sema.c - STUB */
#include "sgc.h"
int sema_module(Module *m, AstFile *f, DimOverride *ov, int nov) { (void)m; (void)f; (void)ov; (void)nov; return 1; }
